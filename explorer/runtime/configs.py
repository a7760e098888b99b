"""The one door for a config: what a caller sends becomes a validated ``ModelConfig`` here, or a
``ConfigError`` that names the field and what it accepts.

- ``app_config(source)``: every config the app serves passes here, whatever brought it (the controls,
  a share link, an uploaded file, an API call's JSON, a preset, the pinned A of a comparison):
  ``None`` (the defaults), a ``ModelConfig``, a dict of fields or a JSON object string (parsed with
  bounded size, nesting and number length) -> the explorer's caps, the library's validation, and the
  memory budget of the requests the app makes of every config (``explorer.runtime.limits``).
  A config that passed once is not checked again: the result is remembered by the (frozen, hashable)
  config itself (each analysis still checks its own request against the budget before it allocates).
- ``as_config(source)``: the same sources, the library's validation only (the training code, the
  checkpoint loader and the benchmarks, which have their own caps).
"""

from __future__ import annotations

import functools

from explorer.runtime.limits import check_budget, check_caps
from explorer.runtime.untrusted import load_json
from models import ConfigError, ModelConfig


def _parse(source) -> ModelConfig:
    """A ``ModelConfig`` (not yet validated) from any accepted source."""
    if source is None or (isinstance(source, str) and not source.strip()):
        return ModelConfig()
    if isinstance(source, (str, bytes)):
        source = load_json(source)
    if isinstance(source, dict):
        return ModelConfig.from_dict(source)
    if isinstance(source, ModelConfig):
        return source
    raise ConfigError("config", type(source).__name__, "a JSON object of ModelConfig fields")


def as_config(source) -> ModelConfig:
    """A config validated by the library (no explorer caps, no budget), once per distinct config."""
    return _once(_valid, _parse(source))


def app_config(source=None) -> ModelConfig:
    """A config the explorer serves: within its caps, valid, and within the memory budget."""
    return _once(_served, _parse(source))


def _once(check, cfg: ModelConfig) -> ModelConfig:
    """``check(cfg)``, remembered by the config; a refusal raises and is not remembered. A config
    holding an unhashable value (a list where a number goes) cannot be a key: its check names it."""
    try:
        hash(cfg)
    except TypeError:
        return check.__wrapped__(cfg)
    return check(cfg)


@functools.lru_cache(maxsize=1024)
def _valid(cfg: ModelConfig) -> ModelConfig:
    return cfg.validate()


@functools.lru_cache(maxsize=512)
def _served(cfg: ModelConfig) -> ModelConfig:
    return check_budget(_once(_valid, check_caps(cfg)))
