"""The encoder-decoder in the app's handlers: separator box, extra figures, share links, controls."""

import base64
import json

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio

from explorer.analysis import attention_maps
from explorer.app.api.export import cleanup_export, export_files
from explorer.app.controls.fields import config_values, visible_fields
from explorer.app.controls.share import from_query, to_query
from explorer.app.controls.sources import apply_preset, upload_config
from explorer.app.controls.state import new_state
from explorer.app.tabs import attention as h
from explorer.app.tabs.gradients import gradients_outputs
from explorer.app.tabs.latency import FIXED_LEN, run_sweep
from explorer.app.tabs.model import model_outputs
from explorer.figures.stacks import extra_grid
from explorer.runtime.text import DEFAULT_SEPARATOR, DEFAULT_TEXT, SEQ2SEQ_TEXT
from models import ModelConfig

SMALL = dict(
    architecture="encoder_decoder", n_layers=2, n_encoder_layers=1, n_decoder_layers=2, d_model=32, n_heads=2, d_ff=64
)


def as_figure(value) -> go.Figure:
    """A figure a handler sent: a ``go.Figure``, or the memoised JSON Gradio's Plot sends (``PlotData``)."""
    return value if isinstance(value, go.Figure) else pio.from_json(value.plot)


def z_of(trace) -> np.ndarray:
    """A heatmap's z as an array, also when Plotly's JSON carries it as a typed array (base64 ``bdata``)."""
    z = trace.z
    if isinstance(z, dict) and "bdata" in z:
        shape = [int(n) for n in str(z.get("shape", "")).split(",") if n.strip()]
        return np.frombuffer(base64.b64decode(z["bdata"]), dtype=np.dtype(z["dtype"])).reshape(shape)
    return np.asarray(z)


def _vis(update):
    return update.get("visible")


def test_layer_count_controls_only_for_the_encoder_decoder():
    assert {"n_encoder_layers", "n_decoder_layers"} <= visible_fields({"architecture": "encoder_decoder"})
    for arch in ("decoder_only", "encoder_only"):
        assert not {"n_encoder_layers", "n_decoder_layers"} & visible_fields({"architecture": arch})


def test_refresh_draws_cross_attention_with_source_and_target_labels():
    values = config_values(ModelConfig(**SMALL))
    out = h.refresh_attention(values, "ab c|xyz", new_state(), separator="|")
    assert "⚠" not in out["status"] and _vis(out["separator"]) and _vis(out["cross_grid"])
    fig = out["cross_grid"]["value"]
    assert len(fig.data) == 2 * 2  # decoder layers x heads
    assert list(fig.data[0].x) == ["0 a", "1 b", "2 ␣", "3 c"] and list(fig.data[0].y) == ["0 x", "1 y", "2 z"]
    enc = out["encoder_grid"]["value"]
    assert len(enc.data) == 1 * 2 and list(enc.data[0].y) == ["0 a", "1 b", "2 ␣", "3 c"]
    # the main grid is the decoder's causal self-attention over the target: 3 x 3, upper triangle blank
    z = z_of(as_figure(out["grid"]).data[0])
    assert z.shape == (3, 3) and np.all(np.triu(z, 1) == 0) and np.all(np.diag(z) > 0)


def test_a_missing_separator_warns_and_keeps_the_box_visible():
    """A separator deleted while the encoder-decoder is already drawn: the user's edit is warned about."""
    values = config_values(ModelConfig(**SMALL))
    out = h.refresh_attention(values, "no split here", {**new_state(), "arch": "encoder_decoder"})
    assert "separator" in out["status"] and _vis(out["separator"])
    assert out["cross_grid"] == h.gr.skip()  # the last good figure stays
    assert "text" not in out  # the user's text is left as typed


def test_first_click_on_encoder_decoder_switches_the_example_text():
    """From the decoder's page (its example text), picking encoder_decoder draws its example pair."""
    values = config_values(ModelConfig(**SMALL))
    out = h.refresh_attention(values, DEFAULT_TEXT, new_state())
    assert "⚠" not in out["status"] and out["text"] == SEQ2SEQ_TEXT
    assert _vis(out["cross_grid"]) and out["state"]["arch"] == "encoder_decoder"


def test_first_click_keeps_the_users_text_and_inserts_the_separator():
    values = config_values(ModelConfig(**SMALL))
    out = h.refresh_attention(values, "translate this sentence please", new_state(), separator="|")
    assert "⚠" not in out["status"] and "inserted" in out["status"]
    assert out["text"] == "translate this|sentence please"  # split at the space nearest the middle
    src, tgt = out["text"].split("|")
    cross = out["cross_grid"]["value"]
    assert len(cross.data[0].x) == len(src) and len(cross.data[0].y) == len(tgt)


def test_decoder_only_hides_the_encoder_decoder_parts():
    out = h.refresh_attention(config_values(ModelConfig(n_layers=1, d_model=32, n_heads=2)), "abc", new_state())
    assert not _vis(out["separator"]) and not _vis(out["cross_grid"]) and not _vis(out["encoder_grid"])
    assert not _vis(gradients_outputs(ModelConfig(n_layers=1, d_model=32, n_heads=2), "abc")["grad_stacks"])


def test_analysis_has_per_stack_gradients_and_the_card():
    out = gradients_outputs(ModelConfig(**SMALL), "ab=>cd")
    fig = out["grad_stacks"]["value"]
    names = {t.name for t in fig.data}
    assert {"self-attention out-proj", "cross-attention out-proj", "FFN out-proj"} <= names
    assert json.loads(model_outputs(ModelConfig(**SMALL), "ab=>cd")["config_code"])["n_encoder_layers"] == 1


def test_an_encoder_decoder_preset_fills_a_text_with_the_separator():
    out = apply_preset("Original Transformer (Vaswani 2017, encoder-decoder)")
    assert out["text"] == SEQ2SEQ_TEXT and DEFAULT_SEPARATOR in out["text"]
    assert apply_preset("GPT-2 (2019)")["text"] == h.gr.skip()


def test_share_link_carries_the_stack_depths():
    cfg = ModelConfig(**SMALL)
    back, text, _, notice = from_query(dict(p.split("=", 1) for p in to_query(cfg, "ab=>cd").split("&")))
    assert notice is None and back.n_encoder_layers == 1 and back.n_decoder_layers == 2
    assert back.architecture == "encoder_decoder"


def test_cross_grid_of_the_reverse_text_has_every_source_column():

    maps = attention_maps(ModelConfig(**SMALL), SEQ2SEQ_TEXT)
    fig = extra_grid(maps.stacks["cross"])
    src, tgt = SEQ2SEQ_TEXT.split("=>")
    assert len(fig.data[0].x) == len(src) and len(fig.data[0].y) == len(tgt)


def test_ui_sweep_varies_the_chosen_side():
    values = config_values(ModelConfig(**{**SMALL, "n_decoder_layers": 1}))
    out = run_sweep(values, "4,8", "forward", None, seq2seq_axis="target")
    recs = out["state"]["sweep"]["current"]
    assert [(r["src_len"], r["tgt_len"]) for r in recs] == [(FIXED_LEN, 4), (FIXED_LEN, 8)]
    assert "target length" in out["sweep_md"]
    refresh = h.refresh_attention(values, "a=>b", new_state())
    assert _vis(refresh["sweep_axis"])


def test_export_and_views_follow_the_separator(tmp_path, monkeypatch):
    import sys
    import zipfile

    from explorer.app.tabs import views as ui_views

    monkeypatch.setitem(sys.modules, "kaleido", None)  # PNGs: tests/explorer/export/test_archive.py
    values = config_values(ModelConfig(**SMALL))
    out = export_files(values, "ab|cde", None, separator="|")
    with zipfile.ZipFile(out["files"]["value"]) as zf:
        html = zf.read("figures.html").decode("utf-8")
    assert "Cross-attention and encoder self-attention" in html and "Gradient norms per stack" in html
    cleanup_export(out["export_dir"])
    views = ui_views.refresh_views(values, "ab|cde", separator="|")
    assert views["views_tab"] != h.gr.skip()  # drawn (not skipped for a missing separator)


def test_architecture_dropdown_and_upload_carry_the_stacks(tmp_path):
    from explorer.app.controls.fields import CONTROL_FIELDS
    from models.config import CATEGORIES

    assert CATEGORIES[0] == "architecture" and "architecture" in CONTROL_FIELDS
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps(SMALL))
    out = upload_config(str(path))
    assert out["architecture"]["value"] == "encoder_decoder"
    assert out["n_encoder_layers"]["value"] == 1 and out["n_decoder_layers"]["value"] == 2


def test_the_example_text_is_one_the_bundled_encoder_decoder_reverses():
    """The example a visitor gets on switching to an encoder-decoder is its trained task: a source of the task's
    symbols at the bundle's trained length and its exact reversal, which the bundle's decoder predicts (last
    layer of the logit lens: the model's own output) at under 0.05 nats per token."""
    from explorer.analysis.weights import bundled
    from explorer.analysis.why.seq2seq_ids import SYMBOLS, TRAINED_SOURCE
    from explorer.app.tabs import why

    src, tgt = SEQ2SEQ_TEXT.split(DEFAULT_SEPARATOR)
    assert tgt == src[::-1] and len(src) == TRAINED_SOURCE and set(src.encode()) <= set(SYMBOLS)
    cfg = bundled.load("encoder_decoder").config
    out = why.api_logit_lens(cfg.to_json(), SEQ2SEQ_TEXT, "bundled")
    assert out["loss_per_layer"][-1] < 0.05, out["loss_per_layer"]
    assert out["loss_per_layer"][0] > 3  # the embedding alone cannot: the reversal is the decoder's work
