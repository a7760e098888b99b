"""The rows of the Surgery table and the tables stored beside the models (read without computing).

``rows_for(origin)``: the model as trained, every surgery-safe attention of the catalogue (the windowed
ones at the origin's window: a bundle's own, a quarter of a checkpoint's trained length, each with and
without attention sinks), K/V heads merged by mean-pooling, RoPE position interpolation and one head
ablated per layer, and per-layer schedules of sliding and full layers (``schedule_rows``).
A table (``tabulate.py`` computes it) is stored beside its model (``<bundle>.surgery.json``
in the bundle folder, ``surgery.json`` in a checkpoint's folder); ``stored_table`` reads it back, so the
page shows it at once, and ``stored_loss`` finds a config's held-out loss in it (its trained-length column:
the number ``loss.heldout_loss`` computes, not computed again).
"""

from __future__ import annotations

import json

from explorer.analysis.surgery.origin import Origin
from explorer.analysis.weights import bundled, checkpoints
from models import ConfigError, registries, schedule, surgery
from models.attention import ATTENTION, PATTERNS

SINKS = 4  # StreamingLLM keeps 4 initial tokens
CHECKPOINT_FILE = "surgery.json"
MAX_STORED = 1 << 20  # bytes of a stored table read back at most


def surgery_attentions() -> list:
    return [k for k, v in registries()["attention"].items() if v.surgery]


def _windowed(key: str, param: str) -> bool:
    return key in PATTERNS and param in PATTERNS[key].params


def rows_for(origin: Origin) -> list:
    """``(label, config)`` of every row of ``origin``'s table (see the module docstring)."""
    base = origin.config
    rows = [(f"{base.layer_schedule or base.attention} (as trained)", base)]  # a schedule: its layers named
    if base.layer_schedule:  # its own layer kinds switched first ("full layers -> sliding_window (64)")
        rows += schedule_rows(origin)
    for key in surgery_attentions():
        if key == base.attention and not base.layer_schedule:  # the row as trained; a windowed one also with sinks
            if _windowed(key, "n_sinks") and not base.n_sinks:
                rows.append((f"{key} (as trained) + {SINKS} sinks", base.replace(n_sinks=SINKS).validate()))
            continue
        try:
            cfg = base.replace(attention=key, layer_schedule="")  # every layer this key (a schedule's too)
            if _windowed(key, "window"):
                cfg = cfg.replace(window=origin.window)
            if _windowed(key, "attention_chunk_size"):  # a chunk of as many keys as the windows hold
                cfg = cfg.replace(attention_chunk_size=origin.window)
            cfg = cfg.validate()
            surgery.check(base, cfg)
        except ConfigError:
            continue
        sized = _windowed(key, "window") or _windowed(key, "attention_chunk_size")
        rows.append((f"{key} ({origin.window})" if sized else key, cfg))
        if _windowed(key, "n_sinks") and not base.n_sinks:
            rows.append((f"{rows[-1][0]} + {SINKS} sinks", cfg.replace(n_sinks=SINKS).validate()))
    keyless = getattr(ATTENTION[base.attention].caps, "state_values", None) and not base.layer_schedule
    merges = set() if keyless else {base.kv_heads // 2 if base.kv_heads % 2 == 0 else 0, 1} - {0, base.kv_heads}
    for kv in sorted(merges, reverse=True):  # a recurrent mixer caches no keys: none to merge
        try:  # a core without K/V heads (MLA's latent) has none to merge
            rows.append((f"K/V heads {base.kv_heads} -> {kv} (mean-pooled)", base.replace(n_kv_heads=kv).validate()))
        except ConfigError:
            continue
    if not base.layer_schedule:
        rows += schedule_rows(origin)
    if base.position == "rope":
        rows.append(("RoPE positions / 4 (interpolation)", base.replace(rope_scale=base.rope_scale * 4).validate()))
    rows.append(
        (
            "head 0 of every layer ablated",
            base.replace(ablate_heads=", ".join(f"{i}.0" for i in range(base.n_layers))).validate(),
        )
    )
    seen, out = set(), []
    for label, cfg in rows:  # a change two rows make (a schedule's key made uniform) is listed once, first label
        if cfg not in seen:
            seen.add(cfg)
            out.append((label, cfg))
    return out


def schedule_rows(origin: Origin) -> list:
    """Per-layer schedules on the trained weights: a uniform ``full`` model gets gpt-oss / Gemma 2's 1:1 and a
    Gemma 3-like 3:1 of sliding (at the origin's window) and full layers; a model with a schedule gets each of
    its layer kinds switched to the other of ``full`` / ``sliding_window`` (``full layers -> sliding_window (64)``:
    gpt-oss with no global layer). Labels stay short: the Surgery table's figure lays them out beside its plot.
    Rows the surgery rules refuse are left out."""
    base, w, out = origin.config, origin.window, []
    if not base.layer_schedule:
        if base.attention == "full":
            out += [
                (f"sliding_window ({w}) / full 1:1", "sliding_window,full", None),  # gpt-oss, Gemma 2
                (f"sliding_window ({w}) / full 3:1", "sliding_window*3,full", None),  # Gemma 3-like
            ]
    else:
        kinds = schedule.parse(base.layer_schedule)
        for key in dict.fromkeys(k.attention for k in kinds):
            for target in ("full", "sliding_window"):
                if target == key:
                    continue
                label = f"{key} layers -> {target}" + (f" ({w})" if target == "sliding_window" else "")
                out.append((label, schedule.with_attention(base.layer_schedule, {key: target}), target))
    rows = []
    for label, text, target in out:  # text "": every layer became ``target``
        try:
            keys = {k.attention for k in schedule.parse(text)} if text else {target}
            attention = base.attention if base.attention in keys else sorted(keys)[0]
            cfg = base.replace(layer_schedule=text, attention=attention, window=w).validate()
            surgery.check(base, cfg)
        except ConfigError:
            continue
        rows.append((label, cfg))
    return rows


def table_path(origin: Origin):
    """Where ``origin``'s table is stored (None: a checkpoint this host does not offer from a folder)."""
    if origin.kind == "bundle":
        return bundled.BUNDLE_DIR / f"{origin.name}{bundled.SURGERY_SUFFIX}"
    folder = checkpoints.offered().get(origin.name)
    return None if folder is None else folder / CHECKPOINT_FILE


def stored_table(origin: Origin) -> dict | None:
    """The Surgery table stored beside ``origin`` (None without one, or an unreadable one)."""
    path = table_path(origin)
    if path is None or not path.is_file() or path.stat().st_size > MAX_STORED:
        return None
    try:
        return json.loads(path.read_text())
    except ValueError:
        return None


def as_trained(table: dict) -> float | None:
    """The table's held-out loss of the model as trained at its trained length (the one held-out number)."""
    row = next((r for r in table.get("rows", []) if r["label"].endswith("(as trained)")), None)
    return None if row is None else row["loss"].get(str(table["trained_length"]))


def stored_loss(origin: Origin, cfg) -> float | None:
    """The held-out loss of ``cfg`` (one of ``origin``'s rows) at the trained length in the stored table, or None."""
    table = stored_table(origin)
    if table is None or table.get("scored_tokens") is None:
        return None
    label = next((lab for lab, c in rows_for(origin) if c == cfg), None)
    row = next((r for r in table.get("rows", []) if r["label"] == label), None)
    return None if row is None else row["loss"].get(str(table["trained_length"]))
