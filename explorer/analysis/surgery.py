"""Architecture surgery on the bundled models: keep the trained weights, change the architecture.

When the dropdowns leave a bundled model's weights valid (``models.surgery``: a pattern and its sizes,
attention sinks, a mechanism that reads the same Q/K/V, the softcap, RoPE's base and scale, fewer or
more K/V heads), the analyses draw the bundle's weights moved to the new config instead of an
initial model, and this module says what the change costs:

- ``weights_for(cfg)``: the bundle trained with ``cfg``, else ``adapted(cfg)``: ``TrainedWeights`` of
  ``cfg`` from the bundle that needs the fewest changes (None
  when no bundle can serve it); ``why_not(cfg)``: the sentence the page shows instead (the field that
  needs other weights, and how long training one took here).
- ``loss_change(cfg, text)``: held-out loss in nats per byte of the bundle and of the changed model,
  on the visitor's text and on a fixed held-out passage of the Python documentation.
- ``table(name)``: the Surgery table, held-out loss under every surgery-safe attention of the catalogue
  (and sinks on/off for the windowed patterns, position interpolation for RoPE) at the trained length
  and at four times it. ``python -m explorer.analysis.surgery --json`` prints it; ``--write`` stores it
  beside the bundle (``<name>.surgery.json``, read by ``stored_table``: the page shows it at once).
- ``difference(cfg, text)``: the maps of ``cfg`` with the moved weights and the bundle's own maps on
  the same text (the difference view).

Everything here is read-only and memoised by config (the bundles are immutable, shared like the code).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from functools import lru_cache

import torch
import torch.nn.functional as F

from explorer.analysis import bundled
from explorer.analysis.memo import eval_model, memo, weights_key
from explorer.analysis.weights import TrainedWeights, tensor_digest
from explorer.runtime import budget
from explorer.runtime.configs import as_config
from explorer.runtime.corpus import python_docs, split_corpus
from explorer.runtime.device import gpu
from explorer.runtime.limits import MAX_TEXT_BYTES
from models import ConfigError, registries, surgery
from models.attention import PATTERNS

HELDOUT_BYTES = 4096          # the fixed held-out passage: the first 4 KiB of the held-out split
PASSAGE_BYTES = 512           # the passage the page scores beside the visitor's text
SINKS = 4                     # StreamingLLM keeps 4 initial tokens
MAX_TEXT_SCORED = MAX_TEXT_BYTES  # bytes of the visitor's text scored per change: those the maps draw
TABLE_SUFFIX = ".surgery.json"


def is_lm(bundle) -> bool:
    """Whether ``bundle`` is a byte-level language model (the losses and the table are nats per byte)."""
    return bundle.manifest["task"].startswith("lm")


def _param_state(bundle) -> dict:
    names = {n for n, _ in bundle.model().named_parameters()}
    return {k: v for k, v in bundle.state.items() if k in names}


def candidates(cfg) -> list:
    """``[(bundle name, changed fields)]`` of every bundle whose weights ``cfg`` can read, fewest changes first."""
    cfg = as_config(cfg)
    found = []
    for name in bundled.names():
        b = bundled.load(name)
        try:
            surgery.check(b.config, cfg)
        except ConfigError:
            continue
        found.append((name, surgery.changed_fields(b.config, cfg)))
    return sorted(found, key=lambda x: len(x[1]))


@lru_cache(maxsize=24)
def _adapted(name: str, cfg_json: str) -> TrainedWeights:
    b = bundled.load(name)
    cfg = as_config(cfg_json)
    model = surgery.transplant(_param_state(b), b.config, cfg)
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    changed = tuple(surgery.changed_fields(b.config, cfg))
    shown = ", ".join(f"{k}={getattr(cfg, k)!r}" for k in changed)
    size = sum(t.numel() * t.element_size() for t in state.values())
    return TrainedWeights(cfg_json, state, tensor_digest(state), b.step, size,
                          source=f"{b.source()}, moved to {shown} (surgery: the same weights)", surgery=changed)


def adapted(cfg) -> TrainedWeights | None:
    """The weights of the bundle that needs the fewest changes, moved to ``cfg`` (``models.surgery.transplant``),
    or None without a bundle that can serve it."""
    cfg = as_config(cfg)
    for name, _changed in candidates(cfg):
        try:
            return _adapted(name, cfg.to_json())
        except ConfigError:  # the move needs a weight this bundle lacks (a table of another size): the next
            continue
    return None


def weights_for(cfg) -> TrainedWeights | None:
    """The bundled weights that serve ``cfg``: the bundle trained with it, else a bundle whose weights keep
    their meaning under it (``adapted``), else None (``why_not`` says why)."""
    return bundled.bundled_weights(cfg) or adapted(cfg)


def _reason(b, cfg) -> str:
    try:
        surgery.check(b.config, cfg)
    except ConfigError as e:
        return (f"{e.field}={getattr(cfg, e.field)!r} needs other weights than bundle '{b.name}' "
                f"({e.field}={getattr(b.config, e.field)!r})")
    return ""


def why_not(cfg) -> str:
    """Why no bundle serves ``cfg``: the closest bundle, the first field that needs other weights, and how
    long training that bundle took here (the Train tab trains this config)."""
    cfg = as_config(cfg)
    if not bundled.names():
        return "no bundled models are installed (python -m explorer.training.bundle makes them)"
    best = min(bundled.names(), key=lambda n: len(surgery.changed_fields(bundled.load(n).config, cfg)))
    b = bundled.load(best)
    reason = _reason(b, cfg) or f"it differs from bundle '{best}'"
    minutes = b.manifest["wall_s"] / 60
    return (f"{reason}; training a model like it took {minutes:.0f} min here ({b.manifest['steps']} steps on one "
            "CPU core): the Train tab trains this config")


# ---------------------------------------------------------------------------- losses
@lru_cache(maxsize=1)
def heldout_text() -> bytes:
    """The fixed held-out bytes the table and the page score (no byte of them is in any training window)."""
    return split_corpus(python_docs())[1][:HELDOUT_BYTES]


def nats_per_byte(model, ids: list, window: int) -> float:
    """Mean next-byte loss over ``ids`` cut into windows of ``window`` bytes (positions 1.. of each scored);
    for a checkpoint's tokenizer the same per token (``explorer.analysis.checkpoint_surgery``)."""
    ids = ids[: len(ids) // window * window] if len(ids) >= window else ids
    width = min(window, len(ids))
    x = torch.tensor(ids, dtype=torch.long, device=next(model.parameters()).device).view(-1, width)
    total, count = 0.0, 0
    with torch.no_grad():
        for row in x.split(4):  # 4 windows per pass: bounded memory at any length
            logits = model(row).logits.float()
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), row[:, 1:].reshape(-1),
                                   reduction="sum")
            total, count = total + loss.item(), count + row[:, 1:].numel()
    return total / max(count, 1)


def _model(weights: TrainedWeights, cfg):
    from models import build_model
    return weights.load_into(build_model(cfg)).eval()


def _scores(cfg, text: bytes, window: int) -> dict:
    """Nats/byte of ``cfg`` with the bundled weights that serve it, on ``text`` (read whole, as the maps
    read it) and on the fixed passage (in windows of ``window``, the bundle's trained length); memoised
    and held in the server's memory pool like every analysis (``explorer.analysis.memo``)."""
    w = weights_for(cfg)
    if w is None:
        raise ConfigError("weights", "bundled", why_not(cfg))
    passage = heldout_text()[:PASSAGE_BYTES]
    need = budget.check(cfg, "attention", max(len(text), len(passage)), 1)

    return memo(("surgery-loss", cfg.to_json(), text, window, weights_key(w)),
                lambda: compute_scores(cfg.to_json(), text, passage, window, w), need=need)


@gpu(duration=30)
def compute_scores(cfg_json: str, text: bytes, passage: bytes, window: int, weights: TrainedWeights) -> dict:
    """The GPU call of ``_scores``: nats/byte on the text (read whole) and on the passage (in windows)."""
    model = eval_model(as_config(cfg_json), weights)
    return {"text": nats_per_byte(model, list(text), len(text)) if len(text) >= 2 else math.nan,
            "heldout": nats_per_byte(model, list(passage), window)}


def loss_change(cfg, text: str) -> dict | None:
    """Held-out loss (nats/byte) of the bundle and of ``cfg`` with its weights, on ``text`` and on the fixed
    passage; None when ``cfg`` is a bundle's own config or no bundle serves it."""
    cfg = as_config(cfg)
    found = candidates(cfg)
    if not found or not found[0][1] or not cfg.causal:
        return None
    name, changed = found[0]
    b = bundled.load(name)
    if not is_lm(b):  # a seq2seq bundle has no byte-level loss on a text
        return None
    data = str(text).encode("utf-8")[:MAX_TEXT_SCORED]
    window = int(b.manifest["recipe"]["seq_len"])
    before, after = _scores(b.config, data, window), _scores(cfg, data, window)
    return {"bundle": name, "changed": changed, "before": before, "after": after,
            "delta": {k: after[k] - before[k] for k in before}}


# ---------------------------------------------------------------------------- the surgery table
def surgery_attentions() -> list:
    return [k for k, v in registries()["attention"].items() if v.surgery]


def rows_for(b) -> list:
    """``(label, config)`` of every row of ``b``'s table: each surgery-safe attention (windowed ones with
    and without sinks), and RoPE position interpolation for a RoPE bundle."""
    rows = []
    for key in surgery_attentions():
        try:
            cfg = b.config.replace(attention=key).validate()
            surgery.check(b.config, cfg)
        except ConfigError:
            continue
        rows.append((f"{key} (as trained)" if key == b.config.attention else key, cfg))
        if key in PATTERNS and "n_sinks" in PATTERNS[key].params and not b.config.n_sinks:
            rows.append((f"{key} + {SINKS} sinks", cfg.replace(n_sinks=SINKS).validate()))
    if b.config.position == "rope":
        rows.append((f"{b.config.attention}, RoPE positions / 4 (interpolation)",
                     b.config.replace(rope_scale=4.0).validate()))
    return rows


def table(name: str = "default", lengths: tuple | None = None, log=None) -> dict:
    """The Surgery table of bundle ``name``: held-out nats/byte of every row at each length (the same
    ``HELDOUT_BYTES`` bytes cut into windows of that length; every position but the first of a window scored)."""
    b = bundled.load(name)
    if not is_lm(b):
        raise ConfigError("bundle", name, f"a language-model bundle: {[n for n in bundled.names() if is_lm(bundled.load(n))]}")
    trained = int(b.manifest["recipe"]["seq_len"])
    lengths = lengths or (trained, 4 * trained)
    data = list(heldout_text())
    out = []
    for label, cfg in rows_for(b):
        w = bundled.bundled_weights(cfg) if cfg == b.config else _adapted(name, cfg.to_json())  # this bundle's own
        model = _model(w, cfg)
        row = {"label": label, "attention": cfg.attention, "n_sinks": getattr(cfg, "n_sinks", 0),
               "changed": list(surgery.changed_fields(b.config, cfg)), "loss": {}}
        for L in lengths:
            t0 = time.perf_counter()
            try:
                row["loss"][str(L)] = round(nats_per_byte(model, data, L), 4)
            except (RuntimeError, ConfigError) as e:  # a mechanism that cannot run this length: marked
                row["loss"][str(L)] = None
                row.setdefault("errors", {})[str(L)] = str(e)[:120]
            if log:
                log(f"{label} L={L}: {row['loss'][str(L)]} ({time.perf_counter() - t0:.1f} s)")
        out.append(row)
    return {"bundle": name, "trained_length": trained, "lengths": list(lengths), "scored_bytes": len(data),
            "unit": "nats/byte", "rows": out,
            "scoring": f"the first {len(data)} bytes of the held-out split cut into windows of each length; "
                       "every position but the first of each window scored"}


def table_path(name: str):
    return bundled.BUNDLE_DIR / f"{name}{TABLE_SUFFIX}"


def write_table(name: str, log=None) -> dict:
    result = table(name, log=log)
    table_path(name).write_text(json.dumps(result, indent=1) + "\n")
    return result


def stored_table(name: str) -> dict | None:
    """The Surgery table stored beside bundle ``name`` (None without one)."""
    path = table_path(name)
    if name not in bundled.names() or not path.is_file():
        return None
    return json.loads(path.read_text())


def difference(cfg, text: str, separator=None) -> tuple | None:
    """``(maps after, maps of the bundle as trained, bundle name, changed fields)`` on ``text``, or None
    when ``cfg`` is no surgery of a bundle."""
    from explorer.analysis.maps import attention_maps  # the maps read this package's weights records

    cfg = as_config(cfg)
    found = candidates(cfg)
    if not found or not found[0][1]:
        return None
    name, changed = found[0]
    b = bundled.load(name)
    after = attention_maps(cfg, text, separator=separator, weights=_adapted(name, cfg.to_json()))
    before = attention_maps(b.config, text, separator=separator, weights=bundled.bundled_weights(b.config))
    return after, before, name, changed


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m explorer.analysis.surgery", description=__doc__.split("\n\n")[0])
    ap.add_argument("bundle", nargs="?", default="default", help=f"the bundle (one of {bundled.names()})")
    ap.add_argument("--json", action="store_true", help="print the table as JSON")
    ap.add_argument("--lengths", default="", help="comma-separated sequence lengths (default: trained, 4x trained)")
    ap.add_argument("--write", action="store_true", help=f"store it beside the bundle (<name>{TABLE_SUFFIX})")
    args = ap.parse_args(argv)
    if args.bundle not in bundled.names():
        ap.error(f"unknown bundle {args.bundle!r}; valid: {bundled.names()}")
    torch.set_num_threads(max(1, torch.get_num_threads()))
    lengths = tuple(int(x) for x in args.lengths.split(",") if x.strip()) or None
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    result = write_table(args.bundle, log) if args.write and lengths is None else table(args.bundle, lengths, log)
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    ls = result["lengths"]
    print(f"| attention ({result['bundle']}) | " + " | ".join(f"L={L}" for L in ls) + " |")
    print("| --- | " + " | ".join("---" for _ in ls) + " |")
    for row in result["rows"]:
        cells = ["n/a" if row["loss"][str(L)] is None else f"{row['loss'][str(L)]:.3f}" for L in ls]
        print(f"| {row['label']} | " + " | ".join(cells) + " |")
    print(f"\n{result['scoring']} ({result['unit']}).")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
