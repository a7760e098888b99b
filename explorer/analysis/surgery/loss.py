"""What a surgery costs: next-token loss of the model as trained and after the change, one definition.

The held-out loss is one number per model wherever the page shows it (the weights line, the Surgery
headline, the Surgery table's trained-length column): the first ``HELDOUT_BYTES`` bytes of the
held-out split (``explorer.runtime.corpus``), as the model's tokens, cut into windows of its trained
length, every position but the first of each window scored. The visitor's text is read whole, as
the maps read it, and its loss says how long it is against the trained length. Every loss is a
``Loss``: its value, the tokens scored, the length they were read at and the trained length.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import torch
import torch.nn.functional as F

from explorer.analysis.common import finite
from explorer.analysis.common.memo import eval_model, memo, weights_key
from explorer.analysis.surgery.moved import weights_for
from explorer.analysis.surgery.origin import Origin, origin_of
from explorer.analysis.surgery.stored import stored_loss
from explorer.analysis.weights.trained import TrainedWeights
from explorer.runtime import budget
from explorer.runtime.configs import as_config
from explorer.runtime.corpus import python_docs, split_corpus
from explorer.runtime.device import gpu
from explorer.runtime.limits import MAX_TEXT_BYTES
from models import ModelConfig, surgery

HELDOUT_BYTES = 4096  # the fixed held-out passage: the first 4 KiB of the held-out split
ROWS_PER_PASS = 4  # windows per forward pass: bounded memory at any length
CHARS_PER_TOKEN = 64  # characters of the visitor's text tokenised per token scored (a bound, never a cut)


@dataclass(frozen=True)
class Loss:
    """A mean next-token loss and what it was measured on."""

    nats: float  # nats per token (per byte for a byte-level model)
    tokens: int  # tokens read
    length: int  # the window they were read in (tokens): the length the model saw
    trained_length: int
    unit: str  # "nats/byte" or "nats/token"

    @property
    def past(self) -> bool:
        """Whether the model read past the length it was trained at."""
        return self.length > self.trained_length

    @property
    def perplexity(self) -> float:
        return math.exp(self.nats) if math.isfinite(self.nats) else math.nan

    def reading(self) -> str:
        """ "4096 tokens in windows of 128, the trained length" / "a 300-token text read whole, 2.3x past the
        trained length (128)"."""
        if self.length == self.trained_length:
            where = "the trained length"
        elif self.past:
            where = f"{self.length / self.trained_length:.1f}x past the trained length ({self.trained_length})"
        else:
            where = f"within the trained length ({self.trained_length})"
        if self.tokens <= self.length:
            return f"{self.tokens} tokens read whole, {where}"
        return f"{self.tokens} tokens in windows of {self.length}, {where}"


@dataclass(frozen=True)
class LossChange:
    """The loss of the model as trained (``before``) and after the surgery (``after``), held out and on the
    visitor's text (``text``: None when it is shorter than two tokens)."""

    origin: str  # the page's name of the model as trained
    kind: str  # "bundle" or "checkpoint"
    changed: tuple  # the fields the surgery changed
    heldout: tuple  # (before, after): ``Loss``
    text: tuple | None  # (before, after) on the visitor's text

    @property
    def unit(self) -> str:
        return self.heldout[0].unit

    @staticmethod
    def delta(pair) -> float:
        return pair[1].nats - pair[0].nats

    def summary(self) -> dict:
        """JSON-safe: ``{"changed", "unit", "heldout", "text"}``, each loss pair as ``{"before", "after",
        "perplexity": [before, after], "tokens", "length", "trained_length", "past"}`` (an API's answer)."""

        def pair(p):
            b, a = p
            return {
                "before": b.nats,
                "after": a.nats,
                "perplexity": [b.perplexity, a.perplexity],
                "tokens": b.tokens,
                "length": b.length,
                "trained_length": b.trained_length,
                "past": b.past,
            }

        return {
            "changed": list(self.changed),
            "unit": self.unit,
            "heldout": pair(self.heldout),
            "text": None if self.text is None else pair(self.text),
        }

    def perplexity(self) -> dict:
        """``{"heldout": [before, after], "text": [before, after]}`` (text: absent when too short to score)."""
        out = {"heldout": [p.perplexity for p in self.heldout]}
        return out if self.text is None else {**out, "text": [p.perplexity for p in self.text]}


@lru_cache(maxsize=1)
def heldout_text() -> bytes:
    """The fixed held-out bytes the table and the page score (no byte of them is in any training window)."""
    return split_corpus(python_docs())[1][:HELDOUT_BYTES]


def nats_per_token(model, ids: list, window: int) -> float:
    """Mean next-token loss over ``ids`` cut into windows of ``window`` tokens (positions 1.. of each
    scored; a remainder shorter than a window is left out, ``ids`` shorter than one are read whole)."""
    ids = ids[: len(ids) // window * window] if len(ids) >= window else ids
    width = min(window, len(ids))
    x = torch.tensor(ids, dtype=torch.long, device=next(model.parameters()).device).view(-1, width)
    total, count = 0.0, 0
    with torch.no_grad():
        for row in x.split(ROWS_PER_PASS):
            logits = model(row).logits.float()
            loss = F.cross_entropy(
                logits[:, :-1].reshape(-1, logits.shape[-1]), row[:, 1:].reshape(-1), reduction="sum"
            )
            total, count = total + loss.item(), count + row[:, 1:].numel()
    return total / max(count, 1)


def heldout_ids(origin: Origin) -> list:
    """The held-out passage as ``origin``'s tokens."""
    return origin.encode(heldout_text())


@gpu(duration=30)
def compute_losses(cfg: ModelConfig, runs: tuple, weights: TrainedWeights) -> list:
    """``[nats_per_token(model, ids, window) for ids, window in runs]`` of ``cfg`` with ``weights``."""
    model = eval_model(cfg, weights)
    return [nats_per_token(model, list(ids), window) for ids, window in runs]


def losses(origin: Origin, cfg, weights: TrainedWeights, text_ids: tuple = ()) -> tuple:
    """``(held-out Loss, text Loss or None)`` of ``cfg`` with ``weights``: the held-out one from the table
    stored beside ``origin`` when ``cfg`` is one of its rows (the same computation, done once), the rest
    computed, memoised and held in the server's memory pool like every analysis (``explorer.analysis.common.memo``)."""
    cfg = as_config(cfg)
    held = tuple(heldout_ids(origin))
    L = origin.trained_length
    text_ids = tuple(text_ids)
    stored = stored_loss(origin, cfg)
    runs = (() if stored is not None else ((held, L),)) + (((text_ids, len(text_ids)),) if len(text_ids) >= 2 else ())
    values = []
    if runs:
        need = budget.check(cfg, "forward", max(min(L, len(held)), len(text_ids), 2), ROWS_PER_PASS)
        values = memo(
            ("surgery-loss", cfg, runs, weights_key(weights)), lambda: compute_losses(cfg, runs, weights), need=need
        )
    values = ([stored] if stored is not None else []) + list(values)
    finite.refuse_losses(values, "losses", cfg, weights)  # a sentence naming the overflow, not a NaN loss
    heldout = Loss(values[0], len(held), min(L, len(held)), L, origin.unit)
    text = Loss(values[1], len(text_ids), len(text_ids), L, origin.unit) if len(text_ids) >= 2 else None
    return heldout, text


def heldout_loss(origin: Origin) -> Loss:
    """The one held-out loss of ``origin`` as trained (the table's trained-length column of the row "as
    trained"; the weights line, the Surgery headline and the table show it)."""
    return losses(origin, origin.config, origin.weights)[0]


def loss_change(cfg, text: str, checkpoint=None, bundle: str | None = None) -> LossChange | None:
    """The loss of the model as trained and of ``cfg`` with its weights (``weights_for``), held out and on
    ``text`` (its first ``MAX_TEXT_BYTES`` tokens, as the maps draw them, read whole); None when ``cfg`` is the model as
    trained, no bundle serves it, or its next-token loss means nothing (``Origin.lm``)."""
    cfg = as_config(cfg)
    origin = origin_of(cfg, checkpoint, bundle)
    if origin is None or cfg == origin.config or not origin.lm or not cfg.causal:
        return None
    ids = tuple(origin.encode(str(text)[: MAX_TEXT_BYTES * CHARS_PER_TOKEN])[:MAX_TEXT_BYTES])
    h0, t0 = losses(origin, origin.config, origin.weights, ids)
    h1, t1 = losses(origin, cfg, weights_for(cfg, checkpoint, bundle), ids)
    return LossChange(
        origin.label,
        origin.kind,
        tuple(surgery.changed_fields(origin.config, cfg)),
        (h0, h1),
        None if t0 is None else (t0, t1),
    )
