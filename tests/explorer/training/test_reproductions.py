"""Each reproduction runs end to end at tiny settings and writes its JSON schema; the
plain-text table and the figure are built from it. (The effects themselves are benchmarks:
``python -m explorer.reproduce NAME``, never asserted here.)"""

import json

import numpy as np
import pytest

from explorer import reproduce
from explorer.figures import training as plots_train
from explorer.training.reproductions.induction import _shifted
from explorer.training.tasks import ideal_induction
from models import ConfigError, ModelConfig

ROW_KEYS = {
    "warmup": {"norm_placement", "warmup", "final_loss", "curve"},
    "extrapolation": {"position", "eval_len", "loss"},
    "induction": {"step", "second_half_loss"},
    "efficiency": {"attention", "throughput_rel_full", "quality", "peak_bytes"},
    "kv_heads": {"n_kv_heads", "kv_cache_bytes", "decode_ms_per_token", "quality"},
    "gated_sink": {"model", "measure", "at", "value"},
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(reproduce.REPRODUCTIONS))
def test_quick_run_writes_the_schema(name, tmp_path, capsys):
    out = tmp_path / f"{name}.json"
    assert reproduce.main([name, "--quick", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["name"] == name and result["wall_s"] > 0 and isinstance(result["settings"], dict)
    assert result["rows"] and all(ROW_KEYS[name] <= set(r) for r in result["rows"])
    printed = capsys.readouterr().out
    assert f"# {name}" in printed and "wall time" in printed
    assert len(plots_train.repro_figure(result).data) >= 1
    if name == "induction":
        score = np.array(result["induction_score"])
        assert score.shape == (2, 2) and ((0 <= score) & (score <= 1)).all()
    if name == "warmup":
        assert {(r["norm_placement"], r["warmup"]) for r in result["rows"]} == {
            ("post", False),
            ("post", True),
            ("pre", False),
            ("pre", True),
        }
    if name == "kv_heads":  # the cached decoder reproduces the model's own forward
        assert result["settings"]["decode_max_abs_diff_vs_forward"] < 1e-4
        mha, mqa = result["rows"][0], result["rows"][-1]
        assert mha["kv_cache_bytes"] == 4 * mqa["kv_cache_bytes"]  # 4 K/V heads vs 1, measured


def test_shifted_stripe_by_hand():
    ideal = ideal_induction([ord(c) for c in "pABCABC"])  # query 5 ('B') -> key 3
    assert _shifted(ideal, 1)[5, 3] == 1 and _shifted(ideal, 0)[5, 2] == 1 and _shifted(ideal, 3)[5, 5] == 1
    assert _shifted(ideal, 3)[6, 6] == 1  # the query itself is still a causal key
    assert _shifted(ideal, 4).sum() == 0  # every target would be in the future: dropped


def test_unknown_reproduction_is_refused():
    with pytest.raises(ConfigError, match="reproduction"):
        reproduce.run("nope")


def test_every_attention_of_the_efficiency_reproduction_has_a_valid_model():
    """The full settings (not the quick ones) build a config for every attention of the catalogue, rope and
    causal wherever the mechanism allows, else the fallback its constraint names."""
    from explorer.training.reproductions import efficiency

    s = efficiency.settings(quick=False)
    for att in s["attentions"]:
        cfg = efficiency.model_config(att, s)
        assert cfg.attention == att
        if cfg.position != "rope":  # rope was refused for this mechanism, by the library's own rule
            with pytest.raises(ConfigError):
                ModelConfig(**{**cfg.to_dict(), "position": "rope"}).validate()
