"""Every path that reads a source / target text reads it at the same separator: share links carry a
custom separator (written only when it is not the default, read back checked like the separator box,
hostile values refused with a notice naming the field, the box restored on load), and the grid
pickers, the Compare tab and the export split and link exactly where the attention maps do."""

from types import SimpleNamespace
from urllib.parse import parse_qsl

import pytest

from explorer.app.controls.fields import CONTROL_FIELDS
from explorer.app.controls.share import SEP_PARAM, from_query, link_separator, to_query
from explorer.app.controls.sources import apply_preset, load_from_url
from explorer.app.controls.state import new_state
from explorer.app.tabs import attention as h
from explorer.runtime.text import DEFAULT_SEPARATOR, MAX_SEPARATOR_CHARS, check_separator, model_input
from models import ConfigError, ModelConfig

ENCDEC = ModelConfig(architecture="encoder_decoder", n_layers=2, d_model=32, n_heads=2)


def _params(query: str) -> dict:
    return dict(parse_qsl(query, keep_blank_values=True))


@pytest.mark.parametrize("sep", ["|", " -> ", "§§", "=>>", "x" * MAX_SEPARATOR_CHARS, "→"])
def test_custom_separator_round_trips(sep):
    text = f"source{sep}target"
    params = _params(to_query(ENCDEC, text, separator=sep))
    assert params[SEP_PARAM] == sep
    cfg, got_text, _, notice = from_query(params)
    assert (cfg, got_text, notice) == (ENCDEC, text, None)  # sep is not read as a config field
    assert link_separator(params) == (sep, None)
    inp = model_input(ENCDEC, got_text, link_separator(params)[0])
    assert bytes(inp.ids("source")) == b"source" and bytes(inp.ids("target")) == b"target"


@pytest.mark.parametrize("cfg, sep", [(ENCDEC, DEFAULT_SEPARATOR), (ENCDEC, ""), (ENCDEC, None), (ModelConfig(), "|")])
def test_separator_left_out_when_default_or_unused(cfg, sep):
    params = _params(to_query(cfg, "a=>b|c", separator=sep))
    assert SEP_PARAM not in params
    assert link_separator(params) == (DEFAULT_SEPARATOR, None)


@pytest.mark.parametrize("raw", ["", "a\nb", "\t", "a\x00", "\u202e=>", "x" * (MAX_SEPARATOR_CHARS + 1), "y" * 5000])
def test_hostile_separator_is_refused_naming_the_field(raw):
    sep, notice = link_separator({SEP_PARAM: raw, "architecture": "encoder_decoder"})
    assert sep == DEFAULT_SEPARATOR
    assert "separator" in notice and str(MAX_SEPARATOR_CHARS) in notice and len(notice) < 400
    with pytest.raises(ConfigError) as err:
        check_separator(raw)
    assert err.value.field == "separator"


def test_link_load_fills_the_separator_box_and_keeps_the_config():
    query = to_query(ENCDEC, "ab|cd", separator="|")
    out = load_from_url(SimpleNamespace(query_params=_params(query)))
    assert out["separator"] == "|" and out["text"] == "ab|cd" and out["status"] == ""
    assert out["architecture"]["value"] == "encoder_decoder"


def test_link_with_a_hostile_separator_warns_escaped_and_splits_at_the_default():
    params = {"architecture": "encoder_decoder", "text": "ab=>cd", SEP_PARAM: "<b>\x00</b>"}
    out = load_from_url(SimpleNamespace(query_params=params))
    assert out["separator"] == DEFAULT_SEPARATOR and out["architecture"]["value"] == "encoder_decoder"
    assert "separator" in out["status"] and "<b>" not in out["status"]


def test_a_new_text_comes_with_its_separator_and_the_refresh_links_it():
    # an encoder-decoder preset brings its "=>" text, so the box is reset to "=>"
    out = apply_preset("Original Transformer (Vaswani 2017, encoder-decoder)")
    assert out["separator"] == DEFAULT_SEPARATOR and DEFAULT_SEPARATOR in out["text"]
    assert apply_preset("GPT-2 (2019)")["separator"] == h.gr.skip()  # text kept, separator kept
    values = {
        k: v["value"]
        for k, v in apply_preset("Original Transformer (Vaswani 2017, encoder-decoder)").items()
        if k in CONTROL_FIELDS
    }
    values.update(n_layers=1, d_model=32, n_heads=2)
    drawn = h.refresh_attention(values, "ab|cd", new_state(), separator="|")
    assert _params(drawn["share_qs"])[SEP_PARAM] == "|"


def test_changing_layers_shown_keeps_the_separator_in_the_link():
    """The grid pickers redraw the grid and rewrite the link through the same code as a control's
    commit: the link keeps the separator the text is split at (it used to reopen splitting at =>)."""
    values = {n: getattr(ENCDEC, n) for n in CONTROL_FIELDS}
    text = "ab|cd"
    first = h.refresh_attention(values, text, new_state(), separator="|")
    out = h.redraw_grid(values, text, "0", "all", first["state"], separator="|")
    params = _params(out["share_qs"])
    assert params[SEP_PARAM] == "|" and params["grid_layers"] == "0" and params["text"] == text
    assert load_from_url(SimpleNamespace(query_params=params))["separator"] == "|"


def test_the_compare_link_carries_the_separator():
    from explorer.app.tabs.compare import compare_outputs

    out = compare_outputs(ENCDEC.replace(n_heads=1), ENCDEC, "ab|cd", separator="|")
    params = _params(out["compare_qs"])
    assert params[SEP_PARAM] == "|" and _params(params["pin"])[SEP_PARAM] == "|"


def test_the_export_splits_a_long_separator_where_analyze_does(tmp_path):
    """/export used to cut the separator to 8 characters: with the text ``src0123456789tgt`` and the
    separator ``0123456789`` it read the target as ``89tgt`` while /analyze read ``tgt``."""
    import asyncio
    import zipfile

    from explorer.app.api import endpoints as api

    text, sep = "src0123456789tgt", "0123456789"
    summary = api.api_analyze(ENCDEC.to_json(), text, sep)
    assert summary["tokens"] == ["t", "g", "t"] and summary["encoder_maps"]["tokens"] == ["s", "r", "c"]
    exported = asyncio.run(api.api_export(ENCDEC.to_json(), text, sep))
    with zipfile.ZipFile(exported["path"]) as z:
        page = z.read("figures.html").decode("utf-8")
    assert '"y":["0 t","1 g","2 t"]' in page and '"0 8"' not in page  # the target's rows, as /analyze reads it
