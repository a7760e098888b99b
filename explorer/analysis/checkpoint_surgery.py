"""Surgery on a pretrained checkpoint: the controls change what its weights can read, and what it costs.

A checkpoint fixes every choice its weights depend on; the controls may change only the surgery-safe
fields (``models.surgery``: a pattern and its sizes, attention sinks, a mechanism reading the same
Q/K/V, K/V heads merged by mean-pooling, RoPE's base and scale, the softcap, ablated heads).

- ``config_for(ckpt_id, overrides)``: the checkpoint's config with ``overrides`` (control values by
  field) applied; a field that needs other weights is refused naming it and the checkpoint's value.
- ``weights_for(ckpt_id, cfg)``: its weights for ``cfg`` (the same tensors, K/V heads regrouped when
  merged), memoised; ``loss_change(ckpt_id, cfg, text)``: the language-model loss in nats per token
  (and perplexity) of the checkpoint as trained and after the change, on the visitor's text and on a
  fixed passage of the Python documentation.
- ``table(ckpt_id)``: the Surgery table of a checkpoint (``python -m explorer.analysis.checkpoint_surgery
  NAME``): held-out loss under windows with and without sinks, every surgery-safe pattern, merged K/V
  heads, RoPE interpolation and one ablated head per layer, at the trained length and at 4x it.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time


from explorer.analysis import checkpoints
from explorer.analysis.memo import eval_model, memo, weights_key
from explorer.analysis.surgery import PASSAGE_BYTES, SINKS, heldout_text, nats_per_byte, surgery_attentions
from explorer.analysis.weights import TrainedWeights
from explorer.runtime import budget
from explorer.runtime.cache import ByteLRU
from explorer.runtime.configs import as_config
from explorer.runtime.device import gpu
from explorer.runtime.limits import MAX_TEXT_BYTES
from models import ConfigError, surgery
from models.attention import PATTERNS

_MOVED = ByteLRU(max_entries=2)  # (id, config) -> TrainedWeights after surgery: the same tensors but the K/V
TABLE_TOKENS = 2048  # tokens of the held-out split the table scores


def config_for(ckpt_id: str, overrides: dict | None = None):
    """The checkpoint's config with the surgery-safe ``overrides`` (``{field: value}``) applied."""
    loaded = checkpoints.load(ckpt_id)
    base = loaded.config
    cfg = base.replace(**(overrides or {}))
    try:
        surgery.check(base, cfg)
    except ConfigError as e:
        raise ConfigError(e.field, e.value, f"{e.allowed}: {loaded.describe()} was trained with "
                          f"{e.field}={getattr(base, e.field)!r} (switch Weights to bundled to explore other "
                          "choices)") from None
    return as_config(cfg)


def weights_for(ckpt_id: str, cfg) -> TrainedWeights:
    """The checkpoint's weights for ``cfg`` (``config_for``): its own record for its own config, else the
    same tensors under ``cfg`` with K/V heads mean-pooled or repeated where their number changed."""
    loaded = checkpoints.load(ckpt_id)
    cfg = as_config(cfg)
    if cfg == loaded.config:
        return loaded.weights
    return _MOVED.get((loaded.id, loaded.weights.digest, cfg.to_json()), lambda: _moved(loaded, cfg))


def _moved(loaded, cfg) -> TrainedWeights:
    a = loaded.config
    ha, hb = a.kv_heads, cfg.kv_heads
    state = surgery.transfer(loaded.weights.tensors, a, cfg, copy=False)  # shared: nothing is written into them
    add_buffers(state, cfg)
    check_shapes(state, cfg)
    changed = tuple(surgery.changed_fields(a, cfg))
    shown = ", ".join(f"{k}={getattr(cfg, k)!r}" for k in changed)
    digest = f"{loaded.weights.digest}:{'kv' if ha != hb else ''}{hb}"  # the tensors are the checkpoint's
    return TrainedWeights(cfg.to_json(), state, digest, 0, loaded.weights.nbytes,
                          source=f"{loaded.weights.source}, moved to {shown} (surgery: the same weights)",
                          surgery=changed, tokenizer=loaded.tokenizer, shared=True, checkpoint=loaded.id)


def add_buffers(state: dict, cfg) -> None:
    """The persistent buffers ``cfg``'s mechanism keeps of its own (routing's centroids, random features),
    from a model of ``cfg`` built for them; nothing is built when it has none."""
    from models import build_model
    from models.meta import on_meta

    with on_meta():
        names = set(build_model(cfg).state_dict()) - set(state)
    if names:
        built = build_model(cfg).state_dict()
        state.update({k: built[k] for k in names})


def check_shapes(state: dict, cfg) -> None:
    """Refuse (naming the first changed field) a config whose model needs other tensors than ``state``."""
    from models import build_model
    from models.meta import on_meta

    with on_meta():
        want = {k: tuple(v.shape) for k, v in build_model(cfg).state_dict().items()}
    bad = sorted(k for k in set(want) | set(state) if k not in want or k not in state
                 or tuple(state[k].shape) != want[k])
    if bad:
        raise ConfigError("attention", cfg.attention, f"a choice that reads exactly the checkpoint's weights "
                          f"({bad[0]} differs)")


# ---------------------------------------------------------------------------- losses
def is_lm(cfg) -> bool:
    """A next-token loss means something for a causal decoder only (BERT is masked, T5 reads a source)."""
    return cfg.causal and cfg.architecture == "decoder_only"


def passage_ids(tokenizer) -> list:
    return tokenizer.encode(heldout_text()[:PASSAGE_BYTES].decode("utf-8", errors="ignore"))


def scores(ckpt_id: str, cfg, text: str) -> dict:
    """``{"text", "heldout"}`` nats per token of ``cfg`` with the checkpoint's weights (memoised)."""
    cfg = as_config(cfg)
    w = weights_for(ckpt_id, cfg)
    ids = tuple(w.tokenizer.encode(str(text))[:MAX_TEXT_BYTES]) if w.tokenizer is not None else ()
    passage = tuple(passage_ids(w.tokenizer)[:MAX_TEXT_BYTES]) if w.tokenizer is not None else ()
    need = budget.check(cfg, "attention", max(len(ids), len(passage), 1), 1)
    return memo(("checkpoint-loss", cfg.to_json(), ids, passage, weights_key(w)),
                lambda: compute_scores(cfg.to_json(), ids, passage, w), need=need)


@gpu(duration=30)
def compute_scores(cfg_json: str, ids: tuple, passage: tuple, weights: TrainedWeights) -> dict:
    model = eval_model(as_config(cfg_json), weights)
    return {"text": nats_per_byte(model, list(ids), len(ids)) if len(ids) >= 2 else math.nan,
            "heldout": nats_per_byte(model, list(passage), max(len(passage), 2))}


def loss_change(ckpt_id: str, cfg, text: str) -> dict | None:
    """Loss (nats/token) and perplexity of the checkpoint as trained and under ``cfg``, on ``text`` and on
    the fixed passage; None when ``cfg`` is the checkpoint's own config, it is no causal LM, or it has
    no tokenizer."""
    loaded = checkpoints.load(ckpt_id)
    cfg = as_config(cfg)
    if cfg == loaded.config or not is_lm(cfg) or loaded.tokenizer is None:
        return None
    before, after = scores(ckpt_id, loaded.config, text), scores(ckpt_id, cfg, text)
    return {"checkpoint": loaded.name, "changed": surgery.changed_fields(loaded.config, cfg), "before": before,
            "after": after, "delta": {k: after[k] - before[k] for k in before}, "unit": "nats/token",
            "perplexity": {k: (math.exp(before[k]), math.exp(after[k])) for k in before}}


# ---------------------------------------------------------------------------- the table
def trained_length(loaded) -> int:
    """The length the table calls "trained": the ``recipe.seq_len`` of a ``manifest.json`` beside the
    checkpoint (one trained here), else its context, at most 256 tokens on a CPU."""
    folder = checkpoints.offered().get(loaded.id)
    manifest = None if folder is None else folder / "manifest.json"
    if manifest is not None and manifest.is_file() and manifest.stat().st_size < 1 << 20:
        try:
            return int(json.loads(manifest.read_text())["recipe"]["seq_len"])
        except (ValueError, KeyError, TypeError):
            pass
    return int(min(loaded.config.max_len or 256, 256))


def rows_for(loaded, length: int) -> list:
    """``(label, config)`` of every row: as trained, each surgery-safe pattern (windowed ones of a quarter
    of ``length``, with and without sinks), K/V heads halved, RoPE interpolation x4, one head ablated."""
    base = loaded.config
    rows = [(f"{base.attention} (as trained)", base)]
    quarter = max(8, length // 4)
    for key in surgery_attentions():
        if key == base.attention:
            continue
        try:
            cfg = base.replace(attention=key)
            if key in PATTERNS and "window" in PATTERNS[key].params:
                cfg = cfg.replace(window=quarter)
            cfg = cfg.validate()
            surgery.check(base, cfg)
        except ConfigError:
            continue
        windowed = key in PATTERNS and "window" in PATTERNS[key].params
        rows.append((f"{key} ({quarter})" if windowed else key, cfg))
        if key in PATTERNS and "n_sinks" in PATTERNS[key].params and not base.n_sinks:
            rows.append((f"{rows[-1][0]} + {SINKS} sinks", cfg.replace(n_sinks=SINKS).validate()))
    for kv in sorted({base.kv_heads // 2 if base.kv_heads % 2 == 0 else 0, 1} - {0, base.kv_heads}, reverse=True):
        rows.append((f"K/V heads {base.kv_heads} -> {kv} (mean-pooled)", base.replace(n_kv_heads=kv).validate()))
    if base.position == "rope":
        rows.append(("RoPE positions / 4 (interpolation)", base.replace(rope_scale=base.rope_scale * 4).validate()))
    rows.append(("head 0 of every layer ablated",
                 base.replace(ablate_heads=", ".join(f"{i}.0" for i in range(base.n_layers))).validate()))
    return rows


def table(ckpt_id: str, lengths: tuple | None = None, log=None) -> dict:
    """Held-out nats/token of every row at each length (``TABLE_TOKENS`` tokens of the held-out split)."""
    loaded = checkpoints.load(ckpt_id)
    if not is_lm(loaded.config) or loaded.tokenizer is None:
        raise ConfigError("checkpoint", ckpt_id, "a causal language model with a tokenizer")
    trained = trained_length(loaded)
    lengths = lengths or (trained, 4 * trained)
    data = loaded.tokenizer.encode(heldout_text().decode("utf-8", errors="ignore"))[:TABLE_TOKENS]
    out = []
    for label, cfg in rows_for(loaded, trained):
        model = eval_model(cfg, weights_for(ckpt_id, cfg))
        row = {"label": label, "changed": surgery.changed_fields(loaded.config, cfg), "loss": {}}
        for L in lengths:
            t0 = time.perf_counter()
            try:
                row["loss"][str(L)] = round(nats_per_byte(model, data, L), 4)
            except (RuntimeError, ConfigError) as e:
                row["loss"][str(L)] = None
                row.setdefault("errors", {})[str(L)] = str(e)[:120]
            if log:
                log(f"{label} L={L}: {row['loss'][str(L)]} ({time.perf_counter() - t0:.1f} s)")
        out.append(row)
    return {"checkpoint": loaded.name, "family": loaded.family, "n_params": loaded.n_params,
            "trained_length": trained, "lengths": list(lengths), "scored_tokens": len(data), "unit": "nats/token",
            "rows": out, "scoring": f"the first {len(data)} tokens of the held-out split cut into windows of each "
                                    "length; every position but the first of each window scored"}


TABLE_FILE = "surgery.json"


def stored_table(ckpt_id: str) -> dict | None:
    """The Surgery table stored beside a checkpoint this host offers (``--write``), or None."""
    folder = checkpoints.offered().get(ckpt_id)
    path = None if folder is None else folder / TABLE_FILE
    if path is None or not path.is_file() or path.stat().st_size > 1 << 20:
        return None
    try:
        return json.loads(path.read_text())
    except ValueError:
        return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m explorer.analysis.checkpoint_surgery",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("checkpoint", help=f"a checkpoint id ({checkpoints.valid_ids()})")
    ap.add_argument("--lengths", default="", help="comma-separated lengths in tokens (default: trained, 4x)")
    ap.add_argument("--write", action="store_true", help=f"store it in the checkpoint's folder ({TABLE_FILE}: the "
                    "Surgery tab shows it)")
    args = ap.parse_args(argv)
    lengths = tuple(int(x) for x in args.lengths.split(",") if x.strip()) or None
    try:
        result = table(args.checkpoint, lengths, log=lambda m: print(m, file=sys.stderr, flush=True))
    except ConfigError as e:
        ap.error(str(e))
    if args.write:
        folder = checkpoints.offered().get(args.checkpoint)
        if folder is None:
            ap.error(f"--write needs a checkpoint folder this host offers: {sorted(checkpoints.offered())}")
        (folder / TABLE_FILE).write_text(json.dumps(result, indent=1) + "\n")
    ls = result["lengths"]
    print(f"{result['checkpoint']} ({result['family']}, {result['n_params'] / 1e6:.2f} M parameters)\n")
    print("| change | " + " | ".join(f"L={L} nats/token (ppl)" for L in ls) + " |")
    print("| --- | " + " | ".join("---" for _ in ls) + " |")
    for row in result["rows"]:
        cells = ["n/a" if row["loss"][str(L)] is None else
                 f"{row['loss'][str(L)]:.3f} ({math.exp(row['loss'][str(L)]):.2f})" for L in ls]
        print(f"| {row['label']} | " + " | ".join(cells) + " |")
    print(f"\n{result['scoring']}.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
