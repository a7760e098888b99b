"""Last-layer gradient norm against depth under every norm placement (Xiong et al. 2020, Theorem 1).

Theorem 1 of "On Layer Normalization in the Transformer Architecture" bounds the gradient of the last
layer's FFN output matrix ``W2`` at initialisation: with the norm after the residual (post-LN) it does
not shrink as the model gets deeper, with the norm before the sublayer (pre-LN) it shrinks like
``1/sqrt(L)``. That is why post-LN needs a learning-rate warm-up (the top layers take large steps at
any depth) and pre-LN does not. A per-layer profile of one 4-layer model cannot show a statement
about depth, so ``depth_scaling(cfg)`` measures it: for each depth in ``DEPTHS`` and each registered
norm placement, the visitor's config with that depth and placement is built at initialisation
(``build_model``, the catalogue's init: Xavier-uniform projections, N(0, 0.02) embedding, which is the
Xavier init the theorem assumes for the matrices it bounds) under seeds ``0 .. SEEDS - 1``, one backward of
the next-token loss on a fixed seeded batch of random tokens (``norms.input_batch``) is taken, and
the Frobenius norm of the gradient of every layer's FFN output parameters is kept
(``norms.branch_gradient_norms``' ``ffn_out``: ``ffn.w2.weight`` of a dense FFN, every expert's
``w2`` of a mixture, the value table of product keys; the attention output projection when the
config has no FFN). The value at a depth is the mean over seeds of the last layer's; the per-layer
profile is the mean over seeds of every layer's.

Cost: 7 depths x 5 placements x 2 seeds are 70 models; the sweep runs at ``d_model`` at most
``MAX_D_MODEL`` (heads and ``d_ff`` scaled with it, said in ``notes``) on ``SEQ_LEN x BATCH`` tokens,
each depth checked against the per-request memory budget (``explorer.runtime.budget``), one GPU call
per placement, memoised like every analysis (``explorer.analysis.common.memo``). A trained model of the
visitor's config under a placement (the session's weights, else a bundle trained with exactly that
config, e.g. the ``default`` pre-LN and ``post_ln`` bundles) adds one point at its own depth,
measured on the same batch with one seed.
"""

from __future__ import annotations

import argparse
import json
import math
import time

import torch

from explorer.analysis.common.memo import Request, fetch
from explorer.analysis.gradients.depth_stored import STORED, preload, write
from explorer.analysis.gradients.norms import (
    branch_gradient_norms,
    gradient_norms,
    input_batch,
    next_token_loss,
    outermost,
)
from explorer.analysis.weights.bundled import bundle_for, bundled_weights
from explorer.analysis.weights.trained import TrainedWeights, applicable
from explorer.runtime import budget
from explorer.runtime.configs import as_config
from explorer.runtime.device import device, gpu
from models import ConfigError, ModelConfig, build_model, registries
from models.attention import PARAMS, pattern_mask
from models.blocks import Attention

DEPTHS = (2, 4, 6, 8, 12, 16, 24)
SEEDS = 2  # initialisations averaged per point (the spread between seeds is a few per cent)
SEQ_LEN, BATCH = 32, 4  # the seeded random batch: 4 sequences of 32 tokens
MAX_D_MODEL = 128  # the sweep's width cap: 70 models stay a few seconds on a CPU
LOSS = "next-token cross-entropy on a seeded batch of random tokens"
INIT = "the catalogue's init (Xavier-uniform projections, N(0, 0.02) embedding)"


# ---------------------------------------------------------------------------- the use case
def depth_scaling(
    cfg,
    weights: TrainedWeights | None = None,
    depths=DEPTHS,
    seeds: int = SEEDS,
    seq_len: int = SEQ_LEN,
    batch: int = BATCH,
    max_d_model: int = MAX_D_MODEL,
    placements=None,
) -> dict:
    """Last-layer FFN output gradient norm against depth, per norm placement (see the module docstring;
    ``placements``: a subset of the registered ones, default all).

    Returns ``{"depths", "d_model", "seeds", "seq_len", "batch", "loss", "init", "quantity" ("ffn_out" or
    "attn_out"), "parameter" (the last layer's parameter, at the deepest depth), "placements": {placement:
    {"last": [mean per depth or None], "per_seed": [[per seed] per depth], "profile": [[mean per layer] per
    depth], "slope": fitted log-log slope or None, "skipped": {depth: why}}}, "skipped": {placement: why},
    "trained": {placement: {"depth", "last", "profile", "source", "label"}}, "notes": [...]}``; None in ``last``:
    the loss or gradient was not finite at that depth (a placement without a norm overflows).
    """
    cfg = as_config(cfg)
    sweep, notes, requests, skipped, skipped_depths = sweep_requests(
        cfg, depths, seeds, seq_len, batch, max_d_model, placements
    )
    depths = tuple(sorted({int(d) for d in depths}))
    preload(requests.values())  # the landing config's sweep is stored with the code: no compute at start-up
    got = fetch(list(requests.values()))
    result = {
        "depths": list(depths),
        "d_model": sweep.d_model,
        "seeds": int(seeds),
        "seq_len": int(seq_len),
        "batch": int(batch),
        "loss": LOSS,
        "init": INIT,
        "placements": {},
        "skipped": skipped,
        "trained": {},
        "notes": notes,
        "quantity": "ffn_out",
        "parameter": "",
    }
    for placement, value in zip(requests, got):
        value = json.loads(json.dumps(value))  # a fresh copy: callers may modify it
        value["skipped"] = skipped_depths[placement]
        value["slope"] = loglog_slope(value["depths"], value["last"])
        result["quantity"] = value.pop("quantity")
        # the deepest model's name of it, with its layer index written as L-1 (the same at every depth)
        result["parameter"] = value.pop("parameter").replace(f".{value['depths'][-1] - 1}.", ".{L-1}.")
        result["placements"][placement] = value
    result["trained"] = trained_points(cfg, weights, int(seq_len), int(batch), result["quantity"])
    return result


def sweep_requests(
    cfg,
    depths=DEPTHS,
    seeds: int = SEEDS,
    seq_len: int = SEQ_LEN,
    batch: int = BATCH,
    max_d_model: int = MAX_D_MODEL,
    placements=None,
) -> tuple:
    """``(sweep config, notes, {placement: Request}, {placement: why skipped}, {placement: {depth: why}})``:
    what ``depth_scaling`` computes, checked and keyed on the caller's side (no model runs)."""
    sweep, notes = sweep_config(as_config(cfg), max_d_model)
    depths = tuple(sorted({int(d) for d in depths}))
    if not depths or depths[0] < 1 or int(seeds) < 1:
        raise ConfigError("depths", list(depths), "depths >= 1 and seeds >= 1")
    # the curve depends on neither the visitor's depth nor seed (it takes its own): one memo entry for all
    sweep = _at_depth(sweep, depths[0]).replace(seed=0)
    requests, skipped, skipped_depths = {}, {}, {}
    for placement in registries()["norm_placement"]:
        if placements is not None and placement not in placements:
            continue
        try:
            other = sweep.replace(norm_placement=placement).validate()
            requests[placement], skipped_depths[placement] = _request(
                other, depths, int(seeds), int(seq_len), int(batch)
            )
        except ConfigError as exc:
            skipped[placement] = str(exc)
    return sweep, notes, requests, skipped, skipped_depths


def sweep_config(cfg, max_d_model: int = MAX_D_MODEL) -> tuple:
    """``(config, notes)``: the visitor's config, narrowed to ``max_d_model`` when wider (heads, K/V heads
    and an explicit ``d_ff`` scaled with it; kept as is when the narrowed config would not validate), and
    a structured pattern measured as full attention (``_pattern_as_full``)."""
    cfg, notes = _pattern_as_full(cfg)
    if cfg.d_model <= max_d_model:
        return cfg, notes
    narrow, more = _narrow(cfg, max_d_model)
    return narrow, notes + more


def _pattern_as_full(cfg) -> tuple:
    """``cfg`` with ``attention="full"`` (its pattern's parameters at their defaults) when it uses a
    structured pattern: a pattern chooses which of the sweep's ``SEQ_LEN`` tokens a query reads, not the
    residual and norm path the theorem is about, and one memo entry then serves every pattern."""
    if cfg.attention == "full" or cfg.attention not in PARAMS:
        return cfg, []
    defaults = ModelConfig()
    full = cfg.replace(
        attention="full",
        **{n: getattr(defaults, n) for n in PARAMS[cfg.attention] if n != "seed" and hasattr(defaults, n)},
    ).validate()
    same = torch.equal(pattern_mask(cfg, SEQ_LEN), pattern_mask(full, SEQ_LEN))
    return full, [
        f"measured with full attention: {cfg.attention} "
        + (
            "allows every pair of it"
            if same
            else "changes which keys a query reads, not the residual and norm path Theorem 1 is about"
        )
        + f" on the sweep's {SEQ_LEN} tokens"
    ]


def _narrow(cfg, max_d_model: int) -> tuple:
    d = int(max_d_model)
    heads = next((h for h in range(min(cfg.n_heads, d), 0, -1) if d % h == 0 and (d // h) % 2 == 0), 1)
    kv = cfg.n_kv_heads
    if kv is not None:
        kv = next(k for k in range(min(kv, heads), 0, -1) if heads % k == 0)
    d_ff = None if cfg.d_ff is None else max(1, round(cfg.d_ff * d / cfg.d_model))
    try:
        narrow = cfg.replace(d_model=d, n_heads=heads, n_kv_heads=kv, d_ff=d_ff).validate()
    except ConfigError:
        return cfg, [f"measured at your d_model {cfg.d_model}: a narrower config does not validate"]
    return narrow, [
        f"measured at d_model {d} ({heads} heads) instead of your {cfg.d_model}, so that "
        f"{len(DEPTHS)} depths x 5 placements stay a few seconds"
    ]


def _request(cfg, depths: tuple, seeds: int, seq_len: int, batch: int) -> tuple:
    """The sweep of one placement, checked and keyed on the caller's side -> ``(Request, skipped depths)``;
    a depth over the memory budget or refused by the config is skipped, saying why."""
    kept, skipped, need = [], {}, 0
    try:  # the deepest fits: so do the others (a model's footprint grows with its depth), one check for all
        need = budget.check(_at_depth(cfg, depths[-1]).validate(), "gradients", seq_len, batch)
        depths_to_check = ()
        kept = list(depths)
    except ConfigError:
        depths_to_check = depths
    for depth in depths_to_check:
        try:
            deep = _at_depth(cfg, depth).validate()
            need = max(need, budget.check(deep, "gradients", seq_len, batch))
            kept.append(depth)
        except ConfigError as exc:
            skipped[str(depth)] = str(exc)
    if not kept:
        raise ConfigError("n_layers", list(depths), "; ".join(sorted(set(skipped.values())))[:300])
    # the fields off their defaults: a field added later leaves the stored sweeps' keys as they were
    key = ("depth_scaling", cfg.delta_json(), tuple(kept), seeds, seq_len, batch)
    return Request(key, need, compute_depth_scaling, (cfg, tuple(kept), seeds, seq_len, batch)), skipped


def _at_depth(cfg, depth: int):
    """``cfg`` with ``depth`` layers (an encoder-decoder's explicit stack depths too)."""
    fields = {"n_layers": depth}
    for name in ("n_encoder_layers", "n_decoder_layers"):
        if getattr(cfg, name, None) is not None:
            fields[name] = depth
    return cfg.replace(**fields)


@gpu(duration=20)  # about 70 small models: a few seconds on a GPU
def compute_depth_scaling(cfg, depths: tuple, seeds: int, seq_len: int, batch: int) -> dict:
    """The GPU call of one placement's sweep (``cfg``: the frozen ``ModelConfig``, picklable):
    ``len(depths) x seeds`` models, one backward each."""
    last, per_seed, profile = [], [], []
    quantity, parameter = "ffn_out", ""
    for depth in depths:
        runs = []
        for s in range(seeds):
            norms, quantity, parameter = measure_model(_at_depth(cfg, depth).replace(seed=cfg.seed + s), seq_len, batch)
            runs.append(norms)
        ok = [bool(r) and all(math.isfinite(v) for v in r) for r in runs]
        finite = [r for r, good in zip(runs, ok) if good]
        per_seed.append([r[-1] if good else None for r, good in zip(runs, ok)])
        last.append(sum(r[-1] for r in finite) / len(finite) if finite else None)
        profile.append([sum(col) / len(finite) for col in zip(*finite)] if finite else [])
    return {
        "depths": list(depths),
        "last": last,
        "per_seed": per_seed,
        "profile": profile,
        "quantity": quantity,
        "parameter": parameter,
    }


def measure_model(cfg, seq_len: int, batch: int) -> tuple:
    """``(per-layer norms, quantity, name of the last layer's parameter)`` of one model at initialisation:
    one backward of the next-token loss on ``input_batch(cfg, seq_len, batch, seed=0)``."""
    model = build_model(cfg).to(device()).train()
    model.random.reseed(0)
    inputs = tuple(t.to(device()) for t in input_batch(cfg, seq_len, batch, 0))
    result = branch_gradient_norms(model, inputs, lambda logits, *args: next_token_loss(logits, args[-1]))
    quantity = "ffn_out" if result["ffn_out"] else "attn_out"
    norms = [float("nan") if v is None else float(v) for v in result[quantity]]
    if not math.isfinite(result["loss"]):
        norms = [float("nan")] * len(norms)
    return norms, quantity, last_parameter_name(model, quantity)


def last_parameter_name(model: torch.nn.Module, quantity: str) -> str:
    """The name(s) of the parameter(s) whose gradient is the last layer's value of ``quantity``."""
    if quantity == "ffn_out":
        mods = outermost(model, lambda m: callable(getattr(m, "output_parameters", None)))
        params = list(mods[-1].output_parameters()) if mods else []
    else:
        mods = outermost(model, lambda m: isinstance(m, Attention) and not m.parallel_mixer)
        params = [mods[-1].out_proj.weight] if mods else []
    names = {id(p): n for n, p in model.named_parameters()}
    found = [names[id(p)] for p in params if id(p) in names]
    return found[0] if len(found) == 1 else f"{found[0]} .. {found[-1]} ({len(found)} tensors)" if found else ""


def trained_points(cfg, weights: TrainedWeights | None, seq_len: int, batch: int, quantity: str) -> dict:
    """``{placement: {"depth", "last", "profile", "source", "label"}}`` of the trained models of ``cfg`` under each
    placement: the session's ``weights`` where they belong, else a bundle trained with exactly that
    config; a pretrained checkpoint is not one (it is drawn on its own text, not this batch)."""
    points = {}
    for placement in registries()["norm_placement"]:
        try:
            other = cfg.replace(norm_placement=placement).validate()
        except ConfigError:
            continue
        w, bundled = applicable(weights, other), bundled_weights(other)
        if w is None or w.checkpoint:
            w = bundled
        if w is None:
            continue
        label = (
            f"'{bundle_for(other).name}' bundle"
            if bundled is not None and w.digest == bundled.digest
            else "your weights"
        )
        r = gradient_norms(other, seq_len=seq_len, batch=batch, seed=0, weights=w)
        values = r.get(quantity) or []
        if values and values[-1] is not None and math.isfinite(values[-1]):
            points[placement] = {
                "depth": len(values),
                "last": values[-1],
                "profile": values,
                "source": w.source or "trained weights",
                "label": label,
            }
    return points


def loglog_slope(depths: list, values: list):
    """Least-squares slope of log(value) against log(depth) over the positive values (None: fewer than 2)."""
    pts = [(math.log(d), math.log(v)) for d, v in zip(depths, values) if v is not None and v > 0]
    if len(pts) < 2:
        return None
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    return None if sxx == 0 else sum((x - mx) * (y - my) for x, y in pts) / sxx


def store() -> dict:
    """Compute the sweep of ``ModelConfig()`` (the config the page opens with) from the code, nothing
    stored or memoised read, and write it where start-up reads it (``explorer.analysis.gradients.depth_stored``)."""
    from models import ModelConfig

    t0 = time.perf_counter()
    _, _, requests, _, _ = sweep_requests(ModelConfig())
    sweeps = [{"key": r.key, "value": r.compute()} for r in requests.values()]
    return write(sweeps, time.perf_counter() - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description="Store the landing config's depth sweep (Theorem 1 panel).")
    parser.add_argument("--write", action="store_true", help=f"recompute and write {STORED.name}")
    if parser.parse_args().write:
        record = store()
        print(f"wrote {STORED} ({len(record['sweeps'])} placements, {record['seconds']} s)")
    else:
        parser.print_help()


if __name__ == "__main__":
    main()
