"""Head labels grounded in a probe and a cause: what each head does on fixed texts, and what removing it costs.

The per-text label (``explorer.analysis.maps.heads``) says what a head's attention looks like on the text in the
box. The grounded label says what the head does in the model, independent of that text:

1. **Probe.** ``probes.probe_scores`` reads each head's attention on the fixed probe texts
   (``explorer.analysis.why.probes``): ``induction`` is the prefix-matching score on repeated random tokens at
   several copy distances, the other behaviours the per-text scores on held-out natural text. The head gets
   the first label of ``heads.LABELS`` whose score reaches ``heads.THRESHOLDS``, except that ``induction``
   needs layer >= 1: a layer-0 head reads the tokens and their positions only, with no earlier head's output
   to match against, so attention on the earlier occurrence's next token can only be positional there.
2. **Cause.** The head is mean-ablated (its result ``z_h`` replaced by its mean over every position of the
   probe being scored, ``patching.head_means``) and the loss change measured, in nats per token, on the
   positions its role predicts (``CAUSE``): for induction and previous-token heads (the two halves of the
   induction circuit) the second copy of the repeated random tokens after its first token (``copy``), for
   the others every position of the natural text (``natural``). The label is ``confirmed`` when that change
   is at least ``MIN_EFFECT``. Both changes are kept for every head.
3. **Groups.** Heads sharing a label often share the work (four induction heads each carry a quarter of it),
   so each label's heads are also ablated together (``groups``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from explorer.analysis.maps.heads import DESCRIBE, LABELS, THRESHOLDS
from explorer.analysis.why.patching import head_means
from explorer.analysis.why.probes import COPY_LEN, Probes, probe_scores
from models.interventions import Interventions, check_model

CAUSE = {"induction": "copy", "previous-token": "copy"}  # every other label: "natural"
CAUSE_TEXT = {"copy": "the second copy of repeated random tokens", "natural": "held-out natural text"}
MIN_EFFECT = 0.05  # nats per token: a loss change this large confirms the role (about 5% in perplexity)
PROBE_OF = {"induction": "repeated random tokens, by prefix matching"}  # every other label: natural text
SAYS = {**DESCRIBE, "induction": "reads the token that followed each earlier occurrence of the current token"}


def cause_of(label: str) -> str:
    return CAUSE.get(label, "natural")


def probe_losses(model, probes: Probes, record: Interventions | None = None, which=("copy", "natural")) -> dict:
    """``{"copy": nats, "natural": nats}`` (those named in ``which``): mean next-token loss on the second
    copies (after their first token) and on every position of the natural text, under ``record``."""
    out = {}
    for name in which:
        ids = probes.repeat if name == "copy" else probes.natural
        with torch.no_grad():
            logits = model(ids, interventions=record).logits[:, :-1].float()
        loss = F.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")  # (B, L - 1)
        if name == "copy":
            d = torch.tensor(probes.distances, device=ids.device)
            loss = loss.gather(1, d[:, None] + torch.arange(COPY_LEN - 1, device=ids.device)[None])  # D .. D + N - 2
        out[name] = float(loss.mean())
    return out


def mean_record(means: dict, heads) -> Interventions:
    """Mean ablation of ``heads`` (``(layer, head)`` pairs) with ``means`` (``patching.head_means``)."""
    return Interventions(replace_heads={h: means[h] for h in heads})


def ablation_effects(model, probes: Probes) -> tuple:
    """``(baseline, effects, means)``: the plain ``probe_losses``; ``{"copy", "natural"}`` -> ``(n_layers,
    n_heads)`` loss changes (nats per token) with each head mean-ablated over that probe; the means used."""
    cfg = model.cfg
    check_model(cfg)
    base = probe_losses(model, probes)
    means = {"copy": head_means(model, probes.repeat), "natural": head_means(model, probes.natural)}
    effects = {k: np.zeros((cfg.n_layers, cfg.n_heads)) for k in base}
    for layer in range(cfg.n_layers):
        for h in range(cfg.n_heads):
            for k in base:
                record = mean_record(means[k], [(layer, h)])
                effects[k][layer, h] = probe_losses(model, probes, record, (k,))[k] - base[k]
    return base, effects, means


@dataclass(frozen=True)
class GroundedLabel:
    layer: int
    head: int
    label: str  # one of heads.LABELS or "mixed"
    score: float  # the probe score that decided it (the best score for "mixed")
    effect: float  # nats per token: loss change on the role's probe (``cause``) when mean-ablated
    cause: str  # "copy" or "natural"
    confirmed: bool  # effect >= MIN_EFFECT
    scores: dict  # every probe score
    effects: dict  # {"copy": nats, "natural": nats}

    def short(self) -> str:
        """ "induction 0.92, +0.10 nats" (a "?" after the label: the cause did not confirm it)."""
        mark = "" if self.confirmed else "?"
        if self.label == "mixed":
            return f"mixed, {self.effect:+.2f} nats"
        return f"{self.label}{mark} {self.score:.2f}, {self.effect:+.2f} nats"

    def sentence(self) -> str:
        """What the head does, by the probe and by the cause, in words."""
        where = PROBE_OF.get(self.label, "held-out natural text")
        cause = f"mean-ablating it changes the loss on {CAUSE_TEXT[self.cause]} by {self.effect:+.3f} nats per token"
        if self.label == "mixed":
            return f"Head {self.layer}.{self.head} meets no probe rule; {cause}."
        verdict = "confirmed" if self.confirmed else f"not confirmed (under {MIN_EFFECT} nats)"
        copy = self.effects.get("copy", float("nan"))
        also = (
            f" It is also part of the copying circuit: ablated, the second copy's loss changes by {copy:+.3f}."
            if self.cause != "copy" and copy >= MIN_EFFECT
            else ""
        )
        return (
            f"Head {self.layer}.{self.head}: {self.label} on {where} (score {self.score:.2f}, threshold "
            f"{THRESHOLDS[self.label]}): it {SAYS[self.label]}; {cause}: {verdict}.{also}"
        )

    @classmethod
    def from_json(cls, d: dict) -> GroundedLabel:
        """The label back from ``to_json`` (a stored card's ``heads`` entries); a missing number is NaN."""
        num = lambda v: float("nan") if v is None else float(v)  # noqa: E731
        return cls(
            d["layer"],
            d["head"],
            d["label"],
            num(d["score"]),
            num(d["effect"]),
            d["cause"],
            d["confirmed"],
            {k: num(v) for k, v in d["scores"].items()},
            {k: num(v) for k, v in d["effects"].items()},
        )

    def to_json(self) -> dict:
        r = lambda v: None if v is None or not np.isfinite(v) else round(float(v), 4)  # noqa: E731
        return {
            "layer": self.layer,
            "head": self.head,
            "label": self.label,
            "score": r(self.score),
            "effect": r(self.effect),
            "cause": self.cause,
            "confirmed": self.confirmed,
            "scores": {k: r(v) for k, v in self.scores.items()},
            "effects": {k: r(v) for k, v in self.effects.items()},
        }


def probe_label(scores: dict, layer: int) -> tuple:
    """``(label, score)`` from one head's probe scores: the first of ``LABELS`` reaching its threshold
    (induction only from layer 1 on), else ``("mixed", best score)``."""
    for label in LABELS:
        v = scores.get(label, np.nan)
        if label == "induction" and layer < 1:
            continue
        if np.isfinite(v) and v >= THRESHOLDS[label]:
            return label, float(v)
    finite = [v for k, v in scores.items() if k in THRESHOLDS and np.isfinite(v)]
    return "mixed", float(max(finite)) if finite else float("nan")


@dataclass(frozen=True)
class GroundedHeads:
    heads: tuple  # ((GroundedLabel per head) per layer)
    baseline: dict  # {"copy": nats, "natural": nats}: the probe losses of the model as it is
    groups: dict  # {label: {"heads": [[layer, head], ...], "cause": ..., "effect": nats}}

    def labels(self) -> list:
        return [[h.label for h in row] for row in self.heads]

    def to_json(self) -> dict:
        return {
            "heads": [[h.to_json() for h in row] for row in self.heads],
            "baseline": {k: round(v, 4) for k, v in self.baseline.items()},
            "groups": self.groups,
            "unit": "nats per token",
            "min_effect": MIN_EFFECT,
            "thresholds": dict(THRESHOLDS),
        }


def grounded_labels(model, probes: Probes) -> GroundedHeads:
    """Every head's grounded label (see the module docstring) on ``probes`` (``probes.make_probes``)."""
    scores = probe_scores(model, probes)
    base, effects, means = ablation_effects(model, probes)
    cfg = model.cfg
    rows = []
    for layer in range(cfg.n_layers):
        row = []
        for h in range(cfg.n_heads):
            s = {k: float(v[layer, h]) for k, v in scores.items()}
            label, score = probe_label(s, layer)
            cause = cause_of(label)
            e = {k: float(v[layer, h]) for k, v in effects.items()}
            row.append(GroundedLabel(layer, h, label, score, e[cause], cause, e[cause] >= MIN_EFFECT, s, e))
        rows.append(tuple(row))
    groups = {}
    for label in sorted({h.label for row in rows for h in row} - {"mixed"}):
        members = [(h.layer, h.head) for row in rows for h in row if h.label == label]
        cause = cause_of(label)
        effect = probe_losses(model, probes, mean_record(means[cause], members), (cause,))[cause] - base[cause]
        groups[label] = {"heads": [list(m) for m in members], "cause": cause, "effect": round(effect, 4)}
    return GroundedHeads(tuple(rows), base, groups)
