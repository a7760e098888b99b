"""The circuit card of an encoder-decoder trained on the reverse task (target = source reversed).

Its circuit is not induction but an alignment: the decoder must read, at target position ``t``, the source
symbol at the mirrored position ``Ls - 1 - t``. The card measures, on fixed reversal probes
(``seq2seq_ids.reversal_probes``: ``PROBE_STRINGS`` random strings of the task's symbols at the trained source
length, seed ``SEED``; teacher forcing, the decoder reads START + the reversal):

- ``cross_heads``: per decoder layer and cross-attention head, the ``mirror`` score (its mean attention on
  source position ``Ls - 1 - t`` from decoder position ``t``, over ``t = 0..Ls-1``) and the loss change when it
  is mean-ablated alone (the mean over other reversal probes, seed ``SEED + 1``); labelled ``mirror`` when the
  score is at least ``MIRROR_SCORE``, confirmed when the ablation costs at least ``grounded.MIN_EFFECT`` nats
  alone (``confirmed_by: "alone"``) or with every other mirror head (``"group"``);
- ``groups``: the same ablation of every mirror head at once (heads that each read the mirror position back
  each other up: alone, each may cost little);
- ``ablation``: every head's mean-ablation loss change, by kind (``self``, ``cross``, ``encoder``), and
  ``circuit``: the heads whose change is at least ``MIN_EFFECT``, largest first;
- ``lens``: the decoder's logit-lens loss after its embedding and after each decoder layer on the probes;
- ``length_curve``: loss and top-1 accuracy of the reversal at source lengths from ``LENGTHS`` (shorter and
  longer than the trained one), and ``fails_at``: the first length past the trained one where fewer than
  ``FAIL_ACCURACY`` of the answer's symbols are predicted (None: none of those measured).
"""

from __future__ import annotations

import torch

from explorer.analysis.why.grounded import MIN_EFFECT
from explorer.analysis.why.lens import cached_run, streams
from explorer.analysis.why.patching import ablate, head_keys, head_means, next_token_loss
from explorer.analysis.why.seq2seq_ids import TRAINED_SOURCE, reversal_probes

PROBE_STRINGS = 64
SEED = 0
MIRROR_SCORE = 0.5  # mean attention on the mirrored source position that labels a cross head "mirror"
FAIL_ACCURACY = 0.5
LENGTHS = (4, 8, 12, 16, 23, 32, 40, 48, 64, 96)
CURVE_STRINGS = 32


def probe_spec() -> dict:
    return {
        "task": "reverse",
        "seed": SEED,
        "strings": PROBE_STRINGS,
        "source_length": TRAINED_SOURCE,
        "lengths": list(LENGTHS),
        "curve_strings": CURVE_STRINGS,
        "mirror_score": MIRROR_SCORE,
    }


def mirror_scores(model, probes) -> torch.Tensor:
    """``(n_decoder_layers, n_heads)``: mean cross-attention on source position ``Ls - 1 - t`` from decoder
    position ``t`` (``t = 0..Ls-1``)."""
    with torch.no_grad():
        out = model(probes.source, probes.target, return_attention=True)
    ls = probes.source.shape[1]
    t = torch.arange(ls)
    return torch.stack([a[:, :, t, ls - 1 - t].float().mean((0, 2)) for a in out.cross_attentions])


def lens_losses(model, probes) -> dict:
    """The decoder's logit-lens loss (nats per token) after its embedding and after each decoder layer."""
    run = cached_run(model, probes)
    nxt = probes.target[:, 1:]
    per = []
    for x in streams(run):
        with torch.no_grad():
            logits = model.classify(x)[:, :-1].float()
        per.append(round(float(torch.nn.functional.cross_entropy(logits.transpose(1, 2), nxt)), 4))
    return {"rows": ["embedding"] + [f"layer {i}" for i in range(len(per) - 1)], "reversal": per}


def length_curve(model) -> dict:
    loss, acc = [], []
    for n in LENGTHS:
        q = reversal_probes(CURVE_STRINGS, n, seed=SEED + 2)
        with torch.no_grad():
            logits = model(q.source, q.target).logits[:, :-1]
        acc.append(round(float((logits.argmax(-1) == q.target[:, 1:]).float().mean()), 4))
        loss.append(round(next_token_loss(model, q), 4))
    fails = next((n for n, a in zip(LENGTHS, acc) if n > TRAINED_SOURCE and a < FAIL_ACCURACY), None)
    return {
        "lengths": list(LENGTHS),
        "loss": loss,
        "accuracy": acc,
        "fails_at": fails,
        "fail_accuracy": FAIL_ACCURACY,
        "trained_length": TRAINED_SOURCE,
        "strings": CURVE_STRINGS,
    }


def seq2seq_card(model) -> dict:
    """The card's measured fields (module docstring) for an encoder-decoder ``model``."""
    cfg = model.cfg
    probes = reversal_probes(PROBE_STRINGS, TRAINED_SOURCE, seed=SEED)
    means = head_means(model, reversal_probes(PROBE_STRINGS, TRAINED_SOURCE, seed=SEED + 1))
    depth = {
        "self": len(model.decoder.blocks),
        "cross": len(model.decoder.blocks),
        "encoder": len(model.encoder.blocks),
    }
    effect = {}
    for key in head_keys(cfg, depth):
        a = ablate(model, probes, [key], "mean", means=means, heldout=probes)
        effect[key] = round(a.loss_ablated - a.loss, 4)
    scores = mirror_scores(model, probes)
    cross = [
        [
            {
                "layer": l,
                "head": h,
                "kind": "cross",
                "score": round(float(scores[l, h]), 4),
                "effect": effect["cross", l, h],
                "label": "mirror" if scores[l, h] >= MIRROR_SCORE else "mixed",
                "confirmed": effect["cross", l, h] >= MIN_EFFECT,
            }
            for h in range(cfg.n_heads)
        ]
        for l in range(depth["cross"])
    ]
    mirror = [("cross", h["layer"], h["head"]) for row in cross for h in row if h["label"] == "mirror"]
    groups = {}
    if mirror:
        a = ablate(model, probes, mirror, "mean", means=means, heldout=probes)
        groups["mirror"] = {"heads": [list(k) for k in mirror], "effect": round(a.loss_ablated - a.loss, 4)}
    together = groups.get("mirror", {}).get("effect", 0.0) >= MIN_EFFECT
    for row in cross:
        for h in row:
            if h["label"] == "mirror":
                h["confirmed_by"] = "alone" if h["confirmed"] else ("group" if together else None)
                h["confirmed"] = h["confirmed_by"] is not None
    circuit = [{"head": list(k), "label": k[0], "effect": v} for k, v in effect.items() if v >= MIN_EFFECT]
    circuit.sort(key=lambda c: -c["effect"])
    return {
        "task": "reverse",
        "seq2seq_probes": probe_spec(),
        "baseline": round(next_token_loss(model, probes), 4),
        "heads": cross,
        "groups": groups,
        "circuit": circuit,
        "min_effect": MIN_EFFECT,
        "ablation": {
            k: [[effect[k, l, h] for h in range(cfg.n_heads)] for l in range(depth[k])]
            for k in ("self", "cross", "encoder")
        },
        "lens": lens_losses(model, probes),
        "length_curve": length_curve(model),
    }
