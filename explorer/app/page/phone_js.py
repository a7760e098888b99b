"""Figures laid out for the room they get (a phone, the projected grid) and the phone's jump button:
a script installed once on page load.

The server draws each figure for a laptop's figure column (~900 px). On a 390 px phone that puts three
panels side by side at ~90 px each (titles, colour bars and axis titles overprint), 16 attention
panels at 26 px, and a 110-token axis with a label every 2 px. In presentation mode at 1280 x 720 the
grid is fitted to the screen's height (``explorer.app.page.fit_js``), its panels shrink to ~77 px under
labels that grew to 20 px, and two thirds of the width stay white.

``PHONE_JS`` re-lays out each Plotly figure after each draw (``plotly_afterplot``), window resize and
presentation switch, from the layout the server sent (kept per layout object, so a redraw starts
over and a wider window gets the server's layout back):

* attention grids (every trace a heatmap whose ``meta`` is ``[layer, head]``): on a narrow figure,
  or the projected grid, the panels are reflowed into the number of columns that gives the largest
  square panels (narrow: as many columns as keep panels >= ``MIN_PANEL`` px), each panel labelled
  ``L<layer> H<head>`` under it; narrow grids get a horizontal colour bar below. On every grid, a
  head label wider than its panel collapses to a short code (``PT 0.42``, then ``PT``) whose full
  text is the annotation's hover text (and the Attention tab's table names every head in full);
* other figures narrower than ``NARROW`` px: their panels stacked in one column (subplot titles and
  colour bars move with their panel), the legend below the plot, token axes labelled every n-th
  token so that labels never touch, and a single heatmap no taller than it is wide;
* the zoomed head (``ZOOM``) in presentation mode: one screen tall, its token labels thinned likewise;
* other figures in presentation mode: an axis of slanted category labels (the Surgery table's changes)
  laid out at the projected type's sizes (``PRESENT_TICK``, ``PRESENT_TITLE``: assets/style.css), which
  Plotly otherwise does not know of: it makes room for the labels at the size it knows, and the first
  labels, a fifth longer, ran past the figure's left edge.

A laptop-wide grid's labels are fitted *before* Plotly draws it (the script wraps ``Plotly.react``,
which Gradio's plot component calls on a new graph div for every figure), so the fit after the draw
finds nothing to change and the grid is drawn once, not twice.

On a phone the figure column comes first (assets/style.css) and ``JUMP_JS``'s button
(``explorer.app.page.phone_jump_js``) jumps between the controls and the open tab's first figure.
``PHONE_JS`` installs both; run twice, it changes nothing.
"""

from explorer.app.page.phone_jump_js import JUMP_JS

NARROW = 600  # px: a figure narrower than this gets the narrow layout
MIN_PANEL = 96  # px: the smallest attention panel of a narrow grid
ZOOM = "#zoom-plot, #stack-zoom"  # the zoomed heads: one screen tall in presentation mode
PRESENT_TICK, PRESENT_TITLE = 18, 20  # px: presentation mode's tick labels and axis titles (assets/style.css)

LAYOUT_JS = (
    """() => {
  if (window.__phoneLayout) return;
  const ZOOM = '"""
    + ZOOM
    + """';
  const NARROW = """
    + str(NARROW)
    + """, MIN_PANEL = """
    + str(MIN_PANEL)
    + """;
  const PRESENT_TICK = """
    + str(PRESENT_TICK)
    + """, PRESENT_TITLE = """
    + str(PRESENT_TITLE)
    + """;
  const state = window.__phoneLayout = {adapted: 0};
  const body = document.body, present = () => body.classList.contains('presentation');
  const seg = (k) => { const m = k.match(/^(\\w+)\\[(\\d+)\\]$/); return m ? [m[1], +m[2]] : [k]; };
  const get = (o, path) => { for (const k of path.split('.')) for (const s of seg(k)) { if (o == null) return undefined; o = o[s]; }
    return o; };
  const clone = (o) => JSON.parse(JSON.stringify(o || {}));
  const axisName = (ref, letter) => letter + 'axis' + String(ref || letter).slice(1);
  const plain = (t) => String(t || '').replace(/<br\\s*\\/?>/gi, ' ').replace(/<[^>]*>/g, '').replace(/\\s+/g, ' ').trim();
  const textW = (t, size) => plain(t).length * size * 0.6 + 6;  // px of a line of DejaVu Sans at `size` (with padding)
  const isGrid = (gd) => gd.data.length > 0 && gd.data.every((t) => t.type === 'heatmap' && Array.isArray(t.meta)
    && t.meta.length === 2);
  const room = (gd) => {  // as fit_js: px from the plot's top to the screen's bottom, page and column at their tops
    const col = document.getElementById('figures'), row = col && col.parentElement;
    if (!col || !row) return window.innerHeight;
    return window.innerHeight - (gd.getBoundingClientRect().top - col.getBoundingClientRect().top + col.scrollTop
      + row.getBoundingClientRect().top + window.scrollY) - 8;
  };
  const halves = (t) => {  // two lines, broken at the space nearest the middle
    const mid = t.length / 2, spaces = [...t.matchAll(/ /g)].map((m) => m.index);
    if (!spaces.length) return t;
    const at = spaces.reduce((a, b) => Math.abs(b - mid) < Math.abs(a - mid) ? b : a);
    return t.slice(0, at) + '<br>' + t.slice(at + 1);
  };
  const code = (label) => {  // "previous-token 0.42" -> ["PT 0.42", "PT"]; "induction 0.71" -> ["IND 0.71", "IND"]
    const [name, ...rest] = plain(label).split(' ');
    const c = name.includes('-') ? name.split('-').map((w) => w[0] || '').join('') : name.slice(0, 3);
    return [[c.toUpperCase(), ...rest].join(' '), c.toUpperCase()];
  };

  // the head labels of a grid whose panels are `size` px: font from the panel, a short code when too wide
  const fitLabels = (orig, size, out) => {
    // projected: never under 16 px (a short code fits where the full label does not); elsewhere from the panel
    const font = present() ? Math.max(16, Math.min(20, Math.round(size / 6))) : Math.max(9, Math.min(16, Math.round(size / 7.5)));
    (orig.annotations || []).forEach((a, i) => {
      if (!/ domain$/.test(String(a.xref || ''))) return;
      const full = a._label || a.text, [mid, short] = code(full);  // _label: the server's, kept by prefit
      const text = [full, mid, short].find((t) => textW(t, font) <= size - 4) || short;
      out[`annotations[${i}].text`] = text;
      out[`annotations[${i}].hovertext`] = text === full ? null : plain(full);
      out[`annotations[${i}].font.size`] = font;
    });
  };

  // px of a panel of a grid laid out as the server arranged it, in a figure `W` wide and `height` tall
  // whose top margin is `top` (the layout's before a draw, Plotly's after it)
  const panelSize = (orig, data, W, height, top) => {
    const m = orig.margin || {};
    const xa = orig[axisName(data[0].xaxis, 'x')] || {}, ya = orig[axisName(data[0].yaxis, 'y')] || {};
    const xd = xa.domain || [0, 1], yd = ya.domain || [0, 1];
    return Math.min((xd[1] - xd[0]) * (W - (m.l || 0) - (m.r || 0) - 60), (yd[1] - yd[0]) * (height - top - (m.b || 0)));
  };

  const gridPlan = (gd, orig, W, fitH) => {
    const narrow = W < NARROW, out = {}, m = orig.margin || {};
    if (!narrow && !fitH) {  // the server's arrangement: only the labels fit their panels
      const full = gd._fullLayout;
      fitLabels(orig, panelSize(orig, gd.data, W, full.height, full.margin.t), out);
      return out;
    }
    const n = gd.data.length, label = present() ? 20 : 12, rowGap = label + 14, gapX = 8;
    const mt = gd._fullLayout.margin.t, ml = narrow ? 6 : 40, mr = narrow ? 6 : 150;
    const bar = narrow ? 90 : 0, mb = rowGap + bar, avW = W - ml - mr;
    let best = null;
    for (let C = 1; C <= n; C++) {
      const R = Math.ceil(n / C);
      let S = Math.floor((avW - (C - 1) * gapX) / C);
      if (fitH) S = Math.min(S, Math.floor((fitH - mt - mb - (R - 1) * rowGap) / R));
      if (narrow && S < MIN_PANEL && C > 1) break;
      if (!best || (narrow ? true : S > best.S)) best = {C, R, S};
    }
    const {C, R} = best, S = Math.max(40, best.S);
    const Hp = R * S + (R - 1) * rowGap, left = (avW - (C * S + (C - 1) * gapX)) / 2;
    gd.data.forEach((t, k) => {
      const r = Math.floor(k / C), c = k % C, x0 = left + c * (S + gapX), top = r * (S + rowGap);
      const xa = axisName(t.xaxis, 'x'), ya = axisName(t.yaxis, 'y');
      out[xa + '.domain'] = [Math.max(0, x0 / avW), Math.min(1, (x0 + S) / avW)];
      out[ya + '.domain'] = [Math.max(0, 1 - (top + S) / Hp), Math.min(1, 1 - top / Hp)];
      out[xa + '.title.text'] = `L${t.meta[0]} H${t.meta[1]}`;
      out[xa + '.title.standoff'] = 2;
      out[xa + '.title.font.size'] = label;
      out[xa + '.showticklabels'] = false;  // positions: on the zoomed map, which has room for them
      out[ya + '.showticklabels'] = false;
      out[ya + '.title.text'] = '';
    });
    // margins as set: a colour bar that pushes them shrinks the plot area, and the square panels with it
    Object.assign(out, {height: Math.round(mt + Hp + mb), 'margin.l': ml, 'margin.r': mr, 'margin.b': mb});
    if (narrow) out['margin.autoexpand'] = false;
    if (narrow) {
      const words = plain(get(orig, 'coloraxis.colorbar.title.text'));
      Object.assign(out, {'coloraxis.colorbar.orientation': 'h', 'coloraxis.colorbar.x': 0.5,
        'coloraxis.colorbar.xanchor': 'center', 'coloraxis.colorbar.y': -(rowGap + 4) / Hp,
        'coloraxis.colorbar.yanchor': 'top', 'coloraxis.colorbar.len': 0.9, 'coloraxis.colorbar.thickness': 10,
        'coloraxis.colorbar.title.side': 'top', 'coloraxis.colorbar.title.font.size': 12,
        'coloraxis.colorbar.title.text': textW(words, 12) <= avW ? words : halves(words)});
    }
    fitLabels(orig, S, out);
    return out;
  };

  // a token axis of `len` px: every n-th label, so that neighbours never touch
  const thin = (orig, name, len, along, out, font) => {
    const vals = get(orig, name + '.tickvals'), text = get(orig, name + '.ticktext');
    if (get(orig, name + '.tickmode') !== 'array' || !vals || !text || !vals.length) return;
    const angle = get(orig, name + '.tickangle'), size = font || get(orig, name + '.tickfont.size') || 12;
    const each = along === 'y' || Math.abs(angle || 0) === 90 ? size * 1.3 : Math.max(...text.map((t) => textW(t, size)));
    const step = Math.max(1, Math.ceil(vals.length * each / Math.max(1, len)));
    if (step === 1) return;
    out[name + '.tickvals'] = vals.filter((_, i) => i % step === 0);
    out[name + '.ticktext'] = text.filter((_, i) => i % step === 0);
  };

  // the projected zoom (one head, a row per token: 1760 px for 110 tokens) within one screen's height
  const zoomPlan = (gd, orig) => {
    const full = gd._fullLayout, out = {}, H = window.innerHeight - 16;
    if ((orig.height || full.height) <= H) return out;
    // presentation type (assets/style.css): 24 px title lines, 18 px tick labels, which Plotly does not know of
    const lines = (String(get(gd.layout, 'title.text') || '').match(/<br>/g) || []).length + 1;
    const mt = Math.max(full.margin.t, 46 + lines * 27), Hp = H - mt - full.margin.b;
    // the title pinned to the top (a title of several lines is set on its first baseline: a line's height down)
    Object.assign(out, {height: H, 'margin.t': mt, 'title.y': 1, 'title.yref': 'container', 'title.yanchor': 'top',
                        'title.pad.t': 36});
    thin(orig, 'xaxis', Math.min(full._size.w, Hp), 'x', out, 18);
    thin(orig, 'yaxis', Hp, 'y', out, 18);
    return out;
  };

  // projected: slanted category labels at the size the page shows them, so that Plotly's margins hold them;
  // the figure grows by the depth they and their axis title gain, so that its plot area keeps its height
  const slantPlan = (gd, orig) => {
    const full = gd._fullLayout, out = {};
    let extra = 0;
    for (const name of Object.keys(orig).filter((k) => /^xaxis\\d*$/.test(k))) {
      const angle = get(orig, name + '.tickangle');
      if (!angle || Math.abs(angle) === 90 || get(orig, name + '.tickmode') === 'array' || !full[name]) continue;
      const tick = get(orig, name + '.tickfont.size') || get(orig, 'font.size') || 12;
      const title = get(orig, name + '.title.font.size') || get(orig, 'font.size') || 12;
      const chars = Math.max(0, ...(full[name]._categories || []).map((c) => plain(c).length));
      const sin = Math.abs(Math.sin(angle * Math.PI / 180));
      extra = Math.max(extra, Math.ceil(chars * 0.6 * (PRESENT_TICK - tick) * sin + 1.3 * (PRESENT_TITLE - title)));
      out[name + '.tickfont.size'] = PRESENT_TICK;
      out[name + '.title.font.size'] = PRESENT_TITLE;
    }
    if (extra > 0) out.height = (orig.height || full.height) + extra;
    return out;
  };

  // narrow non-grid figures: panels in one column, legend below, fewer token labels, heatmaps not too tall
  const stackPlan = (gd, orig, bars, W) => {
    const full = gd._fullLayout, out = {}, traces = {}, m = orig.margin || {};
    const subs = (full._subplots && full._subplots.cartesian) || [];
    const panels = subs.map((id) => { const [, xs, ys] = id.match(/^x(\\d*)y(\\d*)$/) || [];
      const xa = 'xaxis' + xs, ya = 'yaxis' + ys;
      return {xa, ya, xref: 'x' + xs, yref: 'y' + ys, xd: get(orig, xa + '.domain') || [0, 1],
              yd: get(orig, ya + '.domain') || [0, 1], square: !!get(orig, ya + '.scaleanchor')}; });
    const hasBar = gd.data.some((t) => /heatmap|contour/.test(t.type) && t.showscale !== false);
    const ml = m.l != null ? Math.min(m.l, 80) : 70, mr = hasBar ? 64 : 16, Wp = W - ml - mr;
    const mt = full.margin.t, origHp = (orig.height || full.height) - (m.t || 0) - (m.b || 0);
    const stack = panels.length > 1 && new Set(panels.map((p) => p.xd.join())).size > 1;
    let Hp = full._size.h, placed = panels.map((p) => ({...p, y0: 0, y1: 1, px: Hp}));
    const legend = gd.data.some((t) => t.showlegend !== false && t.name && (t.showlegend || /scatter|bar/.test(t.type)))
      && orig.showlegend !== false;
    if (stack) {
      const GAP = 92;  // x tick labels and title of one panel, the next panel's title
      panels.sort((a, b) => (b.yd[1] - a.yd[1]) || (a.xd[0] - b.xd[0]));
      // the paper annotations (subplot and row titles) go with the panel they sit on or above
      const notes = [];
      (orig.annotations || []).forEach((a, i) => {
        if ((a.xref || 'paper') !== 'paper' || (a.yref || 'paper') !== 'paper') return;
        const p = panels.filter((q) => a.x >= q.xd[0] - 0.02 && a.x <= q.xd[1] + 0.02 && a.y >= q.yd[0] - 0.02)
          .sort((u, v) => u.yd[1] - v.yd[1])[0];
        if (!p) return;
        const size = get(a, 'font.size') || 15, wide = textW(a.text, size) > W - 8;
        const lines = (wide ? 2 : 1) + (String(a.text).match(/<br>/g) || []).length;
        notes.push({a, i, p, wide, above: a.y >= p.yd[1], reach: 4 + (a.yshift || 0) + lines * size * 1.3});
      });
      const hs = panels.map((p) => p.square ? Math.min(Wp, 320)
        : Math.max(170, Math.min(260, (p.yd[1] - p.yd[0]) * origHp)));
      const gaps = panels.map((p) => GAP + Math.max(0, ...notes.filter((n) => n.p === p && n.above).map((n) => n.reach - 14)));
      Hp = hs.reduce((a, b) => a + b, 0) + gaps.slice(1).reduce((a, b) => a + b, 0);
      let top = 0;
      placed = panels.map((p, i) => { if (i) top += gaps[i]; const y1 = 1 - top / Hp, y0 = 1 - (top + hs[i]) / Hp;
        top += hs[i]; return {...p, y0, y1, px: hs[i]}; });
      for (const p of placed) { out[p.xa + '.domain'] = [0, 1]; out[p.ya + '.domain'] = [p.y0, p.y1]; }
      for (const {a, i, p: q, wide, above} of notes) {
        const p = placed[panels.indexOf(q)], fx = (a.x - q.xd[0]) / Math.max(1e-6, q.xd[1] - q.xd[0]);
        out[`annotations[${i}].x`] = Math.max(0, Math.min(1, fx));
        out[`annotations[${i}].y`] = above ? p.y1 + 4 / Hp : p.y0 + (a.y - q.yd[0]) / Math.max(1e-6, q.yd[1] - q.yd[0]) * (p.y1 - p.y0);
        if (above) out[`annotations[${i}].yanchor`] = 'bottom';
        if (wide) out[`annotations[${i}].text`] = halves(a.text);
      }
      gd.data.forEach((t, i) => {
        const p = placed.find((q) => q.xref === (t.xaxis || 'x') && q.yref === (t.yaxis || 'y'));
        if (!p || !/heatmap|contour/.test(t.type) || t.showscale === false) return;
        Object.assign(traces, {[i]: {x: 1.02, xanchor: 'left', y: (p.y0 + p.y1) / 2, yanchor: 'middle',
                                     len: p.y1 - p.y0, lenmode: 'fraction', thickness: 10}});
      });
    } else if (panels.length === 1 && gd.data.some((t) => t.type === 'heatmap')) {
      // a heatmap no taller than it is wide, nor so short that its colour bar's labels meet
      Hp = Math.max(200, Math.min(origHp, Wp));
      placed[0].px = Hp;
    }
    for (const p of placed) {
      thin(orig, p.xa, Wp, 'x', out);
      thin(orig, p.ya, p.px, 'y', out);
      // the two axes' first labels (a 0 and a 0) meet at the corner: each a few px off its axis
      out[p.xa + '.ticklabelstandoff'] = 4;
      out[p.ya + '.ticklabelstandoff'] = 4;
      for (const name of [p.xa, p.ya]) {  // a log axis over decades: decades only (no 2s and 5s between them)
        const r = full[name] && full[name].range;
        if (get(orig, name + '.type') === 'log' && r && Math.abs(r[1] - r[0]) >= 1.5 && get(orig, name + '.dtick') !== 1
            && get(orig, name + '.tickmode') !== 'array') out[name + '.dtick'] = 1;
      }
      const angle = get(orig, p.xa + '.tickangle');  // slanted category labels: upright, smaller, one per category
      if (angle && Math.abs(angle) !== 90 && get(orig, p.xa + '.tickmode') !== 'array') {
        const cats = (full[p.xa]._categories || []).map(plain);
        out[p.xa + '.tickangle'] = -90;
        out[p.xa + '.tickfont.size'] = 11;
        p.depth = Math.max(0, ...cats.map((c) => textW(c, 11))) + 34;
      }
      if (!stack) continue;
      if (get(orig, p.xa + '.type') !== 'log' && !get(orig, p.xa + '.dtick') && get(orig, p.xa + '.tickmode') !== 'array')
        out[p.xa + '.nticks'] = 6;
    }
    let renamed = null, mb = Math.max(m.b != null ? m.b : 60, ...placed.map((p) => p.depth || 0));
    if (legend) {
      const long = (nm) => textW(nm, 13) + 40 > W - 12;  // an entry wider than the screen: on two lines
      const names = gd.data.filter((t) => t.showlegend !== false && t.name).map((t) => plain(t.name));
      const rows = names.reduce((acc, nm) => { const w = long(nm) ? W : textW(nm, 13) + 40;
        if (acc.x + w > Wp) { acc.rows++; acc.x = 0; } acc.x += w; acc.rows += long(nm) ? 1 : 0; return acc; },
        {rows: 1, x: 0}).rows;
      if (names.some(long)) renamed = gd.data.map((t) => t.name && long(plain(t.name)) ? halves(plain(t.name)) : t.name ?? null);
      const below = Math.max(64, ...placed.map((p) => p.depth || 0));  // the last panel's tick labels and title
      Object.assign(out, {'legend.orientation': 'h', 'legend.x': 0, 'legend.xanchor': 'left', 'legend.yref': 'container',
        'legend.y': 0, 'legend.yanchor': 'bottom', 'legend.font.size': 13});
      mb = below + rows * 24 + 16;
    }
    Object.assign(out, {'margin.l': ml, 'margin.r': mr, 'margin.b': mb, height: Math.round(mt + Hp + mb)});
    const keys = new Set(), bar = {};
    for (const c of Object.values(traces)) for (const k of Object.keys(c)) keys.add(k);
    for (const k of keys) bar['colorbar.' + k] = gd.data.map((_, i) => traces[i] ? traces[i][k] : get(bars[i], k) ?? null);
    if (renamed) bar.name = renamed;
    return {layout: out, traces: bar};
  };

  const adapt = (gd) => {
    const P = window.Plotly, full = gd._fullLayout;
    if (!P || !full || !gd.data || !gd.isConnected || gd.offsetParent === null) return;
    const W = Math.round(gd.getBoundingClientRect().width);
    if (!W) return;
    let st = gd.__phone;
    if (!st || st.layout !== gd.layout)
      st = gd.__phone = {layout: gd.layout, copy: clone(gd.layout), bars: gd.data.map((t) => clone(t.colorbar)),
                         names: gd.data.map((t) => t.name ?? null), keys: [], traceKeys: [], key: null};
    const fitH = present() && gd.closest('#attention-grid') ? Math.floor(room(gd)) : 0;
    const key = [W, full.margin.t, fitH, present(), window.innerHeight].join();
    if (st.key === key) return;
    st.key = key;
    let plan = {layout: {}, traces: {}};
    if (isGrid(gd)) plan.layout = gridPlan(gd, st.copy, W, fitH);
    else if (W < NARROW) plan = stackPlan(gd, st.copy, st.bars, W);
    else if (present() && gd.closest(ZOOM)) plan.layout = zoomPlan(gd, st.copy);
    else if (present()) plan.layout = slantPlan(gd, st.copy);
    const lay = {}, tr = {};
    for (const k of st.keys) if (!(k in plan.layout)) lay[k] = get(st.copy, k) ?? null;  // back to the server's
    for (const k of st.traceKeys) if (!(k in plan.traces))
      tr[k] = k === 'name' ? st.names : st.bars.map((b) => get(b, k.slice(9)) ?? null);
    Object.assign(lay, plan.layout);
    Object.assign(tr, plan.traces);
    st.keys = Object.keys(plan.layout);
    st.traceKeys = Object.keys(plan.traces);
    const changed = Object.keys(lay).filter((k) => JSON.stringify(get(gd.layout, k) ?? null) !== JSON.stringify(lay[k]));
    if (!changed.length && !Object.keys(tr).length) return;
    state.adapted++;
    // a relayout of the height alone would fix the width too: the figure keeps following its container
    if ('height' in lay) Object.assign(lay, {width: null, autosize: true});
    P.update(gd, tr, lay);
  };

  // Before Plotly draws a grid on a laptop-wide figure, its head labels are fitted already (the
  // server's text kept as `_label`), so the fit after the draw finds nothing to change: otherwise
  // every redraw drew the grid twice (Gradio mounts a new graph div per figure: the second draw, a
  // relayout of 16 labels, cost ~140 ms of the main thread). Narrow and projected grids, whose panels
  // move, are still laid out after the draw.
  const prefit = (gd, data, layout) => {
    if (!layout || !Array.isArray(data) || !data.length || present() || !isGrid({data})) return;
    const W = Math.round(gd.getBoundingClientRect().width), m = layout.margin || {};
    if (!W || W < NARROW || !layout.height || m.t == null) return;
    const out = {};
    fitLabels(layout, panelSize(layout, data, W, layout.height, m.t), out);
    (layout.annotations || []).forEach((a, i) => {
      if (!(`annotations[${i}].text` in out)) return;
      a._label = a._label || a.text;
      a.text = out[`annotations[${i}].text`];
      a.hovertext = out[`annotations[${i}].hovertext`] ?? undefined;
      a.font = {...(a.font || {}), size: out[`annotations[${i}].font.size`]};
    });
  };
  const wrap = (P) => {
    if (!P || P.__prefit) return P;
    const react = P.react;
    P.react = function (gd, data, layout, ...rest) {
      try { prefit(gd, data, layout); } catch (e) { console.warn('grid prefit', e); }
      return react.call(this, gd, data, layout, ...rest);
    };
    P.__prefit = true;
    return P;
  };
  if (window.Plotly) wrap(window.Plotly);
  else {  // Gradio's plot module sets window.Plotly when it loads: wrap it then
    let plotly;
    Object.defineProperty(window, 'Plotly', {configurable: true, enumerable: true,
      get: () => plotly, set: (v) => { plotly = wrap(v); }});
  }

  const seen = new WeakSet(), pending = new Set();
  let frame = 0;
  const schedule = (gd) => { pending.add(gd); if (!frame) frame = requestAnimationFrame(() => {
    frame = 0; const list = [...pending]; pending.clear();
    for (const gd of list) { try { adapt(gd); } catch (e) { console.warn('phone layout', e); } } }); };
  const all = () => document.querySelectorAll('.js-plotly-plot').forEach(schedule);
  const watch = () => { for (const gd of document.querySelectorAll('.js-plotly-plot')) {
    if (seen.has(gd) || typeof gd.on !== 'function') continue;
    seen.add(gd); gd.on('plotly_afterplot', () => schedule(gd)); schedule(gd); } };
  new MutationObserver(watch).observe(document.body, {childList: true, subtree: true});
  new MutationObserver(() => setTimeout(all, 150)).observe(body, {attributes: true, attributeFilter: ['class']});
  window.addEventListener('resize', () => setTimeout(all, 150));
  watch();
}"""  # noqa: E501 (JavaScript kept verbatim)
)

PHONE_JS = "() => { (" + LAYOUT_JS + ")(); (" + JUMP_JS + ")(); }"  # the one script the page installs
