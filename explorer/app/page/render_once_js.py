"""Each figure update is drawn once, in a task of its own, and never into a plot Gradio is removing: a
script installed once on page load.

Gradio 6.31 mounts a new plot element for each new value of a ``gr.Plot``, and the component being
replaced still calls ``Plotly.react`` with the new value on its old element just before it is removed
(measured in Chromium during a redraw chain: the attention grid drawn into the outgoing element in
191 ms, then into the new one in 92 ms; the statistics and the zoomed head likewise). These wasted
draws held the page's main thread: a dropdown opened during a redraw chain waited for them.

Gradio also draws every plot of an event's answer inside the task that applies the answer: the grid's
draw (~100-170 ms in place) on top of Gradio's own bookkeeping of the event (~30-60 ms), and the
statistics and the zoomed head (~50 ms each) together in one task, so one redraw held the main thread
for 200-230 ms at a time.

``RENDER_ONCE_JS`` wraps ``window.Plotly.react`` (Gradio loads Plotly as ``window.Plotly`` when the first
plot mounts: the wrap is installed as soon as it exists). Every call on a plot element is queued and
drawn one task later, one draw per task, in the order asked (a second call for the same element before
its draw replaces the first: only the latest figure is drawn). A queued draw is skipped, resolving with
the element as Plotly's own does, when its element has left the document or was last drawn with exactly
the same data and layout. While a new element waits for its first draw, the element it replaces (the
last one drawn in the same parent) is put back beside it, so the old figure stays on screen until the new
one is drawn in the same task that removes it: the box never shows empty and nothing below it moves.
Calls with an element id, not an element, go to Plotly unchanged.
"""

RENDER_ONCE_JS = """() => {
  if (window.__renderOnce) return;
  const last = new WeakMap();        // element -> JSON of the data and layout it was last drawn with
  const shown = new WeakMap();       // parent -> the element last drawn in it
  const standIn = new WeakMap();     // new element -> the old element kept on screen until it is drawn
  const queue = new Map();           // element -> {self, args, waiting: [[resolve, reject]]}
  let timer = 0;
  window.__renderOnce = {skipped: 0, drawn: 0, kept: 0};
  const keyOf = (data, layout) => { try { return JSON.stringify([data, layout]); } catch (e) { return null; } };
  const install = () => {
    const P = window.Plotly;
    if (!P || P.__renderOnce) return !!P;
    const react = P.react;
    const settle = (job, gd, error) => job.waiting.forEach(([ok, fail]) => error ? fail(error) : ok(gd));
    const drawNext = () => {
      timer = 0;
      const next = queue.entries().next();
      if (next.done) return;
      const [gd, job] = next.value;
      queue.delete(gd);
      if (queue.size) timer = setTimeout(drawNext, 0);  // the next draw in a task of its own
      const old = standIn.get(gd);
      standIn.delete(gd);
      if (old) old.remove();  // in this task, with the draw: never a frame with neither figure
      if (!gd.isConnected) { window.__renderOnce.skipped++; settle(job, gd); return; }  // being replaced
      const [data, layout] = job.args;
      const key = keyOf(data, layout);
      if (key !== null && gd._fullLayout && gd.data && last.get(gd) === key) {
        window.__renderOnce.skipped++; settle(job, gd); return;
      }
      if (key === null) last.delete(gd); else last.set(gd, key);
      window.__renderOnce.drawn++;
      if (gd.parentElement) shown.set(gd.parentElement, gd);
      try { Promise.resolve(react.call(job.self, gd, ...job.args)).then(() => settle(job, gd), (e) => settle(job, gd, e)); }
      catch (e) { settle(job, gd, e); }
    };
    P.react = function (gd, ...args) {
      if (!gd || typeof gd !== 'object' || !('isConnected' in gd)) return react.call(this, gd, ...args);  // an id
      const parent = gd.parentElement, old = parent && shown.get(parent);
      if (!gd._fullLayout && old && old !== gd && !old.isConnected && !standIn.has(gd)) {
        const queued = queue.get(old);  // the outgoing element's own draw: never drawn
        if (queued) { queue.delete(old); window.__renderOnce.skipped++; settle(queued, old); }
        parent.insertBefore(old, gd);
        standIn.set(gd, old);
        window.__renderOnce.kept++;
      }
      return new Promise((resolve, reject) => {
        const job = queue.get(gd) || {waiting: []};
        job.self = this; job.args = args; job.waiting.push([resolve, reject]);
        queue.set(gd, job);
        if (!timer) timer = setTimeout(drawNext, 0);
      });
    };
    P.__renderOnce = true;
    return true;
  };
  if (install()) return;
  const watch = new MutationObserver(() => { if (install()) watch.disconnect(); });
  watch.observe(document.body, {childList: true, subtree: true});
}"""  # noqa: E501 (JavaScript kept verbatim)
