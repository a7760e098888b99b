"""The Train tab trains the model on the controls, in Debian's Chromium: sliding_window + ALiBi picked
on the controls are in the Train tab's config and its checkpoint's name, one step trains that model, and
"Weights: your run" draws it without a warning; a model over the training cap is scaled down, the tab
says so, and "your run" sets the size controls to the trained size."""

import json
import re

from browser_page import Page  # noqa: E402

from models import ModelConfig


def _config(page: Page) -> dict:
    """The fields of the config box that the test reads (the editor may not show every line)."""
    text = page.page.locator("#train-config .cm-content").inner_text()
    found = dict(re.findall(r'"(attention|position|n_layers|d_model|max_len|n_heads)": ("?[\w.]+"?)', text))
    return {k: json.loads(v) for k, v in found.items()}


def _step_once(page: Page):
    page.page.click("#train-step")
    page.page.wait_for_function(
        "() => /step 1 \\//.test(document.querySelector('#train-status').innerText)", timeout=120_000
    )


def _your_run(page: Page):
    page.page.locator("#weights-switch label").filter(has_text="your run").click()
    page.page.wait_for_function(
        "() => document.querySelector('#status').innerText.includes(\"Showing your run\")", timeout=60_000
    )
    page.settle()
    checked = page.page.evaluate("() => document.querySelector('#weights-switch input:checked').value")
    assert checked == "trained"
    assert page.page.locator(".toast-body.warning").count() == 0
    page.check_clean()


def test_train_tab_trains_the_controls_model(open_page):
    page = open_page()
    page.choose("ctl-attention", "sliding_window")
    page.settle()
    page.choose("ctl-position", "alibi")
    page.settle()
    page.tab("Train")
    line = page.page.locator("#train-source").inner_text()
    assert "sliding_window" in line and "alibi" in line and "Scaled down" not in line
    page.page.get_by_text("Model and data").click()  # the accordion holding the config box
    cfg = _config(page)
    assert cfg["attention"] == "sliding_window" and cfg["position"] == "alibi"
    assert (cfg["n_layers"], cfg["d_model"]) == (ModelConfig().n_layers, ModelConfig().d_model)  # not scaled
    _step_once(page)
    page.page.click("#train-download")
    page.page.locator("#train-files a").first.wait_for(timeout=90_000)
    hrefs = page.page.eval_on_selector_all("#train-files a", "els => els.map(e => e.href)")
    assert any(h.endswith("sliding_window-alibi-copy-step1.safetensors") for h in hrefs), hrefs
    _your_run(page)


def test_a_model_over_the_cap_is_scaled_down_and_your_run_sets_its_size(open_page):
    page = open_page()
    page.commit_number("ctl-d_model", "512")
    page.settle()
    page.commit_number("ctl-n_layers", "12")
    page.settle()
    page.tab("Train")
    line = page.page.locator("#train-source").inner_text()
    assert "Scaled down" in line and "n_layers 12 →" in line, line
    page.page.get_by_text("Model and data").click()
    cfg = _config(page)
    assert ModelConfig(**cfg).approx_params() <= 2_000_000 and cfg["n_layers"] < 12
    _step_once(page)
    _your_run(page)
    assert (page.value("ctl-n_layers"), page.value("ctl-d_model")) == (str(cfg["n_layers"]), str(cfg["d_model"]))
    assert "Controls set to your run's size" in page.page.locator("#status").inner_text()
