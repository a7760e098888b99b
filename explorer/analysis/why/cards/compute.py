"""One circuit card computed: what a trained model's heads do by the probe and the cause, what each layer
predicts, and how far apart two copies can be before copying fails.

``compute_card(origin)`` reads the model ``origin`` (``explorer.analysis.surgery.Origin``: a bundle or a
checkpoint, as trained) on the fixed probe texts (``explorer.analysis.why.probes``) and returns a JSON-safe dict:

- ``heads``, ``groups``, ``baseline``: the grounded labels (``explorer.analysis.why.grounded``);
- ``circuit``: every head whose mean-ablation raises the second copy's loss by ``grounded.MIN_EFFECT`` or more,
  largest first (the copying circuit, whatever its heads' labels);
- ``lens``: the logit-lens loss after the embedding and after each layer (``explorer.analysis.why.lens``: the
  residual stream through the model's own final norm and head), on the natural probe (every position) and
  on the second copies (after their first token), nats per token;
- ``copy_curve``: the second copy's loss and top-1 accuracy against the copy distance
  (``probes.curve_distances``: up to the trained length), the first copy's loss (random tokens nothing
  predicts) beside it, and ``fails_at``: the first distance at which fewer than ``FAIL_ACCURACY`` of the second
  copy's tokens are the model's top prediction (None: copying holds at every distance measured).

An encoder-decoder trained on the reverse task gets the card of its own circuit instead
(``explorer.analysis.why.cards.seq2seq``: cross-attention heads that read the mirrored source position, confirmed by
mean ablation, the decoder's logit lens, the source length at which reversal fails; ``task: "reverse"`` marks
it). A model the intervention record does not cover (another layer structure, a memory), an encoder-decoder
of another task, or a model whose next-token loss means nothing gets a card that says why it was skipped.
"""

from __future__ import annotations

import time

import numpy as np
import torch
import torch.nn.functional as F

from explorer.analysis.surgery.loss import HELDOUT_BYTES, heldout_text
from explorer.analysis.surgery.origin import Origin
from explorer.analysis.why.cards.seq2seq import seq2seq_card
from explorer.analysis.why.grounded import MIN_EFFECT, grounded_labels
from explorer.analysis.why.lens import cached_run, streams
from explorer.analysis.why.probes import (
    COPY_LEN,
    CURVE,
    CURVE_BATCH,
    LABEL_DISTANCES,
    NATURAL_WINDOWS,
    PERIODIC,
    REPEAT_BATCH,
    REPEAT_LENGTH,
    SEED,
    Probes,
    curve_distances,
    distance_probe,
    make_probes,
)
from models import ConfigError
from models.attention import PATTERNS
from models.config import FIELDS
from models.interventions import check_model
from models.schedule import layer_kinds

FORMAT = "transformer-family-explorer/circuit-card"
VERSION = 1  # raised when what a card measures changes: older stored cards are then stale
FAIL_ACCURACY = 0.5  # copying has failed once fewer than half of the second copy's tokens are predicted
ARCH_FIELDS = (
    "architecture",
    "attention",
    "window",
    "position",
    "norm_placement",
    "norm",
    "ffn",
    "n_layers",
    "n_heads",
    "n_kv_heads",
    "d_model",
)


def probe_spec() -> dict:
    """What the probes are (a card computed on other probes is stale)."""
    return {
        "seed": SEED,
        "copy_len": COPY_LEN,
        "label_distances": list(LABEL_DISTANCES),
        "repeat_length": REPEAT_LENGTH,
        "repeat_batch": REPEAT_BATCH,
        "natural_windows": NATURAL_WINDOWS,
        "natural": f"the first {HELDOUT_BYTES} bytes of the held-out split",
        "periodic": PERIODIC.decode(),
        "curve": list(CURVE),
        "curve_batch": CURVE_BATCH,
    }


MODERN_FIELDS = ("layer_schedule", "attn_sinks", "attn_gate", "qk_norm")  # named only when set (2024-2026 terms)


def architecture(cfg) -> dict:
    out = {k: getattr(cfg, k) for k in ARCH_FIELDS}
    out["n_kv_heads"] = cfg.kv_heads
    out.update({k: getattr(cfg, k) for k in MODERN_FIELDS if getattr(cfg, k) != FIELDS[k].default})
    keys = [k.attention for k in layer_kinds(cfg)]
    if not any(k in PATTERNS and "window" in PATTERNS[k].params for k in keys):  # no layer reads a window
        out.pop("window")
    return out


def _ce(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """``(B, L - 1)`` next-token losses."""
    return F.cross_entropy(logits[:, :-1].float().transpose(1, 2), ids[:, 1:], reduction="none")


def _copy_rows(ids_loss: torch.Tensor, distances) -> torch.Tensor:
    d = torch.as_tensor(distances, device=ids_loss.device)
    return ids_loss.gather(1, d[:, None] + torch.arange(COPY_LEN - 1, device=ids_loss.device)[None])  # D .. D + N - 2


def lens_losses(model, probes: Probes) -> dict:
    """Per-layer logit-lens loss (nats per token) on the natural probe and on the second copies."""
    out = {"rows": ["embedding"] + [f"layer {i}" for i in range(model.cfg.n_layers)]}
    for name, ids in (("natural", probes.natural), ("copy", probes.repeat)):
        run = cached_run(model, ids)
        per = []
        for x in streams(run):
            with torch.no_grad():
                loss = _ce(model.classify(x), ids)
            per.append(float((_copy_rows(loss, probes.distances) if name == "copy" else loss).mean()))
        out[name] = [round(v, 4) for v in per]
    return out


def copy_curve(model, probes: Probes) -> dict:
    """The second copy's loss and accuracy, the first copy's loss, at each distance of ``curve_distances``;
    ``fails_at``."""
    ds, second, acc, first = list(curve_distances(probes.trained_length)), [], [], []
    for d in ds:
        ids = distance_probe(probes, d).to(probes.repeat.device)
        with torch.no_grad():
            logits = model(ids).logits
        loss = _ce(logits, ids)
        hit = (logits[:, :-1].argmax(-1) == ids[:, 1:]).float()
        second.append(round(float(_copy_rows(loss, [d] * len(ids)).mean()), 4))
        acc.append(round(float(_copy_rows(hit, [d] * len(ids)).mean()), 4))
        first.append(round(float(loss[:, : COPY_LEN - 1].mean()), 4))
    fails = next((d for d, a in zip(ds, acc) if a < FAIL_ACCURACY), None)
    return {
        "distances": ds,
        "second_copy": second,
        "accuracy": acc,
        "first_copy": first,
        "fails_at": fails,
        "fail_accuracy": FAIL_ACCURACY,
        "copy_len": COPY_LEN,
        "sequences": CURVE_BATCH,
    }


def header(origin: Origin, weights_sha256: str) -> dict:
    return {
        "format": FORMAT,
        "version": VERSION,
        "model": origin.name,
        "kind": origin.kind,
        "label": origin.label,
        "weights_sha256": weights_sha256,
        "probes": probe_spec(),
        "unit": origin.unit,
        "trained_length": origin.trained_length,
        "architecture": architecture(origin.config),
    }


def skip_reason(origin: Origin) -> str | None:
    """Why ``origin`` gets no card (None: it gets one)."""
    try:
        check_model(origin.config)
    except ConfigError as e:
        return f"no per-head intervention points: {e}"
    if origin.config.architecture == "encoder_decoder":
        task = trained_task(origin)
        return (
            None
            if task == "reverse"
            else (f"an encoder-decoder trained on {task or 'an unknown task'}: its card's probes are reversals")
        )
    if not origin.lm or origin.config.architecture != "decoder_only":
        return "not a causal language model: its next-token loss means nothing"
    return None


def trained_task(origin: Origin) -> str | None:
    """The task a bundle was trained on (its manifest's ``task``); None for a checkpoint."""
    if origin.kind != "bundle":
        return None
    from explorer.analysis.weights import bundled

    return bundled.load(origin.name).manifest.get("task")


def compute_card(origin: Origin, weights_sha256: str, log=None) -> dict:
    """The card of ``origin`` (see the module docstring); ``weights_sha256``: the digest of its weights file."""
    card = header(origin, weights_sha256)
    reason = skip_reason(origin)
    if reason is not None:
        return {**card, "skipped": reason}
    t0 = time.perf_counter()
    model = origin.weights.eval_model(origin.config).eval()
    if origin.config.architecture == "encoder_decoder":
        card.update(skipped=None, **seq2seq_card(model))
        if log:
            log(f"{origin.label}: {time.perf_counter() - t0:.1f} s")
        return card
    probes = make_probes(origin.encode, heldout_text(), origin.trained_length)
    grounded = grounded_labels(model, probes).to_json()
    copy = np.array([[h["effects"]["copy"] for h in row] for row in grounded["heads"]])
    circuit = [
        {"head": [int(l), int(h)], "label": grounded["heads"][l][h]["label"], "effect": round(float(copy[l, h]), 4)}
        for l, h in zip(*np.nonzero(copy >= MIN_EFFECT))
    ]
    circuit.sort(key=lambda c: -c["effect"])
    card.update(
        skipped=None,
        heads=grounded["heads"],
        groups=grounded["groups"],
        baseline=grounded["baseline"],
        circuit=circuit,
        lens=lens_losses(model, probes),
        copy_curve=copy_curve(model, probes),
        min_effect=MIN_EFFECT,
        thresholds=grounded["thresholds"],
    )
    if log:
        log(f"{origin.label}: {time.perf_counter() - t0:.1f} s")
    return card
