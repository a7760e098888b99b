"""``/compare_ab`` from ``gradio_client``: the diff and both sides' numbers, checked against the
single-config endpoints (the independent reference), and a bad config as the client's error."""

import json
from urllib.parse import parse_qsl

import pytest
from gradio_client import Client

A = {"n_layers": 2, "d_model": 32, "n_heads": 2}
B = {**A, "attention": "sliding_window", "window": 2}


@pytest.fixture(scope="module")
def client(app_url):
    return Client(app_url, verbose=False)


def test_compare_endpoint_matches_the_single_config_endpoints(client):
    out = client.predict(json.dumps(A), json.dumps(B), "abcdef", api_name="/compare_ab")
    assert {tuple(r[:1]) for r in out["diff"]} == {("attention",), ("window",)}
    assert out["a"]["attention"] == client.predict(json.dumps(A), "abcdef", api_name="/analyze")
    assert out["b"]["attention"]["allowed_fraction"] == pytest.approx(11 / 36, abs=1e-6)
    assert out["b"]["gradients"] == client.predict(json.dumps(B), api_name="/gradients")
    q = dict(parse_qsl(out["link"]))
    assert q["tab"] == "compare" and q["attention"] == "sliding_window" and "attention" not in dict(parse_qsl(q["pin"]))


def test_compare_endpoint_names_a_bad_field(client):
    with pytest.raises(Exception, match="n_heads"):
        client.predict(json.dumps(A), json.dumps({**A, "n_heads": 3}), "abc", api_name="/compare_ab")
