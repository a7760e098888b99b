"""Results -> short Markdown text (the one-line readings and the model card); no torch, no gradio."""

from __future__ import annotations

from explorer.figures.base import human_bytes
from explorer.figures.latency import fitted_slope, slope_text


def _ratio(vals: list) -> str:
    vals = [v for v in vals if v is not None]
    if not vals:
        return "-"
    if all(v == 0 for v in vals):
        return "exactly 0"
    if vals[0] == 0:
        return "∞"
    return f"{vals[-1] / vals[0]:.2f}×"


def gradient_reading(results: dict, current: str, skipped: dict | None = None) -> str:
    """One line computed from the numbers: last-layer / first-layer ratio of each placement."""
    parts = []
    for placement, r in results.items():
        text = f"{placement} {_ratio(r['attn_out'])}"
        if placement == current:
            text = f"**{text}** (current)"
        parts.append(text)
    line = "Attention out-proj gradient, last layer ÷ first layer: " + " · ".join(parts) + "."
    zero = [p for p, r in results.items() if r["attn_out"] and all(v == 0 for v in r["attn_out"])]
    if zero:
        line += (
            f" {', '.join(zero)}: every branch is multiplied by α = 0 at initialisation, so its "
            "weights get exactly zero gradient (drawn on the bottom edge)."
        )
    for note in results.get(current, {}).get("notes", []):
        line += f" Note: {note}."
    if skipped:
        line += " Not comparable here: " + "; ".join(f"{p} ({why})" for p, why in skipped.items()) + "."
    return line


def sweep_reading(current: list, baseline: list | None, attention: str, baseline_name: str = "full") -> str:
    """Fitted slopes, the largest length measured, how much faster the current attention is than its
    baseline (whole forward and attention alone), where the baseline stopped, and what the memory curves
    measure (which kernel ran and whether it holds an L x L matrix), as sentences."""

    def describe(records, name):
        s_t, s_m = slope_text(records, "ms"), slope_text(records, "peak_bytes")
        ok = [r for r in records if r["status"] == "ok"]
        bad = [f"L={r['seq_len']}: {r['status']}" for r in records if r["status"] != "ok"]
        text = f"**{name}**: time slope {s_t}" if s_t is not None else f"**{name}**: too few points for a slope"
        if s_m is not None:
            text += f", memory slope {s_m}"
        if ok:
            last = ok[-1]
            text += f"; at L={last['seq_len']}: {last['ms']:.1f} ms, {human_bytes(last['peak_bytes'])}"
            if last.get("attn_ms"):
                text += (
                    f", of which the attention alone {last['attn_ms']:.1f} ms "
                    f"({100 * last['attn_ms'] / last['ms']:.0f}%)"
                )
        if bad:
            text += " (" + ", ".join(bad) + ")"
        return text

    parts = [describe(current, attention)]
    if baseline:
        parts.append(describe(baseline, baseline_name))
    text = " · ".join(parts) + ". A slope of 1 is linear in L, 2 quadratic."
    if baseline:
        text += speed_sentence(current, baseline, attention, baseline_name)
    every = current + (baseline or [])
    text += memory_sentence(current, baseline, attention, baseline_name)
    text += " " + timing_method(every)
    loaded = [r for r in every if r.get("others")]
    if loaded:
        most = max(r["others"] for r in loaded)
        text += (
            f" ⚠️ Other requests were computing during {len(loaded)} of these measurements (up to {most} at "
            "once): those timings are inflated; run the sweep again when the app is quiet."
        )
    return text


def speed_sentence(current: list, baseline: list, attention: str, baseline_name: str) -> str:
    """ " At L=8192 sliding_window's forward is 4.5× faster than full's (the attention alone: 9.1×); full
    stopped at L=16384 (timeout: ...), which sliding_window ran in 700 ms." ("" without a common length)."""
    ok_c = {r["seq_len"]: r for r in current if r["status"] == "ok"}
    ok_b = {r["seq_len"]: r for r in baseline if r["status"] == "ok"}
    common = sorted(set(ok_c) & set(ok_b))
    text = ""
    if common:
        L = common[-1]
        c, b = ok_c[L], ok_b[L]
        ratio = b["ms"] / c["ms"] if c["ms"] > 0 else float("inf")
        word = f"{ratio:.2f}× faster than" if ratio >= 1 else f"{1 / ratio:.2f}× slower than"
        text = f" At L={L}, the longest length both measured, {attention}'s forward is {word} {baseline_name}'s"
        if c.get("attn_ms") and b.get("attn_ms"):
            text += f" (the attention alone: {b['attn_ms'] / c['attn_ms']:.2f}×)"
        text += "."
    stops = [r for r in baseline if r["status"] in ("timeout", "oom") and r["seq_len"] in ok_c]
    if stops:
        r = stops[0]
        text += (
            f" {baseline_name} stopped at L={r['seq_len']} ({r['status']}: {r.get('reason') or 'no reason given'}), "
            f"which {attention} ran in {ok_c[r['seq_len']]['ms']:.0f} ms."
        )
    return text


# What each kernel of ``kernels.attention`` holds: the sweep's memory reading says it per backend that ran.
OWN_CODE = "no kernels.attention call"
BACKEND_MEMORY = (
    (
        "sdpa",
        "PyTorch's fused scaled_dot_product_attention (a flash-style kernel): it streams blocks of keys "
        "through a running softmax and never holds the L × L scores",
    ),
    ("triton", "our Triton kernel: each tile of scores lives in on-chip memory, never the L × L matrix"),
    (
        "torch-",
        "our block-sparse PyTorch path: it computes only the pattern's tiles, a chunk of rows at a time "
        "with a running softmax, never the L × L scores",
    ),
)


def backend_memory(backend: str) -> str:
    """Whether the kernel named ``backend`` (a sweep record's, maybe ``a + b``) holds an L x L matrix."""
    if OWN_CODE in backend:
        return (
            "the mechanism's own PyTorch code, not a kernel of ours: whether it holds an L × L matrix is its "
            "own (a memory slope near 2 says it does)"
        )
    said = [how for name in backend.split(" + ") for key, how in BACKEND_MEMORY if name.startswith(key)]
    return "; ".join(dict.fromkeys(said)) or "a kernel this reading does not describe"


def memory_sentence(current: list, baseline: list | None, attention: str, baseline_name: str) -> str:
    """Which kernel ran for each attention and whether it materialises L x L, checked against the measured
    peak: the size one L x L score matrix of every head would have at the longest length measured."""
    named = [(attention, current), (baseline_name, baseline or [])]
    kernels = []
    for name, records in named:
        ran = list(dict.fromkeys(r["backend"] for r in records if r.get("backend") and r["backend"] != "not run"))
        kernels += [f"`{b}` ({name}): {backend_memory(b)}" for b in ran]
    if not kernels:
        return ""
    text = " Memory: the kernels that ran are " + "; ".join(kernels) + "."
    ok = [r for _, records in named for r in records if r["status"] == "ok" and r.get("peak_bytes")]
    if not ok or not ok[0].get("n_heads"):
        return text
    L = max(r["seq_len"] for r in ok)
    at = [r for r in ok if r["seq_len"] == L]
    peak = max(r["peak_bytes"] for r in at)
    width = 2 if at[0].get("dtype") in ("bfloat16", "float16") else 4
    square = at[0].get("batch", 1) * at[0]["n_heads"] * L * L * width
    text += (
        f" At L={L} the measured peak is {human_bytes(peak)}, where one {at[0].get('dtype', 'float32')} L × L score "
        f"matrix for the {at[0]['n_heads']} heads alone would be {human_bytes(square)}"
    )
    if peak >= square:
        return text + "."
    text += ": none is held"
    slopes = [fitted_slope(records, "peak_bytes") for _, records in named if records]
    if slopes and all(x is not None and x < 1.4 for x in slopes):
        text += ", and the memory that is measured (activations, logits) grows like L"
    c = {r["seq_len"]: r["peak_bytes"] for r in current if r["status"] == "ok" and r.get("peak_bytes")}
    b = {r["seq_len"]: r["peak_bytes"] for r in baseline or [] if r["status"] == "ok" and r.get("peak_bytes")}
    common = sorted(set(c) & set(b))
    if common:
        n = common[-1]
        ratio = c[n] / b[n]
        if max(ratio, 1 / ratio) <= 1.25:
            text += (
                f". That is why the memory curves of {attention} and {baseline_name} look alike (within 25% at "
                f"L={n}): a sparse pattern saves time here (fewer tiles computed), not memory"
            )
        else:
            text += (
                f"; at L={n} {attention}'s peak is {ratio:.2f}× {baseline_name}'s: what differs is the "
                "kernels' working memory, not an L × L matrix"
            )
    return text + "."


def timing_method(records: list) -> str:
    """How the sweep's numbers were taken and which one-time costs they exclude."""
    r = next((r for r in records if r.get("timer")), None)
    if r is None:
        return ""
    how = (
        "CUDA events, bf16 autocast"
        if r["timer"] == "CUDA events"
        else f"wall clock, {r.get('dtype', 'float32')}, {r.get('threads', 1)} thread(s)"
    )
    return (
        f"Median of timed runs ({how}); excluded: the model build, the process's first run and each "
        "length's untimed warm-up, which builds and plans the block-sparse layout (memoised per "
        "pattern and length)."
    )


def _si(x: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.2f} {unit}"
    return f"{x:.0f} "


def model_markdown(summary: dict) -> str:
    """The Model tab: size, measured FLOPs per token, each component with its paper and summary."""
    lines = [
        f"### {summary['parameters']:,} parameters · {_si(summary['flops_per_token'])}FLOPs per token",
        f"Forward FLOPs counted by `torch.utils.flop_counter` on a {summary['flops_seq_len']}-token "
        f"sequence (matmuls and attention; attention backend: `{summary['backend']}`).",
        "Latency curves (Latency & memory tab) exclude one-time costs: the model build, the process's "
        "first run, and the block-sparse layout and its execution plan, built once per (pattern, length), "
        "memoised, and paid by the untimed warm-up run of each length.",
        "",
        "| choice | key | paper | what it does | parameters |",
        "| --- | --- | --- | --- | --- |",
    ]
    st = summary.get("stacks")
    if st:  # encoder-decoder: the two stacks, and FLOPs counted on a source and a target of that length
        lines[1:1] = [
            f"Encoder-decoder: encoder {st['encoder_layers']} layers ({st['encoder_params']:,} parameters) "
            f"over the source; decoder {st['decoder_layers']} layers ({st['decoder_params']:,}, of which "
            f"cross-attention {st['cross_params']:,}) over the target; the byte embedding is shared. "
            f"FLOPs per target token, source and target of {summary['flops_seq_len']} tokens each."
        ]
    for c in summary["components"]:
        params = ", ".join(f"`{k}={v}`" for k, v in c["params"].items()) or "–"
        lines.append(f"| {c['category']} | `{c['key']}` | {c['paper']} | {c['summary']} | {params} |")
    return "\n".join(lines)


def maps_reading(summary: dict, max_bytes: int = 256) -> str:
    """The attention maps' reading: ``maps_line`` and the head table (``head_table``)."""
    return maps_line(summary, max_bytes) + head_table(summary.get("heads"), summary.get("head_rules"))


def maps_line(summary: dict, max_bytes: int = 256) -> str:
    """One line over the attention maps: tokens, layers and heads, the pairs allowed, what was cut, and when
    the pattern allows every pair full attention does, where to see it differ."""
    tokenizer = summary.get("vocabulary") == "tokenizer"
    kind = "tokens (the checkpoint's tokenizer)" if tokenizer else "byte tokens"
    text = (
        f"{summary['n_tokens']} {kind} · {summary['n_layers']} layers × {summary['n_heads']} heads · "
        f"{100 * summary['allowed_fraction']:.1f}% of pairs allowed ({summary['mask_kind']})"
    )
    if summary.get("truncated"):
        text += f" · the text was cut to the first {max_bytes} {'tokens' if tokenizer else 'bytes'}"
    if allows_every_pair(summary):
        text += (
            f" · at {summary['n_tokens']} tokens {summary['attention']}'s pattern covers every pair full attention "
            f"allows, so its maps are full attention's: a longer text (up to {max_bytes} "
            f"{'tokens' if tokenizer else 'bytes'}) shows where it differs, and the **Long context** tab draws "
            f"the same weights at 1024 to 16384 tokens, where the pattern parts from full attention"
        )
    for note in summary.get("notes", []):
        text += f" · {note}"
    return text


def allows_every_pair(summary: dict) -> bool:
    """True when a structured pattern other than full allows exactly full attention's pairs at this length.
    A pattern is a subset of full attention (causal or not) and memory keys are all allowed, so the same
    number of allowed pairs is the same set: all of them, or the causal triangle and the memory columns."""
    if summary.get("mask_kind") != "pattern" or summary.get("attention") in (None, "full"):
        return False
    lq, lk = summary["n_tokens"], summary.get("n_keys", summary["n_tokens"])
    if not lq or not lk:
        return False
    causal = (lq * (lq + 1) // 2 + lq * (lk - lq)) / (lq * lk)
    allowed = summary["allowed_fraction"]
    return abs(allowed - causal) < 0.5 / (lq * lk) or allowed >= 1 - 0.5 / (lq * lk)


def head_table(heads, rules: str | None = None) -> str:
    """What each head does on this text (``summary["heads"]``): a layer x head Markdown table, "" without."""
    if not heads:
        return ""
    n_h = max(len(row) for row in heads)
    lines = [
        "",
        "",
        "**Head types on this text** (the label and the score that decided it)",
        "",
        "| layer | " + " | ".join(f"head {k}" for k in range(n_h)) + " |",
        "| --- |" + " --- |" * n_h,
    ]
    for n, row in enumerate(heads):
        cells = [
            h["label"] if h["label"] == "mixed" or h["score"] is None else f"{h['label']} {h['score']:.2f}" for h in row
        ]
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    if rules:
        lines += ["", f"<sup>Rules: {rules}.</sup>"]
    return "\n".join(lines)


def diff_markdown(rows: list, card_a: dict | None = None, card_b: dict | None = None) -> str:
    """The comparison's reading: a table of the differing fields (``rows``: ``[(field, A, B)]``, as
    ``analysis.compare.config_diff`` gives them) and, given the model summaries
    (``analysis.model_summary``), parameter count and FLOPs per token of each."""
    if not rows:
        head = "**A and B are the same configuration**: change a control to compare."
    else:
        head = f"**{len(rows)} field{'s differ' if len(rows) > 1 else ' differs'}** (A = pinned, B = the controls now)."
    lines = [head, ""]
    if card_a and card_b:
        lines += [
            "| | A | B |",
            "| --- | --- | --- |",
            f"| parameters | {card_a['parameters']:,} | {card_b['parameters']:,} |",
            f"| FLOPs per token | {card_a['flops_per_token']:,.0f} | {card_b['flops_per_token']:,.0f} |",
        ]
        for k, va, vb in rows:
            lines.append(f"| `{k}` | `{va}` | `{vb}` |")
    elif rows:
        lines += ["| field | A | B |", "| --- | --- | --- |"] + [f"| `{k}` | `{va}` | `{vb}` |" for k, va, vb in rows]
    return "\n".join(lines)


def _times(x: float, y: float) -> str:
    """How many times ``x`` is larger than ``y`` (both positive), as text."""
    return f"{x / y:.2f}×" if y > 0 else "∞×"


def ab_sweep_reading(a: list, b: list, name_a: str, name_b: str) -> str:
    """Which of A and B is faster and which smaller, and by how much, at the longest length both
    measured; the failures of each (OOM, time-out, ...) after it."""
    ok_a = {r["seq_len"]: r for r in a if r["status"] == "ok"}
    ok_b = {r["seq_len"]: r for r in b if r["status"] == "ok"}
    common = sorted(set(ok_a) & set(ok_b))
    if not common:
        text = "A and B have no length that both measured, so they cannot be compared here."
    else:
        L = common[-1]
        ra, rb = ok_a[L], ok_b[L]
        ta, tb, ma, mb = ra["ms"], rb["ms"], ra["peak_bytes"], rb["peak_bytes"]
        if ta == tb:
            speed = f"A and B take the same time ({ta:.1f} ms)"
        else:
            fast, slow = ("A", "B") if ta < tb else ("B", "A")
            speed = (
                f"**{fast} is {_times(max(ta, tb), min(ta, tb))} faster** than {slow} "
                f"({min(ta, tb):.1f} ms vs {max(ta, tb):.1f} ms)"
            )
        if ma == mb:
            size = f"the same peak memory ({human_bytes(ma)})"
        else:
            small = "A" if ma < mb else "B"
            size = (
                f"**{small} needs {_times(max(ma, mb), min(ma, mb))} less peak memory** "
                f"({human_bytes(min(ma, mb))} vs {human_bytes(max(ma, mb))})"
            )
        text = f"At L={L}, the longest length both measured: {speed}, and {size}."
    fails = [
        f"{side} ({name}) L={r['seq_len']}: {r['status'].upper()}"
        for side, name, records in (("A", name_a, a), ("B", name_b, b))
        for r in records
        if r["status"] != "ok"
    ]
    if fails:
        text += " Not measured: " + "; ".join(fails) + "."
    return text + f" A = {name_a} (pinned), B = {name_b} (the controls)."


def loss_line(change) -> str:
    """A ``surgery.LossChange`` in one line: "held-out loss 1.386 → 1.396 nats/byte (+0.010; perplexity 4.00 →
    4.04), 4096 tokens in windows of 128, the trained length; on your text (89 tokens read whole, within the
    trained length (128)) 1.30 → 1.38 (+0.08)"."""
    if not change:
        return ""
    b, a = change.heldout
    line = (
        f"held-out loss **{b.nats:.3f} → {a.nats:.3f}** {change.unit} ({a.nats - b.nats:+.3f}; perplexity "
        f"{b.perplexity:.2f} → {a.perplexity:.2f}), {b.reading()}"
    )
    if change.text is None:
        return line + "; your text is too short to score"
    tb, ta = change.text
    return line + f"; on your text ({tb.reading()}) {tb.nats:.3f} → {ta.nats:.3f} ({ta.nats - tb.nats:+.3f})"
