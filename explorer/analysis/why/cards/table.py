"""The circuit cards as one Markdown table, a row per model (the command's output and the page's text).

Cards are the stored JSON dicts (``explorer.analysis.why.cards``); a skipped card is a row saying why. An
encoder-decoder's reversal card (``task: "reverse"``, ``explorer.analysis.why.cards.seq2seq``) measures another
circuit: it is a row of its own table below the first (``seq2seq_table_md``). No torch: the page formats
stored cards without loading a model.
"""

from __future__ import annotations

SHOWN_DISTANCES = (16, 32, 64, 112)  # the table's copy-curve columns (tokens)


def architecture_text(arch: dict) -> str:
    """ "sliding_window (64), rope, pre-LN layernorm, gelu, 4 x 4 heads (2 K/V)"."""
    attn = arch.get("layer_schedule") or arch["attention"]
    attn += f" ({arch['window']})" if "window" in arch else ""
    kv = f" ({arch['n_kv_heads']} K/V)" if arch["n_kv_heads"] != arch["n_heads"] else ""
    terms = [
        *(["learned sinks"] if arch.get("attn_sinks") else []),
        *([f"{arch['attn_gate']} output gate"] if arch.get("attn_gate") else []),
        *([f"qk-norm {arch['qk_norm']}"] if arch.get("qk_norm") else []),
    ]
    return (
        f"{attn}, {arch['position']}, {arch['norm_placement']}-LN {arch['norm']}, {arch['ffn']}, "
        f"{arch['n_layers']} x {arch['n_heads']} heads{kv}" + "".join(f", {t}" for t in terms)
    )


def heads_of(card: dict, label: str) -> list:
    return [h for row in card["heads"] for h in row if h["label"] == label]


def head_name(h: dict) -> str:
    return f"{h['layer']}.{h['head']}" + ("" if h["confirmed"] else "?")


def role_text(card: dict, label: str) -> str:
    """ "1.0 1.1 1.2 1.3 (score 0.91-0.92; together +4.99 nats)" ("-" without such heads; "?": unconfirmed)."""
    heads = heads_of(card, label)
    if not heads:
        return "-"
    lo, hi = min(h["score"] for h in heads), max(h["score"] for h in heads)
    score = f"{lo:.2f}" if round(lo, 2) == round(hi, 2) else f"{lo:.2f}-{hi:.2f}"
    group = card["groups"].get(label)
    together = f"; together {group['effect']:+.2f} nats" if group and len(heads) > 1 else ""
    return " ".join(head_name(h) for h in heads) + f" (score {score}{together})"


def circuit_text(card: dict, n: int = 5) -> str:
    parts = [f"{c['head'][0]}.{c['head'][1]} {c['label']} {c['effect']:+.2f}" for c in card["circuit"][:n]]
    more = len(card["circuit"]) - n
    return ", ".join(parts) + (f" (+{more} more)" if more > 0 else "") if parts else "-"


def curve_cells(card: dict) -> list:
    c = card["copy_curve"]
    curve = dict(zip(c["distances"], zip(c["second_copy"], c["accuracy"])))
    return [f"{curve[d][0]:.2f} ({curve[d][1]:.0%})" if d in curve else "-" for d in SHOWN_DISTANCES]


def fails_text(card: dict) -> str:
    c = card["copy_curve"]
    return f"{c['fails_at']}" if c["fails_at"] is not None else f"> {c['distances'][-1]}"


def cards_table_md(cards: list) -> str:
    """One Markdown row per card (module docstring), with a note saying what each column measures."""
    if not cards:
        return ""
    head = (
        "| model | architecture | induction heads | previous-token heads | copying circuit (second-copy loss "
        "change when mean-ablated, nats) | logit-lens loss per layer, held-out text (emb, 0, 1, ...) | "
        "second-copy loss (top-1 accuracy) at distance "
        + " / ".join(map(str, SHOWN_DISTANCES))
        + " | induction fails at |"
    )
    lines = [head, "| --- | --- | --- | --- | --- | --- | --- | ---: |"]
    for c in cards:
        if is_seq2seq(c):
            lines.append(
                f"| {c['model']} | {architecture_text(c['architecture'])} | a reversal circuit: see the "
                "encoder-decoder table below | | | | | |"
            )
            continue
        if c.get("skipped"):
            lines.append(
                f"| {c['model']} | {architecture_text(c['architecture'])} | skipped: {c['skipped']} | | | | | |"
            )
            continue
        lens = " ".join(f"{v:.2f}" for v in c["lens"]["natural"])
        lines.append(
            f"| {c['model']} | {architecture_text(c['architecture'])} | {role_text(c, 'induction')} | "
            f"{role_text(c, 'previous-token')} | {circuit_text(c)} | {lens} | {' / '.join(curve_cells(c))} "
            f"| {fails_text(c)} |"
        )
    done = next((c for c in cards if not c.get("skipped") and not is_seq2seq(c)), None)
    seq = [c for c in cards if is_seq2seq(c)]
    if done is not None:
        lines.append(
            f"\nLosses in {done['unit']} on fixed probes: heads labelled on repeated random tokens "
            "(induction: prefix-matching score, layer >= 1) and held-out text (the rest), each confirmed "
            f"when mean-ablating it changes the loss its role predicts by at least {done['min_effect']} nats "
            '("?": not confirmed); the copy curve is the second copy\'s loss of '
            f"{done['copy_curve']['copy_len']} random tokens repeated at each distance (after its first "
            f"token, {done['copy_curve']['sequences']} sequences); induction fails at the first distance "
            f"where fewer than {done['copy_curve']['fail_accuracy']:g} of those tokens are predicted (top-1)."
        )
    if seq:
        lines.append("\n" + seq2seq_table_md(seq))
    return "\n".join(lines)


def is_seq2seq(card: dict) -> bool:
    return not card.get("skipped") and card.get("task") == "reverse"


def seq2seq_table_md(cards: list) -> str:
    """The reversal cards: one row per encoder-decoder, with a note saying what each column measures."""
    head = (
        "| model | architecture | mirror cross-attention heads (score; alone / together: loss change when "
        "mean-ablated, nats) | other heads that matter (mean-ablated) | decoder logit-lens loss (emb, 0, 1, ...) "
        "| reversal accuracy at source length | reversal fails at |"
    )
    lines = [head, "| --- | --- | --- | --- | --- | --- | ---: |"]
    for c in cards:
        mirror = [h for row in c["heads"] for h in row if h["label"] == "mirror"]
        if mirror:
            lo, hi = min(h["score"] for h in mirror), max(h["score"] for h in mirror)
            alone = max(h["effect"] for h in mirror)
            g = c["groups"].get("mirror")
            roles = (
                f"{' '.join(seq2seq_head_name(h) for h in mirror)} (score {lo:.2f}-{hi:.2f}; alone at most "
                f"{alone:+.2f}" + (f", together {g['effect']:+.2f}" if g else "") + ")"
            )
        else:
            roles = "-"
        others = (
            ", ".join(
                f"{k[0]} {k[1]}.{k[2]} {e['effect']:+.2f}"
                for e in c["circuit"][:5]
                for k in [e["head"]]
                if k[0] != "cross"
            )
            or "-"
        )
        curve = c["length_curve"]
        acc = " / ".join(f"{n}: {a:.0%}" for n, a in zip(curve["lengths"], curve["accuracy"]))
        fails = f"{curve['fails_at']}" if curve["fails_at"] is not None else f"> {curve['lengths'][-1]}"
        lens = " ".join(f"{v:.2f}" for v in c["lens"]["reversal"])
        lines.append(
            f"| {c['model']} | {architecture_text(c['architecture'])} | {roles} | {others} | {lens} | {acc} | {fails} |"
        )
    c = cards[0]
    spec, curve = c["seq2seq_probes"], c["length_curve"]
    lines.append(
        f"\nEncoder-decoder cards read {spec['strings']} random strings of {spec['source_length']} symbols "
        "(the trained length) and their reversals, the decoder teacher-forced on the reversal: a cross-"
        "attention head's mirror score is its mean attention on source position Ls-1-t from target "
        f"position t (labelled at {spec['mirror_score']:g} or more); losses in {c['unit']}; reversal fails "
        f"at the first source length past {curve['trained_length']} where fewer than "
        f"{curve['fail_accuracy']:g} of the answer's symbols are predicted (top-1)."
    )
    return "\n".join(lines)


def seq2seq_head_name(h: dict) -> str:
    return f"{h['layer']}.{h['head']}" + ("" if h["confirmed"] else "?")
