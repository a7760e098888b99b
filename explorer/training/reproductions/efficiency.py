"""Quality vs speed vs memory, the Long Range Arena bubble chart (Tay et al. 2021): every attention
of the catalogue trained for the same steps on the same long sequences, on this machine.

x = training throughput relative to ``full`` (tokens/s of one optimizer step, timed after training,
round-robin over all the models with ``kernels.tools.measure.interleaved_ms`` so a busy spell of a shared
machine slows every mechanism alike), y = held-out quality (byte accuracy),
bubble = measured peak memory of one training step (forward + backward; PyTorch allocator events
on CPU, ``max_memory_allocated`` on CUDA, ``kernels.tools.measure.measure_peak``). The task is byte-level
language modelling on the Python documentation at ``seq_len`` >= 512. ``linformer`` and
``nystrom`` are bidirectional only (a causal mask cannot be applied to their projections), so
they train on the masked variant of the same text (15% of the bytes hidden and predicted from
both sides): their quality is marked and is not comparable to the causal rows.
"""

from __future__ import annotations

import torch

from explorer.runtime.stopping import check_stop
from explorer.training.bursts import run_in_bursts
from explorer.training.reproductions.cost import Cost
from explorer.training.tasks import model_input, scored_loss
from explorer.training.trainer import RunConfig, Trainer
from kernels.tools.measure import interleaved_ms, measure_peak
from models import ConfigError, ModelConfig, choices

TITLE = "quality vs speed vs memory of every attention (Long Range Arena style)"
COST = Cost(seconds=315, peak_bytes=972718080)  # python -m benchmarks.repro_costs efficiency
COLUMNS = [
    "attention",
    "objective",
    "position",
    "throughput_rel_full",
    "step_ms",
    "quality",
    "heldout_loss",
    "peak_bytes",
]


def settings(quick: bool) -> dict:
    if quick:
        return {
            "n_layers": 1,
            "d_model": 32,
            "n_heads": 2,
            "seq_len": 64,
            "batch_size": 2,
            "steps": 2,
            "lr": 3e-3,
            "attentions": ["full", "sliding_window", "linformer"],
            "window": 16,
            "block_size": 16,
            "timing_repeats": 2,
        }
    return {
        "n_layers": 2,
        "d_model": 64,
        "n_heads": 4,
        "seq_len": 512,
        "batch_size": 4,
        "steps": 80,
        "lr": 3e-3,
        "attentions": list(choices()["attention"]),
        "window": 64,
        "block_size": 64,
        "timing_repeats": 7,
    }


def model_config(attention: str, s: dict) -> ModelConfig:
    """The shared architecture with ``attention``: rope and causal, unless the mechanism cannot have them
    (bidirectional only: ``causal=False``; logits without a query-key product, as the synthesizers: the
    absolute ``sinusoidal`` encoding of their paper)."""
    base = dict(
        n_layers=s["n_layers"],
        d_model=s["d_model"],
        n_heads=s["n_heads"],
        attention=attention,
        max_len=s["seq_len"],
        position="rope",
        window=s["window"],
        block_size=s["block_size"],
        chunk_size=s["block_size"],
        proj_len=s["block_size"],
        n_landmarks=s["block_size"] // 4,
        seed=0,
    )
    fallback = {"causal": False, "position": "sinusoidal"}
    for _ in range(len(fallback) + 1):
        try:
            return ModelConfig(**base).validate()
        except ConfigError as e:
            if e.field not in fallback or base.get(e.field) == fallback[e.field]:
                raise
            base[e.field] = fallback[e.field]
    return ModelConfig(**base).validate()


def _peak_bytes(trainer: Trainer) -> int:
    """Measured peak bytes allocated by one training forward + backward (weights excluded)."""
    batch = trainer.task.batch(trainer.run_cfg.batch_size, trainer.run_cfg.seq_len, torch.Generator().manual_seed(7))

    def step():
        out = trainer.model(model_input(batch, trainer.cfg.causal))
        (scored_loss(out.logits, batch) + out.aux_loss).backward()

    _, peak = measure_peak(step, next(trainer.model.parameters()).device)
    trainer.model.zero_grad(set_to_none=True)
    return int(peak)


def _step_closure(trainer: Trainer):
    """One forward + backward + AdamW step of ``trainer``'s model on a fixed batch (for timing)."""
    batch = trainer.task.batch(trainer.run_cfg.batch_size, trainer.run_cfg.seq_len, torch.Generator().manual_seed(8))
    opt = torch.optim.AdamW(trainer.model.parameters(), lr=0.0)  # lr 0: timing leaves the weights alone

    def step():
        check_stop()  # a stopped reproduction ends between two timed steps
        out = trainer.model(model_input(batch, trainer.cfg.causal))
        (scored_loss(out.logits, batch) + out.aux_loss).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def _trainer(s: dict, att: str, threads: int = 1) -> Trainer:
    cfg = model_config(att, s)
    task = "lm" if cfg.causal else "masked"
    rc = RunConfig(
        task=task,
        steps=s["steps"],
        lr=s["lr"],
        warmup=s["steps"] // 10,
        batch_size=s["batch_size"],
        seq_len=s["seq_len"],
        every=s["steps"],
        seed=0,
        threads=threads,
        grad_norms=False,
        probe=False,
        eval_batches=2,
    )
    return Trainer(cfg, rc)


def first_trainer(quick: bool = False, threads: int = 1) -> Trainer:
    """The run's first trainer, as ``run`` builds it (``explorer.training.reproductions.stored.replay``)."""
    s = settings(quick)
    return _trainer(s, s["attentions"][0], threads)


def run(quick: bool = False, threads: int = 1, progress=lambda _m: None) -> dict:
    s = settings(quick)
    rows, trainers = [], []
    for att in s["attentions"]:
        trainer = _trainer(s, att, threads)
        cfg = trainer.cfg
        # GPU bursts where there is a GPU; ``snap`` keeps the last snapshot, read after the loop
        for snap in run_in_bursts(trainer):  # noqa: B007
            pass
        peak = _peak_bytes(trainer)
        trainers.append(trainer)
        rows.append(
            {
                "attention": att,
                "objective": "next byte" if cfg.causal else "masked bytes (bidirectional)",
                "position": cfg.position,
                "quality": round(snap.heldout_acc, 4),
                "heldout_loss": round(snap.heldout_loss, 4),
                "peak_bytes": peak,
                "train_s": round(trainer.elapsed, 1),
            }
        )
        progress(
            f"efficiency: {att}: accuracy {snap.heldout_acc:.3f}, peak {peak / 2**20:.1f} MiB, "
            f"trained in {trainer.elapsed:.1f} s"
        )
    progress("efficiency: timing one training step of every model, round-robin")
    ms = interleaved_ms([_step_closure(t) for t in trainers], "cpu", repeats=s["timing_repeats"], budget_s=5.0)
    for r, t in zip(rows, ms):
        r["step_ms"] = round(t, 2)
        r["tokens_per_s"] = round(s["batch_size"] * s["seq_len"] / (t / 1e3), 1)
    full = next((r["tokens_per_s"] for r in rows if r["attention"] == "full"), None)
    for r in rows:
        r["throughput_rel_full"] = round(r["tokens_per_s"] / full, 3) if full else None
    return {
        "settings": {
            **s,
            "task": "byte LM on pydoc_data.topics (masked bytes for bidirectional-only mechanisms)",
            "quality": "held-out byte accuracy",
            "memory": "measured peak of one training step (kernels.tools.measure.measure_peak)",
            "position": "rope",
            "throughput": "median of one optimizer step per model, timed round-robin after training",
        },
        "rows": rows,
    }


def table_rows(result: dict) -> list:
    return result["rows"]


def extra_lines(result: dict) -> list:
    return [
        "quality = held-out accuracy of the scored bytes; rows marked 'masked bytes' see both sides and are "
        "not comparable to the next-byte rows"
    ]


def reading(result: dict) -> str:
    rows = [r for r in result["rows"] if r["objective"] == "next byte"]
    full = next((r for r in rows if r["attention"] == "full"), None)
    if full is None or len(rows) < 2:
        return "Too few causal mechanisms to compare."
    faster = [r for r in rows if (r["throughput_rel_full"] or 0) > 1.05]
    best = max(rows, key=lambda r: r["quality"])
    lighter = min(rows, key=lambda r: r["peak_bytes"])
    return (
        f"At L={result['settings']['seq_len']}, {len(faster)} of {len(rows) - 1} causal alternatives train faster "
        f"than full attention here; full reaches accuracy {full['quality']:.3f}, the best is {best['attention']} "
        f"({best['quality']:.3f}); the lightest step is {lighter['attention']} ({lighter['peak_bytes'] / 2**20:.1f} "
        f"MiB vs {full['peak_bytes'] / 2**20:.1f} MiB for full). Short CPU runs: differences of a few points of "
        "accuracy are within run-to-run noise."
    )
