"""Event handlers of the app: control values in, figures and text out.

Every handler catches ``ConfigError`` (and, logged, any other exception): it shows a warning that
names the problem and returns ``gr.skip()`` for the figures, so the last good figures stay on
screen and no traceback ever reaches the page. Per-user values travel in the arguments and in a
``gr.State`` dict (``{"config", "text", "sweep"}``); nothing here is module-level mutable state.
"""
from __future__ import annotations

import json
import logging
import os
import tempfile

import gradio as gr

from models import ConfigError, ModelConfig, registries

from . import experiments as ex
from . import plots, plots_views, report
from .limits import MAX_TEXT_BYTES, check_limits, parse_lengths
from .presets import CUSTOM, matching_preset, preset_config
from .share import DEFAULT_TEXT, from_query, to_query
from .ui_controls import config_updates, values_to_config

log = logging.getLogger(__name__)

KV_LENGTHS = [2 ** k for k in range(7, 18)]
SWEEP_BUDGET_S = 3.0


def new_state(cfg: ModelConfig | None = None, text: str = DEFAULT_TEXT) -> dict:
    return {"config": (cfg or ModelConfig()).to_json(), "text": text, "sweep": None}


def _problem(exc: Exception) -> str:
    """The message shown for a failed request: the ConfigError itself, or a generic line (logged)."""
    if isinstance(exc, ConfigError):
        return str(exc)
    log.exception("handler failed")
    return f"Could not compute this configuration ({type(exc).__name__}: {str(exc)[:200]})."


def _warn(msg: str) -> str:
    gr.Warning(msg)
    return f"⚠️ **{msg}** The figures show the last valid configuration."


def text_notice(text: str) -> str:
    n = len(str(text).encode("utf-8"))
    if n > MAX_TEXT_BYTES:
        return f"ℹ️ The text is {n} bytes; the first {MAX_TEXT_BYTES} are used (one token per byte)."
    return ""


def current_config(values) -> ModelConfig:
    return check_limits(values_to_config(values))


# ---------------------------------------------------------------------------- live refresh
def attention_outputs(cfg: ModelConfig, text: str) -> tuple:
    maps = ex.attention_maps(cfg, text)
    summary = maps.summary()
    return plots.attention_grid(maps), plots.attention_stats(maps), report.maps_reading(summary, MAX_TEXT_BYTES)


def refresh_attention(values, text, state, preset=CUSTOM):
    """-> (grid, stats, reading, status, share query, preset, state)."""
    try:
        cfg = current_config(values)
        grid, stats, reading = attention_outputs(cfg, text)
    except Exception as exc:  # ConfigError and anything else: warn, keep the last good figures
        msg = _problem(exc)
        return (gr.skip(), gr.skip(), gr.skip(), _warn(msg), gr.skip(), gr.skip(), state)
    matched = matching_preset(cfg)
    state = {**(state or new_state()), "config": cfg.to_json(), "text": text}
    status = text_notice(text)
    return grid, stats, reading, status, to_query(cfg, text, matched), matched, state


def placement_results(cfg: ModelConfig) -> tuple:
    """Gradient norms of ``cfg`` under every registered norm placement -> (results, skipped)."""
    results, skipped = {}, {}
    for placement in registries()["norm_placement"]:
        try:
            results[placement] = ex.gradient_norms(cfg.replace(norm_placement=placement))
        except ConfigError as exc:
            skipped[placement] = str(exc)
    return results, skipped


def analysis_outputs(cfg: ModelConfig, text: str) -> tuple:
    results, skipped = placement_results(cfg)
    grad_fig = plots.gradient_figure(results, cfg.norm_placement)
    reading = report.gradient_reading(results, cfg.norm_placement, skipped)
    seq = max(1, min(len(str(text).encode("utf-8")), MAX_TEXT_BYTES))
    summary = ex.model_summary(cfg, seq_len=seq)
    kv = plots.kv_cache_figure(ex.kv_cache_bytes(cfg, KV_LENGTHS))
    return grad_fig, reading, report.model_markdown(summary), kv, json.dumps(cfg.to_dict(), indent=2)


def refresh_analysis(values, text):
    """-> (gradient figure, reading, model card, KV figure, config JSON); skips on a bad config
    (the attention handler already showed the warning)."""
    try:
        return analysis_outputs(current_config(values), text)
    except Exception as exc:
        _problem(exc)
        return tuple(gr.skip() for _ in range(5))


# ---------------------------------------------------------------------------- config sources
def _fill(cfg: ModelConfig, text, preset, status) -> list:
    return [*config_updates(cfg), text, preset, status]


def apply_preset(name):
    """A preset fills every control (-> controls..., text, preset, status)."""
    if name == CUSTOM:
        return [gr.skip()] * (len(config_updates(ModelConfig())) + 3)
    try:
        cfg = check_limits(preset_config(name))
    except Exception as exc:
        msg = _problem(exc)
        return [gr.skip()] * (len(config_updates(ModelConfig())) + 2) + [_warn(msg)]
    return _fill(cfg, gr.skip(), name, "")


def load_from_url(request: gr.Request | None):
    """Restore every control from the page's query string; hostile strings fall back to defaults."""
    params = dict(request.query_params) if request is not None and request.query_params else {}
    cfg, text, preset, notice = from_query(params)
    if notice:
        gr.Warning(notice)
    if not params:
        return [gr.skip()] * (len(config_updates(cfg)) + 3)
    return _fill(cfg, text, preset, f"⚠️ {notice}" if notice else "")


def upload_config(path):
    """A JSON config file -> every control (-> controls..., text, preset, status)."""
    try:
        if path is None:
            raise ConfigError("file", None, "a JSON file")
        if os.path.getsize(path) > 100_000:
            raise ConfigError("file", f"{os.path.getsize(path)} bytes", "a config JSON of at most 100 kB")
        with open(path, encoding="utf-8") as f:
            try:
                data = json.load(f)
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                raise ConfigError("file", os.path.basename(path), f"valid JSON ({e})") from None
        cfg = check_limits(ModelConfig.from_dict(data))
    except Exception as exc:
        msg = _problem(exc)
        return [gr.skip()] * (len(config_updates(ModelConfig())) + 2) + [_warn(msg)]
    return _fill(cfg, gr.skip(), matching_preset(cfg), "✅ Config loaded.")


# ---------------------------------------------------------------------------- sweep
def sweep_baseline(cfg: ModelConfig):
    """``(name, config)`` the sweep compares against: a reversible stack against the same model with
    standard layers (its activation memory is what stays flat in depth), otherwise the same model
    with ``full`` attention; ``(None, None)`` when the config is its own baseline."""
    if cfg.layer == "reversible":
        return "standard layers", cfg.replace(layer="standard")
    if cfg.attention != "full":
        return "full", cfg.replace(attention="full")
    return None, None


def sweep_outputs(cfg: ModelConfig, lengths: list, mode: str, progress=None) -> tuple:
    """Sweep the current config and its baseline -> (figure, reading, records)."""
    def part(lo, hi):
        if progress is None:
            return None
        return lambda frac, msg: progress(lo + (hi - lo) * frac, desc=msg)

    base_name, base_cfg = sweep_baseline(cfg)
    current = ex.latency_memory_sweep(cfg, lengths, mode, time_budget_s=SWEEP_BUDGET_S,
                                      progress=part(0.0, 0.5 if base_cfg is not None else 1.0))
    baseline = None
    if base_cfg is not None:
        try:
            baseline = ex.latency_memory_sweep(base_cfg, lengths, mode,
                                               time_budget_s=SWEEP_BUDGET_S, progress=part(0.5, 1.0))
        except ConfigError:  # the baseline is not valid with this config: no baseline
            baseline = None
    name = cfg.attention if base_name != "standard layers" else f"{cfg.attention}, reversible layers"
    fig = plots.sweep_figure(current, baseline, name, base_name or "full")
    reading = report.sweep_reading(current, baseline, name, base_name or "full")
    if cfg.layer == "reversible" and mode == "forward":
        reading += (" Reversible layers save *activation* memory, which only exists when gradients are taken:"
                    " measure forward_backward to see it.")
    return fig, reading, {"current": current, "baseline": baseline, "attention": name,
                          "baseline_name": base_name or "full"}


def run_sweep(values, lengths_text, mode, state, progress=None):
    """-> (figure, reading, state)."""
    try:
        cfg = current_config(values)
        lengths = parse_lengths(lengths_text)
        fig, reading, records = sweep_outputs(cfg, lengths, mode, progress)
    except Exception as exc:
        return gr.skip(), _warn(_problem(exc)), state
    return fig, reading, {**(state or new_state()), "sweep": records}


# ---------------------------------------------------------------------------- export
def _html(figs: list, title: str) -> str:
    parts = [f"<h2 style='font-family:sans-serif'>{title}</h2>"]
    for n, fig in enumerate(figs):
        parts.append(fig.to_html(full_html=False, include_plotlyjs=(n == 0)))  # plotly.js inlined once: works offline
    return "<!doctype html><html><head><meta charset='utf-8'><title>" + title + "</title></head><body>" + \
        "".join(parts) + "</body></html>"


def export_files(values, text, state):
    """Write config.json and one self-contained HTML per tab; show them in the downloads box."""
    try:
        cfg = current_config(values)
        grid, stats, _ = attention_outputs(cfg, text)
        grad_fig, _, _, kv, _ = analysis_outputs(cfg, text)
    except Exception as exc:
        _warn(_problem(exc))
        return gr.skip()
    out = tempfile.mkdtemp(prefix="explorer-export-")
    files = {"config.json": json.dumps(cfg.to_dict(), indent=2),
             "attention.html": _html([grid, stats], f"Attention maps: {cfg.attention}"),
             "gradients.html": _html([grad_fig], "Gradient norms at initialisation"),
             "kv_cache.html": _html([kv], "KV cache for decoding")}
    view_figs = list(plots_views.view_figures(ex.attention_maps(cfg, text).views).values())
    if view_figs:  # only the variants that have views (layer 0, head 0 for the comparison)
        files["views.html"] = _html(view_figs, f"Variant views: {cfg.attention}, {cfg.ffn}, {cfg.memory}, {cfg.layer}")
    sweep = (state or {}).get("sweep")
    if sweep:
        fig = plots.sweep_figure(sweep["current"], sweep["baseline"], sweep["attention"],
                                 sweep.get("baseline_name", "full"))
        files["latency_memory.html"] = _html([fig], "Latency and memory vs sequence length")
    paths = []
    for name, content in files.items():
        path = os.path.join(out, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(content)
        paths.append(path)
    return gr.update(value=paths, visible=True)


# ---------------------------------------------------------------------------- API
def _api_config(config_json) -> ModelConfig:
    if config_json is None or (isinstance(config_json, str) and not config_json.strip()):
        return check_limits(ModelConfig())
    return check_limits(ex.as_config(config_json))


def _api(fn):
    try:
        return fn()
    except gr.Error:
        raise
    except Exception as exc:
        raise gr.Error(_problem(exc)) from None


def api_analyze(config_json: str, text: str) -> dict:
    """Attention maps summary: per (layer, head) entropy and mean distance, the allowed fraction."""
    return _api(lambda: ex.attention_maps(_api_config(config_json), text or DEFAULT_TEXT).summary())


def api_gradients(config_json: str) -> dict:
    """``gradient_norms`` of the config: per-layer attn_out, ffn_out and residual gradient norms."""
    return _api(lambda: ex.gradient_norms(_api_config(config_json)))


def api_benchmark(config_json: str, lengths: str, mode: str) -> list:
    """Latency / memory sweep records of the config's attention at the given lengths."""
    def run():
        cfg = _api_config(config_json)
        return ex.latency_memory_sweep(cfg, parse_lengths(lengths or "128,256,512"), mode or "forward",
                                       time_budget_s=SWEEP_BUDGET_S)
    return _api(run)
