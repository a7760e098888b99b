"""The app's door to a checkpoint, at the handler level: the Weights switch fills the controls with its
architecture, every tab draws it (tokens, surgery, gradients, card, latency), the share link carries its
id and its surgery, and what the host cannot load falls back to the bundled model with a message."""

from types import SimpleNamespace
from urllib.parse import parse_qs

import pytest

from explorer.app.api import endpoints as api
from explorer.app.controls import weights as W
from explorer.app.controls.checkpoint_door import open_named
from explorer.app.controls.fields import CONTROL_FIELDS, config_values
from explorer.app.controls.sources import load_from_url
from explorer.app.page.wiring import stage_handler
from explorer.app.tabs.attention import refresh_attention
from explorer.app.tabs.latency import run_sweep
from explorer.app.tabs.surgery import refresh_surgery
from models import ModelConfig

# the chain's analysis stage as the page runs it: the Gradients, Model and Latency (KV cache) tabs' steps
analysis_stage = stage_handler("analysis")


TEXT = "The password is Xq7Rv9Lm2; type Xq7Rv9Lm2 again to confirm it."
CHOICE = "checkpoint:tiny"


def _values(out, before):
    return {
        k: (out[k]["value"] if isinstance(out.get(k), dict) and "value" in out[k] else before[k])
        for k in CONTROL_FIELDS
    }


@pytest.fixture
def opened(tiny):
    values = config_values(ModelConfig())
    out = W.switch(values, CHOICE, None, None)
    return _values(out, values), out


def _draw(values, state=None, text=TEXT):
    handler = W.attention_with_weights(lambda v, **kw: refresh_attention(v, **kw))
    return handler(values, trained=None, weights=CHOICE, text=text, state=state, separator=None)


def test_switch_fills_the_controls_and_the_grid_shows_its_tokens(tiny, opened):
    ckpt, model, cfg, tok = tiny
    values, out = opened
    assert (values["d_model"], values["n_kv_heads"], values["norm"], values["ffn"]) == (32, 2, "rmsnorm", "swiglu")
    assert "Opened" in out["status"] and "tiny" in out["status"]
    drawn = _draw(values, out["state"])
    assert "password" in str(drawn["grid"]) and "tiny" in drawn["weights_md"]
    query = parse_qs(drawn["share_qs"])
    assert query["ckpt"] == ["tiny"] and "d_model" not in query and "vocab_size" not in query
    assert "tokens (the checkpoint's tokenizer)" in drawn["maps_md"]


def test_a_window_is_surgery_with_its_perplexity_and_the_link_carries_it(opened):
    values, out = opened
    window = {**values, "attention": "sliding_window", "window": 3}
    drawn = _draw(window, out["state"])
    assert "perplexity" in drawn["weights_md"].lower() and "moved to attention" in drawn["weights_md"]
    query = parse_qs(drawn["share_qs"])
    assert (query["ckpt"], query["attention"], query["window"]) == (["tiny"], ["sliding_window"], ["3"])
    tab = W.with_weights(refresh_surgery)(window, trained=None, weights=CHOICE, text=TEXT)
    assert "perplexity" in tab["surgery_md"] and "checkpoint" in tab["surgery_diff"].layout.title.text
    restored = load_from_url(SimpleNamespace(query_params={k: v[0] for k, v in query.items()}))
    assert restored["weights"]["value"] == CHOICE and restored["window"]["value"] == 3
    assert restored["d_model"]["value"] == 32


def test_a_change_that_needs_other_weights_is_named(opened):
    values, out = opened
    drawn = _draw({**values, "ffn": "gelu"}, out["state"])
    assert "ffn" in drawn["status"] and "swiglu" in drawn["status"]


def test_link_to_a_checkpoint_the_host_lacks_falls_back(tiny):
    out = load_from_url(
        SimpleNamespace(
            query_params={"ckpt": "elsewhere", "attention": "sliding_window", "window": "8", "text": "hello"}
        )
    )
    assert "cannot load" in out["status"] and out["weights"]["value"] == "bundled"
    assert out["attention"]["value"] == "sliding_window" and out["text"] == "hello"
    hostile = load_from_url(SimpleNamespace(query_params={"ckpt": "<img src=x onerror=alert(1)>"}))
    assert "<img" not in hostile["status"]


def test_leaving_the_checkpoint_resets_sizes_past_the_caps(tiny, monkeypatch, opened):
    values, out = opened
    big = {**values, "d_model": 4096}  # as a real checkpoint's would be
    back = W.switch(big, "bundled", None, None)
    assert back["d_model"]["value"] == ModelConfig().d_model and "reset" in back["status"]


def test_gradients_card_and_latency_at_its_sizes(tiny, opened):
    ckpt, model, cfg, tok = tiny
    values, out = opened
    tabs = W.with_weights(analysis_stage)(values, trained=None, weights=CHOICE, text=TEXT)
    assert "next-token loss on your text" in tabs["grad"].layout.title.text
    per_token = 2 * cfg.n_layers * cfg.kv_heads * cfg.d_head * 2
    assert f"{per_token:,} bytes per token" in tabs["model_md"] and "tiny" in tabs["model_md"]
    swept = run_sweep(W.with_checkpoint(values, CHOICE), "16,32", "forward", None)
    assert swept["state"]["sweep"]["current"][0]["status"] == "ok"


def test_open_by_name_and_a_bad_name(tiny):
    state = None
    out = open_named(config_values(ModelConfig()), "tiny", [], state)
    assert out["weights"]["value"] == CHOICE and out["d_model"]["value"] == 32
    bad = open_named(config_values(ModelConfig()), "../../etc", [], state)
    assert "checkpoint" in bad["status"] and "tiny" in bad["status"]


def test_api_draws_a_checkpoint_with_changes(tiny):
    ckpt, model, cfg, tok = tiny
    out = api.api_analyze('{"attention": "sliding_window", "window": 3}', TEXT, weights=CHOICE)
    assert out["tokens"] == tok.pieces(tok.encode(TEXT)) and out["weights"]["used"] == "checkpoint"
    assert set(out["weights"]["perplexity"]) == {"text", "heldout"}
    grads = api.api_gradients("", weights=CHOICE)
    assert len(grads["attn_out"]) == cfg.n_layers
    with pytest.raises(Exception, match="ffn"):
        api.api_analyze('{"ffn": "gelu"}', TEXT, weights=CHOICE)


def test_a_preset_or_reset_leaves_the_checkpoint(tiny):
    from explorer.app.controls import history
    from explorer.app.controls.sources import apply_preset, skip_fill
    from explorer.runtime.presets import available

    preset = W.after_fill(apply_preset(available()[0]), CHOICE)
    assert preset["weights"] == "bundled" and "switched to bundled" in preset["status"]
    reset = W.after_fill(history.reset(), CHOICE)
    assert reset["weights"] == "bundled"
    assert W.after_fill(skip_fill(), CHOICE)["weights"] == {"__type__": "update"}  # nothing filled: kept
    assert W.after_fill(apply_preset(available()[0]), "bundled")["weights"] == {"__type__": "update"}


def test_export_of_a_checkpoint_view(tiny, opened, tmp_path):
    import zipfile

    from explorer.app.api.export import cleanup_export, export_files

    values, out = opened
    result = W.with_weights(export_files)(
        values,
        trained=None,
        weights=CHOICE,
        text=TEXT,
        separator=None,
        state=None,
        zoom_layer=0,
        zoom_head=0,
        pinned=None,
        train_state=None,
    )
    try:
        with zipfile.ZipFile(result["files"]["value"]) as z:
            config = next(n for n in z.namelist() if n.endswith(".json"))
            assert '"vocab_size": 400' in z.read(config).decode()  # the checkpoint's config, its sizes
    finally:
        cleanup_export(result["export_dir"])


def test_an_encoder_decoder_checkpoint_link_keeps_its_separator(tiny):
    from explorer.app.controls.share import checkpoint_query

    cfg = ModelConfig(architecture="encoder_decoder").validate()
    query = parse_qs(checkpoint_query("tiny", cfg, cfg.replace(n_sinks=0), "a ## b", "##"))
    assert query["sep"] == ["##"] and query["ckpt"] == ["tiny"]
    restored = load_from_url(SimpleNamespace(query_params={"ckpt": "tiny", "sep": "##", "text": "hello"}))
    assert restored["separator"] == "##" and restored["weights"]["value"] == CHOICE


def test_an_uploaded_save_pretrained_folder_names_its_ignored_files(tiny_root, tmp_path, monkeypatch):
    import shutil

    from explorer.app.controls import checkpoint_door
    from explorer.app.server import request_limits
    from explorer.runtime.untrusted import shown

    root = tiny_root[0]
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path))
    monkeypatch.setattr(request_limits, "owns", lambda path: True)  # the visitor's own upload
    (tmp_path / "up").mkdir()
    paths = [str(shutil.copyfile(root / "tiny" / n, tmp_path / "up" / n)) for n in ("config.json", "model.safetensors")]
    for name in ("generation_config.json", "tokenizer_config.json"):
        (tmp_path / "up" / name).write_text("{}")
        paths.append(str(tmp_path / "up" / name))
    out = checkpoint_door.open_upload(config_values(ModelConfig()), paths, [], None)
    named = shown("generation_config.json, tokenizer_config.json")  # as the status shows it (Markdown-escaped)
    assert f"Ignored (not needed here): {named}." in out["status"]
    # one name for the upload wherever a visitor reads it: the Weights choice's label and the status line
    ckpt = out["weights"]["value"].removeprefix("checkpoint:")
    label = dict((v, k) for k, v in out["weights"]["choices"])[out["weights"]["value"]]
    name = label.removeprefix("checkpoint: ")
    assert name == "upload-" + ckpt.removeprefix("upload:")[:8] and ckpt not in label
    assert f"checkpoint &#x27;{shown(name)}&#x27;" in out["status"] and f"as {shown(name)}." in out["status"]
