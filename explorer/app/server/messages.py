"""What a visitor reads when something goes wrong or needs saying: escaped, truncated, never a traceback.

``problem(exc)`` is the message of a failed request: the ``ConfigError`` itself (it names the field
and what it accepts), a plain line for running out of memory, or a generic line with an incident
number for anything else; the exception's own text (allocator sizes, type errors, recursion depth)
is logged with its traceback for the host under that number, never shown. ``warn(msg)`` shows it as a toast and returns
the status line; the echoed value may be hostile, so both are escaped (``explorer.runtime.untrusted``).
"""

from __future__ import annotations

import logging
import secrets

import gradio as gr

from explorer.runtime.limits import MAX_TEXT_BYTES
from explorer.runtime.pool import is_out_of_memory
from explorer.runtime.untrusted import shown, shown_html, truncate, words
from models import ConfigError

log = logging.getLogger(__name__)


MAX_ALLOWED_CHARS = 2000  # what a field accepts is ours (every choice), but it may quote a value: bounded too
MESSAGE_CHARS = MAX_ALLOWED_CHARS + 400  # a whole ``problem()``: the field, the echoed value (120) and the rest


def problem(exc: Exception) -> str:
    """The message for a failed request: the ConfigError (the echoed value truncated, the valid values whole,
    or cut at a comma or space where over ``MAX_ALLOWED_CHARS``), or a generic line (logged)."""
    if isinstance(exc, ConfigError):
        return (
            f"{exc.field}={truncate(repr(exc.value), 120)} is not valid: {words(str(exc.allowed), MAX_ALLOWED_CHARS)}"
        )
    if isinstance(exc, UnicodeError):  # a lone surrogate in some text field that reached an encoder
        return "A text of this request is not valid Unicode (it holds a lone surrogate); remove that character."
    incident = secrets.token_hex(4)
    log.error("handler failed (incident %s)", incident, exc_info=exc)
    if is_out_of_memory(exc):
        return (
            f"This request ran out of memory on this server: make the model or the text smaller (incident {incident})."
        )
    return (
        f"Could not compute this configuration: an internal error (incident {incident}, logged for the "
        "host of this app). Try another setting."
    )


def refused(exc: Exception) -> gr.Error:
    """The ``gr.Error`` a failed request raises: ``problem(exc)``; a refusal (``ConfigError``: the visitor's value)
    is answered without a traceback in the server's console (a failure is logged with its incident)."""
    return gr.Error(problem(exc), print_exception=False)


def shown_problem(exc: Exception) -> str:
    """``problem(exc)`` for a Markdown status line: escaped, and whole (what the field accepts is never cut at the
    status line's usual few hundred characters; ``problem`` bounded the echoed value already)."""
    return shown(problem(exc), MESSAGE_CHARS)


def warn(msg: str) -> str:
    """Toast + status line; ``msg`` may echo a hostile value, so both are escaped (bounded: ``problem`` cut
    the echoed value already; what a field accepts is kept whole)."""
    gr.Warning(shown_html(msg, MESSAGE_CHARS))
    return f"⚠️ **{shown(msg, MESSAGE_CHARS)}** The figures show the last valid configuration."


def text_notice(text: str) -> str:
    """The status line for a text longer than the model reads ("" otherwise)."""
    n = len(str(text).encode("utf-8"))
    if n > MAX_TEXT_BYTES:
        return (
            f"ℹ️ The text is {n:,} bytes; the first {MAX_TEXT_BYTES} are used (one token per byte) "
            "and only those go into the share link."
        )
    return ""
