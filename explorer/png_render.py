"""Plotly figures -> PNG bytes through kaleido (a headless Chrome or Chromium), bounded in time and
in browsers: the export's static pictures.

Kaleido 1.x drives a locally installed Chrome (on the host, Debian's ``/usr/bin/chromium``) over the
DevTools protocol; it never downloads anything here: the page it renders in loads plotly.js from
the installed plotly package and MathJax is switched off (no CDN request).

Bounds: one browser at a time in the whole process (``_BROWSER``, a semaphore: a lock, not shared
data; an export that waits longer than ``WAIT_S`` renders no PNGs and says why), the browser is
launched for one export and closed after it (a crashed or hung browser never outlives its export),
``STARTUP_S`` for kaleido's import and the browser start, ``FIGURE_S`` per figure, ``TOTAL_S`` for
all of them, at most ``MAX_FIGURES`` figures. Nothing here raises: a missing kaleido or Chrome, a
time-out or a crash comes back as the reason the PNGs (or some of them) were skipped.
"""
from __future__ import annotations

import asyncio
import logging
import threading
import time
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

WIDTH = 1400          # px: wide enough for a projector; the height is the figure's own layout height
DEFAULT_HEIGHT = 500  # px, for a figure without a layout height
STARTUP_S = 30.0      # kaleido import + browser start
FIGURE_S = 20.0       # one figure
TOTAL_S = 120.0       # every figure of one export, start-up included
WAIT_S = 60.0         # waiting for another export's browser
MAX_FIGURES = 16
_BROWSER = threading.BoundedSemaphore(1)
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@dataclass
class Rendered:
    """``pngs``: file stem -> PNG bytes, in the order asked; ``skipped``: why no PNG at all was made
    ("" when the browser ran); ``notes``: figures left out and why."""
    pngs: dict = field(default_factory=dict)
    skipped: str = ""
    notes: list = field(default_factory=list)


def png_size(fig) -> tuple:
    """``(width, height)`` in pixels of the PNG rendered for ``fig``."""
    height = fig.layout.height
    return WIDTH, int(height) if height else DEFAULT_HEIGHT


def render_pngs(figures: list) -> Rendered:
    """``figures``: ``[(stem, plotly Figure), ...]`` -> ``Rendered``; never raises."""
    out = Rendered()
    if len(figures) > MAX_FIGURES:
        out.notes.append(f"{len(figures) - MAX_FIGURES} figure(s) past the first {MAX_FIGURES} were not rendered")
        figures = figures[:MAX_FIGURES]
    if not figures:
        return out
    try:
        import kaleido  # noqa: F401  (optional: the zip is complete without it, PNGs aside)
    except Exception as exc:  # ImportError, or a broken install
        out.skipped = f"kaleido is not installed ({type(exc).__name__}); pip install kaleido==1.5.0 renders them"
        return out
    if not _BROWSER.acquire(timeout=WAIT_S):
        out.skipped = f"another export was rendering PNGs for more than {WAIT_S:.0f} s; export again later"
        return out
    try:
        result = {}
        # a fresh event loop in its own thread: the caller may be inside one (Gradio's worker threads are not)
        worker = threading.Thread(target=lambda: result.update(value=_run(figures)), daemon=True,
                                  name="explorer-png-export")
        worker.start()
        worker.join(TOTAL_S + 30.0)  # the loop enforces TOTAL_S; this is the backstop for a stuck close
        if "value" not in result:
            out.skipped = f"the PNG renderer did not finish within {TOTAL_S:.0f} s"
            return out
        got = result["value"]
        got.notes[:0] = out.notes
        return got
    finally:
        _BROWSER.release()


def _run(figures: list) -> Rendered:
    try:
        return asyncio.run(_render(figures))
    except Exception as exc:  # the renderer's own failure must not fail the export
        log.exception("PNG rendering failed")
        return Rendered(skipped=f"the PNG renderer failed ({type(exc).__name__}: {str(exc)[:160]})")


async def _render(figures: list) -> Rendered:
    import kaleido
    from choreographer.errors import ChromeNotFoundError

    out = Rendered()
    start = time.monotonic()
    try:
        k = kaleido.Kaleido(n=1, timeout=FIGURE_S, mathjax=False)
    except ChromeNotFoundError:
        out.skipped = "no Chrome or Chromium was found (kaleido renders PNGs in one); install one to get them"
        return out
    try:
        try:
            await asyncio.wait_for(k.open(), STARTUP_S)
        except Exception as exc:  # choreographer turns the time-out's cancellation into BrowserFailedError
            if isinstance(exc, asyncio.TimeoutError) or time.monotonic() - start >= STARTUP_S:
                out.skipped = f"the browser did not start within {STARTUP_S:g} s"
            else:
                first = exc.args[0] if exc.args else ""
                out.skipped = f"the browser did not start ({type(exc).__name__}: {str(first)[:160]})"
            return out
        started = time.monotonic()
        for n, (stem, fig) in enumerate(figures):
            left = TOTAL_S - (time.monotonic() - start)
            if left <= 1.0:
                out.notes.append(f"{len(figures) - n} figure(s) not rendered: the {TOTAL_S:.0f} s limit was reached")
                break
            width, height = png_size(fig)
            try:
                png = await asyncio.wait_for(
                    k.calc_fig(fig, opts=dict(format="png", width=width, height=height, scale=1)),
                    min(FIGURE_S, left))
            except Exception as exc:  # a time-out or a failed figure: the others still come
                out.notes.append(f"{stem}.png not rendered ({type(exc).__name__})")
                continue
            if isinstance(png, bytes) and png.startswith(PNG_SIGNATURE):
                out.pngs[stem] = png
            else:
                out.notes.append(f"{stem}.png not rendered (the browser returned no PNG)")
        log.info("PNG export: browser start %.1f s, %d of %d figures in %.1f s", started - start, len(out.pngs),
                 len(figures), time.monotonic() - started)
    finally:
        try:
            await asyncio.wait_for(k.close(), 15.0)
        except Exception:
            log.warning("closing the PNG browser failed", exc_info=True)
    return out
