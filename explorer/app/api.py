"""The app's documented API (``/analyze``, ``/gradients``, ``/benchmark``): JSON in, plain data out.

Errors come back as ``gr.Error(message)`` (the ConfigError text, truncated); JSON strings are parsed
with bounded size, nesting and number length (``ui_text.load_json``).
"""
from __future__ import annotations

import gradio as gr

from explorer.analysis import experiments as ex
from explorer.analysis.seq2seq import DEFAULT_SEPARATOR
from explorer.app.messages import problem
from explorer.app.tabs.latency import SWEEP_BUDGET_S
from explorer.app.jobs import cancellable
from explorer.app.seq2seq import SEQ2SEQ_TEXT
from explorer.app.share import DEFAULT_TEXT, clip_text
from explorer.runtime.limits import check_limits, parse_lengths
from explorer.runtime.load import LOAD
from explorer.runtime.untrusted import load_json, truncate
from models import ConfigError, ModelConfig
from gradio.utils import get_upload_folder
import os
from gradio.processing_utils import save_bytes_to_cache
import tempfile
from explorer.app.export import cleanup_export, export_sections
from explorer.export import archive


# ---------------------------------------------------------------------------- API
def _api_config(config_json) -> ModelConfig:
    if config_json is None or (isinstance(config_json, str) and not config_json.strip()):
        return check_limits(ModelConfig())
    if isinstance(config_json, str):
        config_json = load_json(config_json)
    if isinstance(config_json, dict):  # the app's caps are checked before the library's validation,
        return check_limits(ModelConfig.from_dict(config_json))  # so the message names the explorer's cap
    return check_limits(ex.as_config(config_json))


def _api(fn):
    try:
        with LOAD.busy():
            return fn()
    except gr.Error:
        raise
    except Exception as exc:
        raise gr.Error(problem(exc)) from None


def _api_text(text) -> str:
    if text is None or text == "":
        return DEFAULT_TEXT
    if not isinstance(text, str):
        raise ConfigError("text", type(text).__name__, "a string")
    return clip_text(text)


def api_analyze(config_json: str, text: str, separator: str = DEFAULT_SEPARATOR) -> dict:
    """Attention maps summary: per (layer, head) entropy and mean distance, the allowed fraction.

    An encoder-decoder reads ``text`` as ``source <separator> target``; its summary is the decoder's
    self-attention with ``encoder_maps`` and ``cross_maps`` (query = target, key = source) added."""
    def run():
        cfg = _api_config(config_json)
        text_ = _api_text(text)
        if cfg.architecture == "encoder_decoder" and (text is None or text == ""):
            text_ = SEQ2SEQ_TEXT
        return ex.attention_maps(cfg, text_, separator=separator or DEFAULT_SEPARATOR).summary()
    return _api(run)


def api_gradients(config_json: str) -> dict:
    """``gradient_norms`` of the config: per-layer attn_out, ffn_out and residual gradient norms."""
    return _api(lambda: ex.gradient_norms(_api_config(config_json)))


async def api_benchmark(config_json: str, lengths: str, mode: str, seq2seq_axis: str = "both") -> list:
    """Latency / memory sweep records of the config's attention at the given lengths (stops between
    two modules when the job is cancelled or the client disconnects). An encoder-decoder varies
    ``seq2seq_axis`` ("both", "source" or "target"; records carry ``src_len`` and ``tgt_len``)."""
    def run(should_stop):
        cfg = _api_config(config_json)
        if mode not in (None, "", "forward", "forward_backward"):
            raise ConfigError("mode", truncate(mode, 40), "'forward' or 'forward_backward'")
        axis = {"seq2seq_axis": seq2seq_axis or "both"} if cfg.architecture == "encoder_decoder" else {}
        return ex.latency_memory_sweep(cfg, parse_lengths(lengths or "128,256,512"), mode or "forward",
                                       time_budget_s=SWEEP_BUDGET_S, should_stop=should_stop, **axis)
    return await cancellable(lambda should_stop: _api(lambda: run(should_stop)))


def api_export(config_json: str, text: str, separator: str = DEFAULT_SEPARATOR) -> dict:
    """The export zip (config.json, README.txt, figures.html, a PNG per figure when the server has
    kaleido and a Chrome) of the config on the text -> the file (``gradio_client`` downloads it).
    An encoder-decoder reads ``text`` as ``source <separator> target``."""
    def run():
        cfg = _api_config(config_json)
        text_ = _api_text(text)
        if cfg.architecture == "encoder_decoder" and (text is None or text == ""):
            text_ = SEQ2SEQ_TEXT
        sep = (separator if isinstance(separator, str) and separator else DEFAULT_SEPARATOR)[:8]
        folder = tempfile.mkdtemp(prefix="explorer-export-")
        try:
            sections, sweeps = export_sections(cfg, text_, None, sep)
            path, _ = archive.write_zip(folder, cfg, text_, sections, sweeps, separator=sep)
            with open(path, "rb") as f:
                cached = save_bytes_to_cache(f.read(), os.path.basename(path), get_upload_folder())
        finally:
            cleanup_export(folder)
        return {"path": cached, "orig_name": os.path.basename(cached), "meta": {"_type": "gradio.FileData"}}
    return _api(run)
