"""Save and load a trained model: config JSON + weights as safetensors, never pickle.

One ``.safetensors`` file carries everything: the tensors of ``model.state_dict()`` and, in the
header's string metadata, the ``ModelConfig`` JSON, the training run's settings, the step, and a
SHA-256 digest of every tensor (name, dtype, shape, bytes). A copy of the config is also written
beside it as ``config.json`` for people to read. safetensors stores raw tensors only, so loading
a file never executes code (unlike ``torch.load`` of a pickle).

Loading refuses, with a ``ConfigError`` that says what is wrong: a file that is not safetensors
or whose header is corrupt, a config that does not validate (or that the caller's ``check`` refuses:
the app's caps and memory budget), a digest that does not match the tensors (the file was edited), a
separate config that differs from the embedded one, and any tensor missing, unexpected, or of a shape
or dtype this config's model does not have. Everything but the digest is checked from the header
alone, before a tensor is read or the model is built: the config's ``check``, then the header's
tensor names, shapes and dtypes against those of the model built on the ``meta`` device (which
allocates nothing). So a small file whose header asks for a huge model costs nothing to refuse.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from explorer.analysis.weights.trained import tensor_digest
from explorer.runtime.configs import as_config
from models import ConfigError, build_model
from models.meta import on_meta

FORMAT = "transformer-family-explorer/weights"
VERSION = "1"
MAX_FILE_BYTES = 512 * 1024 * 1024


def to_bytes(model: torch.nn.Module, cfg=None, extra: dict | None = None) -> bytes:
    """The safetensors bytes of ``model`` (config from ``cfg`` or ``model.cfg``)."""
    cfg = as_config(cfg if cfg is not None else model.cfg)
    tensors = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    meta = {"format": FORMAT, "version": VERSION, "config": cfg.to_json(), "sha256": tensor_digest(tensors)}
    for k, v in (extra or {}).items():
        meta[k] = v if isinstance(v, str) else json.dumps(v, sort_keys=True)
    return st_save(tensors, metadata=meta)


def save(
    model: torch.nn.Module, directory: str | Path, cfg=None, extra: dict | None = None, stem: str = "model"
) -> tuple:
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
        header = json.loads(data[8 : 8 + n])
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ConfigError("weights", "header", "a .safetensors file (the header is not valid JSON)") from None
    meta = header.get("__metadata__") if isinstance(header, dict) else None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ConfigError(
            "weights",
            "metadata",
            f"a file saved by the explorer (metadata format {FORMAT!r} "
            "with the model's config); this safetensors file has none",
        )
    return meta


def read_header(data: bytes) -> dict:
    """The whole safetensors header (tensor entries and ``__metadata__``) of a file already checked by
    ``read_metadata``."""
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8 : 8 + n])


def load(source: str | Path | bytes, config=None, check=None) -> tuple:
    """``(cfg, model, metadata)`` from a saved file (path or bytes); ``config`` (a ModelConfig,
    dict, JSON string or path of a config.json), when given, must equal the embedded one; ``check``
    (``ModelConfig -> ModelConfig``, raising ``ConfigError``) vets the embedded config before anything
    is built (the app passes its caps and budget)."""
    data = _read(source)
    meta = read_metadata(data)
    try:
        cfg = as_config(meta["config"]) if check is None else check(meta["config"])
    except KeyError:
        raise ConfigError("weights", "metadata", "a file whose metadata holds the model config") from None
    if config is not None:
        other = as_config(Path(config).read_text() if isinstance(config, Path) else config)
        if other.to_dict() != cfg.to_dict():
            diff = sorted(k for k, v in other.to_dict().items() if cfg.to_dict()[k] != v)
            raise ConfigError(
                "config",
                diff[0],
                f"the config the weights were saved with ({', '.join(f'{k}={getattr(cfg, k)!r}' for k in diff[:4])})",
            )
    _match(_header_shapes(read_header(data)), _meta_shapes(cfg))  # names, shapes and dtypes, nothing allocated
    try:
        tensors = st_load(data)
    except Exception:  # safetensors raises its own error types for corrupt data
        raise ConfigError("weights", "data", "a readable .safetensors file (its tensors could not be read)") from None
    if tensor_digest(tensors) != meta.get("sha256"):  # accidental damage only: a recomputed digest passes
        raise ConfigError(
            "weights",
            "sha256",
            "tensors matching the digest saved with them: the file was modified after it was saved (or is incomplete)",
        )
    for name, t in tensors.items():  # NaN / Inf would draw blank maps and poison every loss
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise ConfigError("weights", name[:80], "finite numbers only (this tensor holds NaN or Inf)")
    model = build_model(cfg)
    _match(
        {k: (tuple(t.shape), t.dtype) for k, t in tensors.items()},
        {k: (tuple(t.shape), t.dtype) for k, t in model.state_dict().items()},
    )
    model.load_state_dict(tensors, strict=True)
    return cfg, model, meta


DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}


def _header_shapes(header: dict) -> dict:
    """``{name: (shape, dtype)}`` of the header's tensor entries."""
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(entry, dict) or not isinstance(entry.get("shape"), list):
            raise ConfigError("weights", str(name)[:80], "a tensor entry with a shape in the header")
        out[name] = (tuple(entry["shape"]), DTYPES.get(entry.get("dtype"), entry.get("dtype")))
    return out


def _meta_shapes(cfg) -> dict | None:
    """``{name: (shape, dtype)}`` of the config's model built on the meta device; None when a module
    cannot be built there (its tensors are then compared after the real build)."""
    try:
        with on_meta():
            return {k: (tuple(t.shape), t.dtype) for k, t in build_model(cfg).state_dict().items()}
    except Exception:
        return None


def _match(got: dict, expected: dict | None) -> None:
    """Refuse tensors missing, unexpected, or of another shape or dtype than ``expected``."""
    if expected is None:
        return
    missing = sorted(set(expected) - set(got))
    unexpected = sorted(set(got) - set(expected))
    if missing:
        raise ConfigError(
            "weights",
            missing[0],
            f"every tensor of this config's model; {len(missing)} missing (e.g. {', '.join(missing[:3])})",
        )
    if unexpected:
        raise ConfigError(
            "weights",
            unexpected[0][:80],
            f"only tensors of this config's model; {len(unexpected)} "
            f"unexpected (e.g. {', '.join(u[:80] for u in unexpected[:3])})",
        )
    for name, (shape, dtype) in expected.items():
        if got[name] != (shape, dtype):
            raise ConfigError(
                "weights",
                name,
                f"shape {shape} and dtype {dtype} for this config; the file has {got[name][0]} {got[name][1]}",
            )


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
