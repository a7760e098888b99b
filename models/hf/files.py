"""The files of a Hugging Face checkpoint folder, read without ``transformers`` and never unpickled.

- ``find(folder)``: ``config.json``, the weights (one ``model.safetensors``, or the shards named by
  ``model.safetensors.index.json``) and ``tokenizer.json`` when present. A folder whose weights are only
  pickles (``pytorch_model.bin``, ``*.pt``, ``*.pth``, ``*.ckpt``, ``*.pkl``) is refused: unpickling runs
  whatever code the file carries. Pickles beside safetensors are never opened.
- ``read_config(path)``: the JSON object of ``config.json`` (size-capped).
- ``read_headers(files)``: ``{tensor name: TensorEntry}`` from every safetensors header, checked
  (dtype, shape, data offsets inside the file that tile it as ``safetensors`` requires: in order, no
  overlap, no gap; no name twice) before a tensor byte is read.

Every JSON file is parsed by ``strict_json``: an absurd number, string or nesting is refused by name.
- ``open_tensors(entries)``: a context manager reading one tensor at a time (memory-mapped by
  ``safetensors``).

Every refusal is a ``ConfigError`` naming the file or the tensor.
"""

from __future__ import annotations

import contextlib
import math
import re
import struct
from dataclasses import dataclass
from pathlib import Path

import torch

from ..errors import ConfigError
from . import strict_json

CONFIG = "config.json"
SINGLE = "model.safetensors"
INDEX = "model.safetensors.index.json"
TOKENIZER = "tokenizer.json"
PICKLES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")
WHY_PICKLE = (
    "safetensors weights (model.safetensors, or shards with model.safetensors.index.json): "
    "{name} is a Python pickle, and unpickling runs any code the file contains, so it is never "
    "opened; convert it once on a trusted machine (transformers: model.save_pretrained(folder, "
    "safe_serialization=True))"
)

MAX_CONFIG_BYTES = 1 << 20  # a config.json is a few kB
MAX_INDEX_BYTES = 16 << 20  # an index lists every tensor name once
MAX_HEADER_BYTES = 64 << 20  # a safetensors header: JSON of names, dtypes, shapes, offsets
MAX_TOKENIZER_BYTES = 64 << 20  # the largest tokenizer.json files are ~30 MB
MAX_NAME_CHARS = 1 << 16  # a tensor name, a shard name, a header's metadata value
MAX_SHARDS = 1024  # safetensors files one index may name
SHARD_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,200}\.safetensors$")  # a plain file name, no folder

# safetensors dtype -> torch dtype; only floating weights are weights a model can read
DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}
ITEM_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2}


@dataclass(frozen=True)
class Files:
    folder: Path
    config: Path
    weights: tuple  # safetensors files, in shard order
    tokenizer: Path | None  # tokenizer.json, or None


@dataclass(frozen=True)
class TensorEntry:
    name: str
    file: Path
    dtype: str  # safetensors dtype ("F32", ...)
    shape: tuple

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    def meta(self) -> torch.Tensor:
        """A tensor of this shape and dtype with no storage (for shape checks of the mapping)."""
        return torch.empty(self.shape, dtype=DTYPES[self.dtype], device="meta")


def find(folder) -> Files:
    """The checkpoint files of ``folder`` (see the module docstring); ConfigError when unusable."""
    path = Path(folder)
    if path.is_file():
        if path.suffix.lower() in PICKLES:
            raise ConfigError("checkpoint", path.name, WHY_PICKLE.format(name=path.name))
        raise ConfigError(
            "checkpoint",
            str(folder),
            "a folder holding config.json and model.safetensors (a Hugging Face checkpoint saved with save_pretrained)",
        )
    if not path.is_dir():
        raise ConfigError("checkpoint", str(folder), "an existing folder holding config.json and model.safetensors")
    config = path / CONFIG
    if not config.is_file():
        raise ConfigError("checkpoint", str(folder), "a folder with a config.json (the model's sizes and choices)")
    index, single = path / INDEX, path / SINGLE
    if single.is_file():
        weights = (single,)
    elif index.is_file():
        weights = _shards(path, index)
    else:
        found = sorted(p.name for p in path.iterdir() if p.is_file() and p.suffix == ".safetensors")
        pickles = sorted(p.name for p in path.iterdir() if p.is_file() and p.suffix.lower() in PICKLES)
        if len(found) == 1:
            weights = (path / found[0],)
        elif found:
            raise ConfigError("checkpoint", ", ".join(found[:4]), f"one .safetensors file, or shards listed by {INDEX}")
        elif pickles:
            raise ConfigError("checkpoint", pickles[0], WHY_PICKLE.format(name=pickles[0]))
        else:
            raise ConfigError(
                "checkpoint", str(folder), f"a folder with model.safetensors (or shards and their {INDEX})"
            )
    tokenizer = path / TOKENIZER
    return Files(path, config, weights, tokenizer if tokenizer.is_file() else None)


def read_json(
    path: Path, cap: int, max_string: int = strict_json.MAX_CONFIG_STRING, infinite: frozenset = frozenset()
) -> dict:
    """The JSON object in ``path`` (at most ``cap`` bytes; ``infinite``: ``strict_json.loads``'s); ConfigError
    naming the file otherwise."""
    size = path.stat().st_size
    if size > cap:
        raise ConfigError(path.name, f"{size} bytes", f"a JSON file of at most {cap} bytes")
    data = strict_json.loads(path.read_bytes(), path.name, max_string, infinite)
    if not isinstance(data, dict):
        raise ConfigError(path.name, type(data).__name__, "a JSON object")
    return data


def read_config(path: Path) -> dict:
    return read_json(path, MAX_CONFIG_BYTES, infinite=strict_json.CONFIG_INFINITE)


def _shards(folder: Path, index: Path) -> tuple:
    """The shard files the index names (plain file names inside ``folder``), in first-use order."""
    weight_map = read_json(index, MAX_INDEX_BYTES, MAX_NAME_CHARS).get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise ConfigError(INDEX, "weight_map", "an object mapping each tensor name to its shard file")
    shards = {}  # in first-use order; a dict: a list's membership test made this loop quadratic in the index
    for _name, shard in weight_map.items():
        if not isinstance(shard, str) or not SHARD_NAME.match(shard) or shard.startswith("."):
            raise ConfigError(INDEX, str(shard)[:80], "plain .safetensors file names in the checkpoint folder")
        shards.setdefault(shard, None)
        if len(shards) > MAX_SHARDS:
            raise ConfigError(
                INDEX,
                f"more than {MAX_SHARDS} shard files",
                f"at most {MAX_SHARDS} shards (the largest public checkpoints have a few hundred)",
            )
    for shard in shards:
        if not (folder / shard).is_file():
            raise ConfigError(INDEX, shard, "shards that exist in the checkpoint folder (this one is missing)")
    return tuple(folder / s for s in shards)


def read_header(path: Path) -> dict:
    """``{name: TensorEntry}`` of one safetensors file, every entry checked against the file's size."""
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise ConfigError(path.name, f"{size} bytes", "a .safetensors file (this one is too short)")
        (n,) = struct.unpack("<Q", head)
        if n > MAX_HEADER_BYTES or n > size - 8:
            raise ConfigError(
                path.name,
                f"header of {n} bytes",
                f"a .safetensors header inside the file and at most {MAX_HEADER_BYTES} bytes",
            )
        raw = f.read(n)
    header = strict_json.loads(raw, f"{path.name} header", MAX_NAME_CHARS)
    if not isinstance(header, dict):
        raise ConfigError(path.name, "header", "a .safetensors header (a JSON object)")
    data_bytes = size - 8 - n
    out, spans = {}, []
    for name, entry in header.items():
        if name == "__metadata__":
            if entry is not None and not (isinstance(entry, dict) and all(isinstance(v, str) for v in entry.values())):
                raise ConfigError(f"{path.name}: __metadata__", str(entry)[:80], "null or an object of strings")
            continue
        if not isinstance(entry, dict):
            raise ConfigError(path.name, name[:80], "a tensor entry with dtype, shape and data_offsets")
        dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
        if dtype not in DTYPES:
            raise ConfigError(f"{path.name}: {name[:80]}", dtype, f"a floating dtype: {list(DTYPES)}")
        if not (
            isinstance(shape, list)
            and len(shape) <= 8
            and all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 1 << 40 for d in shape)
        ):
            raise ConfigError(f"{path.name}: {name[:80]}", str(shape)[:80], "a list of non-negative sizes")
        if not (
            isinstance(offsets, list)
            and len(offsets) == 2
            and all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
            and 0 <= offsets[0] <= offsets[1] <= data_bytes
            and offsets[1] - offsets[0] == math.prod(shape) * ITEM_BYTES[dtype]
        ):
            raise ConfigError(
                f"{path.name}: {name[:80]}",
                str(offsets)[:80],
                f"data offsets inside the file that hold shape {shape} of {dtype}",
            )
        out[name] = TensorEntry(name, path, dtype, tuple(shape))
        spans.append((offsets[0], offsets[1], name))
    _tiled(path, spans, data_bytes)
    return out


def _tiled(path: Path, spans: list, data_bytes: int) -> None:
    """Refuse data offsets that do not tile the data section: sorted by start, each tensor begins where
    the one before ends, and the last ends at the end of the file (what ``safetensors`` checks when
    the file is opened; checked here so a plan that passes is a file that opens)."""
    end, before = 0, None
    for start, stop, name in sorted(spans):
        if start != end:
            why = f"overlaps {before[:80]!r}" if start < end else f"leaves {start - end} bytes unused before it"
            raise ConfigError(
                f"{path.name}: {name[:80]}",
                [start, stop],
                f"data offsets that start where the tensor before ends ({end}): this one {why}",
            )
        end, before = stop, name
    if end != data_bytes:
        raise ConfigError(
            path.name,
            f"{data_bytes - end} bytes after the last tensor",
            "a data section the tensors cover exactly (the header's offsets end at the file's end)",
        )


def read_headers(files: tuple) -> dict:
    """``{name: TensorEntry}`` over every weights file; a name in two files is refused."""
    out = {}
    for path in files:
        for name, entry in read_header(path).items():
            if name in out:
                raise ConfigError(
                    "weights", name[:80], f"each tensor in one file (it is in {out[name].file.name} and {path.name})"
                )
            out[name] = entry
    return out


@contextlib.contextmanager
def open_tensors(files: tuple):
    """``read(entry) -> Tensor`` with every weights file open (memory-mapped) for the block."""
    from safetensors import safe_open

    with contextlib.ExitStack() as stack:
        handles = {path: stack.enter_context(safe_open(str(path), framework="pt")) for path in files}

        def read(entry: TensorEntry) -> torch.Tensor:
            return handles[entry.file].get_tensor(entry.name)

        yield read
