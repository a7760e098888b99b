"""Click a panel of a grid of maps to zoom into it: the one page script the three grids share.

The attention grid, the encoder-decoder's extra grids and the long-context grid each draw one heatmap per
head whose trace carries ``meta = [layer, head]``. ``click_to_pick`` returns the script that runs once per
page (``demo.load(js=...)``): it hooks every (re)drawn grid among ``grid_ids`` (a ``MutationObserver``
re-attaches the listener if Gradio mounts a new plot element; ``Plotly.react`` keeps it across redraws), and
a click turns the clicked point into a pick (``pick``: a JavaScript expression over ``id`` (the grid's
element id), ``gd`` (its plot), ``pt`` (the clicked point) and ``m`` (the trace's ``[layer, head]``); ``null``
ignores the click), keeps it in ``window[store]`` and presses the hidden button ``#button_id``, whose own
client-side step reads it: one click, one zoom request.
"""

from __future__ import annotations

import json


def click_to_pick(grid_ids, pick: str, store: str, button_id: str) -> str:
    """The page script (see the module docstring); ``grid_ids``, ``store`` and ``button_id`` are our own names."""
    flag = "__" + store.strip("_") + "Hooked"
    return (
        """() => {
  const hook = () => {
    for (const id of """
        + json.dumps(list(grid_ids))
        + """) {
      const gd = document.querySelector('#' + id + ' .js-plotly-plot');
      if (!gd || typeof gd.on !== 'function' || gd."""
        + flag
        + """) continue;
      gd."""
        + flag
        + """ = true;
      gd.on('plotly_click', (ev) => {
        const pt = ev && ev.points && ev.points[0], m = pt && pt.data && pt.data.meta;
        if (!Array.isArray(m) || m.length !== 2) return;
        const picked = ("""
        + pick
        + """);
        if (picked === null || picked === undefined) return;
        window."""
        + store
        + """ = picked;
        const go = document.querySelector('#"""
        + button_id
        + """');
        const btn = go && (go.tagName === 'BUTTON' ? go : go.querySelector('button'));
        if (btn) btn.click();
      });
    }
  };
  hook();
  new MutationObserver(hook).observe(document.body, {childList: true, subtree: true});
}"""
    )
