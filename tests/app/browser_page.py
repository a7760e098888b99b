"""Driving the app in Debian's Chromium with Playwright (never a downloaded browser): a ``Page``
that records console errors and the app's queued requests, and reads Plotly data from the page."""
import os
import shutil
import time

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]
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
};"""
# Summary of a Plotly graph inside the element with id `sel`: trace count, names, x values and,
# for trace 0, the number of cells and of blank (NaN or colour level 0: not allowed) cells.
PLOT_JS = """(sel) => {""" + DECODE_JS + """
  const el = document.querySelector(sel + ' .js-plotly-plot');
  if (!el || !el.data) return null;
  const out = {traces: el.data.length, names: el.data.map(t => t.name || ''), cells: 0, blank: 0,
               x: el.data.map(t => t.x ? decode(t.x) : [])};
  for (const v of decode(el.data[0].z)) { out.cells++; if (v === null || Number.isNaN(v) || v === 0) out.blank++; }
  return out;
}"""
BLANK_JS = """([sel, blank]) => {""" + DECODE_JS + """
  const e = document.querySelector(sel + ' .js-plotly-plot');
  if (!e || !e.data) return false;
  return decode(e.data[0].z).filter(v => v === null || Number.isNaN(v) || v === 0).length !== blank;
}"""


class Page:
    """A fresh context + page that records console errors and checks for error toasts."""

    def __init__(self, browser, url, shots=None, wait=True):
        self.ctx = browser.new_context(viewport=VIEWPORT)
        self.page = self.ctx.new_page()
        self.shots = shots
        self.errors = []
        self.requests = []  # every event the page queued on the server (one per handler run)
        # Gradio's client opens an event stream (/queue/data) while the page has events pending and
        # closes it when none is left: the page is busy while a stream is open.
        self.streams = {}  # open event stream -> when it opened
        self.activity = time.monotonic()  # last join, stream opened or stream closed
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("request", self._request)
        self.page.on("requestfinished", self._stream_closed)
        self.page.on("requestfailed", self._stream_closed)  # the client aborts the stream when done
        self.page.goto(url)
        if wait:
            self.wait_plot("#attention-grid")

    def _request(self, r):
        if "/queue/join" in r.url:
            self.requests.append(r.url)
            self.activity = time.monotonic()
        elif "/queue/data" in r.url:
            self.streams[r] = time.monotonic()
            self.activity = time.monotonic()

    def _stream_closed(self, r):
        if "/queue/data" in r.url:
            self.streams.pop(r, None)
            self.activity = time.monotonic()

    def plot(self, sel):
        return self.page.evaluate(PLOT_JS, sel)

    def wait_plot(self, sel, timeout=90_000):
        self.page.wait_for_function(f"() => {{ const e = document.querySelector('{sel} .js-plotly-plot'); "
                                    "return e && e.data && e.data.length > 0; }", timeout=timeout)

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
        self.page.wait_for_timeout(800)  # let Plotly finish its transition
        self.page.screenshot(path=os.path.join(self.shots, f"{name}.png"), full_page=full_page)

    def quiet_for(self, ms: int) -> int:
        """Requests the page queued during the next ``ms`` milliseconds."""
        n = len(self.requests)
        self.page.wait_for_timeout(ms)
        return len(self.requests) - n

    def settle(self, quiet_ms: int = 1200, timeout_ms: int = 60_000) -> None:
        """Wait until no event stream is open, nothing was queued, opened or closed for ``quiet_ms``
        (a chain's next event is queued by the page once the previous one's outputs are drawn) and
        no progress indicator shows."""
        deadline = time.monotonic() + timeout_ms / 1000
        while time.monotonic() < deadline:
            self.page.wait_for_timeout(100)
            if not self.streams and (time.monotonic() - self.activity) * 1000 >= quiet_ms \
                    and self.page.locator(".progress-text, .eta-bar").count() == 0:
                return
        now = time.monotonic()
        raise AssertionError(f"the page was still busy after {timeout_ms} ms: event streams open "
                             f"{[(r.url, r.failure, round(now - t, 1)) for r, t in self.streams.items()]}")

    def commit_number(self, elem_id, text):
        box = self.page.locator(f"#{elem_id} input")
        box.fill(text)
        box.press("Enter")

    def check_clean(self):
        assert self.page.locator(".toast-body.error").count() == 0, "an error toast is showing"
        assert not self.errors, f"browser console errors: {self.errors}"

    def close(self):
        self.ctx.close()


