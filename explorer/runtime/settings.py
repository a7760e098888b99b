"""Every ``EXPLORER_*`` environment variable the app reads, parsed in one place, one way.

| variable | meaning | default |
| --- | --- | --- |
| ``EXPLORER_REQUEST_BUDGET`` | bytes one request may use: ``2G``, ``512M``, a byte count, or a fraction of the available memory like ``0.2`` | a quarter of the available memory, at most 8 GiB |
| ``EXPLORER_CACHE_BYTES`` | bytes of memoised results, same forms | a tenth of the available memory, at most 1 GiB |
| ``EXPLORER_SERVER_MEMORY`` | bytes all work running at once may hold together (``explorer.runtime.pool``), same forms | four fifths of the memory available when the app starts |
| ``EXPLORER_COMPUTE_SLOTS`` | analyses computed at once (besides ``EXPLORER_GUEST_SLOTS``) | 2 |
| ``EXPLORER_GUEST_SLOTS`` | more analyses computed at once, each for an address with nothing running and within its share (``explorer.runtime.fair``) | 4 |
| ``EXPLORER_QUEUE_SIZE`` | requests waiting before the app answers "busy"; its last quarter is kept for addresses with nothing waiting | 64 |
| ``EXPLORER_REQUEST_SECONDS`` | predicted seconds of one core one request may take (``explorer.runtime.cost``; more is refused by name before it runs) | 20 |
| ``EXPLORER_VISITOR_SHARE`` | seconds of one core one address may use per ``EXPLORER_SHARE_WINDOW`` (a request past it is refused; past a quarter of it, its work runs at the lowest priority) | 240 |
| ``EXPLORER_SHARE_WINDOW`` | the window of the visitor share, in seconds | 600 |
| ``EXPLORER_THREADS`` | intra-op threads per computation | 1 |
| ``EXPLORER_SESSION_TTL`` | seconds a browser session may stay idle before its server-side copy is dropped | 3600 |
| ``EXPLORER_COMPILE_BUDGET`` | seconds a sweep's untimed first call of a model may take (Triton compiles its kernels there) | 120 |
| ``EXPLORER_CLIENT_ADDRESS`` | which address names a visitor for the per-visitor limits: ``socket`` (the connection's peer), a number N (the N-th entry of ``X-Forwarded-For`` from the right: the address the outermost of N trusted proxies saw; a client cannot forge it), ``space`` (1, read only from a peer in a private network, as a Space's proxy connects) or ``forwarded-first`` (the first entry: forgeable by any client, for tests behind a proxy that overwrites the header) | ``space`` where ``SPACE_ID`` is set (a Space), else ``socket`` |
| ``EXPLORER_SESSIONS_PER_CLIENT`` | browser sessions one client address keeps on the server (its least recently used goes first; other addresses' sessions are never evicted for it) | 32 |
| ``EXPLORER_NEW_SESSIONS_PER_MINUTE`` | new browser sessions one client address may open per minute (each costs Gradio ~0.1 s of a core; more are answered 429) | 60 |
| ``EXPLORER_EVENTS_PER_CLIENT`` | events one client address may have waiting or running in the queue at once (more are answered 429 before they take a place) | 8 |
| ``EXPLORER_MAX_BODY`` | bytes of one request body other than an upload (413 above) | ``1M`` |
| ``EXPLORER_UPLOAD_TTL`` | seconds an upload stays in Gradio's upload cache (handlers copy or read it at once) | 300 |
| ``EXPLORER_CHECKPOINTS`` | folders of Hugging Face checkpoints to offer besides the shipped one (``os.pathsep``-separated; a folder holding ``config.json`` or folders of them) | none |
| ``EXPLORER_HUB_DOWNLOADS`` | ``1`` lets visitors open Hub models by id (``hub:<owner>/<name>``), downloaded on first use | off |
| ``EXPLORER_HUB_CACHE`` | where Hub downloads are kept | ``huggingface_hub``'s default |
| ``EXPLORER_CHECKPOINT_MAX_PARAMS`` | parameters of the largest checkpoint served (a whole number, ``_`` allowed) | 200000000 |
| ``EXPLORER_UPLOAD_CHECKPOINT_BYTES`` | bytes of an uploaded checkpoint's files together, same forms as the memory sizes | ``24M`` |
| ``EXPLORER_LONG_CONTEXT_MAX_TOKENS`` | the longest passage the long-context view reads (tokens; its lengths above it are not offered) | 16384 |
| ``TRITON_CACHE_DIR`` | where Triton keeps compiled kernels, kept across restarts (set by ``explorer.runtime.device.triton_cache``, created when a GPU first runs) | ``$XDG_CACHE_HOME/transformer-explorer/triton`` (``~/.cache/...``) |

Each is read when asked, so a test or a benchmark can set it for a server it starts. A count or a
duration that cannot be read falls back to its default (logged, naming the variable): a typo in a
Space's settings never stops the app from starting. A memory size that cannot be read is refused
with a ``ConfigError`` naming the variable, since guessing a memory limit would be worse.
"""  # noqa: E501 (a Markdown table, one row a line)

from __future__ import annotations

import logging
import math
import os
import tempfile

from models import ConfigError

log = logging.getLogger(__name__)

REQUEST_BUDGET = "EXPLORER_REQUEST_BUDGET"
CACHE_BYTES = "EXPLORER_CACHE_BYTES"
SERVER_MEMORY = "EXPLORER_SERVER_MEMORY"
COMPUTE_SLOTS = "EXPLORER_COMPUTE_SLOTS"
GUEST_SLOTS = "EXPLORER_GUEST_SLOTS"
REQUEST_SECONDS = "EXPLORER_REQUEST_SECONDS"
VISITOR_SHARE = "EXPLORER_VISITOR_SHARE"
SHARE_WINDOW = "EXPLORER_SHARE_WINDOW"
QUEUE_SIZE = "EXPLORER_QUEUE_SIZE"
THREADS = "EXPLORER_THREADS"
SESSION_TTL = "EXPLORER_SESSION_TTL"
COMPILE_BUDGET = "EXPLORER_COMPILE_BUDGET"
CLIENT_ADDRESS = "EXPLORER_CLIENT_ADDRESS"
SESSIONS_PER_CLIENT = "EXPLORER_SESSIONS_PER_CLIENT"
EVENTS_PER_CLIENT = "EXPLORER_EVENTS_PER_CLIENT"
NEW_SESSIONS = "EXPLORER_NEW_SESSIONS_PER_MINUTE"
MAX_BODY = "EXPLORER_MAX_BODY"
UPLOAD_TTL = "EXPLORER_UPLOAD_TTL"
CHECKPOINTS = "EXPLORER_CHECKPOINTS"
HUB_DOWNLOADS = "EXPLORER_HUB_DOWNLOADS"
HUB_CACHE = "EXPLORER_HUB_CACHE"
CHECKPOINT_MAX_PARAMS = "EXPLORER_CHECKPOINT_MAX_PARAMS"
UPLOAD_CHECKPOINT_BYTES = "EXPLORER_UPLOAD_CHECKPOINT_BYTES"
LONG_CONTEXT_MAX_TOKENS = "EXPLORER_LONG_CONTEXT_MAX_TOKENS"
TRITON_CACHE_DIR = "TRITON_CACHE_DIR"  # Triton's own variable: the app only gives it a lasting default

MAX_DEFAULT_BUDGET = 8 << 30  # a visitor never gets more than 8 GiB by default, however big the host
MAX_DEFAULT_CACHE = 1 << 30
_UNITS = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def _raw(name: str) -> str:
    return os.environ.get(name, "").strip()


def parse_size(text: str, available: int, name: str = REQUEST_BUDGET) -> int:
    """``"2G"`` / ``"512m"`` / ``"1500000000"`` -> bytes; ``"0.2"`` (a number below 1) -> that
    fraction of ``available``. ``ConfigError`` naming ``name`` for anything else."""
    s = str(text).strip().lower().removesuffix("b").removesuffix("i")
    try:
        if s and s[-1] in _UNITS:
            value = int(float(s[:-1]) * _UNITS[s[-1]])
        else:
            num = float(s)
            value = int(num * available) if 0 < num < 1 else int(num)
    except (ValueError, OverflowError):
        value = 0
    if value <= 0:
        raise ConfigError(
            name, text, "a size like 2G or 512M, a byte count, or a fraction of the available memory like 0.2"
        )
    return value


def _number(name: str, default, minimum, kind=int):
    raw = _raw(name)
    if not raw:
        return default
    try:
        value = kind(raw)
    except ValueError:
        value = None
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        log.warning("%s=%r is not a usable %s; using %s", name, raw[:40], kind.__name__, default)
        return default
    return max(minimum, value)


def request_budget(available: int, pool: int | None = None) -> int:
    """Bytes one request may use, given the memory available now (and never more than the ``pool``
    all running work shares)."""
    raw = _raw(REQUEST_BUDGET)
    value = parse_size(raw, available, REQUEST_BUDGET) if raw else min(available // 4, MAX_DEFAULT_BUDGET)
    return value if pool is None else min(value, pool)


def cache_bytes(available: int) -> int:
    """Bytes the memo of results may hold, given the memory available now."""
    raw = _raw(CACHE_BYTES)
    return parse_size(raw, available, CACHE_BYTES) if raw else min(available // 10, MAX_DEFAULT_CACHE)


def server_memory_set() -> bool:
    return bool(_raw(SERVER_MEMORY))


def server_memory(available: int) -> int:
    """Bytes all the server's running work may hold together, given the memory available now."""
    raw = _raw(SERVER_MEMORY)
    return parse_size(raw, available, SERVER_MEMORY) if raw else int(available * 0.8)


def compute_slots() -> int:
    """Analyses computed at once (measure with ``python -m benchmarks.compute_slots``)."""
    return _number(COMPUTE_SLOTS, 2, 1)


def guest_slots() -> int:
    """Analyses computed at once beyond ``compute_slots``, each for an address with nothing running within its share."""
    return _number(GUEST_SLOTS, 4, 0)


def queue_size() -> int:
    """Events waiting before a full queue answers "busy"."""
    return _number(QUEUE_SIZE, 64, 1)


def request_seconds() -> float:
    """Predicted seconds of one core one request may take (at least one)."""
    return float(_number(REQUEST_SECONDS, 20.0, 1.0, float))


def visitor_share() -> float:
    """Seconds of one core one client address may use per ``share_window()`` (at least one)."""
    return float(_number(VISITOR_SHARE, 240.0, 1.0, float))


def share_window() -> float:
    """The window of ``visitor_share``, in seconds (at least ten)."""
    return float(_number(SHARE_WINDOW, 600.0, 10.0, float))


def threads() -> int:
    """Intra-op threads per computation: one per request avoids oversubscribing a small host."""
    return _number(THREADS, 1, 1)


def session_ttl() -> float:
    """Seconds a session may stay idle (at least one)."""
    return float(_number(SESSION_TTL, 3600.0, 1.0, float))


def compile_budget() -> float:
    """Seconds a sweep's untimed first call may take (at least one): kernel compilation happens there."""
    return float(_number(COMPILE_BUDGET, 120.0, 1.0, float))


def client_address_mode() -> str | int:
    """``"socket"``, ``"space"``, ``"forwarded-first"`` or a count of trusted proxies (see the table): a value
    that cannot be read falls back to the default, logged."""
    raw = _raw(CLIENT_ADDRESS).lower()
    default = "space" if _raw("SPACE_ID") else "socket"
    if not raw:
        return default
    if raw in ("socket", "space", "forwarded-first"):
        return raw
    if raw.isdigit() and 0 < int(raw) <= 16:
        return int(raw)
    log.warning(
        "%s=%r is not socket, space, forwarded-first or a proxy count 1-16; using %s", CLIENT_ADDRESS, raw[:40], default
    )
    return default


def sessions_per_client() -> int:
    return _number(SESSIONS_PER_CLIENT, 32, 1)


def events_per_client() -> int:
    return _number(EVENTS_PER_CLIENT, 8, 1)


def new_sessions_per_minute() -> int:
    return _number(NEW_SESSIONS, 60, 1)


def max_body() -> int:
    """Bytes of one non-upload request body."""
    raw = _raw(MAX_BODY)
    return parse_size(raw, 1 << 40, MAX_BODY) if raw else 1 << 20


def upload_ttl() -> float:
    """Seconds an upload stays in Gradio's upload cache (at least ten)."""
    return float(_number(UPLOAD_TTL, 300.0, 10.0, float))


def checkpoint_roots() -> list:
    """The folders named by ``EXPLORER_CHECKPOINTS`` (``~`` expanded; empty entries skipped)."""
    return [os.path.expanduser(p) for p in _raw(CHECKPOINTS).split(os.pathsep) if p.strip()]


def hub_downloads() -> bool:
    """Whether visitors may open Hub models by id (``EXPLORER_HUB_DOWNLOADS``: 1, true, yes or on)."""
    return _raw(HUB_DOWNLOADS).lower() in ("1", "true", "yes", "on")


def hub_cache() -> str | None:
    """Where Hub downloads are kept (None: ``huggingface_hub``'s default)."""
    return _raw(HUB_CACHE) or None


def checkpoint_max_params(default: int) -> int:
    """Parameters of the largest checkpoint served; a value that is no number is refused naming the
    variable (guessing a cap on what a host loads would be worse)."""
    raw = _raw(CHECKPOINT_MAX_PARAMS).replace("_", "")
    if not raw:
        return default
    try:
        value = int(float(raw))
    except (ValueError, OverflowError):
        raise ConfigError(CHECKPOINT_MAX_PARAMS, raw[:40], "a whole number of parameters, e.g. 200000000") from None
    return max(1, value)


def upload_checkpoint_bytes(default: int) -> int:
    """Bytes of an uploaded checkpoint's files together (a size like the memory sizes)."""
    raw = _raw(UPLOAD_CHECKPOINT_BYTES)
    return parse_size(raw, 1 << 40, UPLOAD_CHECKPOINT_BYTES) if raw else default


def long_context_max_tokens() -> int:
    """The longest passage the long-context view reads, in tokens (at least 1024)."""
    return _number(LONG_CONTEXT_MAX_TOKENS, 16384, 1024)


def upload_dir() -> str:
    """Gradio's upload cache (``GRADIO_TEMP_DIR``, else ``gradio`` in the system's temporary folder), read
    the way Gradio reads it, for code below the app layer that must not import Gradio."""
    return _raw("GRADIO_TEMP_DIR") or os.path.realpath(os.path.join(tempfile.gettempdir(), "gradio"))


def triton_cache_dir() -> str:
    """``TRITON_CACHE_DIR`` when set, else ``transformer-explorer/triton`` under the user's cache folder
    (``XDG_CACHE_HOME``, default ``~/.cache``): outside the repository, kept across restarts, so a
    restarted server reloads its compiled kernels instead of compiling them again. Not created here."""
    raw = _raw(TRITON_CACHE_DIR)
    if raw:
        return raw
    base = _raw("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "transformer-explorer", "triton")
