"""Through the running app's API (gradio_client): a ~90-byte Linformer config (12 layers of 65536 x
8192 projections) and a config within every cap but over the per-request memory budget come back as
the client's error, with the message naming what to shrink, and the server keeps answering afterwards."""

import json

import pytest
from gradio_client import Client

LINFORMER = {"attention": "linformer", "causal": False, "proj_len": 65536, "max_len": 8192, "n_layers": 12}
# every field within its cap; ~0.8 G parameters (16 experts of 512 x 4096, 12 layers): its weights,
# their gradients and the activations of the gradient batch exceed any default budget (<= 8 GiB)
BIG_MOE = {"ffn": "moe", "n_experts": 16, "d_model": 512, "d_ff": 4096, "n_layers": 12, "n_heads": 16}


@pytest.fixture(scope="module")
def client(app_url):
    return Client(app_url, verbose=False)


@pytest.mark.parametrize(
    "endpoint,extra", [("/analyze", ("abc",)), ("/gradients", ()), ("/benchmark", ("128", "forward"))]
)
def test_linformer_config_is_refused_with_a_message(client, endpoint, extra):
    with pytest.raises(Exception) as info:
        client.predict(json.dumps(LINFORMER), *extra, api_name=endpoint)
    assert "proj_len=65536" in str(info.value) and "at most 1024" in str(info.value)


def test_over_budget_config_is_refused_and_the_server_keeps_serving(client):
    with pytest.raises(Exception) as info:
        client.predict(json.dumps(BIG_MOE), "abc", api_name="/analyze")
    msg = str(info.value)
    assert "budget" in msg and "shrink" in msg and "halving it saves" in msg
    assert client.predict("{}", "abc", api_name="/analyze")["n_tokens"] == 3
