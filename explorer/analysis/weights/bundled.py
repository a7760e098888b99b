"""The trained models shipped with the app, as weights the analyses can draw.

A bundle lives in ``assets/bundles/`` as ``<name>.safetensors`` (its parameters in float16; buffers
such as RoPE tables are rebuilt from the config) and ``<name>.json``, its manifest (config, recipe,
data, steps, losses, command, commit: see ``explorer.training.bundle``, which makes them). Reading
one checks the file against the manifest's SHA-256 and its parameters against the config's model.

- ``load(name)`` -> ``Bundle``; ``names()`` the bundles present.
- ``bundled_weights(cfg)`` -> ``TrainedWeights`` of the bundle trained with exactly ``cfg`` (or None).

Bundles are read-only and read once per process (a bounded memo of immutable records, shared by
every session like the code itself); a session's own weights never live here.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import torch
from safetensors.torch import load_file

from explorer.analysis.weights.trained import TrainedWeights, tensor_digest
from explorer.runtime.configs import as_config
from models import ConfigError, ModelConfig, build_model

ROOT = Path(__file__).resolve().parents[3]
BUNDLE_DIR = ROOT / "assets" / "bundles"
FORMAT = "transformer-family-explorer/bundle"
SURGERY_SUFFIX = ".surgery.json"  # the Surgery table stored beside a bundle (``explorer.analysis.surgery``)


@dataclass
class Bundle:
    name: str
    config: ModelConfig
    manifest: dict
    state: dict = field(repr=False)  # float32 state dict of the built model (parameters read from the file)

    @property
    def step(self) -> int:
        return int(self.manifest["steps"])

    def source(self) -> str:
        """What the page says the weights are: "bundled model 'default': 3000 steps of byte-level LM on
        the Python documentation, held-out loss 1.386 nats/byte (4096 bytes in windows of 128, the trained
        length)"."""
        m = self.manifest
        if m["task"].startswith("lm"):
            what, unit = "byte-level LM on the Python documentation", " nats/byte"
        else:
            what, unit = f"the {m['task']} task", " nats/token"
        return f"bundled model '{self.name}': {m['steps']} steps of {what}, held-out loss {self.heldout(unit)}"

    def heldout(self, unit: str = "") -> str:
        """The held-out loss the page gives this model, everywhere the same: its Surgery table's (stored beside
        it by ``explorer.analysis.surgery``: the held-out bytes in windows of the trained length), else the
        training's last held-out evaluation."""
        path = BUNDLE_DIR / f"{self.name}{SURGERY_SUFFIX}"
        try:
            table = json.loads(path.read_text())
            row = next(r for r in table["rows"] if r["label"].endswith("(as trained)"))
            L = table["trained_length"]
            return (
                f"{row['loss'][str(L)]:.3f}{unit} ({table['scored_tokens']} bytes in windows of {L}, the trained "
                "length)"
            )
        except (OSError, ValueError, KeyError, TypeError, StopIteration):
            return f"{self.manifest['final_heldout_loss']:.3f}{unit}"

    def model(self) -> torch.nn.Module:
        model = build_model(self.config)
        model.load_state_dict(self.state, strict=True)
        return model.eval()


def names(directory: Path = BUNDLE_DIR) -> list:
    """The bundles present, in the order of their manifests' ``order`` field, then by name."""
    found = []
    for path in sorted(directory.glob("*.json")):
        if "." in path.stem:  # <name>.surgery.json and other records stored beside a bundle
            continue
        try:
            found.append((json.loads(path.read_text()).get("order", 99), path.stem))
        except (OSError, json.JSONDecodeError):
            continue
    return [n for _, n in sorted(found)]


@lru_cache(maxsize=16)
def load(name: str, directory: Path = BUNDLE_DIR) -> Bundle:
    """The bundle called ``name`` (``ConfigError`` for one that is missing or does not match its manifest)."""
    if not isinstance(name, str) or name not in names(directory):
        raise ConfigError("bundle", str(name)[:60], f"one of {names(directory)}")
    manifest = json.loads((directory / f"{name}.json").read_text())
    weights = directory / f"{name}.safetensors"
    if hashlib.sha256(weights.read_bytes()).hexdigest() != manifest["file_sha256"]:
        raise ConfigError(
            "bundle",
            name,
            f"a weights file matching its manifest's digest (regenerate it: python -m explorer.training.bundle {name})",
        )
    cfg = as_config(manifest["config"])
    params = {k: v.float() for k, v in load_file(str(weights)).items()}
    model = build_model(cfg)
    differ = sorted(set(dict(model.named_parameters())) ^ set(params))
    if differ:
        raise ConfigError("bundle", name, f"the parameters of its config's model (they differ in {differ[:3]})")
    model.load_state_dict(params, strict=False)  # the buffers are the config's own
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return Bundle(name, cfg, manifest, state)


@lru_cache(maxsize=16)
def config_of(name: str, directory: Path = BUNDLE_DIR) -> ModelConfig:
    """Bundle ``name``'s config from its manifest alone, through the config door (no weights read, no model built):
    what a search over the bundles needs; ``load`` checks the weights against it when one is drawn."""
    if not isinstance(name, str) or name not in names(directory):
        raise ConfigError("bundle", str(name)[:60], f"one of {names(directory)}")
    return as_config(json.loads((directory / f"{name}.json").read_text())["config"])


@lru_cache(maxsize=1)
def _by_config(directory: Path = BUNDLE_DIR) -> dict:
    """``{config: name}`` (the frozen ``ModelConfig`` is the key); a manifest's config is read through the config door,
    so a field added to ``ModelConfig`` since the bundle was made takes its default (which is what the bundle was made
    with)."""
    return {as_config(json.loads((directory / f"{n}.json").read_text())["config"]): n for n in names(directory)}


def bundle_for(cfg) -> Bundle | None:
    """The bundle trained with exactly ``cfg``, else None."""
    name = _by_config().get(as_config(cfg))
    return None if name is None else load(name)


@lru_cache(maxsize=16)
def _record(name: str) -> TrainedWeights:
    b = load(name)
    size = sum(t.numel() * t.element_size() for t in b.state.values())
    return TrainedWeights(b.config, b.state, tensor_digest(b.state), b.step, size, source=b.source(), bundle=name)


def bundled_weights(cfg) -> TrainedWeights | None:
    """The ``TrainedWeights`` of the bundle trained with exactly ``cfg`` (None without one)."""
    b = bundle_for(cfg)
    return None if b is None else _record(b.name)
