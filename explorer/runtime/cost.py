"""The compute a request will take, predicted before it runs, and refused by name when it is too much.

``predict(cfg, [(passes, seq_len, batch), ...])`` -> seconds of one core: each part is ``passes`` forward
passes over a ``(batch, seq_len)`` input, a forward costing ``2 x parameters`` FLOPs per token plus
``4 x keys x d_model`` per token and layer for the attention scores (the parameters counted exactly on the
meta device, ``models.footprint.weights``), divided by the rate this machine's single-thread matmuls reach
(``rate``: measured once, a fraction of a second) and scaled by ``LEARNED``, per kind of request the ratio
of measured to predicted CPU seconds of the requests run so far (so the prediction follows the measured cost).

``charge(cfg, parts, what)`` checks the prediction before anything runs:

- against the per-request budget, ``settings.request_seconds()`` (``EXPLORER_REQUEST_SECONDS``, 20 s; a heavy
  job, which runs in its own slots at the lowest priority, ``HEAVY_BUDGET`` times that);
- against what the visitor (``visitor``, the ambient client address a request runs for) has left of its
  share, ``settings.visitor_share()`` seconds per ``settings.share_window()`` (``explorer.runtime.fair.LEDGER``),

and raises ``ConfigError`` naming ``what`` with the predicted seconds and the budget, so the request never
takes a slot. A request's measured CPU seconds go into the ledger when it ends (``explorer.app.server.calls``).
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import time

import torch

from explorer.runtime import settings
from explorer.runtime.fair import LEDGER
from models import ConfigError
from models.footprint import weights

_VISITOR: contextvars.ContextVar = contextvars.ContextVar("explorer_cost_visitor", default=None)
_PREDICTED: contextvars.ContextVar = contextvars.ContextVar("explorer_cost_predicted", default=None)
_RATE = {"flops": None}
_RATE_LOCK = threading.Lock()
MEASURE = (128, 512, 512)  # the calibration matmul: (m, k, n), 67 MFLOP (a few ms): the best of REPEATS is taken,
REPEATS = 20  # so that one of them runs uncontended on a busy host


# A whole model's passes reach less than the calibration matmul's rate (small matmuls, softmax, norms, the
# views' hooks and copies): measured on a 2-core host, 123 patching passes of a 7-layer, 512-wide model on 40
# tokens took 11 s of CPU, 2.4x the FLOPs over the matmul rate; the first prediction of a kind uses this.
FIRST_RATIO = 2.5


class Learned:
    """The ratio of measured to predicted seconds, a moving average kept within ``[low, high]``."""

    def __init__(self, low: float = 0.5, high: float = 8.0, weight: float = 0.3, first: float = FIRST_RATIO):
        self.low, self.high, self.weight = low, high, weight
        self._lock = threading.Lock()
        self.ratio = first

    def observe(self, predicted: float, measured: float) -> None:
        if predicted < 0.05 or measured <= 0:  # too short to say anything about the model's cost
            return
        with self._lock:
            seen = min(self.high, max(self.low, measured / predicted * self.ratio))
            self.ratio = (1 - self.weight) * self.ratio + self.weight * seen


class Corrections:
    """One ``Learned`` ratio per kind of request (a Why view, the long-context view, a sweep: their passes cost
    differently per FLOP), at most ``MAX_KINDS`` of them."""

    MAX_KINDS = 64

    def __init__(self):
        self._lock = threading.Lock()
        self._kinds: dict = {}

    def of(self, kind: str | None) -> Learned:
        with self._lock:
            found = self._kinds.get(kind)
            if found is None:
                found = Learned()
                if len(self._kinds) < self.MAX_KINDS:
                    self._kinds[kind] = found
            return found

    def observe(self, kind: str | None, predicted: float, measured: float) -> None:
        self.of(kind).observe(predicted, measured)


LEARNED = Corrections()


def rate() -> float:
    """FLOP/s of a float32 matmul on this machine with the app's threads (the best of ``REPEATS`` after a
    first untimed one, measured once)."""
    with _RATE_LOCK:
        if _RATE["flops"] is None:
            m, k, n = MEASURE
            a, b = torch.randn(m, k), torch.randn(k, n)
            a @ b  # the first call sets up the library's kernels
            best = float("inf")
            for _ in range(REPEATS):
                t0 = time.perf_counter()
                a @ b
                best = min(best, time.perf_counter() - t0)
            _RATE["flops"] = max(1e9, 2 * m * k * n / max(best, 1e-6))
        return _RATE["flops"]


def forward_flops(cfg, seq_len: int, batch: int = 1) -> float:
    """FLOPs of one forward pass over a ``(batch, seq_len)`` input (see the module docstring)."""
    n_params = weights(cfg)[0]
    layers = int(getattr(cfg, "n_layers", 1) or 1)
    keys = seq_len + int(getattr(cfg, "n_memory", 0) or 0)
    return float(batch) * seq_len * (2.0 * n_params + 4.0 * layers * keys * cfg.d_model)


def predict(cfg, parts, kind: str | None = None) -> float:
    """Seconds of one core for ``parts``: ``[(passes, seq_len, batch), ...]``, with the measured correction of
    ``kind``."""
    flops = sum(p * forward_flops(cfg, max(1, int(n)), max(1, int(b))) for p, n, b in parts)
    return flops / rate() * LEARNED.of(kind).ratio


@contextlib.contextmanager
def visitor(address: str | None):
    """The client address the enclosed work is charged to; yields a dict whose ``"predicted"`` sums the
    seconds ``charge`` predicted inside (``"kind"``: the last kind charged)."""
    seen = {"predicted": 0.0, "kind": None}
    t1, t2 = _VISITOR.set(address), _PREDICTED.set(seen)
    try:
        yield seen
    finally:
        _VISITOR.reset(t1)
        _PREDICTED.reset(t2)


def current_visitor() -> str | None:
    return _VISITOR.get()


def _s(seconds: float) -> str:
    return f"{seconds:,.1f} s" if seconds >= 0.1 else f"{seconds * 1000:,.0f} ms"


class OverBudget(ConfigError):
    """A request refused before it runs: its name (``field``), its predicted seconds and the budget it passes."""

    def __init__(self, what: str, need: float, message: str):
        super().__init__(what, f"about {_s(need)} of compute", message)
        self.seconds = need
        self.args = (message,)

    def __str__(self) -> str:
        return self.allowed


# a heavy job (its own slots, lowest priority: a long context, a sweep, an export) may take this many request budgets
HEAVY_BUDGET = 6


def charge(cfg, parts, what: str, heavy: bool = False, kind: str | None = None, ceiling: float | None = None) -> float:
    """Predict ``parts`` of ``cfg`` (see ``predict``; ``kind``, default ``what``, names its measured correction;
    ``ceiling``: the seconds past which the work stops itself, a time-budgeted sweep) and refuse ``what``
    (``OverBudget``, a ConfigError naming it) when over the per-request budget (``heavy``: ``HEAVY_BUDGET`` of
    them) or over what the visitor has left of its share; -> the predicted seconds."""
    kind = what if kind is None else kind
    need = predict(cfg, parts, kind)
    if ceiling is not None:
        need = min(need, ceiling)
    budget = settings.request_seconds() * (HEAVY_BUDGET if heavy else 1)
    if need > budget:
        raise OverBudget(
            what,
            need,
            f"{what} refused: it needs about {_s(need)} of compute, over the "
            f"{_s(budget)} one request may take on this server "
            f"({settings.REQUEST_SECONDS}); try a smaller model or a shorter text.",
        )
    address = _VISITOR.get()
    if address is not None:
        share, window = settings.visitor_share(), settings.share_window()
        used = LEDGER.used(address)
        if used + need > share:
            raise OverBudget(
                what,
                need,
                f"{what} refused: it needs about {_s(need)} of compute and your address "
                f"used {_s(used)} of its {_s(share)} in the last {window / 60:.0f} "
                f"minutes ({settings.VISITOR_SHARE}); try again in a few minutes.",
            )
    seen = _PREDICTED.get()
    if seen is not None:
        seen["predicted"] += need
        seen["kind"] = kind
    return need
