"""The long-context view: pooled attention maps, statistics and per-token loss at thousands of tokens.

``long_context(src, length, source, text, change)`` draws the weights on screen (``src``: the request's
``WeightsSource``, resolved once) twice over the same passage (``text.passage``):

- **as trained**: the model the weights were trained as (``surgery.origin_of``: the bundle or the
  checkpoint, at its own config), with the trained length from its manifest (the loss past it is
  "past the trained length");
- **after the change**: the same weights under ``change``: ``window`` (a 64-key sliding window),
  ``window_sinks`` (the window plus 4 attention sinks) or ``controls`` (the controls' own surgery, the
  config on screen). No weight is loaded from anywhere else: the window is ``models.surgery`` moving
  these very tensors (a pattern has no parameters of its own).

Each side is one forward of the model at ``L`` tokens (``models.long_context.pooled_maps``: every layer's
kernels, plus the pooled pass of each layer in their tiled structure; activations at ``L``, never ``L x
L``), one GPU call per side (``compute_side``, ``@gpu``: on a CUDA host or a ZeroGPU Space the model and tokens
go to the GPU and the pooled pass is the Triton kernel; the maps come back as numpy arrays and the reading
names the backend that ran), under a ``Guard`` (a stop crosses as a ``StopToken`` and ends it within one
module; each layer's progress comes back on the same token) and inside one reservation of the memory pool
(``footprint``'s forward at ``L`` plus the pooled grids and statistics).

One cell of a result, exactly: ``zoom.py``. Bins (``loss_bins``, ``stats_bins``) are means over equal position
ranges.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from explorer.analysis import surgery
from explorer.analysis.long_context.text import Passage, passage
from explorer.runtime import budget, settings
from explorer.runtime.device import device, gpu
from explorer.runtime.pool import POOL
from explorer.runtime.signals import NEVER, StopToken, stop_channel
from explorer.runtime.stopping import Abandoned, Guard
from models import ConfigError, build_model, schedule
from models import surgery as model_surgery
from models.blocks import Attention
from models.long_context import pooled_maps, reporting

LENGTHS = (1024, 2048, 4096, 8192, 16384)
DEFAULT_LENGTH = 2048  # the default bundle was trained at 128 bytes: 16x its trained length
WINDOW, SINKS = 64, 4
CHANGES = {
    "window": {"attention": "sliding_window", "window": WINDOW},
    "window_sinks": {"attention": "sliding_window", "window": WINDOW, "n_sinks": SINKS},
    "controls": None,
}
CHANGE_NAMES = {
    "window": f"{WINDOW}-key sliding window",
    "window_sinks": f"{WINDOW}-key window + {SINKS} sinks",
    "controls": "the controls' surgery",
}
STATS = ("entropy", "distance", "sink", "local")
N_BINS = 64


def max_tokens() -> int:
    """The longest passage the view reads (``EXPLORER_LONG_CONTEXT_MAX_TOKENS``, default 16384)."""
    return settings.long_context_max_tokens()


def allowed_lengths() -> list:
    return [n for n in LENGTHS if n <= max_tokens()] or [LENGTHS[0]]


def check_length(length) -> int:
    """``length`` as an int of ``allowed_lengths()``; ``ConfigError`` naming ``length`` otherwise."""
    allowed = allowed_lengths()
    try:
        value = int(str(length).strip())
    except (TypeError, ValueError):
        value = None
    if value not in allowed:
        raise ConfigError(
            "length",
            str(length)[:20],
            f"one of {allowed} tokens (this server's cap: {settings.LONG_CONTEXT_MAX_TOKENS}={max_tokens()})",
        )
    return value


@dataclass
class Side:
    """One model's pooled maps, statistics and loss over the passage."""

    name: str
    config: object
    model: torch.nn.Module = field(repr=False)
    mass: np.ndarray  # (layers, h, n_q, n_k) float32 attention mass per cell
    stats: dict  # name -> (layers, h, L) float32 per query
    loss: np.ndarray | None  # (L - 1,) nats: the loss of predicting token t + 1, t = 0 .. L - 2
    block_q: int
    block_k: int
    backend: str
    method: str
    notes: list
    layers: list  # the model layer index of each map


@dataclass
class LongContext:
    length: int
    passage: Passage
    unit: str  # "byte" or "token"
    trained_length: int | None  # None: weights with no training length (initial, your run)
    origin: str  # what the weights are, as the page says it
    sides: list
    notes: list
    predicted_bytes: int
    seconds: float

    def loss_bins(self, n_bins: int = N_BINS) -> tuple:
        """``(centres, [per side: means or None])`` of the per-token loss over ``n_bins`` position ranges
        (token ``t + 1``'s loss sits at position ``t + 1``)."""
        pos = np.arange(1, self.length)
        return bin_centres(self.length, n_bins), [
            None if s.loss is None else bin_means(s.loss, pos, self.length, n_bins) for s in self.sides
        ]

    def stats_bins(self, n_bins: int = N_BINS) -> tuple:
        """``(centres, [per side: {stat: (layers, h, n_bins)}])``."""
        pos = np.arange(self.length)
        return bin_centres(self.length, n_bins), [
            {k: bin_means(v, pos, self.length, n_bins) for k, v in s.stats.items()} for s in self.sides
        ]


def _edges(length: int, n_bins: int) -> np.ndarray:
    return np.linspace(0, length, max(1, min(int(n_bins), length)) + 1)


def bin_centres(length: int, n_bins: int) -> np.ndarray:
    e = _edges(length, n_bins)
    return (e[:-1] + e[1:]) / 2


def bin_means(values: np.ndarray, positions: np.ndarray, length: int, n_bins: int) -> np.ndarray:
    """Means of ``values (..., n)`` at ``positions (n,)`` over equal ranges of ``[0, length)``; NaN where a
    range holds no position."""
    e = _edges(length, n_bins)
    idx = np.clip(np.searchsorted(e, positions, side="right") - 1, 0, len(e) - 2)
    counts = np.bincount(idx, minlength=len(e) - 1).astype(np.float64)
    flat = np.asarray(values, dtype=np.float64).reshape(-1, values.shape[-1])
    sums = np.stack([np.bincount(idx, weights=row, minlength=len(e) - 1) for row in flat])
    with np.errstate(invalid="ignore", divide="ignore"):
        out = sums / counts
    return out.reshape(*values.shape[:-1], len(e) - 1).astype(np.float32)


# ---------------------------------------------------------------------------- the models drawn
def _params(model) -> dict:
    names = {n for n, _ in model.named_parameters()}
    return {k: v for k, v in model.state_dict().items() if k in names}


def _as_trained(src):
    """``(config, model, trained length, what)`` of the model the weights were trained as."""
    if src.weights is not None:
        origin = surgery.origin_of(src.config, src.loaded, src.weights.bundle or None)
        if origin is not None:
            return origin.config, origin.weights.eval_model(origin.config).eval(), origin.trained_length, origin.label
        return src.config, src.weights.eval_model(src.config).eval(), None, src.source
    return src.config, build_model(src.config).eval(), None, "initial weights (the config's seed)"


def _changed(src, base_cfg, base_model, change: str, notes: list):
    """``(name, config, make)`` of the model beside the one as trained, or None."""
    if change == "controls":
        if src.config == base_cfg or src.weights is None:
            notes.append(
                "the controls' config is the model as trained: no surgery to draw beside it "
                "(pick a window, or change the pattern, sinks or window in the controls)"
            )
            return None
        return (
            ", ".join(f"{k}={getattr(src.config, k)!r}" for k in model_surgery.changed_fields(base_cfg, src.config)),
            src.config,
            lambda: src.weights.eval_model(src.config).eval(),
        )
    changes = dict(CHANGES[change])
    if base_cfg.layer_schedule:  # every layer of a schedule windowed, each keeping its own modifiers (NoPE, dense)
        to = changes["attention"]
        changes["layer_schedule"] = schedule.with_attention(
            base_cfg.layer_schedule, {k: to for k in schedule.attention_keys(base_cfg)}
        )
    try:
        cfg = base_cfg.replace(**changes).validate()
        if cfg != base_cfg:
            model_surgery.check(base_cfg, cfg)
    except ConfigError as e:  # a mechanism whose weights a window cannot read (MLA's latent, a learned projection)
        notes.append(f"a {CHANGE_NAMES[change]} cannot keep this model's weights ({e.allowed[:160]}): one model drawn")
        return None
    if cfg == base_cfg:
        notes.append(f"the model as trained already has a {CHANGE_NAMES[change]}: one model drawn")
        return None
    if src.loaded is not None:
        return CHANGE_NAMES[change], cfg, lambda: surgery.weights_for(cfg, src.loaded).eval_model(cfg).eval()
    return CHANGE_NAMES[change], cfg, lambda: model_surgery.transplant(_params(base_model), base_cfg, cfg)


def predicted_bytes(cfg, length: int) -> int:
    """A forward at ``length`` tokens (``budget.check``: refused over the per-request budget) plus the
    pooled pass: every layer's ``256 x 256`` grid and four statistics per query, and one chunk of scores."""
    need = budget.check(cfg, "forward", length)
    heads = cfg.n_layers * cfg.n_heads
    return need + heads * (256 * 256 * 8 + 4 * length * 8) + (16 << 20)


def _side_duration(model, tokens, stop=None) -> int:
    """Seconds a GPU may take for one side: a few for the forward, more at 16k tokens and many layers."""
    layers = sum(1 for m in model.modules() if isinstance(m, Attention))  # every core call, mixers beside attention too
    return int(min(120, 15 + layers * tokens.shape[-1] // 2048))


def _on(model, dev: torch.device):
    """``model`` on ``dev``: itself on the CPU; elsewhere a copy whose tensors are made there directly (the
    caller's model stays on the CPU, where the zoom reads it, and is never moved under another request)."""
    if dev.type == "cpu":
        return model
    memo = {}
    for t in list(model.parameters()) + list(model.buffers()):
        moved = t.detach().to(dev)
        memo[id(t)] = torch.nn.Parameter(moved, requires_grad=False) if isinstance(t, torch.nn.Parameter) else moved
    return copy.deepcopy(model, memo)


@gpu(duration=_side_duration)
def compute_side(model, tokens: torch.Tensor, stop: StopToken = NEVER) -> dict:
    """The GPU call of one side: ``pooled_maps`` of ``model`` on ``tokens (1, L)`` on ``device()`` (on CUDA the
    pooled pass is the Triton kernel), ``stop.report``-ing each layer and polling ``stop`` between modules.

    One call per model, not per group of layers: the pooled pass rides the model's own forward (an observer
    of each attention core, ``Interventions.observe_cores``), so a group of layers would have to send its
    ``(L, d)`` hidden state and every position table back and forth; progress per layer (``reporting``)
    crosses instead on the stop token's shared page.
    Returns plain values only (a worker returns no exception intact): numpy arrays of the maps, statistics
    and loss, or ``{"error": (field, value, allowed)}`` for a ``ConfigError``, ``{"stopped": why}`` for a stop."""
    dev = device()
    m = _on(model, dev)
    try:
        with Guard(stop).installed(m, backward=False), reporting(stop.report):
            maps = pooled_maps(m, tokens.to(dev))
    except ConfigError as e:
        return {"error": (e.field, e.value, e.allowed)}
    except Abandoned as e:
        return {"stopped": str(e) or "stopped"}
    first = maps.maps[0]
    return {
        "mass": torch.stack([x.mass[0] for x in maps.maps]).float().cpu().numpy(),
        "stats": {k: torch.stack([getattr(x, k)[0] for x in maps.maps]).float().cpu().numpy() for k in STATS},
        "loss": None if maps.loss is None else maps.loss[0].float().cpu().numpy(),
        "block_q": int(first.block_q),
        "block_k": int(first.block_k),
        "backend": str(first.backend),
        "method": maps.method,
        "notes": [str(n) for n in maps.notes],
        "layers": [int(i) for i in maps.layers],
        "device": str(dev),
    }


def _side(name, cfg, model, tokens, should_stop, report) -> Side:
    """One side through the GPU call; its errors raised here, on the caller's side."""
    with stop_channel(should_stop or _never, progress=report) as token:
        out = compute_side(model, tokens, stop=token)
    if "error" in out:
        raise ConfigError(*out["error"])
    if out.get("stopped"):
        raise Abandoned(out["stopped"])
    return Side(
        name,
        cfg,
        model,
        out["mass"],
        out["stats"],
        out["loss"],
        out["block_q"],
        out["block_k"],
        out["backend"],
        out["method"],
        out["notes"],
        out["layers"],
    )


def _never() -> bool:
    return False


def long_context(
    src,
    length=DEFAULT_LENGTH,
    source: str = "heldout",
    text=None,
    change: str = "window",
    should_stop=None,
    progress=None,
) -> LongContext:
    """The long-context view of ``src`` (module docstring). ``progress(fraction, message)``: called per
    layer; ``should_stop()``: polled between modules (``Abandoned`` raised when it says so)."""
    t0 = time.perf_counter()
    length = check_length(length)
    if change not in CHANGES:
        raise ConfigError("change", str(change)[:40], f"one of {list(CHANGES)}")
    if src is None:
        raise ConfigError("weights", "none", "weights the controls can draw")
    notes = []
    base_cfg, base_model, trained, origin = _as_trained(src)
    text_in = passage(base_cfg, length, source, text, src.tokenizer)
    notes.extend(text_in.notes)
    tokens = torch.tensor([text_in.ids], dtype=torch.long)
    L = tokens.shape[1]
    drawn = [("as trained", base_cfg, lambda: base_model)]
    other = _changed(src, base_cfg, base_model, change, notes)
    if other is not None:
        drawn.append(other)
    need = max(predicted_bytes(cfg, L) for _, cfg, _ in drawn)
    sides = []
    with POOL.reserve(need, f"the long-context view at {L} tokens"):
        for k, (name, cfg, make) in enumerate(drawn):

            def report(frac, k=k, name=name):
                if progress is not None:
                    progress(
                        (k + frac) / len(drawn),
                        f"{name}: layer {int(frac * cfg.n_layers)} of {cfg.n_layers} at {L} tokens",
                    )

            sides.append(_side(name, cfg, make(), tokens, should_stop, report))
    unit = "byte" if src.tokenizer is None else "token"
    return LongContext(L, text_in, unit, trained, origin, sides, notes, need, time.perf_counter() - t0)
