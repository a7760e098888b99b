"""The share link in the address bar: a script that runs in the browser after every redraw.

``SHARE_JS(qs)`` puts the configuration's query string in the address bar, without navigating, and
returns the full link for the copy box. Each committed change is an entry of the browser's history
(``history.pushState``), so Back and Forward step through the configurations instead of leaving the
app; the first rewrite of a landing link (its normalised or refused form) and the redraw that follows a
Back or Forward replace the entry instead. On ``popstate`` the script presses the hidden ``#url-back``
button, whose event reads the address bar again as the page's load does (``explorer.app.controls.history.
from_address``) and redraws: no reload.
"""

# Plotly writes its clip paths and gradients as url('<page address>#id') when the page has a <base>
# (Gradio's has), with the address of the figure's first draw. Once the address bar changes, that is
# another document, and Chromium downloads it (the whole page, ~0.6 MB) to resolve them, on every
# redraw. So the figures are pointed at the new address along with the address bar.
SHARE_JS = """(qs) => {
  const url = window.location.origin + window.location.pathname + (qs ? '?' + qs : '');
  let st = window.__shareHistory;
  if (!st) {
    st = window.__shareHistory = {first: true, replaceUntil: 0, pushed: 0};
    window.addEventListener('popstate', () => {
      st.replaceUntil = Date.now() + 8000;  // the redraw of the restored link must not push again
      const back = document.querySelector('#url-back');
      if (back) back.click();
    });
  }
  try {
    if (url !== window.location.href.split('#')[0]) {
      const replace = (st.first && window.location.search !== '') || Date.now() < st.replaceUntil;
      if (replace) window.history.replaceState(null, '', url);
      else { window.history.pushState(null, '', url); st.pushed++; }
    }
  } catch (e) {}
  st.first = false;
  st.replaceUntil = 0;
  const here = window.location.href.split('#')[0];
  const fix = (v) => v.replace(/url\\((['"]?)[^'"#)]*#/g, 'url($1' + here + '#');
  document.querySelectorAll('.js-plotly-plot').forEach((gd) => {
    if (gd._context && gd._context._baseUrl) gd._context._baseUrl = here;
    gd.querySelectorAll('[clip-path], [style*="url("]').forEach((el) => {
      const clip = el.getAttribute('clip-path');
      if (clip && clip.includes('#')) el.setAttribute('clip-path', fix(clip));
      for (const prop of ['fill', 'stroke']) {
        const v = el.style.getPropertyValue(prop);
        if (v && v.includes('url(')) el.style.setProperty(prop, fix(v));
      }
    });
  });
  return url;
}"""


# Before Gradio's client starts (a <script> in the page's head): an address whose query is longer than any
# link the app writes becomes "?__link_chars=<its length>", which the link reader refuses with the
# notice of any over-long link. Gradio's client sends the address's query with every event, and a
# server refuses a request line that long outright (no answer the page could show).
LONG_LINK_CHARS = 16384
LONG_LINK_HEAD = (
    "<script>(() => { const q = window.location.search; if (q.length > "
    + str(LONG_LINK_CHARS)
    + ") { try { window.history.replaceState(null, '', window.location.pathname + '?__link_chars=' + "
    "(q.length - 1)); } catch (e) {} } })();</script>"
)

# A tab's own link (its parameters and tab=): the page's address with them set, for the tab's share box
TAB_LINK_JS = (
    "(qs) => { if (!qs) return ''; const u = new URL(window.location.href); "
    "for (const [k, v] of new URLSearchParams(qs)) u.searchParams.set(k, v); return u.toString(); }"
)
