"""What the export holds beyond the Attention tab: the zoomed head, the Compare tab when A is pinned, the
Train tab's run, each figure under a section that names it (the statistics are no "Attention maps")."""

from __future__ import annotations

import numpy as np
import pytest

from explorer.analysis import attention_maps
from explorer.app.api.export import export_sections
from explorer.training.trainer import RunConfig, Trainer
from models import ModelConfig

SMALL = ModelConfig(n_layers=2, d_model=32, n_heads=2)
TEXT = "abcabcabc"


def _by_stem(sections) -> dict:
    return {stem: (title, fig) for title, items in sections for stem, fig in items}


def test_statistics_have_their_own_section():
    figs = _by_stem(export_sections(SMALL, TEXT)[0])
    assert figs["attention-maps"][0].startswith("Attention maps")
    assert "statistics" in figs["attention-stats"][0] and not figs["attention-stats"][0].startswith("Attention maps")
    assert "zoomed-head" not in figs and "compare-a" not in figs and "train-curves" not in figs


def test_the_zoomed_head_is_the_picked_one():
    figs = _by_stem(export_sections(SMALL, TEXT, zoom=(1, 1))[0])
    title, fig = figs["zoomed-head"]
    assert title == "Zoomed head: layer 1, head 1"
    att = attention_maps(SMALL, TEXT).attention[1, 1]
    z = np.asarray(fig.data[0].z, dtype=np.float64)
    assert np.allclose(np.nan_to_num(z), att, atol=1e-6)  # the head's own probabilities, blank where 0


def test_a_pinned_a_brings_the_compare_figures():
    a = SMALL.replace(attention="sliding_window", window=2)
    figs = _by_stem(export_sections(SMALL, TEXT, pinned=a.to_dict())[0])
    assert {"compare-a", "compare-b", "compare-gradients"} <= set(figs)
    za = np.asarray(figs["compare-a"][1].data[0].z, dtype=np.float64)
    n = za.shape[0]
    assert np.isnan(za).sum() + (np.nan_to_num(za) == 0).sum() > n * (n - 1) // 2  # the window hides more


def test_the_train_tabs_run_comes_along():
    trainer = Trainer(
        SMALL.replace(max_len=64),
        RunConfig(task="copy", steps=4, lr=3e-3, warmup=1, batch_size=4, seq_len=17, every=2, seed=0),
    )
    snaps = list(trainer.run())
    figs = _by_stem(export_sections(SMALL, TEXT, train_state={"trainer": trainer, "snap": snaps[-1]})[0])
    title, curves = figs["train-curves"]
    assert "copy" in title and f"step {snaps[-1].step}" in title
    assert {"train-probe-attention", "train-gradient-norms"} <= set(figs)


@pytest.mark.parametrize("zoom", [("x", None), (None, 1), (-3, 99)])
def test_hostile_zoom_values_draw_a_real_head(zoom):
    figs = _by_stem(export_sections(SMALL, TEXT, zoom=zoom)[0])
    assert "zoomed-head" in figs


def test_no_zoom_without_the_pickers():
    assert "zoomed-head" not in _by_stem(export_sections(SMALL, TEXT, zoom=(None, None))[0])


def test_bundled_weights_bring_the_surgery_table():
    from explorer.analysis import surgery

    cfg = ModelConfig(attention="sliding_window", window=16)  # the default bundle, operated on
    w = surgery.weights_for(cfg)
    assert w is not None and w.surgery
    figs = _by_stem(export_sections(cfg, TEXT, weights=w)[0])
    assert {"surgery-difference", "surgery-table"} <= set(figs)
