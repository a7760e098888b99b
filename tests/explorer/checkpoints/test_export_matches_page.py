"""The export holds what the page draws, for each kind of weights: a bundle, a pretrained checkpoint and
your run. Each source is resolved once per request (``explorer.analysis.source``) and the page's handlers,
the Export button and the API read the same record, so the zip's attention grid, its gradient figure
(placements, values) and its input text are the page's, a checkpoint's text read with its tokenizer."""

from __future__ import annotations

import base64
import zipfile

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
import pytest

from explorer.analysis.weights import checkpoints
from explorer.app.api import endpoints as api
from explorer.app.api.export import cleanup_export, export_files, export_sections
from explorer.app.controls import weights as W
from explorer.app.controls.fields import config_values
from explorer.app.controls.state import drawn_config
from explorer.app.page.wiring import stage_handler
from explorer.app.tabs.attention import refresh_attention
from explorer.app.tabs.train import small_config
from explorer.runtime.text import model_input
from explorer.training.trainer import RunConfig, Trainer
from models import ModelConfig

# the chain's analysis stage as the page runs it: the Gradients, Model and Latency (KV cache) tabs' steps
analysis_stage = stage_handler("analysis")


TEXT = "The password is Xq7Rv9Lm2; type Xq7Rv9Lm2 again to confirm it."


@pytest.fixture(autouse=True)
def no_pngs(monkeypatch):
    """The zip without PNGs (no browser needed): its figures and README are compared here."""
    from explorer.export import archive, png

    real = archive.write_zip
    monkeypatch.setattr(archive, "write_zip", lambda *a, **k: real(*a, **{**k, "render": lambda figs: png.Rendered()}))


def figure(fig) -> go.Figure:
    """A ``go.Figure``, or the figure of Gradio's ``PlotData`` (its JSON)."""
    return fig if isinstance(fig, go.Figure) else pio.from_json(fig.plot, skip_invalid=True)


def values(array) -> np.ndarray:
    """An array of a figure: a list, a numpy array, or Plotly's typed array (``{"dtype", "bdata", "shape"}``)."""
    if isinstance(array, dict) and "bdata" in array:
        flat = np.frombuffer(base64.b64decode(array["bdata"]), dtype=np.dtype(array["dtype"]))
        shape = [int(n) for n in str(array.get("shape", len(flat))).split(",")]
        return flat.reshape(shape).astype(np.float64)
    return np.asarray(
        [np.nan if v is None else v for v in np.ravel(np.asarray(array, dtype=object))], dtype=np.float64
    ).reshape(np.shape(array))


def traces(fig) -> dict:
    """``{(trace name, axes): its y values}`` of a line figure (the gradient norms per placement; NaN as None)."""
    return {
        (t.name, t.xaxis, t.yaxis): tuple(None if np.isnan(v) else round(v, 9) for v in values(t.y).tolist())
        for t in figure(fig).data
        if getattr(t, "y", None) is not None
    }


def heat(fig) -> np.ndarray:
    """The first heatmap's values (blank cells as 0)."""
    z = next(t.z for t in figure(fig).data if t.type == "heatmap")
    return np.nan_to_num(values(z))


def page(values: dict, choice: str, trained=None) -> dict:
    """The page's Attention grid and Gradients figure for the Weights ``choice`` (the handlers as wired)."""
    grid = W.attention_with_weights(lambda v, **kw: refresh_attention(v, **kw))(
        values, trained=trained, weights=choice, text=TEXT, state=None, separator=None
    )
    assert not isinstance(grid["weights"], str), "the switch must stay on the choice"
    grads = W.with_weights(analysis_stage)(values, trained=trained, weights=choice, text=TEXT)
    return {"grid": grid["grid"], "grad": grads["grad"], "weights_md": grid["weights_md"]}


def exported(values: dict, choice: str, trained=None) -> tuple:
    """``(figures by stem, README text)`` of the Export button's zip for the same choice."""

    def sections(v, weights=None):
        return {
            stem: fig
            for _, figs in export_sections(drawn_config(v, weights), TEXT, weights=weights)[0]
            for stem, fig in figs
        }

    figs = W.with_weights(sections)(values, trained=trained, weights=choice)
    out = W.with_weights(export_files)(values, trained=trained, weights=choice, text=TEXT, separator=None, state=None)
    try:
        with zipfile.ZipFile(out["files"]["value"]) as zf:
            readme = zf.read("README.txt").decode()
    finally:
        cleanup_export(out["export_dir"])
    return figs, readme


def assert_same(values: dict, choice: str, trained=None) -> tuple:
    shown, (figs, readme) = page(values, choice, trained), exported(values, choice, trained)
    assert traces(figs["gradient-norms"]) == traces(shown["grad"])  # same placements, same norms
    assert np.allclose(heat(figs["attention-maps"]), heat(shown["grid"]), atol=1e-6)
    return shown, figs, readme


def test_a_bundle_exports_the_pages_figures():
    values = config_values(ModelConfig())
    shown, figs, readme = assert_same(values, "bundled")
    assert "bundle" in shown["weights_md"]
    assert "one token per byte" in readme and TEXT[:20] in readme


def test_a_checkpoint_exports_its_own_placement_and_its_tokenizers_text(tiny):
    ckpt_id, _model, cfg, tok = tiny
    values = config_values(cfg)
    opened = W.switch(values, f"checkpoint:{ckpt_id}", None, None)
    values = {
        k: (opened[k]["value"] if isinstance(opened.get(k), dict) and "value" in opened[k] else values[k])
        for k in values
    }
    shown, figs, readme = assert_same(values, f"checkpoint:{ckpt_id}")
    names = " ".join(str(name) for name, _, _ in traces(figs["gradient-norms"]))
    assert cfg.norm_placement in names and "post" not in names and "sandwich" not in names  # its own placement
    used = model_input(cfg, TEXT, tokenizer=tok)
    assert "checkpoint's tokenizer" in readme and used.text[:20] in readme
    # /gradients reads the same text and draws the same numbers as the tab's placement
    api_grads = api.api_gradients("", f"checkpoint:{ckpt_id}", TEXT)
    tab = W.with_weights(analysis_stage)(values, trained=None, weights=f"checkpoint:{ckpt_id}", text=TEXT)["grad"]
    ys = list(traces(tab).values())
    for key in ("attn_out", "ffn_out", "residual"):  # each of the tab's curves is the API's numbers
        assert any(len(y) == len(api_grads[key]) and np.allclose(y, api_grads[key], rtol=1e-6) for y in ys), key


@pytest.fixture(scope="module")
def your_run():
    cfg = small_config()
    trainer = Trainer(
        cfg, RunConfig(task="copy", steps=4, lr=3e-3, warmup=1, batch_size=4, seq_len=17, every=2, seed=0)
    )
    list(trainer.run())
    return cfg, {"trainer": trainer}


def test_your_run_exports_its_weights(your_run):
    cfg, train_state = your_run
    values = config_values(cfg)
    on = W.switch(values, "trained", train_state, None)
    assert on["trained"] is not None
    shown, figs, readme = assert_same(values, "trained", on["trained"])
    assert "your run" in shown["weights_md"]
    initial = export_sections(cfg, TEXT)[0]
    init = {stem: fig for _, fs in initial for stem, fig in fs}
    assert not np.allclose(heat(init["attention-maps"]), heat(figs["attention-maps"]))  # not the initial weights


def test_the_source_is_resolved_once_and_looked_up_once(tiny, monkeypatch):
    """One /analyze of a checkpoint with surgery: one resolution, one look-up of the checkpoint by id."""
    from explorer.analysis import source

    ckpt_id = tiny[0]
    calls = {"resolve": 0, "lookup": 0}
    real_resolve, real_load = source.resolve, checkpoints.load

    def counted_resolve(*a, **k):
        calls["resolve"] += 1
        return real_resolve(*a, **k)

    def counted_load(x):
        calls["lookup"] += isinstance(x, str)
        return real_load(x)

    monkeypatch.setattr(source, "resolve", counted_resolve)
    monkeypatch.setattr(checkpoints, "load", counted_load)
    out = api.api_analyze('{"attention": "sliding_window", "window": 3}', TEXT, weights=f"checkpoint:{ckpt_id}")
    assert out["weights"]["used"] == "checkpoint" and out["weights"]["surgery"]
    assert calls == {"resolve": 1, "lookup": 1}
