"""The stand-in pretrained checkpoint: a small byte-level Llama trained here, saved as the Hub holds one.

No real checkpoint can be downloaded where the app runs, yet the checkpoint features (``models.hf``,
the surgery table) need one that has learned something. This trains a Llama-shaped catalogue model
(decoder-only, RoPE, pre-norm RMSNorm, SwiGLU, grouped-query attention with half as many K/V heads as
query heads, vocabulary 256 = the bytes) by the bundles' machinery (``explorer.training.bundle``: the
same corpus, the induction curriculum, schedule and seed; a larger model, about 2 M parameters) and
writes ``assets/checkpoints/byte-llama/``: ``config.json``, ``model.safetensors`` (bfloat16) and
``tokenizer.json`` (ids = UTF-8 bytes) through ``models.hf.export.save_llama``, so ``models.hf.load`` and
``transformers.LlamaForCausalLM.from_pretrained`` both read it, plus ``manifest.json``: the recipe, the
steps, the wall time, the final train and held-out loss (nats per byte; the held-out loss also as the
saved bfloat16 checkpoint gives it, read back through ``models.hf.load``), the parameter count, the
command, the commit and the versions.

``python -m explorer.training.stand_in [--steps N] [--out DIR]`` (one intra-op thread, deterministic
like the bundles).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

from explorer.analysis.weights.bundled import ROOT
from explorer.training.bundle import Recipe, data_digest, head_commit, run_logged, trainer_for
from explorer.training.tasks import model_input, python_docs, scored_loss, split_corpus
from models.hf import load
from models.hf.byte_tokenizer import byte_tokenizer_json
from models.hf.export import save_llama

OUT = ROOT / "assets" / "checkpoints" / "byte-llama"
DTYPE = torch.bfloat16

# d_model 192, 5 layers, 6 query heads of 32 dims sharing 3 K/V heads, SwiGLU of width round(8 d / 3) = 512:
# 2.13 M parameters, 2.5x the bundles (0.86 M); the head stays separate from the embedding (the catalogue's own
# layout; the loader reads tied and untied checkpoints alike).
RECIPE = Recipe(
    "byte-llama",
    "a byte-level Llama (RoPE, RMSNorm, SwiGLU, GQA 6:3), the stand-in pretrained checkpoint",
    {
        "vocab_size": 256,
        "d_model": 192,
        "n_layers": 5,
        "n_heads": 6,
        "n_kv_heads": 3,
        "norm": "rmsnorm",
        "norm_placement": "pre",
        "ffn": "swiglu",
        "position": "rope",
        "attention": "full",
        "architecture": "decoder_only",
        "causal": True,
    },
    steps=3000,
    notes="the bundles' default recipe (lm_repeat after 600 induction steps) on a Llama-shaped model",
)


def heldout_loss(logits_of, trainer) -> float:
    """Mean scored loss (nats/byte) over ``trainer``'s fixed held-out batches, logits from ``logits_of(ids)``."""
    with torch.no_grad():
        return float(np.mean([float(scored_loss(logits_of(model_input(b, True)), b)) for b in trainer.heldout]))


def make(recipe: Recipe = RECIPE, out: Path = OUT, log=print) -> dict:
    """Train ``recipe``, write the checkpoint folder ``out`` and its manifest; returns the manifest."""
    t0 = time.perf_counter()
    trainer = trainer_for(recipe)
    trajectory = run_logged(trainer, recipe.name, recipe.steps, t0, log)
    wall = time.perf_counter() - t0
    cfg = recipe.model_config()
    save_llama(trainer.model, cfg, out, dtype=DTYPE, tokenizer_json=byte_tokenizer_json())
    ckpt = load(out)
    train_bytes, held_bytes = (len(p) for p in split_corpus(python_docs()))
    last = trajectory[-1]
    manifest = {
        "name": recipe.name,
        "title": recipe.title,
        "config": cfg.to_dict(),
        "recipe": dataclasses.asdict(recipe),
        "steps": trainer.step,
        "wall_s": round(wall, 1),
        "parameters": ckpt.n_params,
        "final_train_loss": last["train_loss"],
        "final_heldout_loss": last["heldout_loss"],
        "final_heldout_acc": last["heldout_acc"],
        # the same held-out batches through the saved bfloat16 weights, as models.hf.load reads them
        "saved_heldout_loss": round(heldout_loss(ckpt.logits, trainer), 6),
        "loss_unit": "nats per byte",
        "dtype": str(DTYPE).removeprefix("torch."),
        "trajectory": trajectory,
        "data": {
            "corpus": "pydoc_data.topics",
            "sha256": data_digest(),
            "train_bytes": train_bytes,
            "heldout_bytes": held_bytes,
            "curriculum": f"steps 0-{recipe.induction_steps - 1}: the induction "
            f"task ({recipe.induction_batch} x {recipe.induction_len}); then {recipe.task} "
            f"({recipe.batch_size} x {recipe.seq_len})",
        },
        "files": {p.name: p.stat().st_size for p in sorted(out.iterdir()) if p.name != "manifest.json"},
        "command": "python -m explorer.training.stand_in"
        + ("" if recipe.steps == RECIPE.steps else f" --steps {recipe.steps}"),
        "commit": head_commit(),
        "machine": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "cpu": platform.machine(),
            "threads": 1,
        },
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return manifest


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m explorer.training.stand_in", description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=RECIPE.steps, help=f"training steps (default {RECIPE.steps})")
    ap.add_argument("--out", default=str(OUT), help="the checkpoint folder (default: assets/checkpoints/byte-llama)")
    args = ap.parse_args(argv)
    if args.steps <= RECIPE.induction_steps:
        ap.error(f"--steps must exceed the {RECIPE.induction_steps} induction steps of the curriculum")
    torch.set_num_threads(1)
    m = make(
        dataclasses.replace(RECIPE, steps=args.steps),
        Path(args.out),
        log=lambda msg: print(msg, file=sys.stderr, flush=True),
    )
    print(
        f"{m['name']}: {m['parameters']:,} parameters, {m['steps']} steps in {m['wall_s']:.0f} s, train loss "
        f"{m['final_train_loss']:.3f}, held-out loss {m['final_heldout_loss']:.3f} (saved {DTYPE}: "
        f"{m['saved_heldout_loss']:.3f}) nats/byte -> {args.out}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
