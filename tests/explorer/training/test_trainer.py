"""The training generator: yields, stops, is deterministic, resumes, lowers every task's loss, and
trains every registry entry of the catalogue (with aux losses and memories)."""

import copy

import numpy as np
import pytest
import torch

from explorer.runtime.stopping import Abandoned, stop_when
from explorer.training import trainer as tr
from explorer.training.tasks import task_names
from models import ConfigError, ModelConfig, choices

TINY = dict(
    n_layers=2,
    d_model=32,
    n_heads=2,
    max_len=64,
    segment_len=16,
    mem_len=16,
    cmem_len=8,
    window=8,
    block_size=8,
    stride=4,
    n_landmarks=4,
    proj_len=8,
    max_span=16,
    chunk_size=8,
)


def _run(**kw):
    return tr.RunConfig(**{"task": "copy", "steps": 6, "every": 2, "batch_size": 4, "seq_len": 16, **kw})


def test_yields_snapshot_every_n_steps_with_its_fields():
    snaps = list(tr.train(ModelConfig(**TINY), _run()))
    assert [s.step for s in snaps] == [0, 2, 4, 6]
    assert snaps[0].train_loss is None and all(s.train_loss > 0 for s in snaps[1:])
    assert snaps[-1].done and not snaps[-2].done
    s = snaps[-1]
    assert s.attention.shape == (2, 2, 16, 16)
    rows = s.attention.sum(-1)
    assert np.allclose(rows, 1, atol=1e-4)  # causal softmax rows sum to one
    assert np.allclose(np.triu(s.attention, 1), 0)  # and never look ahead
    assert len(s.grad_norms["attn_out"]) == 2 and all(g > 0 for g in s.grad_norms["residual"])
    assert s.tokens_per_s > 0 and s.elapsed_s > 0 and 0 <= s.heldout_acc <= 1


def test_a_stop_ends_the_run_at_the_next_module():
    trainer = tr.Trainer(ModelConfig(**TINY), _run(steps=50, every=10))
    snaps = list(trainer.run(stop=lambda: trainer.step >= 3))
    assert snaps[-1].step == 3 and "stopped at step 3" in snaps[-1].message and not snaps[-1].done


def test_a_step_abandoned_halfway_changes_nothing():
    """A stop inside a step's backward pass abandons it; playing on gives exactly the uninterrupted run."""
    cfg = ModelConfig(**TINY, dropout=0.1)
    whole = _digest(tr.train(cfg, _run()))
    trainer = tr.Trainer(cfg, _run())
    calls = {"n": 0}

    def stop_in_step_4():  # called before every module, and at every input gradient in backward
        if trainer.step == 4:
            calls["n"] += 1
        return calls["n"] > 25

    first = list(trainer.run(stop=stop_in_step_4))
    assert first[-1].step == 4 and "stopped at step 4" in first[-1].message and calls["n"] > 25
    assert _digest(first + list(trainer.run()))[-1] == whole[-1]


def test_an_ambient_stop_ends_the_enclosing_work_instead_of_yielding_a_snapshot():
    """Under ``stop_when`` (a reproduction's stop) a run without its own stop raises ``Abandoned`` out of
    the generator, inside the step, and leaves the step undone; a run given its own stop keeps it."""
    trainer = tr.Trainer(ModelConfig(**TINY), _run(steps=50, every=10))
    with stop_when(lambda: trainer.step >= 3):
        with pytest.raises(Abandoned):
            list(trainer.run())
        assert trainer.step == 3
        own = list(trainer.run(stop=lambda: trainer.step >= 5))
    assert own[-1].step == 5 and "stopped at step 5" in own[-1].message
    list(trainer.run())  # outside: nothing stops it
    assert trainer.done


def test_wall_time_cap_stops_with_a_message():
    snaps = list(tr.train(ModelConfig(**TINY), _run(steps=50, every=10), max_wall_s=0.0))
    assert snaps[-1].step == 0 and "wall-time cap" in snaps[-1].message


def _digest(snaps):
    return [
        (s.step, s.train_loss, s.heldout_loss, s.heldout_acc, s.attention.tobytes(), tuple(s.grad_norms["residual"]))
        for s in snaps
    ]


def test_deterministic_for_a_seed_and_resumable():
    cfg = ModelConfig(**TINY, dropout=0.1)  # dropout draws from the run's own RNG
    a = _digest(tr.train(cfg, _run()))
    b = _digest(tr.train(cfg, _run()))
    assert a == b
    trainer = tr.Trainer(cfg, _run())
    paused = list(trainer.run(max_steps=3)) + list(trainer.run())  # pause after step 3, play again
    assert _digest(paused)[-1] == a[-1]
    other = _digest(tr.train(cfg, _run(seed=1)))
    assert other[-1][2] != a[-1][2]


def test_learning_rate_schedule():
    run = tr.RunConfig(steps=110, lr=1.0, warmup=10)
    assert tr.lr_at(run, 0) == pytest.approx(0.1) and tr.lr_at(run, 9) == pytest.approx(1.0)
    assert tr.lr_at(run, 60) == pytest.approx(0.5) and tr.lr_at(run, 110) == pytest.approx(0.0)
    const = tr.RunConfig(steps=110, lr=1.0, schedule="constant")
    assert tr.lr_at(const, 0) == tr.lr_at(const, 100) == 1.0


@pytest.mark.parametrize("task", task_names())
def test_training_lowers_the_loss_of_every_task(task):
    run = tr.RunConfig(task=task, steps=60, every=60, batch_size=16, seq_len=32, lr=3e-3, grad_norms=False, probe=False)
    snaps = list(tr.train(ModelConfig(n_layers=2, d_model=48, n_heads=2, max_len=64), run))
    first, last = snaps[0].heldout_loss, snaps[-1].heldout_loss
    assert last < first - 1.0, (task, first, last)  # at least a nat below the untrained model


def _variants():
    out = []
    for cat, keys in choices().items():
        for key in keys:
            extra = {"causal": False} if key in ("linformer", "nystrom", "encoder_only") else {}
            out.append(pytest.param({cat: key, **extra}, id=f"{cat}={key}"))
    out.append(pytest.param({"layer": "universal", "act": True}, id="layer=universal+act"))
    return out


def _valid(variant: dict) -> ModelConfig:
    """TINY with ``variant``, adjusted where the variant itself refuses TINY's causal mask or rotary
    positions (bidirectional-only mechanisms, synthesizers without a q.k product)."""
    d = {**TINY, **variant}
    for _ in range(3):
        try:
            return ModelConfig(**d).validate()
        except ConfigError as exc:
            fix = {"causal": {"causal": False}, "position": {"position": "sinusoidal"}}.get(exc.field)
            if fix is None or exc.field in variant:
                raise
            d.update(fix)
    return ModelConfig(**d).validate()


@pytest.mark.parametrize("variant", _variants())
def test_every_catalogue_entry_trains(variant):
    cfg = _valid(variant)
    # an encoder-decoder trains on the sequence-to-sequence tasks only (explorer.training.seq2seq)
    task = "reverse" if cfg.architecture == "encoder_decoder" else "induction"
    run = _run(task=task, steps=2, every=2, seq_len=32)
    trainer = tr.Trainer(cfg, run)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    snaps = list(trainer.run())
    assert np.isfinite(snaps[-1].heldout_loss) and all(np.isfinite(snaps[-1].grad_norms["attn_out"]))
    moved = [not torch.equal(a, p.detach()) for a, p in zip(before, trainer.model.parameters())]
    assert sum(moved) >= len(moved) // 2  # the optimizer updated the weights


def test_aux_loss_is_part_of_the_training_loss():
    cfg = ModelConfig(**TINY, ffn="moe")
    trainer = tr.Trainer(cfg, _run())
    batch = trainer.task.batch(4, 16, torch.Generator().manual_seed(0))
    out = trainer.model(batch.tokens)
    assert out.aux_loss.item() > 0
    task_loss, aux = trainer._loss(batch)
    assert task_loss.item() == pytest.approx(tr.scored_loss(out.logits, batch).item())
    assert aux.item() == pytest.approx(out.aux_loss.item())


@pytest.mark.parametrize("ffn", ["moe", "gelu"])
def test_a_snapshot_reports_the_auxiliary_loss_apart(ffn):
    """The snapshot's ``train_aux_loss`` is the mean ``out.aux_loss`` of the steps since the previous one,
    recomputed here from copies of the weights and batches each step saw (0 for a dense FFN)."""
    cfg = ModelConfig(**TINY, ffn=ffn)
    trainer = tr.Trainer(cfg, _run(steps=3, every=3, task="lm", seq_len=16))
    seen = []
    step = trainer.train_step

    def recorded():
        model = copy.deepcopy(trainer.model)
        state = trainer.data_gen.get_state()
        batch = trainer.task.batch(trainer.run_cfg.batch_size, trainer.run_cfg.seq_len, trainer.data_gen, "train")
        trainer.data_gen.set_state(state)
        model.train()
        with torch.no_grad():
            seen.append(float(model(tr.model_input(batch, True)).aux_loss))
        return step()

    trainer.train_step = recorded
    last = list(trainer.run())[-1]
    assert len(seen) == 3 and last.train_aux_loss == pytest.approx(float(np.mean(seen)), rel=1e-5, abs=1e-7)
    assert (last.train_aux_loss > 0) == (ffn == "moe") and trainer.history[-1]["train_aux_loss"] == last.train_aux_loss
    assert last.train_aux_loss < last.train_loss


@pytest.mark.slow
def test_short_induction_run_reaches_a_low_second_half_loss():
    """The slowest test here (~20 s on one core): induction needs a few hundred steps to switch on
    (the loss sits near ln 64 until the heads form, then falls)."""
    cfg = ModelConfig(n_layers=2, d_model=64, n_heads=4, ffn="none", position="rope", max_len=64)
    run = tr.RunConfig(
        task="induction",
        steps=350,
        every=350,
        batch_size=32,
        seq_len=48,
        lr=3e-3,
        warmup=20,
        schedule="constant",
        grad_norms=False,
        probe=False,
    )
    snaps = list(tr.train(cfg, run))
    assert snaps[0].heldout_loss > 4.0 and snaps[-1].heldout_loss < 1.0  # chance after the alphabet: ln 64 = 4.16


def test_bad_runs_and_caps_are_refused():
    with pytest.raises(ConfigError, match="schedule"):
        tr.RunConfig(schedule="linear").validate()
    with pytest.raises(ConfigError, match="lr"):
        tr.RunConfig(lr=-1).validate()
    with pytest.raises(ConfigError, match="causal"):
        tr.Trainer(ModelConfig(**TINY, attention="linformer", causal=False), _run(task="lm"))
    with pytest.raises(ConfigError, match="steps"):
        tr.check_caps(ModelConfig(**TINY), _run(steps=tr.MAX_TRAIN_STEPS + 1))
    with pytest.raises(ConfigError, match="batch_size"):
        tr.check_caps(ModelConfig(**TINY), _run(batch_size=1024, seq_len=1024))
    with pytest.raises(ConfigError, match="d_model"):
        tr.check_caps(ModelConfig(d_model=1024), _run())
