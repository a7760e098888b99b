"""Warm-up and norm placement (Xiong et al. 2020, "On Layer Normalization in the Transformer
Architecture"): at initialisation post-LN has large gradients near the output, so a large learning
rate from step 0 derails it and it needs warm-up; pre-LN's gradients are well behaved and it trains
without. Four runs, same learning rate, same seed, same data: post / pre x warm-up / none.
"""

from __future__ import annotations

from explorer.training.bursts import run_in_bursts
from explorer.training.reproductions.cost import Cost
from explorer.training.reproductions.point import Point
from explorer.training.trainer import RunConfig, Trainer
from models import ModelConfig

TITLE = "warm-up and norm placement (Xiong et al. 2020)"
COST = Cost(seconds=58, peak_bytes=263983104)  # python -m benchmarks.repro_costs warmup
COLUMNS = ["norm_placement", "warmup", "final_loss", "loss_at_1/3"]


def settings(quick: bool) -> dict:
    if quick:
        return {
            "n_layers": 2,
            "d_model": 32,
            "n_heads": 2,
            "task": "copy",
            "seq_len": 16,
            "batch_size": 8,
            "lr": 3e-3,
            "steps": 6,
            "warmup_steps": 2,
            "every": 3,
        }
    return {
        "n_layers": 6,
        "d_model": 128,
        "n_heads": 4,
        "task": "copy",
        "seq_len": 32,
        "batch_size": 16,
        "lr": 3e-3,
        "steps": 150,
        "warmup_steps": 50,
        "every": 15,
    }


def _trainer(s: dict, placement: str, warm: bool, threads: int = 1) -> Trainer:
    cfg = ModelConfig(
        n_layers=s["n_layers"],
        d_model=s["d_model"],
        n_heads=s["n_heads"],
        max_len=s["seq_len"],
        norm_placement=placement,
        position="rope",
        ffn="gelu",
        seed=0,
    )
    rc = RunConfig(
        task=s["task"],
        steps=s["steps"],
        lr=s["lr"],
        warmup=s["warmup_steps"] if warm else 0,
        schedule="cosine",
        batch_size=s["batch_size"],
        seq_len=s["seq_len"],
        every=s["every"],
        clip=0.0,
        beta2=0.98,
        seed=0,
        threads=threads,
        grad_norms=True,
        probe=False,
        eval_batches=2,
    )
    return Trainer(cfg, rc)


def first_trainer(quick: bool = False, threads: int = 1) -> Trainer:
    """The run's first trainer, as ``run`` builds it (``explorer.training.reproductions.stored.replay``)."""
    return _trainer(settings(quick), "post", False, threads)


def run(quick: bool = False, threads: int = 1, progress=lambda _m: None) -> dict:
    s = settings(quick)
    rows = []
    for placement in ("post", "pre"):
        for warm in (False, True):
            trainer = _trainer(s, placement, warm, threads)
            grads = []
            for snap in run_in_bursts(trainer):  # GPU bursts where there is a GPU
                grads.append({"step": snap.step, "residual": [round(float(v), 6) for v in snap.grad_norms["residual"]]})
                series = f"{placement}-LN, warm-up {'on' if warm else 'off'}"
                progress(
                    Point(
                        f"warmup: {series}: step {snap.step} held-out loss {snap.heldout_loss:.3f}",
                        series,
                        snap.step,
                        snap.heldout_loss,
                    )
                )
            curve = [{"step": h["step"], "loss": round(h["heldout_loss"], 4)} for h in trainer.history]
            rows.append(
                {
                    "norm_placement": placement,
                    "warmup": warm,
                    "final_loss": curve[-1]["loss"],
                    "curve": curve,
                    "grad_norms": grads,
                }
            )
    return {
        "settings": {
            **s,
            "optimizer": "AdamW (betas 0.9, 0.98, no weight decay, no clipping)",
            "schedule": "linear warm-up (when on) then cosine to 0",
            "loss": "held-out copy loss",
            "grad_norms": "per-layer residual-stream gradient norm of the held-out loss at each snapshot",
        },
        "rows": rows,
    }


def table_rows(result: dict) -> list:
    out = []
    for r in result["rows"]:
        third = r["curve"][len(r["curve"]) // 3]["loss"]
        out.append(
            {
                "norm_placement": r["norm_placement"],
                "warmup": r["warmup"],
                "final_loss": r["final_loss"],
                "loss_at_1/3": third,
            }
        )
    return out


def extra_lines(result: dict) -> list:
    return ["chance (uniform over the 64 symbols): ln 64 = 4.16"]


def reading(result: dict) -> str:
    by = {(r["norm_placement"], r["warmup"]): r["final_loss"] for r in result["rows"]}
    stuck = by[("post", False)]
    others = [by[k] for k in by if k != ("post", False)]
    verdict = (
        "post-LN without warm-up is stuck or far behind the other three, as Xiong et al. predict"
        if stuck > max(others) + 0.3
        else "the four runs end close together at these settings: "
        "the post-LN instability did not show (try more layers or a larger learning rate)"
    )
    return (
        f"Final held-out loss: post-LN {by[('post', False)]:.2f} without warm-up, {by[('post', True)]:.2f} "
        f"with; pre-LN {by[('pre', False)]:.2f} without, {by[('pre', True)]:.2f} with. {verdict}."
    )
