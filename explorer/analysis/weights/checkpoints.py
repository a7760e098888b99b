"""Pretrained checkpoints as weights the analyses draw: which ones this host offers, and loading one.

A checkpoint is a Hugging Face folder (``config.json``, ``*.safetensors``, ``tokenizer.json``) read by
``models.hf`` (never ``transformers``, never a pickle). The app names one by an id:

- a folder name: every folder holding a ``config.json`` directly under a root (``assets/checkpoints``,
  shipped with the app, then each folder of ``EXPLORER_CHECKPOINTS``, separated by ``os.pathsep``; a
  root that is itself a checkpoint is offered under its own name). Nothing outside the roots is read.
- ``hub:<owner>/<name>``: a Hugging Face Hub model, only where ``EXPLORER_HUB_DOWNLOADS=1`` (a Space
  sets it as a variable in its settings); its safetensors are sized from the Hub's listing before
  anything is downloaded, and only config, weights and tokenizer files are fetched.
- ``upload:<sha256>``: a checkpoint a visitor uploaded (``explorer.analysis.weights.checkpoint_upload``), kept in a
  small memo by the digest of its files' contents.

``load(ckpt_id)`` plans the checkpoint from its headers first (``models.hf.plan``: family, config,
parameter count against ``max_params()``, every tensor's shape), refuses it when its weights would not
fit the per-request memory budget, and only then reads the weights (``models.hf.load`` of that plan: the
config and the headers are read, the model built, once), holding their bytes in the server's memory
pool while it does. The result, a ``Loaded`` record (its ``weights`` a ``TrainedWeights`` carrying the
tokenizer), is memoised per id: at most ``MAX_LOADED`` models stay in memory, shared read-only by every
session like the bundles. A request loads its checkpoint once and passes the record on
(``explorer.analysis.source``): ``load`` given a ``Loaded`` returns it as it is.

A refused upload (named by the digest of its files' contents, so the same id always means the same
bytes) is remembered with its reason (``_REFUSED``, at most ``MAX_REFUSED``): asking for it again answers at
once instead of parsing an 18 MB tokenizer in a compute slot on every request.
"""

from __future__ import annotations

import re
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

from explorer.analysis.weights.bundled import ROOT
from explorer.analysis.weights.trained import TrainedWeights, tensor_digest
from explorer.runtime import budget, settings
from explorer.runtime.cache import ByteLRU
from explorer.runtime.pool import POOL
from models import ConfigError, ModelConfig

SHIPPED = ROOT / "assets" / "checkpoints"
ROOTS_ENV, HUB_ENV, MAX_PARAMS_ENV = settings.CHECKPOINTS, settings.HUB_DOWNLOADS, settings.CHECKPOINT_MAX_PARAMS
HUB_PREFIX, UPLOAD_PREFIX = "hub:", "upload:"
DEFAULT_MAX_PARAMS = 200_000_000  # measured: a 186 M model loads in 0.27 s and runs 128 tokens in 0.23 s on 2 cores
MAX_LOADED = 2
MAX_REFUSED = 256  # refusals remembered (a few hundred bytes each)
MAX_ID_CHARS = 120
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
UPLOAD_ID = re.compile(r"^[0-9a-f]{64}$")
HUB_FILES = ("config.json", "*.safetensors", "model.safetensors.index.json", "tokenizer.json")

# bounded by count, not by the results' cache budget: a 200 M model (800 MB) must stay loaded on a host whose
# cache budget is smaller, or every click would read it again; the budget check before a read bounds each one
_LOADED = ByteLRU(max_bytes=1 << 62, max_entries=MAX_LOADED)
_UPLOADS = ByteLRU(max_bytes=1 << 62, max_entries=MAX_LOADED)  # id -> Loaded of an upload (its files deleted)
_REFUSED: OrderedDict = OrderedDict()  # upload id -> the ConfigError's (field, value, allowed)
_LOCK_REFUSED = threading.Lock()
_LOCK = threading.Lock()  # one checkpoint read at a time (a fraction of a second each): two visitors asking for one
# model read it once


@dataclass(frozen=True)
class Loaded:
    """A checkpoint in memory: its catalogue config, its weights (with the tokenizer) and what the page says."""

    id: str
    name: str
    family: str
    config: ModelConfig
    weights: TrainedWeights = field(repr=False, compare=False)  # out of eq / hash: the record keys a memo by id
    n_params: int
    notes: tuple
    load_s: float

    @property
    def tokenizer(self):
        return self.weights.tokenizer

    def describe(self) -> str:
        """ "checkpoint 'byte-llama' (llama, 2.1 M parameters)"."""
        return f"checkpoint '{self.name}' ({self.family}, {count(self.n_params)} parameters)"


def count(n: int) -> str:
    """ "134.5 M", "2.10 M", "48,640"."""
    return f"{n / 1e6:.1f} M" if n >= 1e7 else f"{n / 1e6:.2f} M" if n >= 1e6 else f"{n:,}"


def max_params() -> int:
    """The parameter cap for a checkpoint served interactively (``EXPLORER_CHECKPOINT_MAX_PARAMS``)."""
    return settings.checkpoint_max_params(DEFAULT_MAX_PARAMS)


def hub_allowed() -> bool:
    return settings.hub_downloads()


def roots() -> list:
    """The folders checkpoints are offered from: the shipped one, then ``EXPLORER_CHECKPOINTS``'s."""
    extra = [Path(p) for p in settings.checkpoint_roots()]
    return [r for r in [SHIPPED, *extra] if r.is_dir()]


def offered() -> dict:
    """``{name: folder}`` of the checkpoints this host offers (a folder name that is no valid id is skipped)."""
    found = {}
    for root in roots():
        folders = [root] if (root / "config.json").is_file() else sorted(p for p in root.iterdir() if p.is_dir())
        for folder in folders:
            if (folder / "config.json").is_file() and NAME.match(folder.name) and folder.name not in found:
                found[folder.name] = folder
    return found


def check_id(ckpt_id) -> str:
    """``ckpt_id`` as a well-formed id (ConfigError naming the field and the ids offered otherwise)."""
    ok = (
        isinstance(ckpt_id, str)
        and len(ckpt_id) <= MAX_ID_CHARS
        and (
            NAME.match(ckpt_id)
            or (ckpt_id.startswith(HUB_PREFIX) and HUB_ID.match(ckpt_id[len(HUB_PREFIX) :]))
            or (ckpt_id.startswith(UPLOAD_PREFIX) and UPLOAD_ID.match(ckpt_id[len(UPLOAD_PREFIX) :]))
        )
    )
    if not ok:
        shown = ckpt_id[:60] if isinstance(ckpt_id, str) else type(ckpt_id).__name__
        raise ConfigError("checkpoint", shown, valid_ids())
    return ckpt_id


def valid_ids() -> str:
    names = sorted(offered())
    hub = (
        f"or '{HUB_PREFIX}<owner>/<name>' (a Hugging Face Hub model)"
        if hub_allowed()
        else f"(Hub ids need {HUB_ENV}=1 on the host)"
    )
    return f"a checkpoint this host offers: {names or 'none'} {hub}"


def folder_of(ckpt_id: str) -> Path:
    """The local folder of an offered name or of a Hub id (downloaded now if allowed and not cached)."""
    ckpt_id = check_id(ckpt_id)
    if ckpt_id.startswith(HUB_PREFIX):
        if not hub_allowed():
            raise ConfigError(
                "checkpoint",
                ckpt_id,
                f"a checkpoint on this host: {sorted(offered()) or 'none'} "
                f"(this host does not download from the Hub: {HUB_ENV} is not set)",
            )
        from explorer.analysis.weights.hub import download  # only a host that allows downloads imports the Hub client

        return download(ckpt_id[len(HUB_PREFIX) :], max_bytes=max_params() * 4)
    found = offered().get(ckpt_id)
    if found is None:
        raise ConfigError("checkpoint", ckpt_id, valid_ids())
    return found


def load(ckpt_id) -> Loaded:
    """The checkpoint ``ckpt_id`` in memory (memoised; see the module docstring); a ``Loaded`` record is
    returned as it is (the request that loaded it passes it on instead of its id)."""
    if isinstance(ckpt_id, Loaded):
        return ckpt_id
    ckpt_id = check_id(ckpt_id)
    if ckpt_id.startswith(UPLOAD_PREFIX):
        key = ("upload", ckpt_id)
        if key not in _UPLOADS:
            raise ConfigError(
                "checkpoint",
                shown_name(ckpt_id),
                "an upload this server still holds (uploads are kept for a while only): upload the checkpoint again",
            )
        return _UPLOADS.get(key, lambda: None)
    key = ("local", ckpt_id)
    if key in _LOADED:
        return _LOADED.get(key, lambda: None)
    folder = folder_of(ckpt_id)  # a Hub download happens here, outside the lock: other checkpoints still open
    with _LOCK:
        return _LOADED.get(key, lambda: read(folder, ckpt_id))


def shown_name(ckpt_id: str) -> str:
    """The one name a visitor reads for ``ckpt_id`` (the Weights choice, the status line, a message): an
    upload's ``upload-<first 8 hex digits of its sha256>``, any other id as it is."""
    if ckpt_id.startswith(UPLOAD_PREFIX):
        return "upload-" + ckpt_id[len(UPLOAD_PREFIX) :][:8]
    return ckpt_id


def _remembered(ckpt_id: str) -> bool:
    return ckpt_id.startswith(UPLOAD_PREFIX)


def refused(ckpt_id: str) -> None:
    """Raise the reason ``ckpt_id`` was refused before, if it was (see the module docstring)."""
    with _LOCK_REFUSED:
        why = _REFUSED.get(ckpt_id)
        if why is not None:
            _REFUSED.move_to_end(ckpt_id)
    if why is not None:
        raise ConfigError(*why)


def _refuse(ckpt_id: str, exc: ConfigError) -> None:
    """Remember why a checkpoint named by its contents was refused (bounded: the oldest forgotten)."""
    if not _remembered(ckpt_id):
        return
    with _LOCK_REFUSED:
        _REFUSED[ckpt_id] = (exc.field, exc.value, exc.allowed)
        _REFUSED.move_to_end(ckpt_id)
        while len(_REFUSED) > MAX_REFUSED:
            _REFUSED.popitem(last=False)


def read(folder, ckpt_id: str, name: str | None = None) -> Loaded:
    """Plan, budget and read the checkpoint in ``folder`` (no memo of the result; a refusal of an upload
    is remembered by its id)."""
    from models import hf

    refused(ckpt_id)
    t0 = time.perf_counter()
    try:
        plan = hf.plan(folder, max_params=max_params())
        limit = budget.request_budget()
        if plan.n_bytes > limit:
            raise ConfigError(
                "checkpoint",
                f"{plan.n_params / 1e6:.1f} M parameters",
                f"weights within the per-request memory budget of {budget.human(limit)} (these need "
                f"{budget.human(plan.n_bytes)})",
            )
    except ConfigError as exc:
        _refuse(ckpt_id, exc)
        raise
    with POOL.reserve(plan.n_bytes, f"loading checkpoint '{plan.name}'"):  # busy: not remembered, asked again
        try:
            ckpt = hf.load(folder, max_params=max_params(), planned=plan)
        except ConfigError as exc:  # the tensors or the tokenizer refused
            _refuse(ckpt_id, exc)
            raise
    state = ckpt.model.state_dict()  # the loaded model's own tensors (a tied head shares the embedding's)
    name = name or plan.name
    weights = TrainedWeights(
        ckpt.config,
        state,
        tensor_digest(state),
        0,
        sum(t.numel() * t.element_size() for t in ckpt.model.parameters()),
        source=f"checkpoint '{name}' ({ckpt.family}, {count(ckpt.n_params)} parameters, pretrained)",
        tokenizer=ckpt.tokenizer,
        shared=True,
        checkpoint=ckpt_id,
    )
    return Loaded(ckpt_id, name, ckpt.family, ckpt.config, weights, ckpt.n_params, ckpt.notes, time.perf_counter() - t0)


def keep_upload(loaded: Loaded) -> None:
    """Hold an uploaded checkpoint under its id (``upload:<sha256 of its files>``) for later requests."""
    _UPLOADS.put(("upload", loaded.id), loaded)


def choice_ids() -> list:
    """The ids the Weights control lists (the host's own checkpoints; Hub ids and uploads are added
    to it when a visitor opens one)."""
    return sorted(offered())
