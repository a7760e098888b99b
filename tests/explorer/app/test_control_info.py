"""The one-line explanation under each category dropdown (issue 13): the selected variant's registry
summary, sent with the controls' updates when the selection changes, and for memories whose effect
the Attention tab cannot show, a note whose claims are checked here against the maps themselves."""
import numpy as np
import pytest

from explorer.analysis import experiments as ex
from explorer.app.control_info import MEMORY_ATTENTION_NOTES, UNUSED
from explorer.app.controls import config_values, make_control
from explorer.app.state import new_state
from explorer.app.tabs import attention as h
from models import ModelConfig, registries
from models.config import CATEGORIES

SMALL = dict(n_layers=1, d_model=32, n_heads=2)
CHOICES = [(cat, key) for cat in CATEGORIES for key in registries()[cat]]


@pytest.mark.parametrize("cat, key", CHOICES)
def test_each_dropdown_info_is_the_selected_variants_summary(cat, key):
    values = {**config_values(ModelConfig()), cat: key}
    ups, _ = h.control_outputs(values, {**new_state(), "ui": None})  # a page that shows nothing yet
    info = ups[cat]["info"]
    expected = registries()[cat][key].summary
    if cat == "memory" and key in MEMORY_ATTENTION_NOTES:
        expected = f"{expected} {MEMORY_ATTENTION_NOTES[key]}"
    if info.startswith(UNUSED):  # a norm no chosen variant reads says so first
        expected = f"{UNUSED}. {expected}"
    assert info == expected


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
    return ex.attention_maps(ModelConfig(**SMALL, **kw), text).attention[0, 0]  # (L, Lk) of layer 0, head 0


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
