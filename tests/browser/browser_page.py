"""Driving the app in Debian's Chromium with Playwright (never a downloaded browser): a ``Page``
that records console errors and the app's queued requests, and reads Plotly data from the page."""

import os
import shutil
import time

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
VIEWPORT = {"width": 1600, "height": 1100}

# Values of a Plotly array as sent by the server: a plain array, or a base64 typed array
# ({dtype, bdata, shape}) that plotly.py uses for numpy data.
DECODE_JS = """const decode = (a) => {
  if (!a || Array.isArray(a) || ArrayBuffer.isView(a)) return Array.from(a || [], r => (Array.isArray(r) || ArrayBuffer.isView(r)) ? Array.from(r) : r).flat();
  const bin = atob(a.bdata), buf = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) buf[i] = bin.charCodeAt(i);
  const T = {f4: Float32Array, f8: Float64Array, u1: Uint8Array, i1: Int8Array, u2: Uint16Array, i2: Int16Array,
             u4: Uint32Array, i4: Int32Array}[a.dtype];
  return Array.from(new T(buf.buffer));
};"""  # noqa: E501 (JavaScript kept verbatim)
# Summary of a Plotly graph inside the element with id `sel`: trace count, names, x values and,
# for trace 0, the number of cells and of blank (NaN or colour level 0: not allowed) cells.
PLOT_JS = (
    """(sel) => {"""
    + DECODE_JS
    + """
  const el = document.querySelector(sel + ' .js-plotly-plot');
  if (!el || !el.data) return null;
  const out = {traces: el.data.length, names: el.data.map(t => t.name || ''), cells: 0, blank: 0,
               x: el.data.map(t => t.x ? decode(t.x) : [])};
  for (const v of decode(el.data[0].z)) { out.cells++; if (v === null || Number.isNaN(v) || v === 0) out.blank++; }
  return out;
}"""
)
BLANK_JS = (
    """([sel, blank]) => {"""
    + DECODE_JS
    + """
  const e = document.querySelector(sel + ' .js-plotly-plot');
  if (!e || !e.data) return false;
  return decode(e.data[0].z).filter(v => v === null || Number.isNaN(v) || v === 0).length !== blank;
}"""
)

# The page's own account of its events, read through a wrapper of its ``fetch``: each /queue/join
# (its fn_index, then the event_id it got back) and each message of Gradio's event streams
# (/queue/data, read through a tee so Gradio's reader sees the same bytes at the same pace). An event
# is pending from its join until a ``process_completed`` (a cancel also ends with one) or an
# ``unexpected_error`` names it. ``window.__events.last`` is the page time of the last join or
# message (heartbeats aside); ``window.__trace`` keeps the last 300 of them for failure messages.
TRACE_JS = """(() => {
  if (window.__events) return;
  const ev = window.__events = {asked: 0, answered: 0, ids: new Set(), done: new Set(), last: performance.now()};
  const log = window.__trace = [], t0 = performance.now(), fetch0 = window.fetch;
  const note = (what, quiet) => { if (!quiet) ev.last = performance.now();
    log.push([Math.round(performance.now() - t0), what]); if (log.length > 300) log.shift(); };
  const heard = (m, id) => {
    note(`stream ${id}: ${m.msg} ${m.event_id || ''}`, m.msg === 'heartbeat');
    if (m.event_id && (m.msg === 'process_completed' || m.msg === 'unexpected_error')) ev.done.add(m.event_id); };
  const read = async (body, id) => {
    const reader = body.pipeThrough(new TextDecoderStream()).getReader(); let buf = '';
    try { for (;;) { const {value, done} = await reader.read(); if (done) break; buf += value;
      let i; while ((i = buf.indexOf('\\n\\n')) >= 0) { const line = buf.slice(0, i); buf = buf.slice(i + 2);
        try { heard(JSON.parse(line.replace(/^data: /, '')), id); } catch (e) { note(`stream ${id}: ${line.slice(0, 40)}`); } } }
      note(`stream ${id} ended`); } catch (e) { note(`stream ${id} failed: ${e.name}`); } };
  let streams = 0;
  window.fetch = async function (...args) {
    const url = String((args[0] && args[0].url) || args[0]);
    if (url.includes('/queue/join')) {
      let fn = ''; try { fn = JSON.parse(args[1].body).fn_index; } catch (e) {}
      ev.asked++; note(`join fn ${fn}`);
      try { const res = await fetch0.apply(this, args);
        try { const j = await res.clone().json(); if (j && j.event_id) ev.ids.add(j.event_id);
              note(`joined fn ${fn}: ${j && j.event_id}`); } catch (e) { note(`join fn ${fn}: no event id`); }
        return res;
      } finally { ev.answered++; }
    }
    const res = await fetch0.apply(this, args);
    if (url.includes('/queue/data') && res.body) {
      const id = ++streams, [mine, theirs] = res.body.tee(); note(`stream ${id} opened`); read(mine, id);
      return new Response(theirs, {status: res.status, statusText: res.statusText, headers: res.headers});
    }
    return res;
  };
})()"""  # noqa: E501 (JavaScript kept verbatim)
# A signature of what the visible Plotly figures show: each one's laid-out size and the rounded box of
# each of its texts (titles, ticks, labels, annotations). It changes while Plotly or the page's layout
# scripts (a resize, their pass after Plotly's) still move something.
LAYOUT_JS = """() => [...document.querySelectorAll('.js-plotly-plot')].filter(g => g.offsetParent !== null)
  .map(g => { const l = g._fullLayout || {}; return [l.width, l.height, ...[...g.querySelectorAll('svg text')]
    .map(t => { const b = t.getBoundingClientRect(); return [t.textContent.length, Math.round(b.left),
      Math.round(b.top), Math.round(b.width), Math.round(b.height)].join(','); })].join(';'); }).join('|')"""
# -> [events pending, ms since the last join or message, progress indicators showing]
BUSY_JS = """() => { const ev = window.__events;
  if (!ev) return [0, 1e9, 0];
  const pending = (ev.asked - ev.answered) + [...ev.ids].filter(id => !ev.done.has(id)).length;
  return [pending, performance.now() - ev.last, document.querySelectorAll('.progress-text, .eta-bar').length]; }"""


class Page:
    """A fresh context + page that records console errors and checks for error toasts.

    ``viewport`` (default ``VIEWPORT``) and ``context_options`` (``is_mobile``, ``accept_downloads``...)
    go to the new context. After loading ``url`` it waits: ``wait=True`` for the app's first paint
    (the attention grid drawn), a CSS selector for that element, ``False`` not at all.
    ``errors`` collects console errors and uncaught page errors, ``page_errors`` the latter alone.
    The tests open pages through the ``open_page`` fixture (tests/browser/conftest.py), which closes them."""

    def __init__(self, browser, url, shots=None, wait=True, viewport=None, **context_options):
        self.ctx = browser.new_context(viewport=viewport or VIEWPORT, **context_options)
        self.ctx.add_init_script(TRACE_JS)
        self.page = self.ctx.new_page()
        self.shots = shots
        self.errors = []
        self.page_errors = []
        self.requests = []  # every event the page queued on the server (one per handler run)
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", self._page_error)
        self.page.on("request", self._request)
        self.page.goto(url, timeout=90_000)  # as long as the first paint may take (Playwright's 30 s failed under load)
        if wait is True:
            self.wait_plot("#attention-grid")
        elif wait:
            self.page.wait_for_selector(wait)

    def _page_error(self, e):
        self.errors.append(str(e))
        self.page_errors.append(str(e))

    def _request(self, r):
        if "/queue/join" in r.url:
            self.requests.append(r.url)

    def plot(self, sel):
        return self.page.evaluate(PLOT_JS, sel)

    def wait_plot(self, sel, timeout=90_000):
        self.page.wait_for_function(
            f"() => {{ const e = document.querySelector('{sel} .js-plotly-plot'); "
            "return e && e.data && e.data.length > 0; }",
            timeout=timeout,
        )

    def wait_changed(self, sel, before, timeout=60_000):
        self.page.wait_for_function(BLANK_JS, arg=[sel, before["blank"]], timeout=timeout)

    def choose(self, elem_id, option):
        self.page.locator(f"#{elem_id} input").first.click()
        self.page.get_by_role("option", name=option, exact=True).click()

    def value(self, elem_id):
        return self.page.locator(f"#{elem_id} input, #{elem_id} textarea").first.input_value()

    def tab(self, name):
        self.page.get_by_role("tab", name=name).click()

    def shot(self, name, full_page=False):
        """A screenshot into ``self.shots`` (a temporary folder unless the screenshots are refreshed)."""
        self.laid_out(quiet_ms=400, timeout_ms=2_000, strict=False)  # Plotly and the layout scripts done
        self.page.screenshot(path=os.path.join(self.shots, f"{name}.png"), full_page=full_page)

    def laid_out(self, quiet_ms: int = 600, timeout_ms: int = 60_000, strict: bool = True) -> None:
        """Wait until the visible figures have kept their size and every text box (``LAYOUT_JS``) for
        ``quiet_ms`` of the page's time: Plotly's resize and the page's layout scripts (which run in
        animation frames and in timers of up to 150 ms after a resize or a draw) are done. A condition,
        not a fixed pause: on a loaded machine it waits as long as the page keeps moving things.
        ``strict=False``: return at the timeout instead of failing (a screenshot of a live figure)."""
        from playwright.sync_api import Error

        deadline = time.monotonic() + timeout_ms / 1000
        last, since = None, None
        while time.monotonic() < deadline:
            try:
                now, sig = self.page.evaluate(f"() => [performance.now(), ({LAYOUT_JS})()]")
            except Error:  # a document being replaced
                last = None
                continue
            if sig != last:
                last, since = sig, now
            elif now - since >= quiet_ms:
                return
            self.page.wait_for_timeout(100)
        if strict:
            raise AssertionError(f"the figures were still moving after {timeout_ms} ms")

    def quiet_for(self, ms: int) -> int:
        """Requests the page queued during the next ``ms`` milliseconds."""
        n = len(self.requests)
        self.page.wait_for_timeout(ms)
        return len(self.requests) - n

    def settle(self, quiet_ms: int = 1200, timeout_ms: int = 60_000) -> None:
        """Wait until every event the page joined has completed, nothing was joined or heard for
        ``quiet_ms`` (a chain's next event is joined once the previous one's outputs are drawn) and no
        progress indicator shows.

        Pending events are counted from the page's own joins and stream messages, not from open
        streams: Gradio's client can leave an event stream open with nothing pending (when a join's
        answer reaches a busy page after the event's result came on an earlier stream, it opens a
        stream that stays idle until the page's next event)."""
        from playwright.sync_api import Error

        deadline = time.monotonic() + timeout_ms / 1000
        state = None
        while time.monotonic() < deadline:
            self.page.wait_for_timeout(100)
            try:
                state = self.page.evaluate(BUSY_JS)
            except Error:  # a document being replaced: not settled yet
                continue
            pending, quiet, progress = state
            if not pending and quiet >= quiet_ms and not progress:
                return
        raise AssertionError(
            f"the page was still busy after {timeout_ms} ms (events pending, ms quiet, "
            f"progress indicators: {state}); what the page sent and heard "
            f"(ms since load):\n{self.trace_text()}"
        )

    def trace(self) -> list:
        """The page's joins and stream messages (``TRACE_JS``), oldest first."""
        try:
            return self.page.evaluate("() => window.__trace || []")
        except Exception as e:  # noqa: BLE001 - a closed page or one between documents
            return [[0, f"no trace ({type(e).__name__})"]]

    def trace_text(self, last: int = 60) -> str:
        return "\n".join(f"{t:>8} {what}" for t, what in self.trace()[-last:])

    def commit_number(self, elem_id, text):
        box = self.page.locator(f"#{elem_id} input")
        box.fill(text)
        box.press("Enter")

    def check_clean(self):
        assert self.page.locator(".toast-body.error").count() == 0, "an error toast is showing"
        assert not self.errors, f"browser console errors: {self.errors}"

    def close(self):
        """Close the context (its pages with it); closing again does nothing."""
        if self.ctx is not None:
            self.ctx.close()
            self.ctx = None
