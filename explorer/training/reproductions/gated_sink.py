"""Does a gate on the attention output remove the attention sink? (Qiu et al. 2025, "Gated Attention for
Large Language Models: Non-linearity, Sparsity, and Attention-Sink-Free"): the paper reports that a
head-specific sigmoid gate after the attention output (its G1 position) takes most of the attention
mass off the first token and helps the model extrapolate past its trained length.

Measured on the bundles trained here (``explorer.training.bundle``), which differ from ``default`` in one
choice each and share its data, steps and seed: ``gated_attention`` (the elementwise G1 gate) and, where it
is present, ``gpt_oss_style`` (learned sinks: a second way to give the softmax somewhere else to put its
mass). Nothing is trained, so the run takes seconds.

- **First-token mass**: per layer, the attention weight on key 0, averaged over heads and over the queries
  ``t >= 1`` of ``eval_seqs`` held-out windows at the trained length (query 0 sees only key 0, so it is left
  out), and the same for the layer's head with the most. A model with learned sinks also reports the
  **learned sink's share**, ``1 - sum_k A[t, k]``.
- **Loss past the trained length**: the loss on the last ``eval_tokens`` bytes of held-out windows of each
  length, all ending at the same places (``explorer.training.reproductions.extrapolation.eval_batches``), so
  only the context before the scored bytes grows.
"""

from __future__ import annotations

import torch

from explorer.analysis.weights.bundled import load as load_bundle
from explorer.analysis.weights.bundled import names as bundle_names
from explorer.runtime.stopping import check_stop
from explorer.training.reproductions.cost import Cost
from explorer.training.reproductions.extrapolation import eval_batches
from explorer.training.tasks import scored_loss

TITLE = "gated attention vs the attention sink (Qiu et al. 2025)"
COST = Cost(seconds=20, peak_bytes=300_000_000)  # python -m benchmarks.repro_costs gated_sink
COLUMNS = ["model", "measure", "at", "value"]
BASELINE, GATED, SINKS = "default", "gated_attention", "gpt_oss_style"


def settings(quick: bool) -> dict:
    if quick:
        return {"trained_len": 32, "eval_lens": [32, 64], "eval_seqs": 2, "eval_tokens": 8}
    return {"trained_len": 128, "eval_lens": [128, 256, 512, 1024], "eval_seqs": 16, "eval_tokens": 64}


def models() -> list:
    """The bundles compared: the baseline, the gated one, and the learned-sink one when it is shipped."""
    present = bundle_names()
    return [n for n in (BASELINE, GATED, SINKS) if n in present]


def first_trainer(quick: bool = False, threads: int = 1):
    """The gated bundle's recipe, as ``explorer.training.bundle`` trains it: the stored run replays its first
    steps (``explorer.training.reproductions.stored.replay``), tying the stored figures to that recipe."""
    from explorer.training.bundle import RECIPES, trainer_for

    return trainer_for(RECIPES[GATED])


def sink_masses(attentions: list) -> tuple:
    """``(first-token mass, its largest head, learned-sink share)`` per layer from ``attentions`` (one
    ``(B, h, L, L)`` each): means over batch, heads and the queries ``t >= 1``; the top head's over batch
    and queries (a sink is often one or two heads' habit)."""
    first, top, sink = [], [], []
    for a in attentions:
        a = a.double()[:, :, 1:, :]  # queries 1.. (query 0 can only look at key 0)
        first.append(float(a[..., 0].mean()))
        top.append(float(a[..., 0].mean(dim=(0, 2)).max()))
        sink.append(float((1.0 - a.sum(-1)).clamp(min=0).mean()))
    return first, top, sink


def run(quick: bool = False, threads: int = 1, progress=lambda _m: None) -> dict:
    s = settings(quick)
    chosen = models()
    evals = eval_batches(s["eval_lens"], s["eval_seqs"], s["eval_tokens"])
    rows = []
    for name in chosen:
        bundle = load_bundle(name)
        model = bundle.model()
        check_stop()
        with torch.no_grad():
            out = model(evals[s["eval_lens"][0]].tokens[:, : s["trained_len"]], return_attention=True)
        first, top, sink = sink_masses(out.attentions)
        for layer, (f, t, k) in enumerate(zip(first, top, sink)):
            rows.append({"model": name, "measure": "first-token mass", "at": layer, "value": round(f, 5)})
            rows.append({"model": name, "measure": "first-token mass, top head", "at": layer, "value": round(t, 5)})
            if bundle.config.attn_sinks:
                rows.append({"model": name, "measure": "learned sink share", "at": layer, "value": round(k, 5)})
        progress(f"gated_sink: {name} first-token mass per layer {', '.join(f'{f:.3f}' for f in first)}")
        for L, batch in evals.items():
            check_stop()
            with torch.no_grad():
                loss = float(scored_loss(model(batch.tokens).logits, batch))
            rows.append({"model": name, "measure": "loss", "at": L, "value": round(loss, 4)})
            progress(f"gated_sink: {name} L={L} loss {loss:.3f}")
    return {
        "settings": {
            **s,
            "models": chosen,
            "data": "held-out tail of pydoc_data.topics (explorer.runtime.corpus.split_corpus)",
            "trained": "the bundles of explorer.training.bundle: 3000 steps at 128 bytes, same data and seed",
        },
        "rows": rows,
    }


def table_rows(result: dict) -> list:
    return result["rows"]


def _by(result: dict, measure: str) -> dict:
    out = {}
    for r in result["rows"]:
        if r["measure"] == measure:
            out.setdefault(r["model"], {})[r["at"]] = r["value"]
    return out


def extra_lines(result: dict) -> list:
    first, loss = _by(result, "first-token mass"), _by(result, "loss")
    lines = ["first-token mass by layer:"]
    for name, per in first.items():
        lines.append(f"{name:<16}" + "".join(f"{per[k]:>8.3f}" for k in sorted(per)))
    lines.append("loss by evaluation length: " + " ".join(str(L) for L in result["settings"]["eval_lens"]))
    for name, per in loss.items():
        lines.append(f"{name:<16}" + "".join(f"{per[k]:>8.3f}" for k in sorted(per)))
    return lines


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values)


def reading(result: dict) -> str:
    first, loss = _by(result, "first-token mass"), _by(result, "loss")
    lens = result["settings"]["eval_lens"]
    short, long = lens[0], lens[-1]
    if BASELINE not in first or GATED not in first:
        return "The baseline or the gated bundle is missing: nothing to compare."
    base, gated = _mean(first[BASELINE].values()), _mean(first[GATED].values())
    grow = {n: per[long] - per[short] for n, per in loss.items()}
    uniform = _mean(1 / (t + 1) for t in range(1, short))  # a causal row spread evenly: 1 / (t + 1) on key 0
    if base < uniform:
        held = (
            f"cannot show here: without the gate these small models put less on the first token than rows spread "
            f"evenly would ({uniform:.3f}), so there is no sink for the gate to remove"
        )
    else:
        held = "holds" if gated < 0.5 * base else "does not hold here" if gated >= base else "holds only in part"
    ext = "extrapolates better" if grow[GATED] < grow[BASELINE] else "does not extrapolate better"
    text = (
        f"First-token mass, mean over layers (queries 1-{short - 1} of {result['settings']['eval_seqs']} held-out "
        f"windows of {short} bytes): {base:.3f} without the gate, {gated:.3f} with it. The paper's sink-free "
        f"claim {held}. Loss on the last {result['settings']['eval_tokens']} bytes from "
        f"L={short} to L={long}: without the gate {loss[BASELINE][short]:.3f} -> {loss[BASELINE][long]:.3f}, "
        f"with it {loss[GATED][short]:.3f} -> {loss[GATED][long]:.3f}: the gated model {ext}."
    )
    if SINKS in first:
        share = _by(result, "learned sink share").get(SINKS, {})
        text += (
            f" With learned sinks (gpt-oss style, whose 64-key windows on every other layer also bound what those "
            f"layers see, so its loss past L={short} is not the sinks' alone): first-token mass "
            f"{_mean(first[SINKS].values()):.3f}, the sink's own share {_mean(share.values()) if share else 0.0:.3f} "
            f"(by layer: {', '.join(f'{share[k]:.2f}' for k in sorted(share))}), loss {loss[SINKS][short]:.3f} -> "
            f"{loss[SINKS][long]:.3f}."
        )
    return text
