"""Plotly figures -> PNG bytes through kaleido (a headless Chrome or Chromium), bounded in time and
in browsers: the export's static pictures.

Kaleido 1.x drives a locally installed Chrome (on the host, Debian's ``/usr/bin/chromium``) over the
DevTools protocol; it never downloads anything here: the page it renders in loads plotly.js from
the installed plotly package and MathJax is switched off (no CDN request).

Bounds: one browser in the whole process, used by one export at a time (``_BROWSER``, a semaphore:
an export that waits longer than ``WAIT_S`` renders no PNGs and says why); it is kept ``IDLE_S``
after an export so the next one skips its start-up, closed when idle and closed at once after any
failure (a crashed or hung browser is never reused); ``STARTUP_S`` for the browser start,
``FIGURE_S`` per figure, ``TOTAL_S`` for all of them, at most ``MAX_FIGURES`` figures. Nothing here
raises: a missing kaleido or Chrome, a time-out or a crash comes back as the reason the PNGs (or
some of them) were skipped.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import logging
import threading
import time
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

WIDTH = 1400  # px: wide enough for a projector; the height is the figure's own layout height
DEFAULT_HEIGHT = 500  # px, for a figure without a layout height
STARTUP_S = 30.0  # the browser start (11-19 s measured on the 2-core host under load)
FIGURE_S = 20.0  # one figure
TOTAL_S = 120.0  # every figure of one export, start-up included
WAIT_S = 60.0  # waiting for another export's browser
IDLE_S = 120.0  # the browser is kept this long after an export (the next one starts warm), then closed
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
        got = _run(figures)
        got.notes[:0] = out.notes
        return got
    finally:
        _BROWSER.release()


def _run(figures: list) -> Rendered:
    """Render on the shared browser's event loop (its own thread: the caller may be inside a loop)."""
    try:
        return _HOLDER.render(figures)
    except Exception as exc:  # the renderer's own failure must not fail the export
        log.exception("PNG rendering failed")
        return Rendered(skipped=f"the PNG renderer failed ({type(exc).__name__}: {str(exc)[:160]})")


class _BrowserHolder:
    """The process's one PNG browser. Launched by the first export, kept for ``IDLE_S`` after the
    last one (a warm export skips the seconds of browser start-up), then closed; closed at once
    after any failure, so a crashed or hung browser is never reused. Only ``render_pngs`` calls it,
    holding ``_BROWSER``, so one export at a time touches it. It holds a process resource, no
    user data."""

    def __init__(self):
        self.loop = None
        self.kaleido = None
        self.idle = None  # the scheduled idle close

    def render(self, figures: list) -> Rendered:
        if self.loop is None:
            self.loop = asyncio.new_event_loop()
            threading.Thread(target=self.loop.run_forever, daemon=True, name="explorer-png-browser").start()
            atexit.register(self.shutdown)
        job = asyncio.run_coroutine_threadsafe(self._render(figures), self.loop)
        try:
            return job.result(TOTAL_S + 30.0)  # the coroutine enforces TOTAL_S; this is the backstop
        except concurrent.futures.TimeoutError:
            job.cancel()
            asyncio.run_coroutine_threadsafe(self._close(), self.loop)
            return Rendered(skipped=f"the PNG renderer did not finish within {TOTAL_S:.0f} s")

    def shutdown(self) -> None:
        """Close the browser now (process exit, tests)."""
        if self.loop is not None and self.kaleido is not None:
            try:
                asyncio.run_coroutine_threadsafe(self._close(), self.loop).result(20.0)
            except Exception:
                log.warning("closing the PNG browser failed", exc_info=True)

    def pid(self):
        """The running browser's process id, or None."""
        proc = getattr(self.kaleido, "subprocess", None)
        return proc.pid if proc is not None and proc.poll() is None else None

    async def _close(self) -> None:
        if self.idle is not None:
            self.idle.cancel()
            self.idle = None
        k, self.kaleido = self.kaleido, None
        if k is not None:
            try:
                await asyncio.wait_for(k.close(), 15.0)
            except Exception:
                log.warning("closing the PNG browser failed", exc_info=True)

    async def _open(self, out: Rendered, start: float) -> bool:
        """Start the browser unless a live one is kept; False (and ``out.skipped`` says why) if it cannot."""
        if self.idle is not None:
            self.idle.cancel()
            self.idle = None
        if self.kaleido is not None and self.pid() is not None:
            return True
        await self._close()  # a kept browser that died
        import kaleido
        from choreographer.errors import ChromeNotFoundError

        try:
            k = kaleido.Kaleido(n=1, timeout=FIGURE_S, mathjax=False)
        except ChromeNotFoundError:
            out.skipped = "no Chrome or Chromium was found (kaleido renders PNGs in one); install one to get them"
            return False
        self.kaleido = k
        try:
            await asyncio.wait_for(k.open(), STARTUP_S)
        except Exception as exc:  # choreographer turns the time-out's cancellation into BrowserFailedError
            await self._close()
            if isinstance(exc, asyncio.TimeoutError) or time.monotonic() - start >= STARTUP_S:
                out.skipped = f"the browser did not start within {STARTUP_S:g} s"
            else:
                first = exc.args[0] if exc.args else ""
                out.skipped = f"the browser did not start ({type(exc).__name__}: {str(first)[:160]})"
            return False
        return True

    async def _render(self, figures: list) -> Rendered:
        out = Rendered()
        start = time.monotonic()
        if not await self._open(out, start):
            return out
        started, failed = time.monotonic(), False
        for n, (stem, fig) in enumerate(figures):
            left = TOTAL_S - (time.monotonic() - start)
            if left <= 1.0:
                out.notes.append(f"{len(figures) - n} figure(s) not rendered: the {TOTAL_S:.0f} s limit was reached")
                failed = True
                break
            width, height = png_size(fig)
            try:
                png = await asyncio.wait_for(
                    self.kaleido.calc_fig(fig, opts=dict(format="png", width=width, height=height, scale=1)),
                    min(FIGURE_S, left),
                )
            except Exception as exc:  # a time-out or a failed figure: the others still come
                out.notes.append(f"{stem}.png not rendered ({type(exc).__name__})")
                failed = True
                continue
            if isinstance(png, bytes) and png.startswith(PNG_SIGNATURE):
                out.pngs[stem] = png
            else:
                out.notes.append(f"{stem}.png not rendered (the browser returned no PNG)")
                failed = True
        log.info(
            "PNG export: browser ready in %.1f s, %d of %d figures in %.1f s",
            started - start,
            len(out.pngs),
            len(figures),
            time.monotonic() - started,
        )
        if failed:
            await self._close()
        else:
            self.idle = asyncio.get_running_loop().call_later(IDLE_S, lambda: asyncio.ensure_future(self._close()))
        return out


_HOLDER = _BrowserHolder()
