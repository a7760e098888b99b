"""The trained model a surgery starts from: a bundled model or a pretrained checkpoint, as trained.

Every verb of the package reads this one record, so a bundle and a checkpoint mean the same thing to
it: their config and weights as trained, the length they were trained at (the loss beyond it is
"past the trained length"), the window the table's windowed rows use, the tokens a text becomes
(bytes for a bundle, its tokenizer's for a checkpoint) and whether a next-token loss means anything.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from explorer.analysis.weights import bundled, checkpoints
from explorer.analysis.weights.trained import TrainedWeights
from explorer.runtime.configs import as_config
from models import ConfigError, ModelConfig, surgery

DEFAULT_BUNDLE = "default"  # the weights on screen when the visitor chose no bundle by name
MIN_WINDOW = 8  # a checkpoint's windowed rows: a quarter of its trained length, at least this
MAX_CONTEXT_SCORED = 256  # a checkpoint without a manifest: its context, at most this many tokens on a CPU


def is_lm(cfg) -> bool:
    """Whether a next-token loss on a text means something for ``cfg``: a causal decoder (BERT is masked,
    T5 and the encoder-decoder read a source)."""
    cfg = as_config(cfg)
    return cfg.causal and cfg.architecture == "decoder_only"


@dataclass(frozen=True)
class Origin:
    """A bundled model (``kind="bundle"``, ``name`` its bundle name) or a pretrained checkpoint
    (``kind="checkpoint"``, ``name`` its id), as trained."""

    kind: str
    name: str
    label: str  # how the page names it: "bundle 'default'", "checkpoint 'byte-llama' (llama, …)"
    config: ModelConfig
    weights: TrainedWeights = field(repr=False, compare=False)
    trained_length: int  # tokens per training window
    window: int  # the window (tokens) of the table's windowed rows
    lm: bool  # a causal decoder trained to predict the next token: its loss means something

    @property
    def tokenizer(self):
        return self.weights.tokenizer

    @property
    def unit(self) -> str:
        return "nats/byte" if self.tokenizer is None else "nats/token"

    def encode(self, text) -> list:
        """The tokens ``text`` (str or bytes) is to this model: its bytes, or its tokenizer's ids."""
        if self.tokenizer is None:
            return list(text if isinstance(text, bytes) else str(text).encode("utf-8"))
        raw = text.decode("utf-8", errors="ignore") if isinstance(text, bytes) else str(text)
        return self.tokenizer.encode(raw)


def bundle_origin(name: str) -> Origin:
    """Bundle ``name`` as trained (ConfigError naming the bundles when there is no such bundle)."""
    if name not in bundled.names():
        raise ConfigError("bundle", str(name)[:40], f"one of {bundled.names()}")
    b = bundled.load(name)
    lm = b.manifest["task"].startswith("lm") and is_lm(b.config)
    return Origin(
        "bundle",
        name,
        f"bundle '{name}'",
        b.config,
        bundled.bundled_weights(b.config),
        int(b.manifest["recipe"]["seq_len"]),
        int(b.config.window),
        lm,
    )


def loaded_of(checkpoint) -> checkpoints.Loaded:
    """A checkpoint in memory: ``checkpoint`` itself when the caller loaded it already (a request loads it
    once), else the id loaded through ``explorer.analysis.weights.checkpoints``."""
    return checkpoint if isinstance(checkpoint, checkpoints.Loaded) else checkpoints.load(checkpoint)


def checkpoint_origin(checkpoint) -> Origin:
    """A checkpoint (its id, or its ``checkpoints.Loaded`` record) as trained."""
    loaded = loaded_of(checkpoint)
    trained = checkpoint_trained_length(loaded)
    return Origin(
        "checkpoint",
        loaded.id,
        loaded.describe(),
        loaded.config,
        loaded.weights,
        trained,
        max(MIN_WINDOW, trained // 4),
        is_lm(loaded.config) and loaded.tokenizer is not None,
    )


def checkpoint_trained_length(loaded) -> int:
    """The length a checkpoint was trained at: the ``recipe.seq_len`` of a ``manifest.json`` beside it (one
    trained here), else its context, at most ``MAX_CONTEXT_SCORED`` tokens on a CPU."""
    folder = checkpoints.offered().get(loaded.id)
    manifest = None if folder is None else folder / "manifest.json"
    if manifest is not None and manifest.is_file() and manifest.stat().st_size < 1 << 20:
        try:
            return int(json.loads(manifest.read_text())["recipe"]["seq_len"])
        except (ValueError, KeyError, TypeError):
            pass
    return int(min(loaded.config.max_len or MAX_CONTEXT_SCORED, MAX_CONTEXT_SCORED))


def candidates(cfg, bundle: str | None = None) -> list:
    """``[(bundle name, changed fields)]`` of every bundle whose weights ``cfg`` can read: the weights on screen
    first (``bundle``, the one the visitor chose by name, else the default bundle) when ``cfg`` is a surgery of
    them, then the others, fewest changes first. So a surgery-safe change operates on the weights on screen
    even when another bundle was trained with exactly ``cfg`` (showing that one is an explicit choice); a
    change that needs other weights draws the bundle trained with it, or the nearest one."""
    cfg = as_config(cfg)
    found = []
    for name in bundled.names():
        trained = bundled.config_of(name)  # the manifest's config: only the bundle drawn gets loaded
        try:
            surgery.check(trained, cfg)
        except ConfigError:
            continue
        found.append((name, tuple(surgery.changed_fields(trained, cfg))))
    base = bundle or DEFAULT_BUNDLE
    return sorted(found, key=lambda x: (x[0] != base, len(x[1])))


def origin_of(cfg, checkpoint=None, bundle: str | None = None) -> Origin | None:
    """The model ``cfg`` is a surgery of: the checkpoint ``checkpoint`` (an id or a ``Loaded`` record), else the
    first of ``candidates(cfg, bundle)`` (None when no bundle's weights can serve ``cfg``)."""
    if checkpoint:
        return checkpoint_origin(checkpoint)
    found = candidates(cfg, bundle)
    return bundle_origin(found[0][0]) if found else None
