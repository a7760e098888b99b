"""The Train tab in Debian's Chromium at 1280x720: ▶ Play and the whole loss curves on the first screen
without scrolling; a press after a finished run keeps its summary and says how to continue (no warning
for a value the user did not type); an uploaded checkpoint sets the Task dropdown to its run's task and
draws that task's probe map."""

import json

from browser_page import Page  # noqa: E402

from explorer.training import checkpoint
from models import ModelConfig, build_model

SCREEN = {"width": 1280, "height": 720}
BOX_JS = """(sel) => { const r = document.querySelector(sel).getBoundingClientRect();
  return [r.top, r.bottom, r.left, r.right]; }"""
STATUS_JS = "() => document.querySelector('#train-status').innerText"


def _train_tab(open_page) -> Page:
    page = open_page(viewport=SCREEN)
    page.tab("Train")
    page.page.wait_for_selector("#train-play", state="visible")
    page.page.wait_for_timeout(500)
    return page


def _set_number(page: Page, elem_id: str, value) -> None:
    box = page.page.locator(f"#{elem_id} input").first
    box.fill(str(value))
    box.press("Tab")


def test_play_and_the_curves_fit_the_first_screen(open_page):
    page = _train_tab(open_page)
    height = page.page.evaluate("() => window.innerHeight")
    for sel in ("#train-play", "#train-pause", "#train-step", "#train-reset", "#train-steps", "#train-curves"):
        top, bottom, left, right = page.page.evaluate(BOX_JS, sel)
        assert 0 <= top and bottom <= height and 0 <= left and right <= SCREEN["width"], (sel, top, bottom)
    page.check_clean()


def test_a_press_after_a_finished_run_keeps_its_summary(open_page):
    page = _train_tab(open_page)
    _set_number(page, "train-steps", 10)
    page.page.click("#train-play")
    page.page.wait_for_function(f"() => ({STATUS_JS})().includes('Finished')", timeout=180_000)
    for button in ("#train-play", "#train-step"):
        page.page.click(button)
        page.page.wait_for_function(f"() => ({STATUS_JS})().includes('This run is finished')", timeout=60_000)
        status = page.page.evaluate(STATUS_JS)
        assert "step 10 / 10" in status and "held-out loss" in status and "raise Steps" in status, status
        assert "not valid" not in status and page.page.locator(".toast-body.warning").count() == 0
        page.page.click("#train-reset")  # the next button starts from a status of its own
        page.page.wait_for_function(f"() => ({STATUS_JS})().includes('Reset')", timeout=30_000)
        page.page.click("#train-play")
        page.page.wait_for_function(f"() => ({STATUS_JS})().includes('Finished')", timeout=180_000)
    page.check_clean()


def test_an_uploaded_checkpoint_restores_its_task_and_draws_its_probe_map(open_page, tmp_path):
    cfg = ModelConfig(n_layers=1, d_model=32, n_heads=2, max_len=256, position="rope")
    path, _ = checkpoint.save(
        build_model(cfg), tmp_path, cfg, extra={"step": 7, "run": json.dumps({"task": "reverse", "seq_len": 24})}
    )
    page = _train_tab(open_page)
    assert page.value("train-task") == "copy"
    page.page.locator("#train-upload input[type=file], input[type=file]").last.set_input_files(str(path))
    page.page.wait_for_function(f"() => ({STATUS_JS})().includes('Loaded a model trained for 7 steps')", timeout=60_000)
    page.page.wait_for_function(
        "() => { const e = document.querySelector('#train-attention .js-plotly-plot');"
        " return e && e.data && e.data.some(t => t.name === 'ideal pattern'); }",
        timeout=60_000,
    )
    assert page.value("train-task") == "reverse"
    names = page.page.evaluate("() => document.querySelector('#train-attention .js-plotly-plot').data.map(t => t.name)")
    assert {"layer 0 head 0", "layer 0 head 1", "ideal pattern"} <= set(names)
    title = page.page.evaluate("() => document.querySelector('#train-attention .js-plotly-plot').layout.title.text")
    assert "step 7" in title
    page.check_clean()
