"""Save and load a trained model: config JSON + weights as safetensors, never pickle.

One ``.safetensors`` file carries everything: the tensors of ``model.state_dict()`` and, in the
header's string metadata, the ``ModelConfig`` JSON, the training run's settings, the step, and a
SHA-256 digest of every tensor (name, dtype, shape, bytes). A copy of the config is also written
beside it as ``config.json`` for people to read. safetensors stores raw tensors only, so loading
a file never executes code (unlike ``torch.load`` of a pickle).

Loading refuses, with a ``ConfigError`` that says what is wrong: a file that is not safetensors
or whose header is corrupt, a config that does not validate, a digest that does not match the
tensors (the file was edited), a separate config that differs from the embedded one, and any
tensor missing, unexpected, or of a shape or dtype this config's model does not have.
"""
from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Optional, Union

import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from explorer.analysis.weights import tensor_digest
from explorer.runtime.configs import as_config
from models import build_model
from models import ConfigError

FORMAT = "transformer-family-explorer/weights"
VERSION = "1"
MAX_FILE_BYTES = 512 * 1024 * 1024


def to_bytes(model: torch.nn.Module, cfg=None, extra: Optional[dict] = None) -> bytes:
    """The safetensors bytes of ``model`` (config from ``cfg`` or ``model.cfg``)."""
    cfg = as_config(cfg if cfg is not None else model.cfg)
    tensors = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    meta = {"format": FORMAT, "version": VERSION, "config": cfg.to_json(), "sha256": tensor_digest(tensors)}
    for k, v in (extra or {}).items():
        meta[k] = v if isinstance(v, str) else json.dumps(v, sort_keys=True)
    return st_save(tensors, metadata=meta)


def save(model: torch.nn.Module, directory: Union[str, Path], cfg=None, extra: Optional[dict] = None,
         stem: str = "model") -> tuple:
    """Write ``<stem>.safetensors`` and ``<stem>.config.json`` into ``directory``; return both paths."""
    cfg = as_config(cfg if cfg is not None else model.cfg)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    weights = directory / f"{stem}.safetensors"
    config = directory / f"{stem}.config.json"
    weights.write_bytes(to_bytes(model, cfg, extra))
    config.write_text(json.dumps(cfg.to_dict(), indent=2, sort_keys=True))
    return weights, config


def read_metadata(data: bytes) -> dict:
    """The ``__metadata__`` of a safetensors header (8-byte little-endian length, then JSON)."""
    if len(data) < 8:
        raise ConfigError("weights", f"{len(data)} bytes", "a .safetensors file (this one is too short)")
    (n,) = struct.unpack("<Q", data[:8])
    if n > len(data) - 8:
        raise ConfigError("weights", f"header of {n} bytes", "a .safetensors file (the header is truncated)")
    try:
        header = json.loads(data[8:8 + n])
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ConfigError("weights", "header", "a .safetensors file (the header is not valid JSON)") from None
    meta = header.get("__metadata__") if isinstance(header, dict) else None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ConfigError("weights", "metadata", f"a file saved by the explorer (metadata format {FORMAT!r} "
                          "with the model's config); this safetensors file has none")
    return meta


def load(source: Union[str, Path, bytes], config=None) -> tuple:
    """``(cfg, model, metadata)`` from a saved file (path or bytes); ``config`` (a ModelConfig,
    dict, JSON string or path of a config.json), when given, must equal the embedded one."""
    data = _read(source)
    meta = read_metadata(data)
    try:
        cfg = as_config(meta["config"])
    except KeyError:
        raise ConfigError("weights", "metadata", "a file whose metadata holds the model config") from None
    if config is not None:
        other = as_config(Path(config).read_text() if isinstance(config, Path) else config)
        if other.to_dict() != cfg.to_dict():
            diff = sorted(k for k, v in other.to_dict().items() if cfg.to_dict()[k] != v)
            raise ConfigError("config", diff[0], f"the config the weights were saved with "
                              f"({', '.join(f'{k}={getattr(cfg, k)!r}' for k in diff[:4])})")
    try:
        tensors = st_load(data)
    except Exception as e:  # safetensors raises its own error types for corrupt data
        raise ConfigError("weights", "data", f"a readable .safetensors file ({str(e)[:160]})") from None
    if tensor_digest(tensors) != meta.get("sha256"):
        raise ConfigError("weights", "sha256", "tensors matching the digest saved with them: the file was "
                          "modified after it was saved (or is incomplete)")
    model = build_model(cfg)
    expected = model.state_dict()
    missing = sorted(set(expected) - set(tensors))
    unexpected = sorted(set(tensors) - set(expected))
    if missing:
        raise ConfigError("weights", missing[0], f"every tensor of this config's model; {len(missing)} missing "
                          f"(e.g. {', '.join(missing[:3])})")
    if unexpected:
        raise ConfigError("weights", unexpected[0], f"only tensors of this config's model; {len(unexpected)} "
                          f"unexpected (e.g. {', '.join(unexpected[:3])})")
    for name, t in expected.items():
        got = tensors[name]
        if tuple(got.shape) != tuple(t.shape) or got.dtype != t.dtype:
            raise ConfigError("weights", name, f"shape {tuple(t.shape)} and dtype {t.dtype} for this config; the "
                              f"file has {tuple(got.shape)} {got.dtype}")
    model.load_state_dict(tensors, strict=True)
    return cfg, model, meta


def _read(source) -> bytes:
    if isinstance(source, (bytes, bytearray)):
        data = bytes(source)
    else:
        path = Path(source)
        if not path.is_file():
            raise ConfigError("weights", str(source), "the path of a .safetensors file")
        if path.stat().st_size > MAX_FILE_BYTES:
            raise ConfigError("weights", f"{path.stat().st_size} bytes", f"a file of at most {MAX_FILE_BYTES} bytes")
        data = path.read_bytes()
    return data
