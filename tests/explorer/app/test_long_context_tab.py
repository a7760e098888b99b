"""The Long context tab's link fields, its API answer's shape, and the memory budget it goes through."""

from types import SimpleNamespace

import numpy as np
import pytest

from explorer.analysis import source
from explorer.analysis.long_context import view as lc
from explorer.app.controls.share import from_query
from explorer.app.tabs import link_params
from explorer.app.tabs.long_context import _json, as_json, from_link
from models import ConfigError, ModelConfig


def test_link_fields_fill_the_pickers_and_leave_the_config_alone():
    got = from_link(SimpleNamespace(query_params={"lc_len": "4096", "lc_src": "repeat", "tab": "long_context"}))
    assert got == {"lc_length": "4096", "lc_source": "repeat"}
    bad = from_link(SimpleNamespace(query_params={"lc_len": "5000", "lc_src": "<script>"}))
    assert all(getattr(v, "__class__", None).__name__ != "str" for v in bad.values())  # skipped, never echoed
    owned = link_params()  # the registry hands the link reader the tabs' own parameters
    assert {"lc_len", "lc_src"} <= owned
    cfg, _, _, notice = from_query({"lc_len": "4096", "lc_src": "repeat", "attention": "sliding_window"}, owned)
    assert notice is None and cfg.attention == "sliding_window"


def test_json_rounds_and_writes_nan_as_null():
    assert _json(np.array([[0.1234567891, np.nan]])) == [[0.123457, None]]


@pytest.fixture(scope="module")
def small():
    return lc.long_context(source.resolve("bundled", ModelConfig()), 1024, "heldout", change="window_sinks")


def test_the_api_answer_merges_cells_and_keeps_the_masses(small):
    out = as_json(small, cells=8)
    assert [s["name"] for s in out["sides"]] == ["as trained", "64-key window + 4 sinks"]
    for side, s in zip(out["sides"], small.sides):
        maps = np.array(side["maps"], dtype=float)
        assert maps.shape == (4, 4, 8, 8) and side["block_q"] == 128
        np.testing.assert_allclose(maps.sum(-1), 1.0, atol=1e-4)
        np.testing.assert_allclose(maps[..., 0, 0], s.mass[..., :2, :2].sum(-1).mean(-1), atol=1e-5)
        assert side["config"]["n_sinks"] == (4 if "sinks" in side["name"] else 0)
    sink = np.array(out["sides"][1]["stats_bins"]["sink"], dtype=float)
    assert (sink[..., 4:] > 0).any()  # the sinks take mass far from the start


def test_the_view_is_refused_over_the_memory_budget(monkeypatch):
    monkeypatch.setenv("EXPLORER_REQUEST_BUDGET", "1M")
    with pytest.raises(ConfigError, match="budget"):
        lc.long_context(source.resolve("bundled", ModelConfig()), 1024, "heldout")
