"""The trained weights a config reads: a bundle's or a checkpoint's, moved to the config when it differs.

- ``weights_for(cfg, checkpoint=None, bundle=None)``: the ``TrainedWeights`` that serve ``cfg``, memoised.
  Without ``checkpoint``: the weights on screen (``bundle``, else the default bundle) moved to ``cfg`` when it
  is a surgery of them (``models.surgery.transplant``), else the bundle trained with ``cfg``, else the one
  that needs the fewest changes (``origin.candidates``), else None (``why_not`` says why). With
  ``checkpoint`` (an id): the checkpoint's own record for its own config, else the same tensors under
  ``cfg`` (shared, K/V heads mean-pooled or repeated where their number changed); a ``cfg`` that needs
  other tensors is refused naming the field (``config_for`` made it, so that is a changed mechanism's
  tensors, caught here).
- ``config_for(checkpoint, overrides)``: the checkpoint's config with the controls' surgery-safe changes.
- ``difference(cfg, text, ...)``: the maps after the surgery and those of the model as trained;
  ``same_pairs(before, after, length)``: the share of pairs both configs allow when their patterns allow
  exactly the same pairs at ``length`` tokens (why a difference view can read 0% everywhere), else None.
"""

from __future__ import annotations

from functools import lru_cache

from explorer.analysis.surgery.origin import candidates, loaded_of, origin_of
from explorer.analysis.weights import bundled
from explorer.analysis.weights.trained import TrainedWeights, tensor_digest
from explorer.runtime.cache import ByteLRU
from explorer.runtime.configs import as_config
from models import ConfigError, ModelConfig, surgery
from models.attention import pattern_mask

_MOVED = ByteLRU(max_entries=2)  # (id, digest, config) -> a checkpoint's weights moved: the same tensors


def _shown(cfg, changed) -> str:
    return ", ".join(f"{k}={getattr(cfg, k)!r}" for k in changed)


@lru_cache(maxsize=24)
def _adapted(name: str, cfg: ModelConfig) -> TrainedWeights:
    b = bundled.load(name)
    names = {n for n, _ in b.model().named_parameters()}
    model = surgery.transplant({k: v for k, v in b.state.items() if k in names}, b.config, cfg)
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    changed = tuple(surgery.changed_fields(b.config, cfg))
    size = sum(t.numel() * t.element_size() for t in state.values())
    return TrainedWeights(
        cfg,
        state,
        tensor_digest(state),
        b.step,
        size,
        source=f"{b.source()}, moved to {_shown(cfg, changed)} (surgery: the same weights)",
        surgery=changed,
        bundle=name,
    )


def _bundle_weights(cfg: ModelConfig, bundle: str | None = None) -> TrainedWeights | None:
    for name, changed in candidates(cfg, bundle):
        try:
            return bundled.bundled_weights(cfg) if not changed else _adapted(name, cfg)
        except ConfigError:  # the move needs a weight this bundle lacks (a table of another size): the next
            continue
    return None


def _checkpoint_weights(checkpoint, cfg: ModelConfig) -> TrainedWeights:
    loaded = loaded_of(checkpoint)
    if cfg == loaded.config:
        return loaded.weights
    return _MOVED.get((loaded.id, loaded.weights.digest, cfg), lambda: _moved(loaded, cfg))


def weights_for(cfg, checkpoint=None, bundle: str | None = None) -> TrainedWeights | None:
    """The trained weights that serve ``cfg``: the checkpoint ``checkpoint``'s (an id, or the ``Loaded``
    record a request loaded once), else a bundle's, ``bundle`` (the weights on screen) first (see the module
    docstring); None when no bundle serves it."""
    cfg = as_config(cfg)
    return _checkpoint_weights(checkpoint, cfg) if checkpoint else _bundle_weights(cfg, bundle)


def _moved(loaded, cfg: ModelConfig) -> TrainedWeights:
    a = loaded.config
    state = surgery.transfer(loaded.weights.tensors, a, cfg, copy=False)  # shared: nothing is written into them
    add_buffers(state, cfg)
    check_shapes(state, cfg)
    changed = tuple(surgery.changed_fields(a, cfg))
    kv = "kv" if a.kv_heads != cfg.kv_heads else ""
    digest = f"{loaded.weights.digest}:{kv}{cfg.kv_heads}"  # the tensors are the checkpoint's
    return TrainedWeights(
        cfg,
        state,
        digest,
        0,
        loaded.weights.nbytes,
        source=f"{loaded.weights.source}, moved to {_shown(cfg, changed)} (surgery: the same weights)",
        surgery=changed,
        tokenizer=loaded.tokenizer,
        shared=True,
        checkpoint=loaded.id,
    )


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
    bad = sorted(
        k for k in set(want) | set(state) if k not in want or k not in state or tuple(state[k].shape) != want[k]
    )
    if bad:
        raise ConfigError(
            "attention", cfg.attention, f"a choice that reads exactly the checkpoint's weights ({bad[0]} differs)"
        )


def config_for(checkpoint, overrides: dict | None = None) -> ModelConfig:
    """The config of ``checkpoint`` (an id or a ``Loaded`` record) with the surgery-safe ``overrides``
    (``{field: value}``) applied; a field that needs other weights is refused naming it and its value."""
    loaded = loaded_of(checkpoint)
    base = loaded.config
    cfg = base.replace(**(overrides or {}))
    try:
        surgery.check(base, cfg)
    except ConfigError as e:
        raise ConfigError(
            e.field,
            e.value,
            f"{e.allowed}: {loaded.describe()} was trained with "
            f"{e.field}={getattr(base, e.field)!r} (switch Weights to bundled to explore other "
            "choices)",
        ) from None
    return as_config(cfg)


def _reason(b, cfg) -> str:
    try:
        surgery.check(b.config, cfg)
    except ConfigError as e:
        return (
            f"{e.field}={getattr(cfg, e.field)!r} needs other weights than bundle '{b.name}' "
            f"({e.field}={getattr(b.config, e.field)!r})"
        )
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
    return (
        f"{reason}; training a model like it took {minutes:.0f} min here ({b.manifest['steps']} steps on one "
        "CPU core): the Train tab trains this config"
    )


def difference(cfg, text: str, separator=None, checkpoint=None, weights=None) -> tuple | None:
    """``(maps after, maps of the model as trained, the origin, changed fields)`` on ``text``, or None when
    ``cfg`` is no surgery (the model as trained, or a config no bundle serves). ``weights``: the record
    the page draws for ``cfg`` (default ``weights_for``)."""
    from explorer.analysis.maps.attention import attention_maps  # the maps read this package's weights records

    cfg = as_config(cfg)
    bundle = getattr(weights, "bundle", "") or None
    origin = origin_of(cfg, checkpoint, bundle)
    if origin is None or cfg == origin.config:
        return None
    after = attention_maps(cfg, text, separator=separator, weights=weights or weights_for(cfg, checkpoint, bundle))
    before = attention_maps(origin.config, text, separator=separator, weights=origin.weights)
    return after, before, origin, tuple(surgery.changed_fields(origin.config, cfg))


def same_pairs(before: ModelConfig, after: ModelConfig, length: int) -> float | None:
    """The share of all query-key pairs ``before`` allows when ``after`` allows exactly the same ones at
    ``length`` tokens (``pattern_mask``: the patterns differ only past it; with a layer schedule, in every
    layer, and the share is their mean), else None (a pair differs, or a side is no structured pattern, so
    there is no pair rule to compare)."""
    if before.n_layers != after.n_layers:
        return None
    shares = []
    for i in range(before.n_layers):  # a layer schedule: each layer's own pattern (uniform: one pattern)
        try:
            a, b = pattern_mask(before.layer_config(i), length), pattern_mask(after.layer_config(i), length)
        except ConfigError:
            return None
        if not bool(a.shape == b.shape and (a == b).all()):
            return None
        shares.append(float(a.float().mean()))
        if not (before.layer_schedule or after.layer_schedule):
            break
    return sum(shares) / len(shares)
