"""A pretrained checkpoint in Chromium and through ``gradio_client``, on the shared ``limited_app``, which offers
a tiny local checkpoint (``tests/tiny_checkpoint.py``: a Llama with a BPE tokenizer) through
``EXPLORER_CHECKPOINTS``: choose it, see its tokenizer's tokens in the maps, apply a window, see the
perplexity change; open its share link in a fresh page; upload its files; call ``/analyze`` on it."""

import json
import shutil
from urllib.parse import parse_qs, urlparse

import pytest
from gradio_client import Client

WEIGHTS_LINE = "() => (document.querySelector('#weights-line') || {}).innerText || ''"
ZOOM_TEXT = "() => (document.querySelector('#zoom-plot') || {}).textContent || ''"
GRID_TEXT = "() => (document.querySelector('#attention-grid') || {}).textContent || ''"
TEXT = "The password is Xq7Rv9Lm2; type Xq7Rv9Lm2 again to confirm it."


@pytest.fixture(scope="module")
def ckpt_server(limited_app):
    return limited_app["url"], limited_app["offered"], limited_app["cfg"], limited_app["tok"]


def _line(page) -> str:
    return page.page.evaluate(WEIGHTS_LINE)


def test_choose_a_checkpoint_see_its_tokens_apply_a_window(open_page, ckpt_server):
    url, root, cfg, tok = ckpt_server
    page = open_page(url)
    assert "checkpoint: tiny" in page.page.locator("#weights-switch").inner_text()
    page.page.locator("#weights-switch label").filter(has_text="checkpoint: tiny").click()
    page.page.wait_for_function(f"() => ({ZOOM_TEXT})().includes('␣password')", timeout=90_000)
    page.page.wait_for_function(f"() => ({WEIGHTS_LINE})().includes(\"checkpoint 'tiny'\")", timeout=60_000)
    page.settle()
    assert "tokenizer tokens" in page.page.evaluate(GRID_TEXT)
    assert page.value("ctl-d_model") == "32" and page.value("ctl-norm") == "rmsnorm"
    assert "tokens (the checkpoint's tokenizer)" in page.page.locator("#maps-reading").inner_text()

    page.choose("ctl-attention", "sliding_window")
    page.settle()
    page.commit_number("ctl-window", "3")
    page.page.wait_for_function(f"() => ({WEIGHTS_LINE})().includes('window=3')", timeout=90_000)
    line = _line(page)
    assert "moved to" in line and "perplexity" in line  # "held-out loss a → b nats/token (+d; perplexity p → q)"
    before, after = [float(x) for x in line.split("perplexity")[1].split(")")[0].replace("*", "").split("→")]
    assert before != after  # three keys per query change what the model predicts
    page.settle()
    share = page.page.locator("#share-url input, #share-url textarea").first.input_value()
    query = parse_qs(urlparse(share).query)
    assert query["ckpt"] == ["tiny"] and query["window"] == ["3"]
    page.tab("Surgery")
    page.wait_plot("#surgery-diff")
    assert "Surgery on checkpoint" in page.page.locator("#surgery-reading").inner_text()
    page.check_clean()

    again = open_page(share)  # the link opens the checkpoint with its window in a fresh context
    again.page.wait_for_function(f"() => ({WEIGHTS_LINE})().includes('perplexity')", timeout=90_000)
    checked = again.page.evaluate("() => document.querySelector('#weights-switch input:checked').value")
    assert checked == "checkpoint:tiny" and again.value("ctl-window") == "3"
    again.check_clean()


def test_a_link_to_a_checkpoint_this_host_lacks_falls_back(open_page, ckpt_server):
    url, *_ = ckpt_server
    page = open_page(url + "?ckpt=somewhere-else&attention=sliding_window&window=8")
    page.page.wait_for_function(
        "() => document.querySelector('#status').innerText.includes('cannot load')", timeout=60_000
    )
    page.settle()
    assert "bundled model" in _line(page)
    assert page.page.evaluate("() => document.querySelector('#weights-switch input:checked').value") == "bundled"


def test_upload_checkpoint_files(open_page, ckpt_server, tmp_path):
    url, root, cfg, tok = ckpt_server
    files = []
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        files.append(str(shutil.copyfile(root / "tiny" / name, tmp_path / name)))
    page = open_page(url)
    page.page.get_by_text("Open a pretrained checkpoint").click()
    with page.page.expect_file_chooser() as chooser:
        page.page.locator("#checkpoint-upload").click()
    chooser.value.set_files(files)
    page.page.wait_for_function(
        "() => document.querySelector('#status').innerText.includes('Uploaded files read')", timeout=60_000
    )
    page.page.wait_for_function(f"() => ({ZOOM_TEXT})().includes('␣password')", timeout=90_000)
    checked = page.page.evaluate("() => document.querySelector('#weights-switch input:checked').value")
    assert checked.startswith("checkpoint:upload:")
    page.settle()
    page.check_clean()


def test_analyze_endpoint_on_the_checkpoint(ckpt_server):
    url, root, cfg, tok = ckpt_server
    client = Client(url, verbose=False)
    out = client.predict(
        json.dumps({"attention": "sliding_window", "window": 3}), TEXT, "=>", "checkpoint:tiny", api_name="/analyze"
    )
    assert out["tokens"] == tok.pieces(tok.encode(TEXT)) and out["weights"]["checkpoint"] == "tiny"
    assert out["row_sums_ok"] and set(out["weights"]["perplexity"]) == {"text", "heldout"}
    with pytest.raises(Exception, match="d_model"):
        client.predict(json.dumps({"d_model": 64}), TEXT, "=>", "checkpoint:tiny", api_name="/analyze")
    with pytest.raises(Exception, match="checkpoint"):
        client.predict("", TEXT, "=>", "checkpoint:../../etc", api_name="/analyze")
