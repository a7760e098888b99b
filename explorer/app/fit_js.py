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
"""

FIT_JS = """() => {
  if (window.__fitPlots) return;
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
      const note = line.match(/^<sup>([^<]*)<\/sup>$/), inner = note ? note[1] : line;
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
  const fit = () => {
    frame = 0;
    const P = window.Plotly;
    for (const gd of pending) {
      pending.delete(gd);
      if (P && misfit(gd)) Promise.resolve(P.Plots.resize(gd)).then(() => wrapTitle(gd)); else wrapTitle(gd);
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
      }
    }
  };
  new MutationObserver(() => { if (!scan) scan = requestAnimationFrame(look); })
    .observe(document.body, {childList: true, subtree: true});
  window.__fitPlots = {look, misfit, wrapTitle};
  look();
}"""
