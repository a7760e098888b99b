"""``/logit_lens``, ``/attribution``, ``/ablation``, ``/patching``, ``/circuits`` from ``gradio_client`` on the served
app, and the Why tab in Chromium.

Answers are checked against properties that hold whatever the weights: the lens's probabilities are in
[0, 1] with one row per layer plus the embedding; attribution's terms add up to the logit; ablation's
change is after minus before; patching everything restores 1 and nothing 0; copying scores lie in [-1, 1]. Bad fields
and caps are refused naming the field."""

import pytest
from gradio_client import Client

LENS_TITLE = (
    "() => { const e = document.querySelector('#why-lens .js-plotly-plot'); "
    "return e && e.layout ? e.layout.title.text : ''; }"
)


@pytest.fixture(scope="module")
def client(app_url):
    return Client(app_url, verbose=False)


def test_each_endpoint_answers_on_the_landing_text(client):
    lens = client.predict("", "", "bundled", api_name="/logit_lens")
    assert lens["rows"] == ["embedding", "layer 0", "layer 1", "layer 2", "layer 3"]
    assert all(0 <= p <= 1 for row in lens["target_prob"] for p in row) and lens["weights"]["used"] == "bundled"
    attr = client.predict("", "", -1, "", "bundled", api_name="/attribution")
    assert attr["total"] == pytest.approx(attr["logit"], abs=1e-3) and len(attr["heads"]) == 4
    abl = client.predict("", "", "1.0,1.1", "zero", "bundled", api_name="/ablation")
    assert abl["heads"] == [[1, 0], [1, 1]]
    assert abl["text"]["change"] == pytest.approx(abl["text"]["after"] - abl["text"]["before"])
    patch = client.predict("", "", "", "bundled", api_name="/patching")
    assert patch["checks"]["everything_patched"] == pytest.approx(1.0, abs=1e-6)
    assert patch["checks"]["nothing_patched"] == pytest.approx(0.0, abs=1e-6)
    circ = client.predict("", "", "K", 0, 1, "bundled", api_name="/circuits")
    eigen = circ["copying"]["copying_eigen"]
    assert len(eigen) == 4 and all(-1 - 1e-9 <= v <= 1 + 1e-9 for row in eigen for v in row)
    assert len(circ["composition"]["scores"]) == 4 and circ["composition"]["kind"] == "K"


def test_bad_fields_and_caps_are_refused_by_name(client):
    with pytest.raises(Exception, match="weights"):
        client.predict("", "", "nonsense", api_name="/logit_lens")
    with pytest.raises(Exception, match=r"position.*0\.\."):
        client.predict("", "abcdef", 99, "", "bundled", api_name="/attribution")
    with pytest.raises(Exception, match="alternative"):
        client.predict("", "", -1, "two", "bundled", api_name="/attribution")
    with pytest.raises(Exception, match="norm_placement"):
        client.predict('{"norm_placement": "post"}', "", -1, "", "initial", api_name="/attribution")
    with pytest.raises(Exception, match="heads"):
        client.predict("", "", "9.9", "zero", "bundled", api_name="/ablation")
    with pytest.raises(Exception, match="at most 32 heads"):
        client.predict("", "", ",".join(["0.0"] * 33), "zero", "bundled", api_name="/ablation")
    with pytest.raises(Exception, match="mode"):
        client.predict("", "", "1.0", "half", "bundled", api_name="/ablation")
    with pytest.raises(Exception, match=r"patching.*at most 128 forward passes"):
        client.predict('{"n_layers": 12, "n_heads": 16, "d_model": 256}', "", "", "initial", api_name="/patching")
    with pytest.raises(Exception, match="kind"):
        client.predict("", "", "X", 0, 1, "bundled", api_name="/circuits")
    with pytest.raises(Exception, match="corrupted"):
        client.predict("", "abcdef", "abc", "bundled", api_name="/patching")


def test_the_tab_draws_the_lens(open_page):
    page = open_page()
    page.tab("Why")
    page.page.wait_for_function(f"({LENS_TITLE})().includes('Logit lens')", timeout=240_000)
    page.page.wait_for_function("() => document.querySelector('#why-patch .js-plotly-plot')", timeout=120_000)
    assert "loss per layer" in page.page.evaluate(LENS_TITLE)
    page.page.wait_for_function("() => document.querySelector('#why-comp .js-plotly-plot')", timeout=60_000)
    page.shot("why", full_page=True)
    page.check_clean()


ATTR_TITLE = (
    "() => { const e = document.querySelector('#why-attr .js-plotly-plot'); "
    "return e && e.layout ? e.layout.title.text : ''; }"
)


def test_a_link_opens_the_tab_at_its_position(open_page):
    page = open_page("?tab=why&why_pos=40&why_alt=x", wait="#why-pos")
    page.page.wait_for_function(f"({ATTR_TITLE})().includes('position 40')", timeout=240_000)
    assert "'x'" in page.page.evaluate(ATTR_TITLE)
    page.page.wait_for_function(
        "() => document.querySelector('#why-link textarea, #why-link input') && "
        "(document.querySelector('#why-link textarea, #why-link input').value || '')"
        ".includes('why_pos=40')",
        timeout=60_000,
    )
    page.check_clean()
