"""Every figure fits its container whenever it is on screen: a script installed once on page load.

Plotly sizes a figure when it draws it. A figure drawn while its tab is hidden has no width to measure
and keeps Plotly's default 700 px; a figure drawn before "Hide / show controls" or presentation mode
keeps the width it had. Window resizes reach only the figures on screen, and a tab, the control column
or the presentation switch changes a figure's room without any window resize.

``FIT_JS`` observes the size of every plot element on the page (``ResizeObserver``; a
``MutationObserver`` adds the plots Gradio mounts later). A plot whose element has a width (its tab is
shown) different from the width its figure was drawn at is resized by Plotly (``Plots.resize``: the
layout's autosize, the height the figure asked for), at most once per animation frame for all of them.
Gradio's plot component loads Plotly as ``window.Plotly``.

Plotly never wraps a title: on a narrow figure (a phone) it runs past the figure's right edge and is
cut. After each draw and resize, a title wider than its figure is broken into lines between words
(each ``<br>`` line, ``<sup>`` notes with their own smaller type), and the top margin grows by the
lines added (the plot area gives up that height: a relayout of the height would fix the width too).

Each figure is named for assistive technology when it is first seen and after each draw (a failed
resize still names it): ``role="img"`` with its title as
``aria-label`` (the plain text of its lines), described (``aria-describedby``) by the reading of its tab
(the element whose id ends in ``-reading``), which says in words what the figure shows.

In presentation mode the attention grid (``FIT_HEIGHT``) is also made to fit the screen's height: its
height becomes at most the viewport's height below the grid's top when the page and the figure column
are scrolled to their tops (the header, buttons and tabs above it), never under ``MIN_HEIGHT`` px. Its
panels tie their y scale to x (``scaleanchor``, ``constrain="domain"``), so the cells stay square and
the panels narrow. Out of presentation mode it gets back the height the server asked for. The relayout
sets the height with ``autosize`` on and no fixed width, so later resizes still follow the container;
the height the server asked for is remembered per plot (``__asked``): a redraw that brings another
height than the one fitted is a new request.
"""

FIT_HEIGHT = "#attention-grid"  # the figures fitted to the screen's height in presentation mode
MIN_HEIGHT = 300  # px: below this the grid would be unreadable; the page scrolls instead

FIT_JS = (
    """() => {
  if (window.__fitPlots) return;
  const FIT_HEIGHT = '"""
    + FIT_HEIGHT
    + """', MIN_HEIGHT = """
    + str(MIN_HEIGHT)
    + """;
  const seen = new WeakSet(), pending = new Set();
  let frame = 0, scan = 0;
  const misfit = (gd) => {
    const full = gd._fullLayout;
    if (!full || !gd.isConnected || gd.offsetParent === null) return false;
    const width = gd.getBoundingClientRect().width;
    return width > 0 && Math.abs(full.width - width) > 1;
  };
  const wrap = (line, per) => {  // words into lines of at most `per` characters
    const parts = [''];
    for (const w of line.split(' ')) {
      const last = parts[parts.length - 1];
      if (last && (last + ' ' + w).length > per) parts.push(w); else parts[parts.length - 1] = last ? last + ' ' + w : w;
    }
    return parts;
  };
  const wrapTitle = (gd) => {
    const P = window.Plotly, full = gd._fullLayout, t = gd.querySelector('.gtitle');
    const svg = gd.querySelector('svg.main-svg');
    const title = gd.layout && gd.layout.title, text = typeof title === 'string' ? title : title && title.text;
    if (!P || !full || !t || !svg || !text || gd.offsetParent === null) return;
    const box = t.getBoundingClientRect(), edge = svg.getBoundingClientRect().right;
    if (!box.width || box.right <= edge + 1) return;
    const size = parseFloat(getComputedStyle(t).fontSize) || 16, room = edge - box.left - 8;
    let added = 0;
    const lines = text.split('<br>').map((line) => {
      const note = line.match(/^<sup>([^<]*)<\\/sup>$/), inner = note ? note[1] : line;
      if (!note && /</.test(inner)) return line;  // other markup: left whole
      const per = Math.max(12, Math.floor(room / (size * (note ? 0.8 : 1) * 0.56)));
      if (inner.length <= per) return line;
      const parts = wrap(inner, per);
      added += parts.length - 1;
      return parts.map((part) => note ? '<sup>' + part + '</sup>' : part).join('<br>');
    });
    if (!added) return;
    const grow = Math.round(added * size * 1.3);
    // not the height: a relayout of the height fixes the width too, and the figure would no longer fit
    P.relayout(gd, {'title.text': lines.join('<br>'), 'margin.t': full.margin.t + grow});
  };
  const room = (gd) => {  // px from the plot's top to the screen's bottom, page and figure column at their tops
    const col = document.getElementById('figures'), row = col && col.parentElement;
    if (!col || !row) return window.innerHeight;
    const top = gd.getBoundingClientRect().top - col.getBoundingClientRect().top + col.scrollTop
      + row.getBoundingClientRect().top + window.scrollY;
    return window.innerHeight - top - 8;
  };
  const fitHeight = (gd) => {
    const P = window.Plotly, full = gd._fullLayout, box = gd.closest(FIT_HEIGHT);
    if (!P || !full || !box || gd.offsetParent === null) return;
    if (gd.__fitted === undefined || Math.abs(full.height - gd.__fitted) > 1) gd.__asked = full.height;  // a redraw's
    const asked = gd.__asked;
    const want = document.body.classList.contains('presentation')
      ? Math.min(asked, Math.max(MIN_HEIGHT, Math.floor(room(gd)))) : asked;
    gd.__fitted = want;
    if (Math.abs(full.height - want) > 1) P.relayout(gd, {height: want, width: null, autosize: true});
  };
  const name = (gd) => {  // an image with its title as its name, described by its tab's reading
    const title = gd.layout && gd.layout.title, text = typeof title === 'string' ? title : title && title.text;
    const plain = String(text || '').replace(/<br\\s*\\/?>/gi, '. ').replace(/<[^>]*>/g, '').replace(/\\s+/g, ' ').trim();
    const label = plain || (gd.closest('.block') && gd.closest('.block').querySelector('[data-testid="block-label"]')
      || {}).textContent || 'figure';
    gd.setAttribute('role', 'img');
    if (gd.getAttribute('aria-label') !== label) gd.setAttribute('aria-label', label);
    const panel = gd.closest('[role="tabpanel"]'), reading = panel && panel.querySelector('[id$="-reading"]');
    if (reading) gd.setAttribute('aria-describedby', reading.id); else gd.removeAttribute('aria-describedby');
  };
  const fit = () => {
    frame = 0;
    const P = window.Plotly;
    for (const gd of pending) {
      pending.delete(gd);
      const after = () => { wrapTitle(gd); fitHeight(gd); name(gd); };
      if (P && misfit(gd)) Promise.resolve(P.Plots.resize(gd)).then(after, after); else after();
    }
  };
  const ask = (gd) => { pending.add(gd); if (!frame) frame = requestAnimationFrame(fit); };
  const watch = new ResizeObserver((entries) => { for (const e of entries) ask(e.target); });
  const look = () => {
    scan = 0;
    for (const gd of document.querySelectorAll('.js-plotly-plot')) {
      if (!seen.has(gd)) {
        seen.add(gd);
        watch.observe(gd);
        if (gd.on) gd.on('plotly_afterplot', () => ask(gd));  // a redraw: its title may not fit
        if (gd.layout) name(gd);  // named at once, not a frame later
      }
    }
  };
  new MutationObserver(() => { if (!scan) scan = requestAnimationFrame(look); })
    .observe(document.body, {childList: true, subtree: true});
  // presentation mode on / off, a taller or shorter window: the heights fitted to the screen change
  const refit = () => { for (const gd of document.querySelectorAll(FIT_HEIGHT + ' .js-plotly-plot')) ask(gd); };
  new MutationObserver(refit).observe(document.body, {attributes: true, attributeFilter: ['class']});
  window.addEventListener('resize', refit);
  window.__fitPlots = {look, misfit, wrapTitle, fitHeight, name};
  look();
}"""  # noqa: E501 (JavaScript kept verbatim)
)
