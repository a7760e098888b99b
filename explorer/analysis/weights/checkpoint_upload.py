"""A checkpoint a visitor uploads: its files checked, copied into a folder of our own, read, and the copy deleted.

``receive(paths)`` accepts the files of a small Hugging Face checkpoint (``config.json``, the
``*.safetensors`` and their index, ``tokenizer.json``; at most ``MAX_FILES`` files and
``max_bytes()`` bytes together, ``EXPLORER_UPLOAD_CHECKPOINT_BYTES``), ignores the other files
``transformers``' ``save_pretrained`` writes beside them (``EXTRAS``: generation_config.json, the tokenizer's
side files; ``ignored(paths)`` names them, never read), refuses any other name (a pickle with the reason),
copies them into a temporary folder it creates, under a fixed name each (the uploaded
names never reach a path), reads the checkpoint through ``explorer.analysis.weights.checkpoints.read`` (plan,
cap, budget, then the weights) and removes that folder. The checkpoint stays in memory under
``upload:<sha256 of the files>`` (``checkpoints.keep_upload``).

The paths it is handed are not its own: it never writes or deletes them (Gradio's upload cache ages them
out). Each must be a regular file inside Gradio's upload cache (``settings.upload_dir()``) and, where the
caller can tell (``owned``), the visitor's own upload; any other path is refused by name, unread.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
from pathlib import Path

from explorer.analysis.weights import checkpoints
from explorer.runtime import settings
from models import ConfigError
from models.hf.files import PICKLES

MAX_FILES = 8
BYTES_ENV = settings.UPLOAD_CHECKPOINT_BYTES
DEFAULT_BYTES = 24 << 20  # Gradio's per-file upload limit in this app (LAUNCH_OPTIONS)
NAMES = re.compile(
    r"^(config\.json|tokenizer\.json|model\.safetensors|model\.safetensors\.index\.json|"
    r"model-\d{5}-of-\d{5}\.safetensors)$"
)
# what save_pretrained (model and tokenizer) writes beside those: never read, so a saved folder uploads as it is
EXTRAS = re.compile(
    r"^(generation_config\.json|special_tokens_map\.json|tokenizer_config\.json|added_tokens\.json|"
    r"vocab\.json|vocab\.txt|merges\.txt|tokenizer\.model|spiece\.model|sentencepiece\.bpe\.model|"
    r"chat_template\.jinja|chat_template\.json)$"
)
MAX_EXTRAS = 12


def max_bytes() -> int:
    return settings.upload_checkpoint_bytes(DEFAULT_BYTES)


def _original_name(path: str) -> str:
    return os.path.basename(str(path))


def _inside(path, root: str) -> bool:
    """Is ``path`` a regular file (not a link) under ``root``, once every link on the way is resolved?"""
    real, base = os.path.realpath(path), os.path.realpath(root)
    return real.startswith(base + os.sep) and not os.path.islink(path) and os.path.isfile(real)


def check_files(paths, root: str | None = None, owned=None) -> dict:
    """``{name: path}`` of the uploaded files, or ConfigError naming the problem (nothing read yet). A
    path outside ``root`` (Gradio's upload cache), a link, or one ``owned(path)`` disowns is refused."""
    root = settings.upload_dir() if root is None else root
    paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths or ())
    if not paths:
        raise ConfigError("checkpoint upload", None, "config.json, model.safetensors and tokenizer.json")
    if len(paths) > MAX_FILES + MAX_EXTRAS:
        raise ConfigError("checkpoint upload", f"{len(paths)} files", f"at most {MAX_FILES + MAX_EXTRAS} files")
    files, total = {}, 0
    for p in paths:
        name = _original_name(p)
        if EXTRAS.match(name):
            continue  # ignored, unread (``ignored`` names it)
        if os.path.splitext(name)[1].lower() in PICKLES:
            raise ConfigError(
                "checkpoint upload",
                name[:60],
                f"safetensors weights: {name[:60]} is a Python pickle, "
                "and unpickling runs any code the file contains, so it is never read",
            )
        if not NAMES.match(name):
            raise ConfigError(
                "checkpoint upload",
                name[:60],
                "files named config.json, model.safetensors (or "
                "model-00001-of-0000N.safetensors with model.safetensors.index.json), tokenizer.json "
                "(and the files save_pretrained writes beside them, ignored: generation_config.json, "
                "tokenizer_config.json, special_tokens_map.json, vocab / merges files, tokenizer.model, "
                "chat_template files)",
            )
        if name in files:
            raise ConfigError("checkpoint upload", name, "each file once")
        if len(files) == MAX_FILES:
            raise ConfigError("checkpoint upload", f"more than {MAX_FILES} files to read", f"at most {MAX_FILES}")
        if not _inside(p, root) or (owned is not None and not owned(p)):
            raise ConfigError(
                "checkpoint upload",
                name[:60],
                f"files this visitor uploaded to this server (Gradio's upload cache); {name[:60]} is not one of them",
            )
        total += os.path.getsize(p)
        files[name] = p
    if total > max_bytes():
        raise ConfigError("checkpoint upload", f"{total:,} bytes", f"at most {max_bytes():,} bytes in all on this host")
    if "config.json" not in files:
        raise ConfigError("checkpoint upload", sorted(files), "a config.json among the files")
    return files


def ignored(paths) -> list:
    """The names among ``paths`` that ``check_files`` passes over unread (``EXTRAS``), sorted, each once."""
    paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths or ())
    return sorted({_original_name(p) for p in paths if EXTRAS.match(_original_name(p))})


def digest(files: dict) -> str:
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(f"{name}|".encode())
        with open(files[name], "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def receive(paths, root: str | None = None, owned=None) -> checkpoints.Loaded:
    """Check, read and keep an uploaded checkpoint (see the module docstring). ``root``: where uploads
    lie (default Gradio's upload cache); ``owned(path)``: is it this visitor's upload (default: not asked).
    The handed files are left as they are; the copy is made and deleted in a folder of its own."""
    files = check_files(paths, root, owned)
    with tempfile.TemporaryDirectory(prefix="explorer-upload-") as tmp:
        copies = {name: str(shutil.copyfile(path, Path(tmp) / name)) for name, path in files.items()}
        ckpt_id = checkpoints.UPLOAD_PREFIX + digest(copies)  # of the bytes read, not of a path read again
        try:
            return checkpoints.load(ckpt_id)  # the same files uploaded again
        except ConfigError:
            pass
        loaded = checkpoints.read(tmp, ckpt_id, name=checkpoints.shown_name(ckpt_id))
    checkpoints.keep_upload(loaded)
    return loaded
