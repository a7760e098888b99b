"""Induction heads (Olsson et al. 2022, "In-context Learning and Induction Heads"; Elhage et al.
2021): a two-layer attention-only transformer trained on random strings repeated once learns to
complete the second copy. It does so with a previous-token head in layer 0 and an induction head in
layer 1 that attends from each token to the token *after* that token's earlier occurrence.

The induction score of a head is the mean attention, over the tokens of the second copy, on that
key (1 = a perfect induction head; a uniform causal head scores about ``1 / position``).
"""

from __future__ import annotations

import base64

import numpy as np
import torch

from explorer.training.bursts import run_in_bursts
from explorer.training.reproductions.cost import Cost
from explorer.training.reproductions.point import Point
from explorer.training.tasks import get_task, ideal_induction, model_input
from explorer.training.trainer import RunConfig, Trainer, stack_attention
from models import ModelConfig

TITLE = "induction heads in a 2-layer attention-only model (Olsson et al. 2022)"
COST = Cost(seconds=15, peak_bytes=199671808)  # python -m benchmarks.repro_costs induction
COLUMNS = ["step", "second_half_loss"]


def settings(quick: bool) -> dict:
    if quick:
        return {
            "n_layers": 2,
            "d_model": 32,
            "n_heads": 2,
            "seq_len": 16,
            "batch_size": 8,
            "steps": 4,
            "lr": 3e-3,
            "warmup": 1,
            "every": 2,
            "score_seqs": 2,
        }
    return {
        "n_layers": 2,
        "d_model": 64,
        "n_heads": 4,
        "seq_len": 48,
        "batch_size": 32,
        "steps": 500,
        "lr": 3e-3,
        "warmup": 50,
        "every": 25,
        "score_seqs": 16,
    }


SHIFTS = (-1, 0, 1, 2, 3)  # key = earlier occurrence + shift; 1 is the induction head's key


def _shifted(ideal: np.ndarray, shift: int) -> np.ndarray:
    """The one-hot rows of ``ideal`` (key ``j + 1``) moved to key ``j + shift`` (rows off the edge dropped)."""
    out = np.zeros_like(ideal)
    for p, k in zip(*np.nonzero(ideal)):
        if 0 <= k - 1 + shift < p + 1:
            out[p, k - 1 + shift] = 1.0
    return out


def induction_scores(model, L: int, n_seqs: int, seed: int = 99) -> tuple:
    """(scores {shift: (layers, heads)} averaged over ``n_seqs`` held-out sequences, the attention
    maps (layers, heads, L, L) of the first one, its tokens). ``scores[1]`` is the induction score;
    the other shifts show a stripe parallel to it (a circuit that reads a neighbour of that key)."""
    task = get_task("induction")
    b = task.batch(n_seqs, L, torch.Generator().manual_seed(seed), "heldout")
    model.eval()
    with torch.no_grad():
        out = model(model_input(b, model.cfg.causal), return_attention=True)
    scores, first = {c: [] for c in SHIFTS}, None
    for i in range(n_seqs):
        maps = np.nan_to_num(stack_attention([a[i : i + 1] for a in out.attentions]))  # (layers, heads, L, L)
        ideal = ideal_induction(b.tokens[i].tolist())
        for c in SHIFTS:
            target = _shifted(ideal, c)
            rows = target.sum(1) > 0
            scores[c].append((maps * target).sum(-1)[..., rows].mean(-1))  # (layers, heads)
        first = maps if first is None else first
    return {c: np.mean(v, axis=0) for c, v in scores.items()}, first, b.tokens[0].tolist()


def look_back(maps: np.ndarray, offsets=(1, 2)) -> dict:
    """``{d: (layers, heads)}``: mean attention each head puts on key ``p - d`` over the queries ``p >= d``."""
    L = maps.shape[-1]
    return {d: np.stack([maps[..., p, p - d] for p in range(d, L)], -1).mean(-1) for d in offsets}


def _trainer(s: dict, seed: int = 0, threads: int = 1) -> Trainer:
    cfg = ModelConfig(
        n_layers=s["n_layers"],
        d_model=s["d_model"],
        n_heads=s["n_heads"],
        ffn="none",
        position="rope",
        max_len=s["seq_len"],
        seed=seed,
    )
    rc = RunConfig(
        task="induction",
        steps=s["steps"],
        lr=s["lr"],
        warmup=s["warmup"],
        batch_size=s["batch_size"],
        seq_len=s["seq_len"],
        every=s["every"],
        seed=seed,
        threads=threads,
        grad_norms=False,
        probe=True,
    )
    return Trainer(cfg, rc)


def first_trainer(quick: bool = False, threads: int = 1) -> Trainer:
    """The run's first trainer, as ``run`` builds it (``explorer.training.reproductions.stored.replay``)."""
    return _trainer(settings(quick), 0, threads)


def encode_maps(maps: np.ndarray) -> str:
    """Attention ``(layers, heads, L, L)`` in [0, 1] as base64 of uint8 levels (p = level / 255; read back by
    ``explorer.figures.training.decode_maps``)."""
    return base64.b64encode(np.clip(np.rint(np.nan_to_num(maps) * 255), 0, 255).astype(np.uint8).tobytes()).decode()


def probe_scores(maps: np.ndarray, tokens: list) -> dict:
    """``{"0": (layers, heads), "1": ...}``: each head's mean attention on the induction key t-n+1 ("0") and
    on the key after it, t-n+2 ("1"), over the probe's repeated half (the two stripes runs learn)."""
    ideal = ideal_induction(tokens)
    out = {}
    for d in (0, 1):
        target = _shifted(ideal, d + 1)
        rows = target.sum(1) > 0
        out[str(d)] = np.round((np.nan_to_num(maps) * target).sum(-1)[..., rows].mean(-1), 4).tolist()
    return out


def learned_stripe(result: dict) -> int:
    """The stripe (0: key t-n+1, 1: key t-n+2) whose best head scores highest at the end of the run."""
    stripes = {int(d): np.array(v) for d, v in result["stripe_score"].items() if d in ("0", "1")}
    return max(stripes, key=lambda d: stripes[d].max())


def run(quick: bool = False, threads: int = 1, progress=lambda _m: None, seed: int = 0) -> dict:
    """The run; ``seed`` seeds the initial weights and the data (the reading reports what this seed learned).
    ``timeline``: at every snapshot the loss, the induction score of each head on the probe sequence and
    its maps (``encode_maps``), for the timeline of the Train tab."""
    s = settings(quick)
    trainer = _trainer(s, seed, threads)
    rows, timeline = [], []
    for snap in run_in_bursts(trainer):  # GPU bursts where there is a GPU
        rows.append({"step": snap.step, "second_half_loss": round(snap.heldout_loss, 4)})
        maps = np.asarray(snap.attention, dtype=np.float32)
        timeline.append(
            {
                "step": snap.step,
                "second_half_loss": round(snap.heldout_loss, 4),
                "stripes": probe_scores(maps, snap.probe_tokens),
                "maps": encode_maps(maps),
            }
        )
        progress(
            Point(
                f"induction: step {snap.step} second-half loss {snap.heldout_loss:.3f}",
                "second-half loss",
                snap.step,
                snap.heldout_loss,
            )
        )
    probe_shape = list(np.asarray(snap.attention).shape)
    score, maps, tokens = induction_scores(trainer.model, s["seq_len"], s["score_seqs"])
    back = look_back(maps)
    result = {
        "settings": {
            **s,
            "seed": seed,
            "model": "attention-only (ffn none), rope, pre-LN",
            "optimizer": "AdamW, warm-up then cosine",
            "train_seconds": round(trainer.elapsed, 1),
        },
        "look_back": {str(d): [[round(float(v), 4) for v in layer] for layer in m] for d, m in back.items()},
        "rows": rows,
        "timeline": timeline,
        "probe_tokens": snap.probe_tokens,
        "maps_shape": probe_shape,
        "induction_score": [[round(float(v), 4) for v in layer] for layer in score[1]],
        "stripe_score": {str(c - 1): [[round(float(v), 4) for v in layer] for layer in score[c]] for c in SHIFTS},
        "attention": np.round(maps, 3).tolist(),
        "attention_tokens": tokens,
    }
    result["stripe"] = learned_stripe(result)
    result["phase_change"] = phase_change(timeline, result["stripe"])
    return result


def phase_change(timeline: list, stripe: int = 0) -> int | None:
    """The step at which the best head's score on ``stripe`` rose most between two snapshots (None: < 2)."""
    best = [max(max(row) for row in t["stripes"][str(stripe)]) for t in timeline]
    if len(best) < 2:
        return None
    k = int(np.argmax(np.diff(best)))
    return timeline[k + 1]["step"]


def table_rows(result: dict) -> list:
    return result["rows"]


def extra_lines(result: dict) -> list:
    lines = ["induction score (mean attention to the token after the earlier occurrence), per layer x head:"]
    for n, layer in enumerate(result["induction_score"]):
        lines.append(f"  layer {n}: " + "  ".join(f"h{h}={v:.3f}" for h, v in enumerate(layer)))
    lines.append("best head's attention to the earlier copy at key offset d from the induction key (d=0), by d:")
    lines.append("  " + "  ".join(f"d={d}: {np.max(v):.3f}" for d, v in result["stripe_score"].items()))
    return lines


def reading(result: dict) -> str:
    """What the run learned, led by the stripe its heads actually read (issue of a 14% head called the
    strongest while another put 73% one key over): that stripe's best head, then the canonical score."""
    first, last = result["rows"][0]["second_half_loss"], result["rows"][-1]["second_half_loss"]
    stripes = {int(d): np.array(v) for d, v in result["stripe_score"].items()}
    d = learned_stripe(result) if "0" in result["stripe_score"] else 0
    bl, bh = np.unravel_index(int(stripes[d].argmax()), stripes[d].shape)
    canon = np.array(result["induction_score"])
    key = (
        "t-n+1, the token after the earlier occurrence (the textbook induction key)"
        if d == 0
        else "t-n+2, one key past the textbook induction key t-n+1"
    )
    text = (
        f"The loss on the repeated half fell from {first:.2f} to {last:.3f}. The heads learned to read key {key}: "
        f"layer {bl} head {bh} puts {stripes[d][bl, bh]:.0%} of its attention there"
    )
    text += (
        "."
        if d == 0
        else (
            f"; on t-n+1 the best head puts {canon.max():.0%} (layer maxima on t-n+1: "
            + ", ".join(f"{m:.2f}" for m in canon.max(1))
            + ")."
        )
    )
    if "look_back" in result:
        one, two = (np.array(result["look_back"][k])[0] for k in ("1", "2"))
        h1 = int(one.argmax())
        text += (
            f" In layer 0, head {h1} is a previous-token head ({one[h1]:.2f} of its attention on key t-1); no "
            f"layer-0 head puts more than {two.max():.2f} two tokens back."
        )
    return text
