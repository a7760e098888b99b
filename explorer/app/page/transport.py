"""How the first screen reaches a viewer over a slow link: the page compressed, Plotly fetched early.

Measured with ``python -m benchmarks.netcheck`` (10 Mbit/s, 40 ms, Chromium): the page document is
about 1 MB of HTML, most of it the first screen's figures as JSON inside Gradio's config. Gradio's
Brotli middleware compresses only paths with a text file's extension (``.js``, ``.css``, ``.json``...),
so the document at ``/`` went uncompressed. ``PAGE_DELIVERY`` gzips the responses of 1 kB or more that
it leaves (Starlette's middleware skips event streams, zips, images and fonts): the document to about
a ninth. Gradio's plot component imports Plotly (1.3 MB compressed) only once a plot mounts, after the
document and the page's scripts have arrived and run; a ``Link`` header on every HTML page
(``preload_links()``) names it, so that the browser fetches it alongside them.
"""
from __future__ import annotations

from pathlib import Path

import gradio as gr
from starlette.middleware import Middleware
from starlette.middleware.gzip import GZipMiddleware

GZIP_LEVEL = 6        # zlib's default: ~30 ms for the 1 MB document; level 9 takes ~3x the time for ~2% fewer bytes
GZIP_MIN_BYTES = 1024  # smaller bodies gain less than the header costs
# the extensions Gradio's BrotliMiddleware compresses (gradio/brotli_middleware.py): those stay Brotli's
BROTLI_EXTENSIONS = {".html", ".htm", ".js", ".css", ".json", ".md", ".txt", ".csv", ".tsv", ".xml", ".svg"}
# Gradio's built frontend: the plot component and the Plotly build it imports (hashed names, per release)
FRONTEND_ASSETS = Path(gr.__file__).resolve().parent / "templates" / "frontend" / "assets"
PRELOADED = ("Plot-*.js", "PlotlyPlot-*.js")


class PageDelivery:
    """ASGI middleware: gzip for what Gradio's Brotli leaves (paths without a text extension: the
    page document, the API's JSON answers), the rest passed through untouched; and on every HTML
    page, a ``Link`` header naming Gradio's plot modules (``preload_links()``), which the browser
    fetches as soon as the headers arrive. (Gradio's ``head`` option does not do it: its tags reach
    the page's head through the app's script, after the page has loaded, as the plot's own import.)"""

    def __init__(self, app):
        self.app = app
        self.gzip = GZipMiddleware(app, minimum_size=GZIP_MIN_BYTES, compresslevel=GZIP_LEVEL)
        self.link = preload_links().encode("latin-1")

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def send_linked(message):
            if message["type"] == "http.response.start" and self.link:
                headers = dict(message.get("headers") or [])
                if headers.get(b"content-type", b"").startswith(b"text/html"):
                    message = {**message, "headers": [*message.get("headers", []), (b"link", self.link)]}
            await send(message)

        if Path(scope.get("path", "")).suffix.lower() not in BROTLI_EXTENSIONS:
            return await self.gzip(scope, receive, send_linked)
        return await self.app(scope, receive, send_linked)


PAGE_DELIVERY = Middleware(PageDelivery)


def preload_links(assets: Path = FRONTEND_ASSETS) -> str:
    """A ``Link`` header's value preloading Gradio's plot component and the Plotly build it imports,
    as found in its installed frontend ("" when a Gradio release names them otherwise: the page then
    loads them as before). Relative to the page, as Gradio's own asset URLs are (a Space may serve
    the app under a path); module preloads, so the import that follows finds them fetched."""
    return ", ".join(f"<assets/{path.name}>; rel=modulepreload" for pattern in PRELOADED
                     for path in sorted(assets.glob(pattern)))
