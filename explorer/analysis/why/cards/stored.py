"""Circuit cards stored beside the models, and read back only when they still describe them.

A card is stored as ``<bundle>.card.json`` in the bundle folder, or ``card.json`` in a checkpoint's folder
(beside the Surgery tables). It names the SHA-256 of the weights file it was computed from
(``weights_sha256``), the card format's ``VERSION`` and the probes (``probe_spec``), and carries ``digest``,
the SHA-256 of its own content. ``load_card`` checks all of them: a card whose weights were retrained, whose
probes or version changed, or whose numbers were edited by hand is recomputed (``recompute=True``) or
refused with a ``ConfigError`` saying which check failed and the command that stores a fresh one.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from explorer.analysis.surgery.origin import Origin, bundle_origin, checkpoint_origin
from explorer.analysis.weights import bundled, checkpoints
from explorer.analysis.why.cards.compute import VERSION, compute_card, probe_spec
from models import ConfigError

SUFFIX = ".card.json"
CHECKPOINT_FILE = "card.json"
MAX_STORED = 1 << 20  # bytes of a stored card read back at most
UNTIMED = ("digest", "seconds")  # what a card's digest (and a comparison with a fresh card) leaves out


@dataclass(frozen=True)
class Named:
    """Which model a card belongs to, without the model: ``kind`` ("bundle" or "checkpoint") and ``name``. Enough to
    find its card and weights file (``card_path``, ``weights_file``), so a stored card is checked against the file's
    digest without building the model (``load_card``; ``Origin`` has the same two fields)."""

    kind: str
    name: str


def named(name: str) -> Named:
    """A bundle, or a checkpoint shipped in a folder (``checkpoints.offered``), by name: its kind."""
    if name in bundled.names():
        return Named("bundle", name)
    if name in checkpoints.offered():
        return Named("checkpoint", name)
    raise ConfigError(
        "model", str(name)[:40], f"a bundle {bundled.names()} or a checkpoint folder {sorted(checkpoints.offered())}"
    )


def origin_named(name: str) -> Origin:
    """A bundle, or a checkpoint shipped in a folder (``checkpoints.offered``), by name, as trained (its weights
    loaded)."""
    return bundle_origin(name) if named(name).kind == "bundle" else checkpoint_origin(name)


def shipped() -> list:
    """Every model a card is stored for: the bundles, then the checkpoints shipped under ``assets/checkpoints``."""
    root = bundled.ROOT / "assets" / "checkpoints"
    return bundled.names() + sorted(n for n, folder in checkpoints.offered().items() if root in folder.parents)


def weights_file(origin: Origin | Named, directory: Path | None = None) -> Path:
    if origin.kind == "bundle":
        return (directory or bundled.BUNDLE_DIR) / f"{origin.name}.safetensors"
    return checkpoints.offered()[origin.name] / "model.safetensors"


def card_path(origin: Origin | Named, directory: Path | None = None) -> Path:
    """Where ``origin``'s card is stored (``directory``: another folder than the model's, for a copy)."""
    if origin.kind == "bundle":
        return (directory or bundled.BUNDLE_DIR) / f"{origin.name}{SUFFIX}"
    return (directory or checkpoints.offered()[origin.name]) / CHECKPOINT_FILE


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def content_digest(card: dict) -> str:
    """SHA-256 of the card's JSON with sorted keys, less ``UNTIMED``."""
    body = {k: v for k, v in card.items() if k not in UNTIMED}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def fresh_card(origin: Origin, log=None) -> dict:
    """The card of ``origin`` computed now (with its digest and the seconds it took)."""
    import time

    t0 = time.perf_counter()
    card = compute_card(origin, sha256_file(weights_file(origin)), log)
    card["digest"] = content_digest(card)
    card["seconds"] = round(time.perf_counter() - t0, 2)
    return card


def write_card(origin: Origin, log=None, directory: Path | None = None) -> dict:
    card = fresh_card(origin, log)
    card_path(origin, directory).write_text(json.dumps(card, indent=1) + "\n")
    return card


def problem(card: dict, origin: Origin | Named) -> str | None:
    """Why a stored ``card`` does not describe ``origin`` (None: it does)."""
    if card.get("version") != VERSION or card.get("probes") != probe_spec():
        return f"a card of format version {VERSION} on the current probes (it has version {card.get('version')})"
    if card.get("digest") != content_digest(card):
        return "a card whose content matches its digest (it was edited after it was computed)"
    if card.get("weights_sha256") != sha256_file(weights_file(origin)):
        return "a card computed from the weights now shipped (they were retrained since)"
    return None


def load_card(name: str, recompute: bool = False, directory: Path | None = None) -> dict:
    """The stored card of model ``name`` after the checks (module docstring); when one fails, a fresh card
    (``recompute``, not stored) or a ``ConfigError``."""
    model = named(name)  # a stored card is checked against its weights file: the model is built only to recompute
    path = card_path(model, directory)
    why = "a stored card"
    if path.is_file() and path.stat().st_size <= MAX_STORED:
        try:
            card = json.loads(path.read_text())
            why = problem(card, model) if isinstance(card, dict) else "a JSON object"
        except ValueError:
            why = "a card that is valid JSON"
        if why is None:
            return card
    if recompute:
        return fresh_card(origin_named(name))
    raise ConfigError("card", path.name, f"{why}: python -m explorer.analysis.why.cards {name} --write")


def load_cards(names: list | None = None, recompute: bool = False) -> list:
    """The cards of ``names`` (default: ``shipped()``), each checked by ``load_card``."""
    return [load_card(n, recompute) for n in (shipped() if names is None else names)]
