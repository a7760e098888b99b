"""In Debian's Chromium: a share link carries an encoder-decoder's custom separator into the separator
box and the maps split there; the line under the Attention and Memory dropdowns explains the selected
variant and follows the selection."""

from urllib.parse import urlencode

from explorer.app.controls.control_info import MEMORY_ATTENTION_NOTES
from models import registries

INFO_JS = """(sel) => { const e = document.querySelector(sel + ' .info-text');
  return e ? e.innerText.trim() : null; }"""
LABELS_JS = """(sel) => { const e = document.querySelector(sel + ' .js-plotly-plot');
  return e && e.data && e.data.length ? {x: Array.from(e.data[0].x), y: Array.from(e.data[0].y)} : null; }"""


def _shown(text):
    return text.replace("`", "")  # the info line renders Markdown: `window` shows as code


def _wait_info(page, sel, text):
    text = _shown(text)
    page.page.wait_for_function(f"([sel, text]) => ({INFO_JS})(sel) === text", arg=[sel, text], timeout=60_000)


def test_link_with_a_separator_fills_the_box_and_the_maps_split_there(open_page):
    qs = urlencode(
        {
            "architecture": "encoder_decoder",
            "n_layers": 2,
            "d_model": 32,
            "n_heads": 2,
            "text": "ab|cd=>xyz",
            "sep": "|",
        }
    )
    page = open_page(f"?{qs}")
    page.page.wait_for_function(
        "() => { const e = document.querySelector('#cross-grid .js-plotly-plot');"
        " return e && e.data && e.data.length && e.data[0].x.length === 2; }",
        timeout=90_000,
    )
    assert page.page.locator("#separator").is_visible() and page.value("separator") == "|"
    cross = page.page.evaluate(LABELS_JS, "#cross-grid")
    assert cross["x"] == ["0 a", "1 b"] and len(cross["y"]) == len("cd=>xyz")  # split at "|", not "=>"
    page.page.wait_for_function(
        "() => document.querySelector('#share-url textarea, #share-url input').value.includes('sep=%7C')",
        timeout=60_000,
    )  # the link keeps it
    page.settle()
    page.check_clean()


def test_the_line_under_a_dropdown_follows_the_selection(page):
    att = registries()["attention"]
    assert page.page.evaluate(INFO_JS, "#ctl-attention") == _shown(att["full"].summary)
    page.choose("ctl-attention", "sliding_window")
    _wait_info(page, "#ctl-attention", att["sliding_window"].summary)
    page.choose("ctl-memory", "knn_lm")
    mem = f"{registries()['memory']['knn_lm'].summary} {MEMORY_ATTENTION_NOTES['knn_lm']}"
    _wait_info(page, "#ctl-memory", mem)  # says why the maps barely change
    page.settle()
    page.check_clean()
