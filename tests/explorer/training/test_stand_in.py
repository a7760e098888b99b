"""The stand-in checkpoint's maker, on a few steps: it writes a folder the loader reads back as the recipe's
model (the bfloat16 held-out loss close to the float32 one), and the shipped byte-llama matches its manifest."""

import dataclasses
import json

import pytest

from explorer.training import stand_in
from models import hf


def test_a_short_run_writes_a_checkpoint_the_loader_reads(tmp_path):
    recipe = dataclasses.replace(
        stand_in.RECIPE,
        steps=6,
        induction_steps=2,
        every=3,
        batch_size=2,
        seq_len=32,
        induction_batch=2,
        induction_len=16,
    )
    manifest = stand_in.make(recipe, tmp_path, log=lambda m: None)
    ckpt = hf.load(tmp_path)
    assert ckpt.config == recipe.model_config().replace(d_ff=ckpt.config.d_ff).validate()
    assert manifest["parameters"] == ckpt.n_params and manifest["steps"] == 6
    assert set(manifest["files"]) == {"config.json", "model.safetensors", "tokenizer.json"}
    assert manifest["saved_heldout_loss"] == pytest.approx(manifest["final_heldout_loss"], abs=0.02)  # bf16
    assert ckpt.tokenizer.encode("hé\n") == list("hé\n".encode())


def test_the_shipped_checkpoint_is_what_its_manifest_says():
    manifest = json.loads((stand_in.OUT / "manifest.json").read_text())
    plan = hf.plan(stand_in.OUT)
    assert plan.family == "llama" and plan.n_params == manifest["parameters"]
    written = {**manifest["config"], "d_ff": plan.config.d_ff}  # the default width, written out by the exporter
    assert plan.config.to_dict() == {**plan.config.to_dict(), **written}
    sizes = {p.name: p.stat().st_size for p in stand_in.OUT.iterdir() if p.name in manifest["files"]}
    assert sizes == manifest["files"]
