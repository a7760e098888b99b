"""The chain's later stages read the controls its grid event committed to, as one input.

References: the values a page shows after an event are its inputs with each output that writes a
value applied (a plain value, or an update carrying ``value``; ``gr.skip()`` and look-only updates
write none); the event graph (``demo.config``) says which components each stage takes."""

import gradio as gr
import pytest

from explorer.app.controls.committed import committed_values, committing, from_committed
from explorer.app.controls.fields import CONTROL_FIELDS, config_values
from models import ModelConfig


def test_only_outputs_that_write_a_value_change_the_committed_controls():
    values = config_values(ModelConfig())
    out = {
        "causal": gr.update(value=not values["causal"]),
        "attention": gr.skip(),
        "n_layers": gr.update(visible=True, info="x"),
        "n_heads": 2,
        "status": "not a control",
    }
    after = committed_values(values, out)
    assert after["causal"] is (not values["causal"]) and after["n_heads"] == 2
    assert after["attention"] == values["attention"] and after["n_layers"] == values["n_layers"]
    assert "status" not in after and set(after) == set(values)
    assert values == config_values(ModelConfig())  # the input dict itself is left alone


def test_a_stage_is_handed_what_the_grid_event_committed():
    seen = []
    grid = committing(lambda values, **kw: {"causal": gr.update(value=False), "grid": "drawn"})
    out = grid({"causal": True, "attention": "full"})
    assert out["grid"] == "drawn" and out["committed"] == {"causal": False, "attention": "full"}
    stage = from_committed(lambda values, **kw: seen.append((values, kw)) or {})
    stage({}, committed=out["committed"], text="hello")
    assert seen == [({"causal": False, "attention": "full"}, {"text": "hello"})]


@pytest.fixture(scope="module")
def deps_and_ids():
    from explorer.app.page.layout import build_app

    demo = build_app()
    return demo.config["dependencies"], demo


def test_the_stages_take_a_handful_of_inputs_and_the_grid_event_fills_committed(deps_and_ids):
    deps, demo = deps_and_ids
    stages = [d for d in deps if (d["api_name"] or "").rsplit("_", 1)[-1] in ("detail", "views", "analysis", "surgery")]
    grids = [d for d in deps if (d["api_name"] or "").endswith("_attention")]
    assert len(stages) >= 14 and len(grids) >= 7
    # the state that starts as the default config's controls
    committed = {
        c._id for c in demo.blocks.values() if isinstance(c, gr.State) and c.value == config_values(ModelConfig())
    }
    assert len(committed) == 1 and all(committed <= set(d["inputs"]) for d in stages)
    for d in stages:
        # was 82 controls and more; the analysis stage reads 13 (the Why tab's seven boxes among them)
        assert len(d["inputs"]) <= 16, (d["api_name"], len(d["inputs"]))
    for d in grids:
        assert committed <= set(d["outputs"]) and len(d["inputs"]) >= len(CONTROL_FIELDS)
