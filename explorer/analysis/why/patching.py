"""Causal tests of heads: ablation (zero or mean) and activation patching, through the one intervention
record of the blocks (``models.interventions``).

- Zero ablation sets a head's result ``z_h`` (its output before the output projection, so its write
  ``z_h W_O^h`` too) to 0; mean ablation sets it to its mean over every position of a reference text
  (default: the held-out passage), which keeps the head's average write and removes only what depends on
  the input. Either is scored as the mean next-token loss (nats per token) on the text and on the held-out
  passage (``explorer.analysis.surgery.loss.heldout_text``, in windows of the trained length), before and after.
- Activation patching runs a corrupted text (same length as the clean one) with one head's result taken
  from the clean run. The metric is the logit difference ``LD = logit[clean next] - logit[corrupted next]``
  averaged over the scored positions (those whose next token differs between the texts, unless given);
  a head's score is the fraction restored, ``(LD_patched - LD_corrupted) / (LD_clean - LD_corrupted)``.
  Patching the embedding and every head and FFN output gives exactly the clean run (fraction 1), patching
  nothing exactly the corrupted one (0): both are returned as checks.
- ``default_pair(text)``: the landing text and the same with the second copy of its longest repeated word
  (the password) changed byte for byte (letters and digits shifted by one, so the length is kept).

An ``encoder_decoder`` (ids: ``explorer.analysis.why.seq2seq_ids.Seq2SeqIds``; the loss and the logit difference
are the decoder's next-token ones under teacher forcing) has three kinds of heads, named ``(kind, layer,
head)`` with ``kind`` in ``KINDS``: the decoder's self-attention heads, its cross-attention heads and the
encoder's heads. Its mean-ablation reference is ``seq2seq_ids.reversal_probes`` (random strings of the
task's symbols at the trained length, and their reversals) instead of the held-out prose. Its patching runs
a clean and a corrupted pair of one source length and one target length (``seq2seq_default_pair``: a word of
the source changed, and its mirror in the target) and grids every kind of head, the decoder's FFNs and the
encoder's; patching the decoder's embedding and every decoder head and FFN gives the clean run.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from explorer.analysis.why.lens import cached_run
from explorer.analysis.why.seq2seq_ids import (
    TRAINED_SOURCE,
    Ids,
    call,
    decoder_ids,
    encoder_layers,
    head_layers,
    reversal_probes,
    seq2seq,
)
from models import ConfigError
from models.interventions import Interventions, check_head_layout, check_model

MODES = ("zero", "mean")
HELDOUT_WINDOW = 128  # bytes: the length the bundled models were trained at
KINDS = ("self", "cross", "encoder")  # an encoder-decoder's heads: decoder self-attention, cross-attention, encoder
REFERENCE_STRINGS = 64  # reversal probes of an encoder-decoder's mean ablation and its "held-out" loss


def reference_ids(cfg, window: int = HELDOUT_WINDOW) -> Ids:
    """The default reference: the held-out passage in windows, or an encoder-decoder's reversal probes."""
    if seq2seq(cfg):
        return reversal_probes(REFERENCE_STRINGS, TRAINED_SOURCE, seed=1)
    return heldout_ids(window)


def reference_name(cfg) -> str:
    if seq2seq(cfg):
        return (
            f"{REFERENCE_STRINGS} random strings of {TRAINED_SOURCE} symbols and their reversals (the encoder-"
            "decoder bundle's task and length)"
        )
    return "the held-out passage"


def head_keys(cfg, n_layers: dict) -> list:
    """Every head of the model: ``(layer, head)``, or ``(kind, layer, head)`` for an encoder-decoder
    (``n_layers``: ``{"self": decoder layers, "cross": ..., "encoder": encoder layers}``)."""
    if not seq2seq(cfg):
        return [(l, h) for l in range(n_layers["self"]) for h in range(cfg.n_heads)]
    return [(k, l, h) for k in KINDS for l in range(n_layers[k]) for h in range(cfg.n_heads)]


def record_of(cfg, heads: dict, **fields) -> Interventions:
    """An ``Interventions`` replacing ``heads`` (keys as ``head_keys``), plus the decoder's ``fields``."""
    if not seq2seq(cfg):
        return Interventions(replace_heads=heads, **fields)
    by = {k: {} for k in KINDS}
    for (kind, l, h), v in heads.items():
        by[kind][l, h] = v
    return Interventions(
        replace_heads=by["self"],
        replace_cross=by["cross"],
        encoder=Interventions(replace_heads=by["encoder"]) if by["encoder"] else None,
        **fields,
    )


def _normalised(cfg, heads) -> list:
    """``heads`` as ``head_keys``' tuples (ConfigError naming ``heads`` otherwise)."""
    try:
        if seq2seq(cfg):
            out = [(str(k), int(l), int(h)) for k, l, h in heads]
            if any(k not in KINDS for k, _, _ in out):
                raise ValueError
            return out
        return [tuple(int(i) for i in h) for h in heads]
    except (TypeError, ValueError):
        what = f"(kind, layer, head) triples with kind in {list(KINDS)}" if seq2seq(cfg) else "[layer, head] pairs"
        raise ConfigError("heads", str(heads)[:40], f"a list of {what}") from None


def heldout_ids(window: int = HELDOUT_WINDOW) -> torch.Tensor:
    """The held-out passage as ``(n, window)`` byte ids (its tail shorter than a window dropped)."""
    from explorer.analysis.surgery.loss import heldout_text

    data = torch.tensor(list(heldout_text()), dtype=torch.long)
    n = len(data) // window
    return data[: n * window].view(n, window)


def next_token_loss(
    model, ids: Ids, interventions: Interventions | None = None, positions: torch.Tensor | None = None
) -> float:
    """Mean ``-log p(next token)`` over ``ids (B, L)`` (an encoder-decoder: its decoder's input), or over
    ``positions`` only, nats per token."""
    check_model(model.cfg)
    with torch.no_grad():
        logits = call(model, ids, interventions=interventions).logits[:, :-1].float()
    nxt = decoder_ids(ids)[:, 1:]
    loss = F.cross_entropy(logits.transpose(1, 2), nxt, reduction="none")  # (B, L - 1)
    return float((loss if positions is None else loss[:, positions]).mean())


def head_means(model, reference: Ids) -> dict:
    """``{key: (d_h,)}`` (keys as ``head_keys``): each head's result averaged over every position of
    ``reference (B, L)``."""
    out = cached_run(model, reference)
    dec = head_layers(out)
    if not seq2seq(model.cfg):
        return {
            (l, h): info.head_results[:, h].mean((0, 1))
            for l, info in enumerate(dec)
            for h in range(info.head_results.shape[1])
        }
    got = {}
    for kind, layers, field in (
        ("self", dec, "head_results"),
        ("cross", dec, "cross_head_results"),
        ("encoder", encoder_layers(out), "head_results"),
    ):
        for l, info in enumerate(layers):
            z = getattr(info, field)
            got.update({(kind, l, h): z[:, h].mean((0, 1)) for h in range(z.shape[1])})
    return got


def ablation_record(
    model, heads: Iterable, mode: str = "zero", reference: Ids | None = None, means: dict | None = None
) -> Interventions:
    cfg = model.cfg
    heads = _normalised(cfg, heads)
    if mode not in MODES:
        raise ConfigError("mode", mode, f"one of {list(MODES)}")
    if mode == "zero":
        return record_of(cfg, {h: "zero" for h in heads})
    means = means if means is not None else head_means(model, reference_ids(cfg) if reference is None else reference)
    return record_of(cfg, {h: means.get(h, "zero") for h in heads})  # out of range: refused by check


@dataclass(frozen=True)
class Ablation:
    heads: tuple
    mode: str
    loss: float  # on the text, before
    loss_ablated: float
    heldout: float  # on the held-out passage (an encoder-decoder: its reversal probes), before
    heldout_ablated: float
    reference: str = "the held-out passage"  # what "heldout" scored

    def to_json(self) -> dict:
        return {
            "heads": [list(h) for h in self.heads],
            "mode": self.mode,
            "unit": "nats per token",
            "heldout_name": self.reference,
            "text": {"before": self.loss, "after": self.loss_ablated, "change": self.loss_ablated - self.loss},
            "heldout": {
                "before": self.heldout,
                "after": self.heldout_ablated,
                "change": self.heldout_ablated - self.heldout,
            },
        }


def ablate(
    model,
    ids: Ids,
    heads: Iterable,
    mode: str = "zero",
    reference: Ids | None = None,
    heldout: Ids | None = None,
    means: dict | None = None,
) -> Ablation:
    """The loss change on ``ids`` and on the held-out passage (an encoder-decoder: its reversal probes) when
    ``heads`` (``(layer, head)`` pairs; ``(kind, layer, head)`` for an encoder-decoder) are zero- or
    mean-ablated (the mean over ``reference``, default the held-out passage; ``means``: those means,
    ``head_means``, already computed)."""
    check_model(model.cfg)
    check_head_layout(model.cfg)
    held = reference_ids(model.cfg) if heldout is None else heldout
    record = ablation_record(model, heads, mode, reference if reference is not None else held, means)
    heads = tuple(sorted(set(_normalised(model.cfg, heads))))
    return Ablation(
        heads,
        mode,
        next_token_loss(model, ids),
        next_token_loss(model, ids, record),
        next_token_loss(model, held),
        next_token_loss(model, held, record),
        reference_name(model.cfg),
    )


def default_pair(text: str) -> tuple:
    """``(clean, corrupted)``: ``text`` and the same with the second copy of its longest repeated word
    changed (ConfigError naming ``text`` when no word of 3 or more characters is written twice)."""
    words = re.findall(r"\w{3,}", text)
    repeated = [w for w in words if words.count(w) > 1 and w.isascii()]
    if not repeated:
        raise ConfigError(
            "text",
            text[:40],
            "a text with a word of 3 or more ASCII characters written at least twice (or give the corrupted text)",
        )
    word = max(repeated, key=len)
    starts = [m.start() for m in re.finditer(re.escape(word), text)]
    s = starts[1]
    return text, text[:s] + "".join(map(_shift, word)) + text[s + len(word) :]


def _shift(c: str) -> str:
    for lo, n in (("a", 26), ("A", 26), ("0", 10)):
        if 0 <= ord(c) - ord(lo) < n:
            return chr(ord(lo) + (ord(c) - ord(lo) + 1) % n)
    return "_" if c != "_" else "-"


@dataclass(frozen=True)
class Patching:
    positions: tuple  # scored positions
    heads: torch.Tensor  # (n_layers, n_heads) fraction of the logit difference restored (decoder self-attention)
    ffn: torch.Tensor  # (n_layers,)
    clean: float  # LD of the clean run
    corrupted: float  # LD of the corrupted run
    everything: float  # fraction restored patching the embedding and every head and FFN output (1)
    nothing: float  # fraction restored patching nothing (0)
    cross: torch.Tensor | None = None  # encoder-decoder: (n_layers, n_heads) cross-attention heads
    encoder: torch.Tensor | None = None  # (n_encoder_layers, n_heads) encoder heads
    encoder_ffn: torch.Tensor | None = None  # (n_encoder_layers,)

    def to_json(self) -> dict:
        nan = lambda t: [None if v != v else v for v in t.tolist()]  # noqa: E731
        extra = (
            {}
            if self.cross is None
            else {"cross": self.cross.tolist(), "encoder": self.encoder.tolist(), "encoder_ffn": nan(self.encoder_ffn)}
        )
        return {
            "positions": list(self.positions),
            "heads": self.heads.tolist(),
            "ffn": nan(self.ffn),
            **extra,
            "logit_difference": {"clean": self.clean, "corrupted": self.corrupted},
            "checks": {"everything_patched": self.everything, "nothing_patched": self.nothing},
            "measure": "fraction of the clean-vs-corrupted logit difference restored",
        }


def seq2seq_default_pair(source: str, target: str) -> tuple:
    """``(corrupted source, corrupted target)``: the source's longest word (3 or more ASCII letters or digits;
    else its whole first half) shifted as ``default_pair`` shifts, and the same change made to its mirror in
    the target (the reverse task's answer), or to its copy there (copy); ConfigError naming ``corrupted`` when
    the target holds neither."""
    words = [w for w in re.findall(r"\w{3,}", source) if w.isascii()]
    word = max(words, key=len) if words else source[: max(1, len(source) // 2)]
    bad = "".join(map(_shift, word))
    s = source.index(word)
    for old, new in ((word[::-1], bad[::-1]), (word, bad)):
        if old in target:
            t = target.index(old)
            return source[:s] + bad + source[s + len(word) :], target[:t] + new + target[t + len(old) :]
    raise ConfigError(
        "corrupted",
        "(empty)",
        f"a corrupted source=>target text: the target holds neither "
        f"{word!r} nor its reversal, so no default corruption changes the answer",
    )


def _same_shape(clean: Ids, corrupted: Ids) -> None:
    """``ConfigError`` naming ``corrupted`` when its ids (each side of a pair) differ in length from the clean ones."""
    sides = [("", decoder_ids(clean), decoder_ids(corrupted))]
    if hasattr(clean, "source"):
        sides = [("source ", clean.source, corrupted.source), ("target ", clean.target, corrupted.target)]
    for side, a, b in sides:
        if b.shape != a.shape:
            raise ConfigError(
                "corrupted",
                f"{b.shape[-1]} {side}tokens",
                f"the same number of {side}tokens as the clean text ({a.shape[-1]})",
            )


def patch_heads(model, clean: Ids, corrupted: Ids, positions: Iterable | None = None) -> Patching:
    """Per head (and per FFN), the fraction of the logit difference restored by patching its clean output
    into the corrupted run; ``clean`` and ``corrupted`` are ``(1, L)`` ids of one length (an encoder-decoder:
    ``Seq2SeqIds`` of one source length and one target length)."""
    cfg = model.cfg
    check_model(cfg)
    check_head_layout(cfg)
    _same_shape(clean, corrupted)
    nxt_clean, nxt_corrupt = decoder_ids(clean)[0, 1:], decoder_ids(corrupted)[0, 1:]
    L = decoder_ids(clean).shape[1]
    if positions is None:
        pos = torch.nonzero(nxt_clean != nxt_corrupt).flatten()
    else:
        pos = torch.tensor(sorted(set(int(p) for p in positions)), dtype=torch.long)
        if len(pos) == 0 or pos.min() < 0 or pos.max() >= L - 1:
            raise ConfigError("positions", list(pos.tolist())[:8], f"positions in 0..{L - 2}")
    if len(pos) == 0:
        raise ConfigError("corrupted", "the clean text", "a text whose next tokens differ somewhere")
    a, b = nxt_clean[pos], nxt_corrupt[pos]

    def diff(logits) -> float:
        logits = logits[0, pos].double()
        return float((logits.gather(1, a[:, None]) - logits.gather(1, b[:, None])).mean())

    def ld(record) -> float:
        with torch.no_grad():
            return diff(call(model, corrupted, interventions=record).logits)

    c = cached_run(model, clean)
    ld_clean = diff(c.logits)
    with torch.no_grad():
        ld_corrupt = diff(call(model, corrupted).logits)
    span = ld_clean - ld_corrupt
    frac = (lambda v: (v - ld_corrupt) / span) if span != 0 else (lambda v: 0.0)
    dec, enc = head_layers(c), encoder_layers(c)
    n_heads = dec[0].head_results.shape[1]

    def grid(layers, field, make) -> torch.Tensor:
        return torch.tensor(
            [
                [frac(ld(make({(l, h): getattr(layers[l], field)[:, h]}))) for h in range(n_heads)]
                for l in range(len(layers))
            ]
        )

    def ffn_row(layers, make) -> torch.Tensor:  # NaN: a layer without an FFN
        return torch.tensor(
            [
                frac(ld(make({l: i.ffn_output}))) if i.ffn_output is not None else float("nan")
                for l, i in enumerate(layers)
            ]
        )

    heads = grid(dec, "head_results", lambda r: Interventions(replace_heads=r))
    ffn = ffn_row(dec, lambda r: Interventions(replace_ffn=r))
    self_all = {(l, h): i.head_results[:, h] for l, i in enumerate(dec) for h in range(n_heads)}
    ffn_all = {l: i.ffn_output for l, i in enumerate(dec) if i.ffn_output is not None}
    extra, cross_all = {}, {}
    if seq2seq(cfg):
        cross_all = {(l, h): i.cross_head_results[:, h] for l, i in enumerate(dec) for h in range(n_heads)}
        extra = dict(
            cross=grid(dec, "cross_head_results", lambda r: Interventions(replace_cross=r)),
            encoder=grid(enc, "head_results", lambda r: Interventions(encoder=Interventions(replace_heads=r))),
            encoder_ffn=ffn_row(enc, lambda r: Interventions(encoder=Interventions(replace_ffn=r))),
        )
    everything = frac(
        ld(
            Interventions(
                replace_heads=self_all, replace_cross=cross_all, replace_ffn=ffn_all, replace_resid={0: dec[0].input}
            )
        )
    )
    nothing = frac(ld(Interventions()))
    return Patching(tuple(pos.tolist()), heads, ffn, ld_clean, ld_corrupt, everything, nothing, **extra)
