"""The trained models shipped with the app: their recipes, how they are made, and how they are read.

Each bundle is a model of the app's default size trained on this kind of CPU by a recipe below, and
lives in ``assets/bundles/`` as two files: ``<name>.safetensors`` (its parameters in float16; buffers
such as RoPE tables are rebuilt from the config) and ``<name>.json``, the manifest: the full config,
the recipe, the data (the Python documentation's split, ``explorer.training.tasks.split_corpus``, and
the SHA-256 of its bytes), the steps, the wall time, the final train loss (and apart, its language-model
part and its auxiliary part: the MoE's load balancing, 0 for the others), the held-out loss, the loss of
each of the first ``REPLAY_STEPS`` steps and at every snapshot, the command that made it, the commit
and the versions.

``python -m explorer.training.bundle [NAME ...] [--out DIR]`` regenerates them: the same recipe, seed and
bytes of data give the same losses (training is deterministic on one intra-op thread; other CPUs or
torch versions agree within float tolerance). A test replays the first steps of a recipe and compares
them with the manifest, so a stored model cannot silently drift from its recipe.

Reading them is ``explorer.analysis.weights.bundled`` (the analyses draw them; this module only makes them).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file

from explorer.analysis.weights.bundled import BUNDLE_DIR, FORMAT, ROOT
from explorer.training.tasks import get_task, python_docs, split_corpus
from explorer.training.trainer import RunConfig, Trainer
from models import ModelConfig

REPLAY_STEPS = 20  # the first steps' losses, recorded one by one (what the replay test compares)
# fifteen float16 models with their JSON, cards and Surgery tables: the twelve attention bundles held 23.99 MB
# (the cap was 24 MiB); the recurrent mixers' weights files measure 1.64 MB (mamba2), 1.88 MB (gated_deltanet)
# and 1.84 MB (the 3:1 hybrid), with ~20 kB of JSON each: 29.4 MB in all, under 30 MiB
MAX_TOTAL_BYTES = 30 << 20


@dataclass(frozen=True)
class Recipe:
    """How a bundle is trained: its config (overrides of the defaults) and its run."""

    name: str
    title: str
    config: dict
    task: str = "lm_repeat"
    steps: int = 3000
    batch_size: int = 16
    seq_len: int = 128
    # a curriculum: the first induction_steps train on the induction task (random strings repeated, batches
    # of induction_batch x induction_len), where only an induction circuit lowers the loss; then the task
    induction_steps: int = 600
    induction_batch: int = 32
    induction_len: int = 64
    lr: float = 3e-3
    warmup: int = 100
    weight_decay: float = 0.01
    seed: int = 0
    every: int = 100
    notes: str = ""

    def model_config(self) -> ModelConfig:
        return ModelConfig(**self.config).validate()

    def run_config(self) -> RunConfig:
        return RunConfig(
            task=self.task,
            steps=self.steps,
            lr=self.lr,
            warmup=self.warmup,
            schedule="cosine",
            batch_size=self.batch_size,
            seq_len=self.seq_len,
            weight_decay=self.weight_decay,
            seed=self.seed,
            every=self.every,
            threads=1,
            grad_norms=False,
            probe=False,
            eval_batches=4,
        )


RECIPES = {
    r.name: r
    for r in (
        Recipe("default", "the default model: pre-LN, RoPE, full attention", {}),
        # post-LN at the others' 3e-3 stalls at 3.31 nats/byte held-out (measured, 3000 steps), the loss of a
        # byte-frequency model (explorer.runtime.corpus.unigram_loss: 3.30): the instability Xiong et al.
        # describe; a third of the learning rate and a longer warm-up train it
        Recipe(
            "post_ln",
            "post-LN (the original Transformer's placement), with a longer warm-up and lr 1e-3",
            {"norm_placement": "post"},
            lr=1e-3,
            warmup=300,
            notes="post-LN at lr 3e-3 with 100 warm-up steps stalled at 3.31 nats/byte held-out, the loss of a "
            "byte-frequency (unigram) model (explorer.runtime.corpus.unigram_loss: 3.30)",
        ),
        Recipe("alibi", "ALiBi positions instead of RoPE", {"position": "alibi"}),
        Recipe("sliding_window", "sliding-window attention (64 keys back)", {"attention": "sliding_window"}),
        Recipe("gqa", "grouped-query attention: 4 query heads share 2 K/V heads", {"n_kv_heads": 2}),
        Recipe("moe", "a mixture of 4 experts (top-2) in place of the dense FFN", {"ffn": "moe", "d_ff": 256}),
        Recipe(
            "encoder_decoder",
            "an encoder-decoder (2 + 2 layers) that reverses a string",
            {"architecture": "encoder_decoder", "n_layers": 2},
            task="reverse",
            steps=1500,
            batch_size=32,
            seq_len=48,
            every=100,
            induction_steps=0,
        ),
        # the 2024-2026 members (docs/catalogue.md): each differs from "default" in one choice, same data and run
        Recipe(
            "gpt_oss_style",
            "gpt-oss-style layers: sliding window (64 keys) and full alternate, with learned attention sinks",
            {"layer_schedule": "sliding_window,full", "window": 64, "attn_sinks": True},
        ),
        Recipe(
            "mla",
            "multi-head latent attention (DeepSeek-V2/V3): keys and values from a shared compressed latent",
            {"attention": "mla"},
        ),
        Recipe(
            "gated_attention",
            "gated attention output (Qiu et al. 2025, G1): an elementwise sigmoid gate on each head's output",
            {"attn_gate": "elementwise"},
        ),
        Recipe(
            "differential",
            "differential attention (Ye et al. 2025): two softmax maps subtracted, lambda learned per layer",
            {"attention": "differential"},
        ),
        Recipe(
            "nsa",
            "native sparse attention (Yuan et al. 2025): compressed, selected and window branches mixed by gates",
            {"attention": "nsa"},
        ),
        # a recurrent mixer: attention's place taken by a scan, everything else (layers, widths, the GELU FFN, the
        # data and run) the default's; no position encoding, since the scan's order is its position
        Recipe(
            "mamba2",
            "Mamba-2 (Dao & Gu 2024): a selective state-space scan in place of attention, no position encoding",
            {"attention": "mamba2", "position": "none"},
            notes="4 heads of width 32 (d_inner 128, expand 1: the parameter count nearest the default's, 813,488 "
            "against 856,832; expand 2 would be 1,013,168), state 16, one B/C group, convolution width 4; "
            "position 'none' (the scan carries order); the default's GELU FFN, data and run",
        ),
    )
}


SPLIT = (
    "explorer.runtime.corpus.split_corpus: a paragraph-aligned 10% tail, less every paragraph whose "
    "joining would bring a 64-byte run of the training part into the held-out text as it is scored"
)


def train_loss_parts(train_loss: float, aux_loss: float) -> dict:
    """The manifest's final train loss split in two: the language model's own loss and the auxiliary loss
    added to it (the MoE's load balancing, ``models.ffn.moe.BALANCE_WEIGHT`` times ``E sum_e f_e P_e`` per
    layer; 0 for a model that adds none)."""
    return {"final_train_lm_loss": round(train_loss - aux_loss, 6), "final_train_aux_loss": round(aux_loss, 6)}


def data_digest() -> str:
    return hashlib.sha256(python_docs()).hexdigest()


def head_commit() -> str:
    """The repository's HEAD, as a manifest records what made it ("unknown" outside a git checkout)."""
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _parameters(model: torch.nn.Module) -> dict:
    return {k: v.detach().to(torch.float16).contiguous() for k, v in model.named_parameters()}


class Curriculum:
    """The recipe's training data as one task: the induction task for the first ``induction_steps`` steps
    of ``trainer`` (its own batch and length), the recipe's task after; held-out batches are always the
    recipe's task (so the held-out loss is the language model's throughout)."""

    def __init__(self, trainer: Trainer, recipe: Recipe):
        self.trainer, self.recipe, self.main = trainer, recipe, trainer.task
        self.first = get_task("induction")
        self.name = self.main.name

    def batch(self, batch: int, seq_len: int, gen, split: str = "train"):
        r = self.recipe
        if split == "train" and self.trainer.step < r.induction_steps:
            return self.first.batch(r.induction_batch, r.induction_len, gen, split)
        return self.main.batch(batch, seq_len, gen, split)

    def __getattr__(self, name):  # probe, chance, ...: the recipe's task
        return getattr(self.main, name)


def trainer_for(recipe: Recipe) -> Trainer:
    """A fresh trainer of ``recipe``, its curriculum installed."""
    trainer = Trainer(recipe.model_config(), recipe.run_config())
    if recipe.induction_steps:
        trainer.task = Curriculum(trainer, recipe)
    return trainer


def replay(recipe: Recipe, steps: int) -> list:
    """The train loss of each of the recipe's first ``steps`` steps, from a fresh run."""
    trainer = trainer_for(recipe)
    return [trainer.train_step() for _ in range(steps)]


def run_logged(trainer: Trainer, name: str, steps: int, t0: float, log=print) -> list:
    """Run ``trainer`` to its end, one log line per snapshot -> the manifest's trajectory (step, losses,
    held-out accuracy)."""
    trajectory = []
    for snap in trainer.run():
        trajectory.append(
            {
                "step": snap.step,
                "train_loss": None if snap.train_loss is None else round(snap.train_loss, 6),
                "train_aux_loss": None if snap.train_aux_loss is None else round(snap.train_aux_loss, 6),
                "heldout_loss": round(snap.heldout_loss, 6),
                "heldout_acc": round(snap.heldout_acc, 6),
            }
        )
        log(
            f"{name}: step {snap.step}/{steps} held-out loss {snap.heldout_loss:.3f} ({time.perf_counter() - t0:.0f} s)"
        )
    return trajectory


def train(recipe: Recipe, out: Path = BUNDLE_DIR, log=print) -> dict:
    """Train ``recipe`` and write its two files into ``out``; returns the manifest."""
    cfg, run = recipe.model_config(), recipe.run_config()
    t0 = time.perf_counter()
    trainer = trainer_for(recipe)
    first = [trainer.train_step() for _ in range(REPLAY_STEPS)]  # the same steps a run would take
    trajectory = run_logged(trainer, recipe.name, run.steps, t0, log)
    wall = time.perf_counter() - t0
    train_bytes, held_bytes = (len(p) for p in split_corpus(python_docs()))
    last = trajectory[-1]
    manifest = {
        "name": recipe.name,
        "title": recipe.title,
        "order": list(RECIPES).index(recipe.name),
        "config": cfg.to_dict(),
        "recipe": asdict(recipe),
        "task": recipe.task,
        "steps": trainer.step,
        "seed": recipe.seed,
        "wall_s": round(wall, 1),
        "final_train_loss": last["train_loss"],
        **train_loss_parts(last["train_loss"], last["train_aux_loss"]),
        "final_heldout_loss": last["heldout_loss"],
        "final_heldout_acc": last["heldout_acc"],
        "first_steps": [round(x, 6) for x in first],
        "trajectory": trajectory,
        "data": {
            "corpus": "pydoc_data.topics" if recipe.task.startswith("lm") else f"generated ({recipe.task} task)",
            "sha256": data_digest(),
            "train_bytes": train_bytes,
            "heldout_bytes": held_bytes,
            "split": SPLIT,
            "curriculum": (
                f"steps 0-{recipe.induction_steps - 1}: the induction task ({recipe.induction_batch} "
                f"x {recipe.induction_len}); then {recipe.task} ({recipe.batch_size} x {recipe.seq_len})"
            )
            if recipe.induction_steps
            else f"{recipe.task} throughout",
        },
        "parameters": sum(p.numel() for p in trainer.model.parameters()),
        "dtype": "float16",
        "command": f"python -m explorer.training.bundle {recipe.name}",
        "commit": head_commit(),
        "machine": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "cpu": platform.machine(),
            "threads": 1,
        },
    }
    out.mkdir(parents=True, exist_ok=True)
    weights = out / f"{recipe.name}.safetensors"
    save_file(_parameters(trainer.model), str(weights), metadata={"format": FORMAT, "config": cfg.to_json()})
    manifest["file_sha256"] = hashlib.sha256(weights.read_bytes()).hexdigest()
    manifest["file_bytes"] = weights.stat().st_size
    (out / f"{recipe.name}.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return manifest


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m explorer.training.bundle", description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", help=f"recipes to train (default: all of {', '.join(RECIPES)})")
    ap.add_argument("--out", default=str(BUNDLE_DIR), help="where to write them (default: assets/bundles)")
    args = ap.parse_args(argv)
    chosen = args.names or list(RECIPES)
    unknown = [n for n in chosen if n not in RECIPES]
    if unknown:
        ap.error(f"unknown recipe {unknown[0]!r}; valid: {', '.join(RECIPES)}")
    torch.set_num_threads(1)
    print("| bundle | parameters | file (MB) | steps | train time here (s) | held-out loss |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name in chosen:
        m = train(RECIPES[name], Path(args.out), log=lambda msg: print(msg, file=sys.stderr, flush=True))
        print(
            f"| {name} | {m['parameters']:,} | {m['file_bytes'] / 2**20:.2f} | {m['steps']} | {m['wall_s']:.0f} | "
            f"{m['final_heldout_loss']:.3f} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
