"""Plotly's cartesian build in place of the full one inside Gradio's plot component.

Gradio 6.31's plot component is one JavaScript module (``assets/PlotlyPlot-<hash>.js``) holding the
whole Plotly.js 3.3 build, every trace type and map and 3-D renderer included: 4.6 MB, 1.25 MB as
Brotli. On a 10 Mbit/s link it arrived 1.8 s after the page request (``benchmarks.netcheck``), then took
one 0.95 s task of the page's main thread to evaluate, and only then could the attention grid be drawn
(first paint 3.2-3.5 s). The app draws three trace types (scatter, bar, heatmap; ``TRACES``), all in
Plotly's cartesian partial bundle, vendored unmodified in ``assets/vendor`` (1.4 MB, 0.42 MB as Brotli).

``plot_module()`` rebuilds Gradio's module with that bundle: Gradio's imports and its Svelte component
are kept byte for byte, and the one expression that evaluates the Plotly build (``var p=r(f(((e,t)=>{
<Plotly's UMD wrapper> return window.Plotly=e,e})}))()),``, a CommonJS wrapper called at once) gets the
cartesian bundle's UMD text as its body instead. The component then finds the same ``default.react``,
``Plots.resize`` and ``window.Plotly``. When a Gradio release lays the module out otherwise (the pattern
is not found, its end is found more than once, or anything but imports stands before it), ``plot_module()`` returns None
and Gradio serves its own module, as before.

``answer()`` (called by ``explorer.app.page.transport.PageDelivery``) answers the module's URL
with the rebuilt text, Brotli- or gzip-compressed as the browser accepts, with an ``ETag`` (a repeat
visit revalidates and gets a 304).
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import logging
import re
import threading
from pathlib import Path

import gradio as gr

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[3]
# Gradio's built frontend (hashed names, per release)
FRONTEND_ASSETS = Path(gr.__file__).resolve().parent / "templates" / "frontend" / "assets"
BUNDLE = ROOT / "assets" / "vendor" / "plotly-cartesian-3.4.0.min.js"
TRACES = ("scatter", "bar", "heatmap")  # every trace type explorer.figures draws (tests check both sides)
BROTLI_QUALITY = 9  # 0.1 s for 1.4 MB, 8% more bytes than quality 11 (2.3 s on the first request)
GZIP_LEVEL = 6
MODULE_GLOB = "PlotlyPlot-*.js"
# Gradio's (minified) expression around the Plotly build: `var p=r(f(((e,t)=>{` ... `return window.Plotly=e,e})}))()),`
START = re.compile(r"var ([\w$]+)=([\w$]+)\(([\w$]+)\(\(\(([\w$]+),([\w$]+)\)=>\{")
END = re.compile(r"return window\.Plotly=([\w$]+),\1\}\)\}\)\)\(\)\),")
IMPORTS = re.compile(r"(?:import\s*(?:\{[^}]*\}\s*from\s*)?\"[^\"]+\";)*")


def splice(gradio_module: str, bundle: str) -> str | None:
    """Gradio's plot module with ``bundle`` (a Plotly UMD build) evaluated in place of its own, or None
    when the module is not laid out as expected."""
    start, ends = START.search(gradio_module), list(END.finditer(gradio_module))
    if start is None or len(ends) != 1:
        return None
    end = ends[0]
    head = gradio_module[: start.start()]
    if start.end() >= end.start() or not IMPORTS.fullmatch(head):
        return None
    name, to_esm, common_js = start.group(1), start.group(2), start.group(3)
    # the bundle's UMD wrapper reads the free names `module` and `exports`: the CommonJS wrapper's parameters
    return (
        f"{head}var {name}={to_esm}({common_js}(((exports,module)=>{{\n{bundle}\n}}))()),{gradio_module[end.end() :]}"
    )


def gradio_module_path(assets: Path = FRONTEND_ASSETS) -> Path | None:
    found = sorted(assets.glob(MODULE_GLOB))
    return found[0] if len(found) == 1 else None


BUILDING = threading.Lock()  # one build, whichever thread asks first (the others wait for it)


def plot_module() -> Served | None:
    """The rebuilt module, its compressed forms and ETag (read and compressed once, ~0.2 s, when the server
    answers its first request), or None when it cannot be rebuilt (Gradio's own module is served then)."""
    with BUILDING:
        return built()


@functools.lru_cache(maxsize=1)
def built() -> Served | None:
    path = gradio_module_path()
    if path is None or not BUNDLE.is_file():
        log.warning("Plotly's cartesian build not used: %s", "no bundle" if path else "Gradio's plot module not found")
        return None
    text = splice(path.read_text(encoding="utf-8"), BUNDLE.read_text(encoding="utf-8"))
    if text is None:
        log.warning("Plotly's cartesian build not used: %s is laid out otherwise", path.name)
        return None
    return Served.of(path.name, text.encode("utf-8"))


class Served:
    """One module's bytes as sent: plain, Brotli and gzip, and its ETag."""

    def __init__(self, name: str, plain: bytes, br: bytes | None, gz: bytes):
        self.name, self.plain, self.br, self.gz = name, plain, br, gz
        self.etag = '"' + hashlib.sha256(plain).hexdigest()[:32] + '"'

    @classmethod
    def of(cls, name: str, plain: bytes) -> Served:
        try:
            import brotli  # Gradio's own dependency (its BrotliMiddleware)

            br = brotli.compress(plain, quality=BROTLI_QUALITY)
        except ImportError:
            br = None
        return cls(name, plain, br, gzip.compress(plain, GZIP_LEVEL, mtime=0))

    def body(self, accept_encoding: str) -> tuple[bytes, str | None]:
        """The bytes for a request's ``Accept-Encoding`` and the ``Content-Encoding`` they carry."""
        accepted = {part.split(";")[0].strip().lower() for part in accept_encoding.split(",")}
        if self.br is not None and "br" in accepted:
            return self.br, "br"
        if "gzip" in accepted:
            return self.gz, "gzip"
        return self.plain, None


def is_module_request(scope: dict, name: str) -> bool:
    """A GET or HEAD of ``.../assets/<name>`` (under whatever path the app is served)."""
    path = scope.get("path", "")
    return scope.get("method") in ("GET", "HEAD") and path.endswith("/assets/" + name)


async def answer(served: Served, scope: dict, send) -> None:
    """The module as one response: 304 when the browser holds this ETag already."""
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
    common = [
        (b"content-type", b"text/javascript; charset=utf-8"),
        (b"etag", served.etag.encode()),
        (b"vary", b"Accept-Encoding"),
    ]
    if served.etag in headers.get("if-none-match", ""):
        await send({"type": "http.response.start", "status": 304, "headers": common})
        await send({"type": "http.response.body", "body": b""})
        return
    body, encoding = served.body(headers.get("accept-encoding", ""))
    out = common + [(b"content-length", str(len(body)).encode())]
    if encoding:
        out.append((b"content-encoding", encoding.encode()))
    await send({"type": "http.response.start", "status": 200, "headers": out})
    await send({"type": "http.response.body", "body": b"" if scope.get("method") == "HEAD" else body})
