"""Each figure update is drawn once, and never into a plot Gradio is removing: a script installed once
on page load.

Gradio 6.31 mounts a new plot element for each new value of a ``gr.Plot``, and the component being
replaced still calls ``Plotly.react`` with the new value on its old element just before it is removed
(measured in Chromium during a redraw chain: the attention grid drawn into the outgoing element in
191 ms, then into the new one in 92 ms; the statistics and the zoomed head likewise). These wasted
draws hold the page's main thread: a dropdown opened during a redraw chain waits for them.

``RENDER_ONCE_JS`` wraps ``window.Plotly.react`` (Gradio loads Plotly as ``window.Plotly`` when the first
plot mounts: the wrap is installed as soon as it exists). A call on a new element (nothing drawn yet)
draws at once, so its box never shows empty. A call on an element that already shows a figure runs one
task later (``setTimeout 0``, after Gradio's swap of the elements; the old figure stays on screen
meanwhile) and is skipped, resolving with the element as Plotly's own does, when the element is no
longer in the document or was last given exactly the same data and layout. Every other call goes to
Plotly unchanged.
"""

RENDER_ONCE_JS = """() => {
  if (window.__renderOnce) return;
  const last = new WeakMap();
  window.__renderOnce = {skipped: 0, drawn: 0};
  const install = () => {
    const P = window.Plotly;
    if (!P || P.__renderOnce) return !!P;
    const react = P.react;
    P.react = function (gd, data, layout, config) {
      const self = this, args = arguments;
      if (!gd || typeof gd !== 'object' || !('isConnected' in gd)) return react.apply(self, args);  // an id
      if (!gd._fullLayout) {  // a new element: drawn at once (its box never shows empty)
        try { last.set(gd, JSON.stringify([data, layout])); } catch (e) { last.delete(gd); }
        window.__renderOnce.drawn++;
        return react.apply(self, args);
      }
      return new Promise((resolve, reject) => setTimeout(() => {
        if (!gd.isConnected) { window.__renderOnce.skipped++; resolve(gd); return; }  // being replaced
        let key = null;
        try { key = JSON.stringify([data, layout]); } catch (e) { key = null; }
        if (key !== null && gd._fullLayout && gd.data && last.get(gd) === key) {
          window.__renderOnce.skipped++;
          resolve(gd);
          return;
        }
        if (key === null) last.delete(gd); else last.set(gd, key);
        window.__renderOnce.drawn++;
        try { Promise.resolve(react.apply(self, args)).then(resolve, reject); } catch (e) { reject(e); }
      }, 0));
    };
    P.__renderOnce = true;
    return true;
  };
  if (install()) return;
  const watch = new MutationObserver(() => { if (install()) watch.disconnect(); });
  watch.observe(document.body, {childList: true, subtree: true});
}"""
