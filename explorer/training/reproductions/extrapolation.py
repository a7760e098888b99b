"""Train short, test long (Press et al. 2022, "Train Short, Test Long: Attention with Linear Biases
Enables Input Length Extrapolation"): the same byte-level language model is trained at one length
with each position encoding, then evaluated on longer held-out sequences. The loss is taken on the
last ``eval_tokens`` tokens of each sequence, the ones that sit at positions never seen in
training. ALiBi's linear distance penalty keeps the loss flat; sinusoidal and rotary encodings meet
unseen angles and break down; T5's buckets clamp far distances and sit in between; a learned table
only exists up to its ``max_len``.
"""

from __future__ import annotations

import torch

from explorer.training.bursts import run_in_bursts
from explorer.training.reproductions.cost import Cost
from explorer.training.reproductions.point import Point
from explorer.training.tasks import Batch, python_docs, scored_loss, split_corpus
from explorer.training.trainer import RunConfig, Trainer
from models import ModelConfig

TITLE = "train short, test long (Press et al. 2022)"
COST = Cost(seconds=70, peak_bytes=347668480)  # python -m benchmarks.repro_costs extrapolation
COLUMNS = ["position", "eval_len", "loss"]
POSITIONS = ("alibi", "t5", "sinusoidal", "rope", "learned")


def settings(quick: bool) -> dict:
    if quick:
        return {
            "n_layers": 1,
            "d_model": 32,
            "n_heads": 2,
            "train_len": 16,
            "eval_lens": [16, 32],
            "batch_size": 4,
            "steps": 4,
            "lr": 3e-3,
            "eval_seqs": 2,
            "eval_tokens": 8,
            "learned_max_len": 16,
        }
    return {
        "n_layers": 2,
        "d_model": 64,
        "n_heads": 4,
        "train_len": 64,
        "eval_lens": [64, 128, 256, 512, 1024],
        "batch_size": 32,
        "steps": 300,
        "lr": 3e-3,
        "eval_seqs": 16,
        "eval_tokens": 64,
        "learned_max_len": 256,
    }


def eval_batches(lengths: list, n: int, last: int) -> dict:
    """``{L: Batch}``: ``n`` held-out windows per length that all END at the same ``n`` positions, the
    last ``last`` tokens scored: every length scores the very same bytes, only the context before
    them grows (so the rows differ by the length alone, not by which text was drawn)."""
    held = torch.tensor(list(split_corpus(python_docs())[1]), dtype=torch.long)
    top = max(lengths)
    ends = torch.randint(top, len(held) + 1, (n,), generator=torch.Generator().manual_seed(4242)).tolist()
    out = {}
    for L in lengths:
        tokens = torch.stack([held[e - L : e] for e in ends])  # (n, L)
        mask = torch.zeros(n, L, dtype=torch.bool)
        mask[:, L - last :] = True
        out[L] = Batch(tokens, mask)
    return out


def _trainer(s: dict, pos: str, threads: int = 1) -> Trainer:
    max_len = s["learned_max_len"] if pos == "learned" else max(s["eval_lens"])
    cfg = ModelConfig(
        n_layers=s["n_layers"], d_model=s["d_model"], n_heads=s["n_heads"], position=pos, max_len=max_len, seed=0
    )
    rc = RunConfig(
        task="lm",
        steps=s["steps"],
        lr=s["lr"],
        warmup=s["steps"] // 10,
        batch_size=s["batch_size"],
        seq_len=s["train_len"],
        every=s["steps"],
        seed=0,
        threads=threads,
        weight_decay=0.01,
        grad_norms=False,
        probe=False,
    )
    return Trainer(cfg, rc)


def first_trainer(quick: bool = False, threads: int = 1) -> Trainer:
    """The run's first trainer, as ``run`` builds it (``explorer.training.reproductions.stored.replay``)."""
    return _trainer(settings(quick), POSITIONS[0], threads)


def run(quick: bool = False, threads: int = 1, progress=lambda _m: None) -> dict:
    s = settings(quick)
    evals = eval_batches(s["eval_lens"], s["eval_seqs"], s["eval_tokens"])
    rows, train_s = [], {}
    for pos in POSITIONS:
        max_len = s["learned_max_len"] if pos == "learned" else max(s["eval_lens"])
        trainer = _trainer(s, pos, threads)
        for snap in run_in_bursts(trainer):  # GPU bursts where there is a GPU
            progress(
                Point(
                    f"extrapolation: {pos} step {snap.step} held-out loss {snap.heldout_loss:.3f}",
                    pos,
                    snap.step,
                    snap.heldout_loss,
                )
            )
        train_s[pos] = round(trainer.elapsed, 1)
        model = trainer.model.eval()
        for L, b in evals.items():
            if L > max_len:
                continue  # a learned table has no row for these positions
            with torch.no_grad():
                loss = float(scored_loss(model(b.tokens).logits, b))
            rows.append({"position": pos, "eval_len": L, "loss": round(loss, 4)})
            progress(f"extrapolation: {pos} L={L} loss {loss:.3f}")
    return {
        "settings": {
            **s,
            "task": "byte LM on pydoc_data.topics (held-out tail)",
            "optimizer": "AdamW, 10% warm-up then cosine",
            "train_seconds": train_s,
        },
        "rows": rows,
    }


def table_rows(result: dict) -> list:
    return result["rows"]


def extra_lines(result: dict) -> list:
    lens = result["settings"]["eval_lens"]
    by = {(r["position"], r["eval_len"]): r["loss"] for r in result["rows"]}
    head = "position    " + "".join(f"{L:>8}" for L in lens)
    lines = ["loss by eval length:", head]
    for pos in POSITIONS:
        lines.append(f"{pos:<12}" + "".join(f"{by[(pos, L)]:>8.3f}" if (pos, L) in by else f"{'n/a':>8}" for L in lens))
    return lines


def reading(result: dict) -> str:
    lens = result["settings"]["eval_lens"]
    short, long = lens[0], lens[-1]
    by = {(r["position"], r["eval_len"]): r["loss"] for r in result["rows"]}
    parts = [f"{p} {by[(p, short)]:.2f} -> {by[(p, long)]:.2f}" for p in POSITIONS if (p, long) in by]
    growth = {p: by[(p, long)] - by[(p, short)] for p in POSITIONS if (p, long) in by}
    best = min(growth, key=growth.get)
    last, n = result["settings"]["eval_tokens"], result["settings"]["eval_seqs"]
    return (
        f"Trained at L={short}. Scored: the last {last} bytes of each of {n} held-out windows, the windows of "
        f"every length ending at the same {n} places of the held-out text (at L={short} the first byte of a "
        f"window has nothing before it, so bytes 1-{short - 1}); only the context before those bytes grows, so "
        f"this is not a loss over all tokens. L={short} -> L={long}: "
        + ", ".join(parts)
        + f". The flattest is {best}; learned positions are evaluated only up to their "
        f"max_len={result['settings']['learned_max_len']}."
    )
