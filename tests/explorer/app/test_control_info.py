"""The one-line explanation under each category dropdown: the selected variant's registry
summary, sent with the controls' updates when the selection changes, and for memories whose effect
the Attention tab cannot show, a note whose claims are checked here against the maps themselves."""

import dataclasses
import re

import numpy as np
import pytest

from explorer.analysis import attention_maps
from explorer.app.controls.fields import config_values, make_control
from explorer.app.controls.state import new_state
from explorer.app.tabs import attention as h
from models import ModelConfig, registries
from models.config import CATEGORIES

SMALL = dict(n_layers=1, d_model=32, n_heads=2)
CHOICES = [(cat, key) for cat in CATEGORIES for key in registries()[cat]]
FIELDS = {f.name for f in dataclasses.fields(ModelConfig)}
# memories whose effect the Attention tab does not show (they act after the last attention layer, or
# only past a segment plus its memory, or beside the drawn map), with the fields that say where
NOTED_MEMORIES = {
    "xl": {"segment_len", "mem_len"},
    "compressive": {"segment_len", "mem_len"},
    "knn": set(),
    "knn_lm": {"segment_len"},
    "spalm": {"segment_len"},
}


def _info(values, cat):
    ups, _ = h.control_outputs(values, {**new_state(), "ui": None})  # a page that shows nothing yet
    return ups[cat]["info"]


@pytest.mark.parametrize("cat, key", CHOICES)
def test_each_dropdown_info_is_the_selected_variants_summary(cat, key):
    """The line is the selected record's own summary; only the memories the Attention tab cannot show
    add a note after it, about that tab, naming real config fields (the ones that decide what the
    maps show)."""
    info = _info({**config_values(ModelConfig()), cat: key}, cat)
    summary = registries()[cat][key].summary
    if cat == "memory" and key in NOTED_MEMORIES:
        assert info.startswith(summary + " ") and "Attention tab" in info[len(summary) :]
        named = set(re.findall(r"`(\w+)`", info[len(summary) :]))
        assert NOTED_MEMORIES[key] <= named <= FIELDS, named
    else:
        assert info == summary


def test_a_norm_no_chosen_variant_reads_says_so_before_its_summary():
    """Placement ``none`` normalises nothing: the norm dropdown says it is not used, then still
    explains the selected norm; under a placement that normalises, the line is the summary alone."""
    norm = ModelConfig().norm
    summary = registries()["norm"][norm].summary
    unused = _info({**config_values(ModelConfig()), "norm_placement": "none"}, "norm")
    assert unused.startswith("not used") and unused.endswith(summary) and len(unused) > len(summary)
    assert _info({**config_values(ModelConfig()), "norm_placement": "pre"}, "norm") == summary


def test_selection_change_sends_the_new_line_and_an_unchanged_one_sends_nothing():
    base = config_values(ModelConfig(**SMALL))
    picked = h.refresh_attention({**base, "attention": "sliding_window"}, "hello there", new_state())
    assert picked["attention"]["info"] == registries()["attention"]["sliding_window"].summary
    again = h.refresh_attention({**base, "attention": "sliding_window", "seed": 3}, "hello there", picked["state"])
    assert again["attention"] == h.gr.skip()  # the page already shows this line
    back = h.refresh_attention(base, "hello there", again["state"])
    assert back["attention"]["info"] == registries()["attention"]["full"].summary


def test_the_first_page_shows_the_default_selections_line():
    d = ModelConfig()
    for cat in CATEGORIES:
        assert make_control(cat, getattr(d, cat)).info.startswith(registries()[cat][getattr(d, cat)].summary)


def _maps(text, **kw):
    return attention_maps(ModelConfig(**SMALL, **kw), text).attention[0, 0]  # (L, Lk) of layer 0, head 0


def test_xl_note_maps_equal_no_memory_only_within_a_segment_plus_its_memory():
    seg = dict(segment_len=16, mem_len=16)
    short, long = "a" * 7 + "b" * 25, "the quick brown fox jumps over the lazy dog"  # 32 and 43 bytes
    assert np.allclose(_maps(short, memory="xl", **seg), _maps(short))
    assert not np.allclose(np.nan_to_num(_maps(long, memory="xl", **seg)), _maps(long))


@pytest.mark.parametrize("memory", ["knn_lm", "spalm", "knn"])
def test_retrieval_notes_maps_are_segments_that_do_not_attend_each_other(memory):
    text = "the quick brown fox jumps over the lazy dog"
    p = np.nan_to_num(_maps(text, memory=memory, segment_len=16))
    assert p.shape == (len(text), len(text))
    assert np.all(p[16:32, :16] == 0) and np.all(p[32:, :32] == 0)  # nothing crosses a segment boundary
    assert np.allclose(p.sum(-1), 1, atol=1e-4)
