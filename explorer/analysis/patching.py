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
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Optional

import torch
import torch.nn.functional as F

from models import ConfigError
from models.interventions import Interventions, check_model
from explorer.analysis.lens import cached_run

MODES = ("zero", "mean")
HELDOUT_WINDOW = 128  # bytes: the length the bundled models were trained at


def heldout_ids(window: int = HELDOUT_WINDOW) -> torch.Tensor:
    """The held-out passage as ``(n, window)`` byte ids (its tail shorter than a window dropped)."""
    from explorer.analysis.surgery.loss import heldout_text
    data = torch.tensor(list(heldout_text()), dtype=torch.long)
    n = len(data) // window
    return data[:n * window].view(n, window)


def next_token_loss(model, ids: torch.Tensor, interventions: Optional[Interventions] = None,
                    positions: Optional[torch.Tensor] = None) -> float:
    """Mean ``-log p(next token)`` over ``ids (B, L)`` (or over ``positions`` only), nats per token."""
    check_model(model.cfg)
    with torch.no_grad():
        logits = model(ids, interventions=interventions).logits[:, :-1].float()
    loss = F.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")  # (B, L - 1)
    return float((loss if positions is None else loss[:, positions]).mean())


def head_means(model, reference: torch.Tensor) -> dict:
    """``{(layer, head): (d_h,)}``: each head's result averaged over every position of ``reference (B, L)``."""
    out = cached_run(model, reference)
    return {(l, h): info.head_results[:, h].mean((0, 1)) for l, info in enumerate(out.layers)
            for h in range(info.head_results.shape[1])}


def ablation_record(model, heads: Iterable, mode: str = "zero", reference: Optional[torch.Tensor] = None,
                    means: Optional[dict] = None) -> Interventions:
    try:
        heads = [tuple(int(i) for i in h) for h in heads]
    except (TypeError, ValueError):
        raise ConfigError("heads", str(heads)[:40], "a list of [layer, head] pairs") from None
    if mode not in MODES:
        raise ConfigError("mode", mode, f"one of {list(MODES)}")
    if mode == "zero":
        return Interventions(replace_heads={h: "zero" for h in heads})
    means = means if means is not None else head_means(model, heldout_ids() if reference is None else reference)
    return Interventions(replace_heads={h: means.get(h, "zero") for h in heads})  # out of range: refused by check


@dataclass(frozen=True)
class Ablation:
    heads: tuple
    mode: str
    loss: float            # on the text, before
    loss_ablated: float
    heldout: float         # on the held-out passage, before
    heldout_ablated: float

    def to_json(self) -> dict:
        return {"heads": [list(h) for h in self.heads], "mode": self.mode, "unit": "nats per token",
                "text": {"before": self.loss, "after": self.loss_ablated, "change": self.loss_ablated - self.loss},
                "heldout": {"before": self.heldout, "after": self.heldout_ablated,
                            "change": self.heldout_ablated - self.heldout}}


def ablate(model, ids: torch.Tensor, heads: Iterable, mode: str = "zero",
           reference: Optional[torch.Tensor] = None, heldout: Optional[torch.Tensor] = None,
           means: Optional[dict] = None) -> Ablation:
    """The loss change on ``ids`` and on the held-out passage when ``heads`` (``(layer, head)`` pairs) are
    zero- or mean-ablated (the mean over ``reference``, default the held-out passage; ``means``: those
    means, ``head_means``, already computed)."""
    held = heldout_ids() if heldout is None else heldout
    record = ablation_record(model, heads, mode, reference if reference is not None else held, means)
    heads = tuple(sorted(record.replace_heads))
    return Ablation(heads, mode, next_token_loss(model, ids), next_token_loss(model, ids, record),
                    next_token_loss(model, held), next_token_loss(model, held, record))


def default_pair(text: str) -> tuple:
    """``(clean, corrupted)``: ``text`` and the same with the second copy of its longest repeated word
    changed (ConfigError naming ``text`` when no word of 3 or more characters is written twice)."""
    words = re.findall(r"\w{3,}", text)
    repeated = [w for w in words if words.count(w) > 1 and w.isascii()]
    if not repeated:
        raise ConfigError("text", text[:40], "a text with a word of 3 or more ASCII characters written at least "
                          "twice (or give the corrupted text)")
    word = max(repeated, key=len)
    starts = [m.start() for m in re.finditer(re.escape(word), text)]
    s = starts[1]
    return text, text[:s] + "".join(map(_shift, word)) + text[s + len(word):]


def _shift(c: str) -> str:
    for lo, n in (("a", 26), ("A", 26), ("0", 10)):
        if 0 <= ord(c) - ord(lo) < n:
            return chr(ord(lo) + (ord(c) - ord(lo) + 1) % n)
    return "_" if c != "_" else "-"


@dataclass(frozen=True)
class Patching:
    positions: tuple       # scored positions
    heads: torch.Tensor    # (n_layers, n_heads) fraction of the logit difference restored
    ffn: torch.Tensor      # (n_layers,)
    clean: float           # LD of the clean run
    corrupted: float       # LD of the corrupted run
    everything: float      # fraction restored patching the embedding and every head and FFN output (1)
    nothing: float         # fraction restored patching nothing (0)

    def to_json(self) -> dict:
        return {"positions": list(self.positions), "heads": self.heads.tolist(), "ffn": [None if v != v else v for v in self.ffn.tolist()],
                "logit_difference": {"clean": self.clean, "corrupted": self.corrupted},
                "checks": {"everything_patched": self.everything, "nothing_patched": self.nothing},
                "measure": "fraction of the clean-vs-corrupted logit difference restored"}


def patch_heads(model, clean: torch.Tensor, corrupted: torch.Tensor,
                positions: Optional[Iterable] = None) -> Patching:
    """Per head (and per FFN), the fraction of the logit difference restored by patching its clean output
    into the corrupted run; ``clean`` and ``corrupted`` are ``(1, L)`` ids of one length."""
    check_model(model.cfg)
    if corrupted.shape != clean.shape:
        raise ConfigError("corrupted", f"{corrupted.shape[-1]} tokens", f"{clean.shape[-1]} tokens, the clean "
                          "text's length")
    nxt_clean, nxt_corrupt = clean[0, 1:], corrupted[0, 1:]
    if positions is None:
        pos = torch.nonzero(nxt_clean != nxt_corrupt).flatten()
    else:
        pos = torch.tensor(sorted(set(int(p) for p in positions)), dtype=torch.long)
        if len(pos) == 0 or pos.min() < 0 or pos.max() >= clean.shape[1] - 1:
            raise ConfigError("positions", list(pos.tolist())[:8], f"positions in 0..{clean.shape[1] - 2}")
    if len(pos) == 0:
        raise ConfigError("corrupted", "the clean text", "a text whose next tokens differ somewhere")
    a, b = nxt_clean[pos], nxt_corrupt[pos]

    def ld(record) -> float:
        with torch.no_grad():
            logits = model(corrupted, interventions=record).logits[0, pos].double()
        return float((logits.gather(1, a[:, None]) - logits.gather(1, b[:, None])).mean())

    c = cached_run(model, clean)
    ld_clean = float((c.logits[0, pos].double().gather(1, a[:, None])
                      - c.logits[0, pos].double().gather(1, b[:, None])).mean())
    with torch.no_grad():
        plain = model(corrupted).logits[0, pos].double()
    ld_corrupt = float((plain.gather(1, a[:, None]) - plain.gather(1, b[:, None])).mean())
    span = ld_clean - ld_corrupt
    frac = (lambda v: (v - ld_corrupt) / span) if span != 0 else (lambda v: 0.0)
    n_layers, n_heads = len(c.layers), c.layers[0].head_results.shape[1]
    result = {(l, h): c.layers[l].head_results[:, h] for l in range(n_layers) for h in range(n_heads)}
    ffn_out = {l: c.layers[l].ffn_output for l in range(n_layers) if c.layers[l].ffn_output is not None}
    heads = torch.tensor([[frac(ld(Interventions(replace_heads={(l, h): result[l, h]})))
                           for h in range(n_heads)] for l in range(n_layers)])
    ffn = torch.tensor([frac(ld(Interventions(replace_ffn={l: ffn_out[l]}))) if l in ffn_out else float("nan")
                        for l in range(n_layers)])  # NaN: a layer without an FFN
    everything = frac(ld(Interventions(replace_heads=result, replace_ffn=ffn_out,
                                       replace_resid={0: c.layers[0].input})))
    nothing = frac(ld(Interventions()))
    return Patching(tuple(pos.tolist()), heads, ffn, ld_clean, ld_corrupt, everything, nothing)
