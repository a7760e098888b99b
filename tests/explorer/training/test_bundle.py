"""The bundled trained models (assets/bundles): present, intact, made by their recipes, served to the page.

References: the manifest each bundle was written with (its SHA-256, config, recorded first steps), the
presets that name them, the held-out split (a trained model must beat the initial one there by far),
and the stored Surgery table (a row recomputed from the weights must agree with it).
"""

import json
import math

import pytest
import torch

from explorer.analysis import surgery
from explorer.analysis.weights import bundled
from explorer.runtime.configs import as_config
from explorer.runtime.presets import BUNDLE_PRESETS, preset_config
from explorer.training import bundle
from models import build_model, registries
from models import surgery as models_surgery
from models.schedule import attention_keys


@pytest.fixture(scope="module")
def manifests():
    return {n: json.loads((bundled.BUNDLE_DIR / f"{n}.json").read_text()) for n in bundled.names()}


def test_every_recipe_has_its_bundle_and_nothing_else(manifests):
    assert list(manifests) == list(bundle.RECIPES)
    for name, m in manifests.items():
        assert (bundled.BUNDLE_DIR / f"{name}.safetensors").is_file()
        assert m["steps"] == bundle.RECIPES[name].steps and m["seed"] == bundle.RECIPES[name].seed
        for key in ("command", "commit", "wall_s", "final_train_loss", "final_heldout_loss", "data", "machine"):
            assert m[key] not in (None, ""), (name, key)
        assert m["command"] == f"python -m explorer.training.bundle {name}"


def test_every_manifest_gives_the_language_model_loss_and_the_auxiliary_loss_apart(manifests):
    """The final train loss is the LM loss plus the auxiliary loss; only the MoE adds one, its load balancing
    weighted 0.01 per layer (Switch's alpha): between 0.01 (uniform routing) and 0.01 x n_experts per layer."""
    for name, m in manifests.items():
        lm, aux = m["final_train_lm_loss"], m["final_train_aux_loss"]
        assert lm + aux == pytest.approx(m["final_train_loss"], abs=2e-6), name
        if m["config"]["ffn"] == "moe":
            layers, experts = m["config"]["n_layers"], m["config"]["n_experts"]
            assert 0.01 * layers <= aux <= 0.01 * layers * experts, (name, aux)
            assert lm < 2.0, name  # the language model's loss, no longer hidden under ~4 of balancing
        else:
            assert aux == 0.0, name


def test_all_bundles_fit_the_size_cap():
    total = sum(p.stat().st_size for p in bundled.BUNDLE_DIR.iterdir())
    assert total <= bundle.MAX_TOTAL_BYTES, f"{total:,} bytes"


def test_bundles_load_and_match_their_manifests(manifests):
    for name, m in manifests.items():
        b = bundled.load(name)  # digest and parameter names checked on the way in
        assert b.config == as_config(m["config"]) == bundle.RECIPES[name].model_config()
        assert sum(t.numel() for k, t in b.state.items() if k in dict(b.model().named_parameters())) == m["parameters"]


def test_a_tampered_bundle_is_refused(tmp_path):
    for suffix in (".json", ".safetensors"):
        (tmp_path / f"default{suffix}").write_bytes((bundled.BUNDLE_DIR / f"default{suffix}").read_bytes())
    data = bytearray((tmp_path / "default.safetensors").read_bytes())
    data[-3] ^= 0xFF
    (tmp_path / "default.safetensors").write_bytes(bytes(data))
    with pytest.raises(Exception, match="digest"):
        bundled.load.__wrapped__("default", tmp_path)


@pytest.mark.parametrize("preset", list(BUNDLE_PRESETS))
def test_each_trained_preset_is_its_bundles_config(preset, manifests):
    name = BUNDLE_PRESETS[preset]
    assert preset_config(preset).validate() == as_config(manifests[name]["config"]), (
        f"preset {preset!r} no longer matches bundle {name!r}: retrain it or fix the preset"
    )
    assert bundled.bundle_for(preset_config(preset)).name == name


def test_the_training_data_is_the_one_the_bundles_saw(manifests):
    digest = bundle.data_digest()
    lm = {n: m for n, m in manifests.items() if m["task"].startswith("lm")}
    if any(m["data"]["sha256"] != digest for m in lm.values()):
        pytest.skip("this Python's pydoc_data.topics differs from the one the bundles were trained on")
    assert lm


def test_replaying_the_first_steps_of_a_recipe_gives_the_recorded_losses(manifests):
    """Same seed, same bytes: the first steps of the default recipe agree with its manifest."""
    m = manifests["default"]
    if m["data"]["sha256"] != bundle.data_digest():
        pytest.skip("this Python's pydoc_data.topics differs from the one the bundle was trained on")
    threads = torch.get_num_threads()
    try:
        got = bundle.replay(bundle.RECIPES["default"], 5)
    finally:
        torch.set_num_threads(threads)
    assert got == pytest.approx(m["first_steps"][:5], rel=2e-3, abs=2e-3)
    assert got[0] > math.log(64)  # the first step knows nothing (the induction task's chance: ln 64), as a check


def test_a_bundled_lm_beats_its_initial_weights_on_held_out_text():
    b = bundled.load("default")
    ids, L = list(surgery.heldout_text()[:1024]), b.manifest["recipe"]["seq_len"]
    trained = surgery.nats_per_token(b.model(), ids, L)
    initial = surgery.nats_per_token(build_model(b.config).eval(), ids, L)
    assert trained < 2.0 < 5.0 < initial  # ln 256 = 5.55 at initialisation
    assert trained == pytest.approx(b.manifest["final_heldout_loss"], abs=0.25)


def test_the_stored_surgery_table_agrees_with_the_weights():
    for name in bundled.names():
        origin = surgery.bundle_origin(name)
        if not origin.lm:
            assert surgery.stored_table(origin) is None
            continue
        stored = surgery.stored_table(origin)
        L = origin.trained_length
        assert stored is not None and stored["lengths"] == [L, 4 * L], name
        assert [r["label"] for r in stored["rows"]] == [lab for lab, _ in surgery.rows_for(origin)], name
        assert stored["window"] == origin.window == 64 and stored["unit"] == "nats/byte"
        labels = [r["label"] for r in stored["rows"]]
        own = origin.config.layer_schedule or origin.config.attention  # a schedule names its layers
        # MLA, differential, the recurrent mixers: weights of their own; a schedule moves only if every layer does
        movable = all(registries()["attention"][k].surgery for k in attention_keys(origin.config))
        assert f"{own} (as trained)" in labels and (len(labels) >= 10 or not movable), name
        assert "sliding_window (64) + 4 sinks" in labels or origin.config.attention == "sliding_window" or not movable
    origin = surgery.bundle_origin("default")
    stored = surgery.stored_table(origin)
    labels = [r["label"] for r in stored["rows"]]
    for label in ("full (as trained)", "sliding_window (64)"):  # two rows recomputed from the weights
        row = stored["rows"][labels.index(label)]
        cfg = dict(surgery.rows_for(origin))[label]
        b = bundled.load("default")
        params = {k: v for k, v in b.model().named_parameters()}
        model = b.model() if label.endswith("(as trained)") else models_surgery.transplant(params, b.config, cfg)
        again = surgery.nats_per_token(model, list(surgery.heldout_text()), stored["lengths"][0])
        assert again == pytest.approx(row["loss"][str(stored["lengths"][0])], abs=2e-3), label
