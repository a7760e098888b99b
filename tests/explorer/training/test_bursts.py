"""Training in GPU bursts yields exactly the snapshots of one uninterrupted run, survives pickling (the
trainer crosses into a GPU worker and back), and keeps both stops: the caller's (a stopped snapshot)
and the ambient one of a reproduction (``Abandoned``)."""

import pickle

import pytest

from explorer.runtime.device import record_gpu_calls
from explorer.runtime.stopping import Abandoned, stop_when
from explorer.training import bursts
from explorer.training import trainer as tr
from models import ModelConfig

TINY = ModelConfig(n_layers=2, d_model=32, n_heads=2, max_len=64, dropout=0.1)


def _run(**kw):
    return tr.RunConfig(**{"task": "copy", "steps": 6, "every": 2, "batch_size": 4, "seq_len": 16, **kw})


def _digest(snaps):
    return [
        (s.step, s.train_loss, s.heldout_loss, s.heldout_acc, s.attention.tobytes(), tuple(s.grad_norms["residual"]))
        for s in snaps
    ]


def _crossing(monkeypatch):
    """``train_burst`` as a GPU worker sees it: the trainer pickled in, the result pickled back."""
    real = bursts.train_burst

    def through_pickle(trainer, steps, stop, max_wall_s=None):
        return pickle.loads(pickle.dumps(real(pickle.loads(pickle.dumps(trainer)), steps, stop, max_wall_s)))

    monkeypatch.setattr(bursts, "train_burst", through_pickle)


@pytest.mark.parametrize("crossing", [False, True], ids=["in place", "pickled"])
def test_bursts_give_the_uninterrupted_runs_snapshots(monkeypatch, crossing):
    whole = _digest(tr.train(TINY, _run()))
    if crossing:
        _crossing(monkeypatch)
    trainer = tr.Trainer(TINY, _run())
    with record_gpu_calls() as calls:
        snaps = list(bursts.run_in_bursts(trainer))
    assert _digest(snaps) == whole
    assert trainer.done and trainer.step == 6 and len(trainer.history) == 4
    assert [args[1] for _, args, _, _ in calls] == [2, 2, 2]  # one GPU call per snapshot interval


def test_a_trainer_pickles_without_its_lock_and_gets_a_new_one():
    trainer = tr.Trainer(TINY, _run())
    copy = pickle.loads(pickle.dumps(trainer))
    assert copy.weights_lock is not trainer.weights_lock and copy.weights_lock.acquire(blocking=False)
    copy.weights_lock.release()
    assert trainer.adopt(copy) is trainer and trainer.model is copy.model


def test_the_callers_stop_ends_the_run_with_a_snapshot(monkeypatch):
    _crossing(monkeypatch)
    trainer = tr.Trainer(TINY, _run(steps=40, every=10))
    snaps = list(bursts.run_in_bursts(trainer, stop=lambda: True))
    assert snaps[-1].step == 0 and "stopped" in snaps[-1].message


def test_an_ambient_stop_ends_the_enclosing_work(monkeypatch):
    _crossing(monkeypatch)
    trainer = tr.Trainer(TINY, _run(steps=40, every=10))
    got = []
    with stop_when(lambda: len(got) >= 1):
        with pytest.raises(Abandoned):
            for snap in bursts.run_in_bursts(trainer):
                got.append(snap)
    assert [s.step for s in got] == [0]
