"""Crafted checkpoint configs uploaded to a served app (``python app.py`` under an 8 GiB address-space limit),
driven over HTTP with ``gradio_client``: two 2^40-layer Qwen2 configs (a few hundred bytes each, the pair
that used to hold both compute slots in a loop for hours) are refused by name, each upload answers, and
``/analyze`` of the bundled model answers after them; so do a list ``model_type`` and a 5,000-digit size."""

import json
import urllib.request

import pytest
import torch
from gradio_client import Client, handle_file
from safetensors.torch import save_file

PROMPT_S = 60  # a hang guard for one answer on a busy machine, not a timing claim (benchmarks time it)
QWEN2_BOMB = {
    "model_type": "qwen2",
    "hidden_size": 32,
    "num_attention_heads": 4,
    "num_hidden_layers": 1 << 40,
    "intermediate_size": 64,
    "vocab_size": 120,
    "use_sliding_window": True,
    "sliding_window": 4,
    "max_window_layers": 0,
}


@pytest.fixture(scope="module")
def server(limited_app):
    """The shared ``limited_app`` (8 GiB of address space); these clients send no ``X-Forwarded-For``."""
    assert limited_app["limit_as"] == 8 << 30
    return limited_app["url"], Client(limited_app["url"], verbose=False)


def crafted(folder, config_text: str):
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(config_text)
    save_file({"model.embed_tokens.weight": torch.zeros(120, 32)}, str(folder / "model.safetensors"))
    return folder


def upload(url: str, client: Client, folder) -> tuple:
    """The Upload button's event over HTTP with ``folder``'s files -> (Weights value, status text)."""
    with urllib.request.urlopen(url + "config", timeout=30) as r:
        cfg = json.load(r)
    comps = {c["id"]: c for c in cfg["components"]}
    dep = next(d for d in cfg["dependencies"] if d.get("api_name") == "upload_checkpoint")
    args = []
    for cid in dep["inputs"]:
        kind = comps[cid]["type"]
        if kind == "uploadbutton":
            args.append([handle_file(str(p)) for p in sorted(folder.iterdir())])
        elif kind != "state":  # gradio_client leaves session state out
            args.append(comps[cid]["props"].get("value"))
    out = client.submit(*args, fn_index=dep["id"]).result(timeout=PROMPT_S)  # a hang fails, never waits forever
    return str((out[0] or {}).get("value") or ""), str(out[1]).replace("\\", "")  # the status is Markdown


def bundled_answers(client: Client) -> None:
    job = client.submit("", "The quick brown fox.", "=>", "bundled", api_name="/analyze")
    out = job.result(timeout=PROMPT_S)
    assert out["row_sums_ok"] and len(out["tokens"]) == len("The quick brown fox.")  # byte tokens


def test_two_2_40_layer_qwen2_configs_are_refused_and_the_app_answers(server, tmp_path):
    url, client = server
    bundled_answers(client)
    for i in range(2):  # two distinct uploads (two digests): once two compute slots
        text = json.dumps({**QWEN2_BOMB, "num_hidden_layers": (1 << 40) - i})
        assert len(text) < 300
        folder = crafted(tmp_path / f"bomb{i}", text)
        weights, said = upload(url, client, folder)
        assert "num_hidden_layers" in said and "[1, 512]" in said, said
        assert not weights.startswith("checkpoint:upload:")
        bundled_answers(client)


@pytest.mark.parametrize(
    "name,text,words",
    [
        ("model_type list", json.dumps({**QWEN2_BOMB, "model_type": ["qwen2"]}), ("model_type", "qwen2")),
        ("5000 digits", json.dumps(QWEN2_BOMB).replace(str(1 << 40), "9" * 5000), ("num_hidden_layers", "5000 digits")),
        ("NaN", json.dumps({**QWEN2_BOMB, "num_hidden_layers": 2})[:-1] + ', "rms_norm_eps": NaN}', ("rms_norm_eps",)),
    ],
)
def test_malformed_configs_are_refused_by_name_over_http(server, tmp_path, name, text, words):
    url, client = server
    weights, said = upload(url, client, crafted(tmp_path / "c", text))
    assert all(w in said for w in words), said
    assert "internal error" not in said.lower() and not weights.startswith("checkpoint:upload:")
    bundled_answers(client)
