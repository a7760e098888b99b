"""Untrusted text on its way into the page or the parser: escaped, truncated and bounded.

Error messages echo the value that was refused (``n_layers=99 is not valid ...``), and that value
can come from a share link, an uploaded file or an API call. Gradio renders Markdown and toasts as
HTML, so an echoed ``<a href=...>`` or ``<img src=...>`` would be live in the page; ``shown``
escapes HTML *and* Markdown syntax and cuts the text to a few hundred characters (a 10 MB value
must not come back as a 10 MB message).

``load_json`` parses uploaded / posted JSON with bounds checked *before* Python's parser runs:
total size, nesting depth (deep nesting is a RecursionError inside ``json``) and the length of
every number literal (Python refuses integers past 4300 digits with a ValueError).
"""

from __future__ import annotations

import html
import json
import re

from models import ConfigError

MAX_SHOWN_CHARS = 300  # of one echoed message
MAX_JSON_BYTES = 100_000  # a config is ~2 kB
MAX_JSON_DEPTH = 8  # a config is one flat object
MAX_NUMBER_CHARS = 40  # 40 digits is far past any size the explorer accepts
# Markdown punctuation, plus "." and "/" so no bare URL (www.x.y, http://...) becomes a live link
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+!|~.:/-])")
_NUMBER = re.compile(r"-?\d[\d.eE+-]*")


def truncate(text, limit: int = MAX_SHOWN_CHARS) -> str:
    text = str(text)
    if len(text) <= limit:
        return text
    return text[:limit] + f"… ({len(text):,} characters in all)"


def words(text, limit: int) -> str:
    """``text`` whole, or cut at its last comma or space before ``limit`` (never inside a word or a name)."""
    text = str(text)
    if len(text) <= limit:
        return text
    cut = max(text.rfind(", ", 0, limit), text.rfind(" ", 0, limit))
    return text[: cut if cut > limit // 2 else limit].rstrip(", ") + f"… ({len(text):,} characters in all)"


def shown(text, limit: int = MAX_SHOWN_CHARS) -> str:
    """``text`` as inert characters in Markdown: cut between words (``words``), Markdown-escaped, then
    HTML-escaped."""
    return html.escape(_MD_SPECIAL.sub(r"\\\1", words(text, limit)), quote=True)


def shown_html(text, limit: int = MAX_SHOWN_CHARS) -> str:
    """``text`` as inert characters in HTML (a toast): cut between words (``words``) and HTML-escaped."""
    return html.escape(words(text, limit), quote=True)


def _depth_and_numbers(s: str) -> None:
    """Raise ConfigError past the depth or number-length bounds (a scan outside string literals)."""
    depth, in_str, esc = 0, False, False
    i, n = 0, len(s)
    while i < n:
        ch = s[i]
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            if depth > MAX_JSON_DEPTH:
                raise ConfigError(
                    "config",
                    f"nesting deeper than {MAX_JSON_DEPTH}",
                    f"a flat JSON object of ModelConfig fields (at most {MAX_JSON_DEPTH} levels)",
                )
        elif ch in "]}":
            depth -= 1
        elif ch == "-" or ch.isdigit():
            m = _NUMBER.match(s, i)
            if m and len(m.group()) > MAX_NUMBER_CHARS:
                raise ConfigError(
                    "config",
                    f"a number of {len(m.group())} characters",
                    f"numbers of at most {MAX_NUMBER_CHARS} characters",
                )
            if m:
                i = m.end()
                continue
        i += 1


def load_json(text: str | bytes, what: str = "config"):
    """``json.loads`` with the bounds above; every failure is a ConfigError naming ``what``."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise ConfigError(what, "bytes that are not UTF-8", "a UTF-8 JSON text") from None
    if not isinstance(text, str):
        raise ConfigError(what, type(text).__name__, "a JSON text")
    if len(text) > MAX_JSON_BYTES:
        raise ConfigError(what, f"{len(text):,} characters", f"a config JSON of at most {MAX_JSON_BYTES:,} characters")
    _depth_and_numbers(text)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(
            what, truncate(text, 60), f"valid JSON ({e.msg} at line {e.lineno} column {e.colno})"
        ) from None
    except (ValueError, RecursionError) as e:  # belt and braces: the scan should have caught these
        raise ConfigError(what, "an unreadable JSON text", f"a plain JSON object ({type(e).__name__})") from None
