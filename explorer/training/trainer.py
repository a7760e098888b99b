"""The training engine: a resumable generator that trains any catalogue model on a task.

``Trainer(model_cfg, run)`` holds one run (model, AdamW, data RNG, dropout RNG, history);
``trainer.run(...)`` is a generator that trains and yields a ``Snapshot`` every ``run.every``
steps: step, train loss (mean since the last snapshot), held-out loss and accuracy on fixed
held-out batches, learning rate, per-layer gradient norms (measured exactly as the Gradients tab
measures them, ``explorer.analysis.gradients.norms.branch_gradient_norms``, on the held-out batch), the probe's
attention maps (layers x heads), tokens/s and elapsed time. It checks ``stop`` and the wall-time
budget between steps, so a stop really stops the work; calling ``run`` again resumes where it
left off (pause / play), with the same result as an uninterrupted run.

Determinism: the data come from a private ``torch.Generator`` seeded with ``run.seed``; the model
is built from ``model_cfg.seed``; dropout draws from the model's own random source
(``models.dropout``), reseeded with ``run.seed + 1`` when the run starts, so a step touches no
process-wide RNG and holds no lock; the number of intra-op threads is fixed for the run and
restored after each chunk (float sums depend on it). So the same configs give identical snapshots,
whatever else the server runs at the same time.

The loss is the task's scored next-token cross-entropy plus ``out.aux_loss`` (MoE load balance,
ACT ponder cost, adaptive-span L1 ...); a snapshot reports that part apart (``train_aux_loss``), so the
language model's own loss is ``train_loss - train_aux_loss``. Memory models process each sequence in segments inside one
call, carrying their memory across the segments; every batch starts from a fresh memory.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields

import numpy as np
import torch

from explorer.analysis.gradients.norms import branch_gradient_norms, next_token_loss
from explorer.runtime.configs import as_config
from explorer.runtime.stopping import Abandoned, Guard, ambient_stop
from explorer.runtime.text import reads_pair
from explorer.training import seq2seq as train_encdec
from explorer.training.tasks import Batch, get_task, model_input, scored_accuracy, scored_loss, task_names
from models import ConfigError, ModelConfig, build_model
from models.dropout import RandomSource, use_random_source

SCHEDULES = ("cosine", "constant")

# What one run of the hosted app may use (two shared CPU cores): the library itself has no caps.
MAX_TRAIN_PARAMS = 2_000_000  # model parameters
MAX_TRAIN_STEPS = 2000
MAX_BATCH_TOKENS = 8192  # batch_size x seq_len
MAX_WALL_S = 180.0  # seconds of work per press of play
PROBE_MAX_LEN = 96  # the probe's attention is drawn as L x L heatmaps


@dataclass
class RunConfig:
    """Every choice of a training run (the model is described by its own ``ModelConfig``)."""

    task: str = "copy"
    steps: int = 300
    lr: float = 3e-3
    warmup: int = 0  # linear warm-up steps (0: none)
    schedule: str = "cosine"  # after warm-up: cosine decay to 0, or constant
    batch_size: int = 32
    seq_len: int = 64
    clip: float = 1.0  # max global gradient norm (0: no clipping)
    weight_decay: float = 0.0
    beta1: float = 0.9
    beta2: float = 0.98
    every: int = 25  # snapshot every N steps
    eval_batches: int = 2  # held-out batches (of batch_size) per snapshot
    seed: int = 0  # data and dropout
    threads: int = 1  # intra-op threads while training
    grad_norms: bool = True  # measure per-layer gradient norms at each snapshot
    probe: bool = True  # draw the probe's attention at each snapshot
    text: str | None = None  # lm task: the corpus (None: the Python documentation)

    def validate(self) -> RunConfig:
        if self.task not in task_names():
            raise ConfigError("task", self.task, f"one of {task_names()}")
        if self.schedule not in SCHEDULES:
            raise ConfigError("schedule", self.schedule, f"one of {list(SCHEDULES)}")
        for name, lo in (
            ("steps", 1),
            ("batch_size", 1),
            ("seq_len", 8),
            ("every", 1),
            ("eval_batches", 1),
            ("threads", 1),
            ("warmup", 0),
            ("seed", 0),
        ):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
                raise ConfigError(name, v, f"an integer >= {lo}")
        for name in ("lr", "clip", "weight_decay", "beta1", "beta2"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ConfigError(name, v, "a finite number >= 0")
        if not 0 < self.lr <= 1:
            raise ConfigError("lr", self.lr, "a learning rate in (0, 1]")
        for name in ("beta1", "beta2"):
            if not getattr(self, name) < 1:
                raise ConfigError(name, getattr(self, name), "a number in [0, 1)")
        return self

    def to_dict(self) -> dict:
        d = asdict(self)
        if d["text"] is not None:
            d["text"] = f"<{len(d['text'])} characters>"
        return d

    @classmethod
    def from_dict(cls, d: dict) -> RunConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ConfigError(unknown[0], d[unknown[0]], f"unknown run field; valid: {sorted(known)}")
        return cls(**d).validate()


@dataclass
class Snapshot:
    step: int
    steps: int  # the run's total
    train_loss: float | None  # mean over the steps since the previous snapshot (None at step 0)
    heldout_loss: float
    heldout_acc: float
    lr: float
    grad_norms: dict | None  # branch_gradient_norms: layer, attn_out, ffn_out, residual, notes
    attention: np.ndarray | None  # (n_layers, h, Lq, Lk) float32 probe attention (NaN: none returned)
    probe_tokens: list  # the probe's byte ids
    tokens_per_s: float
    elapsed_s: float
    done: bool = False
    message: str = ""  # why the run stopped early (stop pressed, a cap ...)
    train_aux_loss: float | None = None  # the part of train_loss that is out.aux_loss (MoE balancing, ...)


def check_caps(model_cfg, run: RunConfig) -> ModelConfig:
    """Refuse (ConfigError naming the field and the cap) a run the hosted app cannot afford."""
    cfg = as_config(model_cfg)
    run.validate()
    n_params = cfg.approx_params()
    if n_params > MAX_TRAIN_PARAMS:
        raise ConfigError(
            "d_model",
            cfg.d_model,
            f"a model of at most {MAX_TRAIN_PARAMS:,} parameters for "
            f"training here (this one has ~{n_params:,}); lower d_model, n_layers or max_len",
        )
    if run.steps > MAX_TRAIN_STEPS:
        raise ConfigError("steps", run.steps, f"at most {MAX_TRAIN_STEPS} steps per run here")
    if run.batch_size * run.seq_len > MAX_BATCH_TOKENS:
        raise ConfigError(
            "batch_size",
            run.batch_size,
            f"batch_size x seq_len <= {MAX_BATCH_TOKENS} tokens here "
            f"(asked {run.batch_size} x {run.seq_len} = {run.batch_size * run.seq_len})",
        )
    return cfg


def lr_at(run: RunConfig, step: int) -> float:
    """Learning rate of step ``step`` (0-based): linear warm-up, then cosine to 0 or constant."""
    if run.warmup and step < run.warmup:
        return run.lr * (step + 1) / run.warmup
    if run.schedule == "constant":
        return run.lr
    span = max(1, run.steps - run.warmup)
    progress = min(1.0, (step - run.warmup) / span)
    return run.lr * 0.5 * (1 + math.cos(math.pi * progress))


def stack_attention(attentions) -> np.ndarray | None:
    """One ``(1, h, Lq, Lk)`` tensor (or None) per layer -> ``(n, h, Lq, Lk)``, right-aligned, NaN-filled."""
    arrays = [a[0].detach().float().cpu().numpy() if isinstance(a, torch.Tensor) else None for a in attentions or []]
    shapes = [a.shape for a in arrays if a is not None]
    if not shapes:
        return None
    h, lq, lk = (max(s[k] for s in shapes) for k in range(3))
    out = np.full((len(arrays), h, lq, lk), np.nan, dtype=np.float32)
    for n, a in enumerate(arrays):
        if a is not None:  # memory slots come first: queries are the last keys
            out[n, : a.shape[0], lq - a.shape[1] :, lk - a.shape[2] :] = a
    return out


def model_probe_attention(cfg, model, probe) -> np.ndarray | None:
    """The probe's attention (its cross-attention for an encoder-decoder) under ``model``, in eval mode
    (``stack_attention``'s array); the model's mode is restored after."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            if reads_pair(cfg):
                return stack_attention(train_encdec.forward(model, probe, True)[0].cross_attentions)
            out = model(model_input(probe, cfg.causal), return_attention=True)
    finally:
        model.train(was_training)
    return stack_attention(out.attentions)


class Trainer:
    """One training run; see the module docstring. Not shared between users: each session owns one."""

    def __init__(self, model_cfg, run: RunConfig, model: torch.nn.Module | None = None):
        self.cfg: ModelConfig = as_config(model_cfg)
        self.run_cfg = run.validate()
        self.task = get_task(run.task, run.text)
        self.seq2seq = reads_pair(self.cfg)  # model(src, tgt): tasks split at SEP (explorer.training.seq2seq)
        if self.seq2seq:
            train_encdec.check_task(run.task)
        if run.task in ("lm", "lm_repeat") and not self.cfg.causal:
            raise ConfigError(
                "causal",
                False,
                "True for next-byte language modelling (a bidirectional model reads "
                "the byte it predicts); non-causal attention trains on the synthetic tasks, whose "
                "answers are hidden from its input",
            )
        if self.cfg.position == "learned" and run.seq_len > self.cfg.max_len:
            raise ConfigError("seq_len", run.seq_len, f"at most max_len={self.cfg.max_len} with learned positions")
        self.model = model if model is not None else build_model(self.cfg)
        self.model.train()
        self.opt = torch.optim.AdamW(
            self.model.parameters(), lr=run.lr, betas=(run.beta1, run.beta2), weight_decay=run.weight_decay
        )
        self.data_gen = torch.Generator().manual_seed(run.seed)
        use_random_source(self.model, RandomSource(run.seed + 1))  # this run's dropout masks
        held_gen = torch.Generator().manual_seed(10_000 + run.seed)
        self.heldout = [
            self.task.batch(run.batch_size, run.seq_len, held_gen, "heldout") for _ in range(run.eval_batches)
        ]
        self.probe = self.task.probe(min(run.seq_len, PROBE_MAX_LEN))
        self.step = 0
        self.weights_lock = threading.Lock()  # held while the optimizer writes the weights (snapshots read under it)
        self.history: list = []  # one dict of scalars per snapshot
        self.train_time = 0.0  # seconds inside training steps (for tokens/s)
        self.elapsed = 0.0  # seconds inside run() (training + evaluation)
        self._losses: list = []
        self._aux_losses: list = []  # out.aux_loss of the same steps as _losses (part of them)
        self.last_aux = 0.0  # out.aux_loss of the last train_step
        self._last_grads = self._last_attention = None  # of the last snapshot (repeated by a stopped one)

    @property
    def done(self) -> bool:
        return self.step >= self.run_cfg.steps

    # ------------------------------------------------------------------ where it trains
    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def to(self, device) -> Trainer:
        """The model and the optimizer's state on ``device`` (a GPU burst moves them there and back:
        ``explorer.training.bursts``). The data and dropout generators stay on the CPU, so the batches
        and masks are the same on every device."""
        device = torch.device(device)
        self.model.to(device)
        for state in self.opt.state.values():
            for key, value in state.items():
                if isinstance(value, torch.Tensor) and not (
                    key == "step" and value.dim() == 0 and value.device.type == "cpu"
                ):
                    state[key] = value.to(device)
        return self

    def __getstate__(self) -> dict:  # pickled into a GPU worker and back: everything but the lock
        state = dict(self.__dict__)
        del state["weights_lock"]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.weights_lock = threading.Lock()

    def adopt(self, other: Trainer) -> Trainer:
        """Take ``other``'s state (the same run, come back from a GPU worker as a copy); this object's
        lock is kept."""
        if other is not self:
            lock = self.weights_lock
            with lock:
                self.__dict__.update(other.__getstate__())
                self.weights_lock = lock
        return self

    # ------------------------------------------------------------------ one step
    def _forward(self, batch: Batch, return_attention: bool = False) -> tuple:
        """(ModelOutput, the Batch its logits are scored against)."""
        if self.seq2seq:
            return train_encdec.forward(self.model, batch, return_attention)
        tokens = model_input(batch, self.cfg.causal).to(self.device)
        return self.model(tokens, return_attention=return_attention), batch

    def _loss(self, batch: Batch) -> tuple:
        """(task loss, ``out.aux_loss``): kept apart so that a run reports the language model's loss and
        the auxiliary terms (MoE load balancing, ...) each on its own."""
        out, scored = self._forward(batch)
        return scored_loss(out.logits, scored), out.aux_loss

    def train_step(self) -> float:
        """One optimizer step on a fresh batch; returns the training loss (task loss + aux). A step the
        guard abandons (``Abandoned``, raised inside the forward or backward) changes nothing: the
        weights, the optimizer, the data and dropout generators are as before it."""
        run = self.run_cfg
        self.model.train()  # another view (e.g. the app's "trained weights" tabs) may have set eval mode
        data_state, random_state = self.data_gen.get_state(), self.model.random.state()
        batch = self.task.batch(run.batch_size, run.seq_len, self.data_gen, "train")
        for group in self.opt.param_groups:
            group["lr"] = lr_at(run, self.step)
        try:
            task_loss, aux = self._loss(batch)
            loss = task_loss + aux
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
        except Abandoned:
            self.opt.zero_grad(set_to_none=True)
            self.data_gen.set_state(data_state)
            self.model.random.set_state(random_state)
            raise
        if run.clip > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), run.clip)
        with self.weights_lock:
            self.opt.step()
            self.step += 1
        value, self.last_aux = float(loss.detach()), float(aux.detach())
        if not math.isfinite(value):
            raise FloatingPointError(f"the loss became {value} at step {self.step}")
        return value

    # ------------------------------------------------------------------ evaluation
    def evaluate(self) -> tuple:
        """(held-out loss, held-out accuracy) on the fixed held-out batches, eval mode."""
        self.model.eval()
        try:
            with torch.no_grad():
                losses, accs = [], []
                for b in self.heldout:
                    out, b = self._forward(b)
                    logits = out.logits
                    losses.append(float(scored_loss(logits, b)))
                    accs.append(scored_accuracy(logits, b))
        finally:
            self.model.train()
        return float(np.mean(losses)), float(np.mean(accs))

    def probe_attention(self) -> np.ndarray | None:
        self.model.eval()
        try:
            with torch.no_grad():
                out, _ = self._forward(self.probe, return_attention=True)
        finally:
            self.model.train()
        return stack_attention(out.cross_attentions if self.seq2seq else out.attentions)

    def gradient_norms(self) -> dict:
        """Per-layer gradient norms of the task loss on the first held-out batch (no ``.grad`` written)."""
        self.model.eval()  # no dropout, no EMA updates: a measurement, not a step
        try:
            dev = self.device
            if self.seq2seq:  # the target's next-token loss is exactly the scored loss
                inputs = tuple(t.to(dev) for t in train_encdec.gradient_inputs(self.heldout[0]))
                return branch_gradient_norms(self.model, inputs, lambda logits, _src, tgt: next_token_loss(logits, tgt))
            return branch_gradient_norms(
                self.model,
                model_input(self.heldout[0], self.cfg.causal).to(dev),
                lambda logits, _inputs: scored_loss(logits, self.heldout[0]),
            )
        finally:
            self.model.train()

    def snapshot(self, message: str = "") -> Snapshot:
        run = self.run_cfg
        loss, acc = self.evaluate()
        train_loss = float(np.mean(self._losses)) if self._losses else None
        aux_loss = float(np.mean(self._aux_losses)) if self._aux_losses else None
        self._losses, self._aux_losses = [], []
        tps = self.step * run.batch_size * run.seq_len / self.train_time if self.train_time > 0 else 0.0
        snap = Snapshot(
            step=self.step,
            steps=run.steps,
            train_loss=train_loss,
            heldout_loss=loss,
            heldout_acc=acc,
            lr=lr_at(run, max(0, self.step - 1)),
            tokens_per_s=tps,
            elapsed_s=self.elapsed,
            grad_norms=self.gradient_norms() if run.grad_norms else None,
            attention=self.probe_attention() if run.probe else None,
            probe_tokens=self.probe.tokens[0].tolist(),
            done=self.done,
            message=message,
            train_aux_loss=aux_loss,
        )
        self._last_grads, self._last_attention = snap.grad_norms, snap.attention
        self.history.append(
            {
                "step": snap.step,
                "train_loss": train_loss,
                "train_aux_loss": aux_loss,
                "heldout_loss": loss,
                "heldout_acc": acc,
                "lr": snap.lr,
                "tokens_per_s": tps,
                "elapsed_s": self.elapsed,
            }
        )
        return snap

    # ------------------------------------------------------------------ the generator
    def run(
        self,
        max_steps: int | None = None,
        stop: Callable[[], bool] | None = None,
        max_wall_s: float | None = None,
        every: int | None = None,
    ):
        """Train up to ``max_steps`` more steps (None: to the end), yielding a ``Snapshot`` every
        ``every`` steps (default ``run.every``) and at the end. ``stop()`` (default: the ambient stop of
        ``explorer.runtime.stopping.stop_when``, if any: a stop of the enclosing work raises ``Abandoned``
        out of the generator instead of ending it with a snapshot) and the wall-time budget
        ``max_wall_s`` (seconds of this call) are checked before every module of every step
        (``explorer.runtime.stopping.Guard``), so a stop ends the work within one module's run; the
        abandoned step changes nothing, and the last snapshot's ``message`` says why the run stopped
        early (it repeats the previous evaluation instead of running a new one)."""
        run = self.run_cfg
        every = every or run.every
        target = run.steps if max_steps is None else min(run.steps, self.step + int(max_steps))
        ambient = stop is None and ambient_stop() is not None  # the enclosing work stops: no snapshot, it ends
        guard = Guard(stop or ambient_stop() or (lambda: False))

        def why() -> str:
            if guard.why == "cancelled":
                return f"stopped at step {self.step}"
            return f"stopped at step {self.step}: the wall-time cap of {max_wall_s:g} s per run was reached"

        def evaluated():
            try:
                return self._timed(self.snapshot), ""
            except Abandoned:  # stopped while evaluating at a snapshot's step: its losses are reported now
                if ambient and guard.why == "cancelled":
                    raise
                pending, self._losses, self._aux_losses = self._losses, [], []
                return self.stopped_snapshot(why(), float(np.mean(pending)) if pending else None), why()

        threads = torch.get_num_threads()
        torch.set_num_threads(run.threads)
        try:
            with guard.run_until(math.inf if max_wall_s is None else max_wall_s), guard.installed(self.model):
                if self.step == 0 and not self.history:
                    snap, message = evaluated()
                    torch.set_num_threads(threads)
                    yield snap
                    torch.set_num_threads(run.threads)
                    if message:
                        return
                while self.step < target:
                    message = ""
                    t0 = time.perf_counter()
                    try:
                        while self.step < target:
                            self._losses.append(self.train_step())
                            self._aux_losses.append(self.last_aux)
                            if self.step % every == 0:
                                break
                    except Abandoned:
                        if ambient and guard.why == "cancelled":
                            raise
                        message = why()
                    finally:
                        dt = time.perf_counter() - t0
                        self.train_time += dt
                        self.elapsed += dt
                    if message:
                        snap = self.stopped_snapshot(message)
                    else:
                        snap, message = evaluated()
                    torch.set_num_threads(threads)  # other requests run between our chunks
                    yield snap
                    torch.set_num_threads(run.threads)
                    if message:
                        return
        finally:
            torch.set_num_threads(threads)

    def stopped_snapshot(self, message: str, train_loss: float | None = None) -> Snapshot:
        """The last evaluation again, at the current step, with ``message``: a stop computes nothing more."""
        last = self.history[-1] if self.history else {}
        snap = Snapshot(
            step=self.step,
            steps=self.run_cfg.steps,
            train_loss=train_loss,
            heldout_loss=last.get("heldout_loss", float("nan")),
            heldout_acc=last.get("heldout_acc", 0.0),
            lr=lr_at(self.run_cfg, max(0, self.step - 1)),
            tokens_per_s=last.get("tokens_per_s", 0.0),
            elapsed_s=self.elapsed,
            grad_norms=self._last_grads,
            attention=self._last_attention,
            probe_tokens=self.probe.tokens[0].tolist(),
            done=self.done,
            message=message,
        )
        return snap

    def _timed(self, fn, *args):
        t0 = time.perf_counter()
        out = fn(*args)
        self.elapsed += time.perf_counter() - t0
        out.elapsed_s = self.elapsed
        self.history[-1]["elapsed_s"] = self.elapsed
        return out


def train(model_cfg, run: RunConfig, stop: Callable[[], bool] | None = None, max_wall_s: float | None = None):
    """Generator of ``Snapshot``s of a fresh run (``Trainer(model_cfg, run).run(...)``)."""
    trainer = Trainer(model_cfg, run)
    yield from trainer.run(stop=stop, max_wall_s=max_wall_s)
