"""Which weights are drawn: the visitor's Weights choice resolved once per request into one typed record.

A choice is one of four kinds, spelled here once:

- ``bundled`` (the default): the weights on screen, the default bundle, moved to the config when it is a
  surgery of them (``explorer.analysis.surgery``); a config that needs other weights draws the bundle
  trained with it (``explorer.analysis.weights.bundled``) or the nearest one; a config no bundle serves is drawn at
  initialisation, and ``why`` says why. ``bundle:<name>``: the same with bundle ``name`` on screen (a
  "Trained: ..." preset, or the page's "a model trained with this pattern exists: show it"): another
  bundle is only ever shown by that explicit choice, never because the controls happen to match it.
- ``initial``: the config's initial weights (its seed).
- ``trained`` ("your run"): a session's own run (``explorer.analysis.weights.trained.TrainedWeights``), passed in
  by the session that holds it.
- ``checkpoint:<id>``: a pretrained checkpoint (``explorer.analysis.weights.checkpoints``), loaded once; its config
  carries the controls' surgery (``surgery.config_for``), its weights are the same tensors moved to it
  (``surgery.weights_for``) and its tokenizer reads the text. The loaded record is what the surgery verbs
  are handed afterwards, never the id again.

``resolve(choice, cfg, trained, loaded)`` makes a ``WeightsSource``: the kind, the config drawn, the
weights (None: initial), the loaded checkpoint and, when the initial weights stand in for the bundled
ones, why. The page, the API and the export resolve the choice once per request and pass the record down
to every analysis, figure and export part, so they draw, describe and export the same weights; nothing
further along parses the choice again or guesses it from the text the page shows.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from explorer.analysis import surgery
from explorer.analysis.weights import bundled, checkpoints
from explorer.analysis.weights.trained import TrainedWeights, applicable
from explorer.runtime.configs import as_config
from models import ConfigError, ModelConfig

BUNDLED, INITIAL, TRAINED, CHECKPOINT = "bundled", "initial", "trained", "checkpoint"
CHECKPOINT_PREFIX = CHECKPOINT + ":"  # a checkpoint's choice: "checkpoint:<id>"
BUNDLE_PREFIX = "bundle:"  # a bundle chosen by name: "bundle:<name>" (kind bundled, that bundle on screen)
KINDS = (BUNDLED, INITIAL, TRAINED, CHECKPOINT)


def checkpoint_id(choice) -> str | None:
    """The checkpoint id of a Weights choice ("checkpoint:<id>"), else None."""
    if isinstance(choice, str) and choice.startswith(CHECKPOINT_PREFIX):
        return choice[len(CHECKPOINT_PREFIX) :]
    return None


def checkpoint_choice(ckpt_id: str) -> str:
    """The Weights choice of checkpoint ``ckpt_id``."""
    return CHECKPOINT_PREFIX + ckpt_id


def bundle_name(choice) -> str | None:
    """The bundle a Weights choice names ("bundle:<name>"), else None; ``ConfigError`` for a name that is no
    bundle."""
    if not (isinstance(choice, str) and choice.startswith(BUNDLE_PREFIX)):
        return None
    name = choice[len(BUNDLE_PREFIX) :]
    if name not in bundled.names():
        raise ConfigError("weights", choice[:60], f"a bundle among {[BUNDLE_PREFIX + n for n in bundled.names()]}")
    return name


def bundle_choice(name: str) -> str:
    """The Weights choice of bundle ``name``."""
    return BUNDLE_PREFIX + name


def kind_of(choice) -> str:
    """The kind of a Weights choice (None and "" are bundled, the default); ``ConfigError`` naming the
    valid choices for anything else."""
    if choice in (None, "") or bundle_name(choice) is not None:
        return BUNDLED
    if checkpoint_id(choice) is not None:
        return CHECKPOINT
    if choice in (BUNDLED, INITIAL, TRAINED):
        return choice
    valid = [BUNDLED, INITIAL, TRAINED, BUNDLE_PREFIX + "<name>", CHECKPOINT_PREFIX + "<id>"]
    raise ConfigError("weights", str(choice)[:40], f"one of {valid}")


@dataclass(frozen=True)
class WeightsSource:
    """The weights a request draws, resolved once (``resolve``)."""

    kind: str  # a key of KINDS
    config: ModelConfig  # the config the weights are drawn for
    weights: TrainedWeights | None = field(default=None, repr=False)  # None: the initial weights
    loaded: checkpoints.Loaded | None = field(default=None, repr=False)  # the checkpoint (kind "checkpoint")
    why: str = ""  # bundled asked for, initial drawn: why no bundle serves it
    bundle: str = ""  # the bundle chosen by name ("bundle:<name>"); "" the default

    @property
    def choice(self) -> str:
        """The Weights choice this record resolves ("bundled", "bundle:<name>", ..., "checkpoint:<id>")."""
        if self.loaded is not None:
            return checkpoint_choice(self.loaded.id)
        return bundle_choice(self.bundle) if self.bundle else self.kind

    @property
    def trained_exists(self) -> str:
        """The bundle trained with exactly this config when the weights drawn are another's under surgery
        (what the page offers to show, explicitly), else ""."""
        if self.kind != BUNDLED or self.weights is None or not self.surgery:
            return ""
        own = bundled.bundled_weights(self.config)
        return own.bundle if own is not None else ""

    @property
    def checkpoint(self) -> str:
        """The checkpoint's id ("" for the other kinds)."""
        return self.loaded.id if self.loaded is not None else ""

    @property
    def surgery(self) -> tuple:
        """The fields changed from the config the weights were trained with (empty: none, or initial)."""
        return tuple(self.weights.surgery) if self.weights is not None else ()

    @property
    def tokenizer(self):
        """The checkpoint's tokenizer (None: one token per byte)."""
        return self.weights.tokenizer if self.weights is not None else None

    @property
    def source(self) -> str:
        """Where the weights come from, as the page says it."""
        return self.weights.source if self.weights is not None else "initial weights (the config's seed)"

    def for_config(self, cfg) -> TrainedWeights | None:
        """The weights when they belong to ``cfg`` (the drawn config), else None: what the figures of another
        config (another norm placement in the gradient figure) are drawn with, at initialisation."""
        if self.weights is None:
            return None
        cfg = as_config(cfg)
        return self.weights if cfg == self.config or self.weights.matches(cfg) else None

    def for_other(self, cfg) -> TrainedWeights | None:
        """What the same choice draws for another config ``cfg`` (Compare's pinned A): its bundle, your run
        when it belongs to it, the initial weights; a checkpoint draws only its own architecture
        (``ConfigError``)."""
        cfg = as_config(cfg)
        if self.kind == CHECKPOINT:
            if cfg == self.config:
                return self.weights
            raise ConfigError(
                "weights",
                self.choice[:60],
                "bundled, initial or your run: a pretrained checkpoint is drawn with its own architecture only",
            )
        if self.kind == BUNDLED:
            return self.weights if cfg == self.config else surgery.weights_for(cfg, bundle=self.bundle or None)
        return self.for_config(cfg)

    def used(self) -> dict:
        """What the API says about these weights: ``{"used", "source", ...}``."""
        if self.kind == CHECKPOINT:
            return {
                "used": CHECKPOINT,
                "checkpoint": self.checkpoint,
                "source": self.source,
                "surgery": list(self.surgery),
            }
        if self.weights is None:
            out = {"used": INITIAL, "source": self.why or "initial weights (the config's seed)"}
            return {**out, "requested": self.kind} if self.kind != INITIAL else out
        out = {"used": self.kind, "source": self.source, "step": self.weights.step, "surgery": list(self.surgery)}
        return out


def drawn_for(weights, cfg) -> TrainedWeights | None:
    """The record a handler's ``weights`` (a request's ``WeightsSource``, a ``TrainedWeights`` record or
    None) draws for ``cfg``: the weights when they belong to ``cfg`` (``WeightsSource.for_config``,
    ``applicable``), else None, the initial weights. The one weights check of an event: a handler calls it
    once and passes the record down to the analyses, which take records only."""
    if isinstance(weights, WeightsSource):
        return weights.for_config(cfg)
    return applicable(weights, cfg)


def checkpoint_config(loaded: checkpoints.Loaded, changes: dict | None = None) -> ModelConfig:
    """A checkpoint's config with the surgery-safe ``changes`` applied (a field that needs other weights is
    refused naming it and the checkpoint's value)."""
    return surgery.config_for(loaded, changes or {})


def resolve(
    choice, cfg, trained: TrainedWeights | None = None, loaded: checkpoints.Loaded | None = None
) -> WeightsSource:
    """The ``WeightsSource`` of Weights choice ``choice`` for config ``cfg`` (a checkpoint's: made by
    ``checkpoint_config``; ``loaded``: the checkpoint, when the caller loaded it already). ``trained``: the
    session's run, used for ``trained`` when it belongs to ``cfg`` (another config draws the initial weights).
    ``ConfigError`` for a choice that is not valid or a checkpoint that cannot be loaded."""
    kind = kind_of(choice)
    cfg = as_config(cfg)
    if kind == CHECKPOINT:
        loaded = loaded if loaded is not None else checkpoints.load(checkpoint_id(choice))
        weights = loaded.weights if cfg == loaded.config else surgery.weights_for(cfg, loaded)
        return WeightsSource(CHECKPOINT, cfg, weights, loaded)
    if kind == TRAINED:
        return WeightsSource(TRAINED, cfg, trained if trained is not None and trained.matches(cfg) else None)
    if kind == INITIAL:
        return WeightsSource(INITIAL, cfg)
    name = bundle_name(choice) or ""
    record = surgery.weights_for(cfg, bundle=name or None)
    return WeightsSource(BUNDLED, cfg, record, why="" if record is not None else surgery.why_not(cfg), bundle=name)
