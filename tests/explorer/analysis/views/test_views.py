"""The views registry: a standard config has no views, summaries are JSON, ``view_figures`` draws the
views present and carries their numbers, the figures import no torch, and every field a view reads
is a ``LayerInfo`` field (a view returns ``None`` without it)."""

import dataclasses
import json
import subprocess
import sys

import numpy as np
import torch
from view_runs import TEXT, TINY

from explorer.analysis import attention_maps
from explorer.analysis.views import VIEWS
from explorer.analysis.views.groups import GROUP_KEYS
from explorer.app.tabs.views import LABELS
from explorer.figures import views as pv
from models import ModelConfig
from models.context import ExpertStats, LayerInfo


def test_standard_configs_have_no_views_and_summaries_are_json():
    assert attention_maps(ModelConfig(**TINY), TEXT).views.items == {}
    assert attention_maps(ModelConfig(attention="sliding_window", window=4, **TINY), TEXT).summary()["views"] == {}
    s = attention_maps(ModelConfig(attention="lsh", ffn="switch", **TINY), TEXT).summary()
    assert set(s["views"]) == {"approximation", "groups", "experts"} <= set(VIEWS)
    assert json.loads(json.dumps(s, allow_nan=False))["views"]["experts"]["top_k"] == 1


def test_view_figures_carry_the_numbers():
    views = attention_maps(ModelConfig(attention="linear", ffn="moe", n_experts=3, **TINY), TEXT).views
    figs = pv.view_figures(views, layer=1, head=1)
    assert set(figs) == {"approximation", "approximation_table", "experts"}
    a = views.items["approximation"]
    title = figs["approximation"].layout.title.text
    assert "layer 1, head 1" in title and f"{a.max_error[1, 1]:.3f}" in title and f"{a.mean_error[1, 1]:.4f}" in title
    np.testing.assert_allclose(
        np.nan_to_num(np.asarray(figs["approximation"].data[2].z, float)), np.tril(a.error[1, 1]), atol=1e-6
    )
    bars = [t for t in figs["experts"].data if t.type == "bar"]
    assert [list(t.y) for t in bars] == views.items["experts"].counts.tolist()
    assert all(f.layout.title.text and f.layout.height >= 300 for f in figs.values())


def test_every_plot_has_a_label_in_the_tab():
    assert set(pv.PLOT_NAMES) <= set(LABELS)


def test_view_figures_do_not_import_torch():
    code = "import sys, explorer.figures.views; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_every_field_the_views_read_is_a_layer_info_field():
    """The views read typed fields; a renamed or misspelt field fails here instead of hiding a view."""
    fields = {f.name for f in dataclasses.fields(LayerInfo)}
    assert set(GROUP_KEYS) <= fields
    assert {
        "span",
        "experts",
        "memory_len",
        "memory",
        "reach",
        "exit_depth",
        "exit_confidence",
        "act_steps",
        "act_halting",
        "attention",
        "q",
        "k",
        "score_mods",
        "key_ids",
        "segments",
        "input",
        "sinkhorn",
        "active_queries",
        "head_mix",
        "prior_share",
        "prior_alpha",
        "slot_counts",
        "induced_pack",
        "induced_unpack",
        "conv_taps",
        "conv_share",
        "lm_next",
        "lm_dist",
        "lm_pos",
        "lm_mix",
        "lm_p_model",
        "lm_p_memory",
        "lm_p_mixed",
        "layer_mix",
        "sublayer_depth",
    } <= fields
    assert {f.name for f in dataclasses.fields(ExpertStats)} == {"expert_counts", "dropped", "assignment", "capacity"}
    # each view returns None for an output without its statistics, never raises
    empty = [LayerInfo(index=0, input=torch.zeros(1, 3, 16)), LayerInfo(index=1, input=torch.zeros(1, 3, 16))]
    cfg = ModelConfig(**TINY)
    assert all(fn(cfg, empty) is None for fn in VIEWS.values())


def test_every_view_has_its_reading_beside_its_figure_in_the_registry_order():
    assert list(pv.READINGS) == list(VIEWS)  # the tab's lines come in the views' order, one per view
    assert all(fn.__module__.startswith("explorer.figures.views.") for fn in pv.READINGS.values())
