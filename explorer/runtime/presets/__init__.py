"""Named architectures as ModelConfig overrides, scaled to the explorer's size.

Each preset keeps the architecture's *choices* (attention pattern, positions, norm placement, FFN,
K/V heads, ...) at the explorer's interactive size (4 layers, d_model 128, ~128 tokens), so the
maps and curves show what the choices do, not what a 70B model costs. Head ratios are kept where
they matter (GQA: several query heads per K/V head). Presets that name a variant not yet in the
registries (or a combination it rejects) are hidden by ``available()`` until it lands.
"""

from __future__ import annotations

from models import ConfigError, ModelConfig

from .classic import CLASSIC
from .lessons import LESSON_TEXT, LESSONS
from .modern import MODERN
from .papers import PAPERS
from .trained import BUNDLE_PRESETS, TRAINED

__all__ = [
    "BUNDLE_PRESETS",
    "CUSTOM",
    "DEFAULT_PRESET",
    "LESSON_TEXT",
    "LESSONS",
    "PRESETS",
    "PRESET_INFO",
    "available",
    "matching_preset",
    "preset_config",
    "preset_info",
    "preset_text",
]

# name -> (one-line description, overrides of ModelConfig defaults), in the dropdown's order: the trained
# models first, then the architectures by era, then the lessons
PRESETS: dict = {
    **TRAINED,
    **CLASSIC,
    **PAPERS,
    **MODERN,
    **{name: (about, overrides) for name, (about, overrides, _) in LESSONS.items()},
}


def preset_text(name: str):
    """The text a lesson preset brings (None: the preset keeps the page's text)."""
    return LESSONS[name][2] if name in LESSONS else None


CUSTOM = "(custom)"
DEFAULT_PRESET = "LLaMA (2023)"


def preset_config(name: str) -> ModelConfig:
    """The full ``ModelConfig`` of preset ``name`` (ConfigError names the valid presets)."""
    if name not in PRESETS:
        raise ConfigError("preset", name, f"one of {list(PRESETS)}")
    return ModelConfig(**PRESETS[name][1])


def available() -> list:
    """Names of the presets whose variants are all registered and whose combination validates, the lessons
    first (what a newcomer or a speaker looks for), then the named architectures."""
    names = []
    for name in sorted(PRESETS, key=lambda n: n not in LESSONS):  # stable: each group keeps its order
        try:
            preset_config(name).validate()
        except ConfigError:
            continue
        names.append(name)
    return names


PRESET_INFO = "A named architecture fills every control (sizes kept small)."


def preset_info(name: str) -> str:
    """The line under the Preset dropdown: which named preset the controls match (``name``, from
    ``matching_preset``), said in words rather than by switching the dropdown under the visitor."""
    return PRESET_INFO if name == CUSTOM else f"The controls match {name}. {PRESET_INFO}"


def matching_preset(cfg: ModelConfig) -> str:
    """The preset whose config equals ``cfg`` exactly (ignoring the seed), else ``CUSTOM``; a paper's
    preset wins over a trained one of the same config (BLOOM is the ALiBi bundle's architecture), and both
    over a lesson (the BigBird lesson is BigBird's config at another text)."""
    d = {**cfg.to_dict(), "seed": 0}
    names = available()
    for name in sorted(names, key=lambda n: (n in LESSONS, n in BUNDLE_PRESETS)):
        if preset_config(name).to_dict() == d:
            return name
    return CUSTOM
