"""The share link in the address bar: a script that runs in the browser after every redraw.

``SHARE_JS(qs)`` puts the configuration's query string in the address bar (``history.replaceState``,
no navigation) and returns the full link for the copy box.
"""

# Plotly writes its clip paths and gradients as url('<page address>#id') when the page has a <base>
# (Gradio's has), with the address of the figure's first draw. Once the address bar changes, that is
# another document, and Chromium downloads it (the whole page, ~0.6 MB) to resolve them, on every
# redraw. So the figures are pointed at the new address along with the address bar.
SHARE_JS = """(qs) => {
  const url = window.location.origin + window.location.pathname + (qs ? '?' + qs : '');
  try { window.history.replaceState(null, '', url); } catch (e) {}
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
