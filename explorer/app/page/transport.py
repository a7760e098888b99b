"""How the first screen reaches a viewer over a slow link: the page compressed, Plotly fetched early.

Measured with ``python -m benchmarks.netcheck`` (10 Mbit/s, 40 ms, Chromium): the page document is
about 1 MB of HTML, most of it the first screen's figures as JSON inside Gradio's config. Gradio's
Brotli middleware compresses only paths with a text file's extension (``.js``, ``.css``, ``.json``...),
so the document at ``/`` went uncompressed. ``PAGE_DELIVERY`` gzips the responses of 1 kB or more that
it leaves (Starlette's middleware skips event streams, zips, images and fonts): the document to about
a ninth. Gradio's plot component imports Plotly (1.3 MB compressed) only once a plot mounts, after the
document and the page's scripts have arrived and run; a ``Link`` header on every HTML page
(``preload_links()``) names it, so that the browser fetches it alongside them. That module is answered
with Plotly's cartesian build in place of the full one (``explorer.app.page.plotly_build``: 1.25 MB ->
0.42 MB as Brotli, and a third of the evaluation).
"""

from __future__ import annotations

import asyncio
import re
import threading
from pathlib import Path

from starlette.middleware import Middleware
from starlette.middleware.gzip import GZipMiddleware

from explorer.app.page import plotly_build
from explorer.app.page.plotly_build import FRONTEND_ASSETS  # the plot component and the Plotly build it imports

GZIP_LEVEL = 6  # zlib's default: ~30 ms for the 1 MB document; level 9 takes ~3x the time for ~2% fewer bytes
GZIP_MIN_BYTES = 1024  # smaller bodies gain less than the header costs
# the extensions Gradio's BrotliMiddleware compresses (gradio/brotli_middleware.py): those stay Brotli's
BROTLI_EXTENSIONS = {".html", ".htm", ".js", ".css", ".json", ".md", ".txt", ".csv", ".tsv", ".xml", ".svg"}
PRELOADED = ("Plot-*.js", "PlotlyPlot-*.js")


class PageDelivery:
    """ASGI middleware: gzip for what Gradio's Brotli leaves (paths without a text extension: the
    page document, the API's JSON answers), the rest passed through untouched; and on every HTML
    page, a ``Link`` header naming Gradio's plot modules (``preload_links()``), which the browser
    fetches as soon as the headers arrive. (Gradio's ``head`` option does not do it: its tags reach
    the page's head through the app's script, after the page has loaded, as the plot's own import.)"""

    def __init__(self, app):
        self.app = app
        self.tag = early_module_tag()
        self.gzip = GZipMiddleware(self.with_early_module, minimum_size=GZIP_MIN_BYTES, compresslevel=GZIP_LEVEL)
        self.link = preload_links().encode("latin-1")
        self.warmed = False

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def send_linked(message):
            if message["type"] == "http.response.start" and self.link:
                headers = dict(message.get("headers") or [])
                if headers.get(b"content-type", b"").startswith(b"text/html"):
                    message = {**message, "headers": [*message.get("headers", []), (b"link", self.link)]}
            await send(message)

        if not self.warmed:  # the first request (Gradio's own, at launch): the module is built off the event loop
            self.warmed = True
            threading.Thread(target=plotly_build.plot_module, name="plotly-build", daemon=True).start()
        if "/assets/PlotlyPlot-" in scope.get("path", ""):
            module = await asyncio.to_thread(plotly_build.plot_module)
            if module is not None and plotly_build.is_module_request(scope, module.name):
                return await plotly_build.answer(module, scope, send)  # Plotly's cartesian build (plotly_build)
        if Path(scope.get("path", "")).suffix.lower() not in BROTLI_EXTENSIONS:
            return await self.gzip(scope, receive, send_linked)
        return await self.app(scope, receive, send_linked)

    async def with_early_module(self, scope, receive, send):
        """The app, with ``self.tag`` (an async module script for the plot module) inserted after Gradio's own
        entry script in the page document, so that the browser evaluates Plotly as soon as it has arrived,
        while Gradio's start-up still fetches its components, not once a plot mounts (0.3-0.7 s later)."""
        if not self.tag:
            return await self.app(scope, receive, send)
        held, parts = [], []

        async def send_tagged(message):
            if message["type"] == "http.response.start":
                headers = dict(message.get("headers") or [])
                if headers.get(b"content-type", b"").startswith(b"text/html") and b"content-encoding" not in headers:
                    held.append(message)  # the headers wait for the body: its length changes
                    return
            elif message["type"] == "http.response.body" and held:
                parts.append(message.get("body", b""))
                if message.get("more_body"):
                    return
                body = with_tag(b"".join(parts), self.tag)
                start = held.pop()
                headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
                await send({**start, "headers": [*headers, (b"content-length", str(len(body)).encode())]})
                message = {"type": "http.response.body", "body": body}
            await send(message)

        return await self.app(scope, receive, send_tagged)


PAGE_DELIVERY = Middleware(PageDelivery)
ENTRY = re.compile(rb'<script type="module" crossorigin src="\./assets/index-[\w-]+\.js"></script>')


def early_module_tag(assets: Path = FRONTEND_ASSETS) -> bytes:
    """``<script type="module" async crossorigin src="./assets/PlotlyPlot-...js">``: evaluated as soon as it has
    arrived (the ``Link`` header started its fetch), the same module Gradio's plot component imports later
    (one module per URL: it is evaluated once). b"" when Gradio's release names it otherwise."""
    path = plotly_build.gradio_module_path(assets)
    return (
        b""
        if path is None
        else f'<script type="module" async crossorigin src="./assets/{path.name}"></script>'.encode()
    )


def with_tag(document: bytes, tag: bytes) -> bytes:
    """``document`` with ``tag`` right after Gradio's entry script; unchanged when it has none (not the app's page)."""
    found = ENTRY.search(document)
    return document if found is None or tag in document else document[: found.end()] + tag + document[found.end() :]


def preload_links(assets: Path = FRONTEND_ASSETS) -> str:
    """A ``Link`` header's value preloading Gradio's plot component and the Plotly build it imports,
    as found in its installed frontend ("" when a Gradio release names them otherwise: the page then
    loads them as before). Relative to the page, as Gradio's own asset URLs are (a Space may serve
    the app under a path); module preloads, so the import that follows finds them fetched."""
    return ", ".join(
        f"<assets/{path.name}>; rel=modulepreload" for pattern in PRELOADED for path in sorted(assets.glob(pattern))
    )
