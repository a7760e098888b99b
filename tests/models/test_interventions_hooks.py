"""The ``Interventions`` record is the one way into a forward pass: no module hook is registered in
``models`` or ``explorer`` outside the documented list below; the record's core observer sees exactly
what each core receives; ``ModelConfig.ablate_heads`` is the record's ``"zero"`` on those heads."""

import ast
import pathlib

import pytest
import torch

from models import ConfigError, ModelConfig, build_model
from models.interventions import CoreInputs, Interventions

ROOT = pathlib.Path(__file__).resolve().parents[2]
HOOKS = {
    "register_forward_hook",
    "register_forward_pre_hook",
    "register_full_backward_hook",
    "register_full_backward_pre_hook",
    "register_backward_hook",
}
# (file, enclosing function) -> why it is a module hook and not the Interventions record. Each is work on a
# plain call of any model (every architecture, layer structure and memory) that changes no value.
ALLOWED = {
    (
        "explorer/runtime/stopping.py",
        "installed",
    ): "the stop Guard checks a stop or deadline before every module's forward (and in the backward), on "
    "calls it does not make (a training step, the sweep's timed runs), for every model",
    (
        "explorer/analysis/cost/core_timer.py",
        "__enter__",
    ): "the sweep's attention timer marks each core's start and end inside the very forward it times "
    "(an observer sees a core's inputs, not its end, and a record in the call would be timed too)",
    (
        "explorer/analysis/gradients/norms.py",
        "__init__",
    ): "per-application gradients of shared layers need each call's input and output of their output "
    "linears, in layer structures that share or repeat sublayers, where the record has no points",
}


def _hook_sites():
    """``(file, innermost enclosing function or "<module>", line)`` of every call of a hook-registering method."""
    sites = []
    for top in ("models", "explorer"):
        for path in sorted((ROOT / top).rglob("*.py")):
            name = path.relative_to(ROOT).as_posix()
            tree = ast.parse(path.read_text(), filename=name)
            owner = {}
            for fn in ast.walk(tree):  # outer functions first, so an inner one overwrites its nodes' owner
                if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    for node in ast.walk(fn):
                        owner[node] = fn.name
            sites += [
                (name, owner.get(node, "<module>"), node.lineno)
                for node in ast.walk(tree)
                if isinstance(node, ast.Attribute) and node.attr in HOOKS
            ]
    return sites


def test_no_module_hook_outside_the_documented_list():
    sites = _hook_sites()
    found = {(path, fn) for path, fn, _line in sites}
    stray = sorted(s for s in sites if (s[0], s[1]) not in ALLOWED)
    assert not stray, f"module hooks outside the allow-list (use models.interventions.Interventions): {stray}"
    assert not any(path.startswith("models/") for path, _fn in found)
    assert found == set(ALLOWED), f"allow-list entries with no hook left: {sorted(set(ALLOWED) - found)}"


SMALL = dict(n_layers=2, d_model=32, n_heads=4, max_len=64)


def _tokens(B=2, L=12):
    return torch.randint(0, 256, (B, L), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("fields", [{}, {"layer": "universal"}, {"attention": "linear"}])
def test_the_observer_sees_each_core_input_and_changes_nothing(fields):
    model = build_model(ModelConfig(**SMALL, **fields)).eval()
    seen = []
    with torch.no_grad():
        plain = model(_tokens(), return_attention=True)
        observed = model(_tokens(), return_attention=True, interventions=Interventions(observe_cores=seen.append))
    assert torch.equal(plain.logits, observed.logits)
    assert len(seen) == len(plain.layers) and all(isinstance(c, CoreInputs) for c in seen)
    for call, info in zip(seen, plain.layers):
        assert torch.equal(call.q, info.q) and torch.equal(call.k, info.k)
        assert call.v.shape == call.k.shape and set(call.mods) == set(info.score_mods)
        with pytest.raises(TypeError):
            call.mods["x"] = 1  # read only


def test_an_observer_that_raises_ends_the_forward():
    class Enough(Exception):
        pass

    calls = []

    def first_only(call):
        calls.append(call.attn.layer)
        raise Enough()

    with pytest.raises(Enough):
        build_model(ModelConfig(**SMALL)).eval()(_tokens(), interventions=Interventions(observe_cores=first_only))
    assert calls == [0]


def test_an_encoder_decoder_observes_both_stacks():
    model = build_model(ModelConfig(**SMALL, architecture="encoder_decoder")).eval()
    seen = []
    with torch.no_grad():
        model(_tokens(L=7), _tokens(L=5), interventions=Interventions(observe_cores=seen.append))
    assert [c.q.shape[2] for c in seen] == [7, 7, 5, 5]  # encoder self-attention, then decoder self-attention


@pytest.mark.parametrize(
    "model_fields, record, field",
    [
        ({"memory": "xl", "position": "xl"}, Interventions(observe_cores=print), "memory"),
        ({}, Interventions(observe_cores="print"), "observe_cores"),
        ({"layer": "universal"}, Interventions(observe_cores=print, cache=True), "layer"),
    ],
)
def test_observer_records_are_checked_naming_the_field(model_fields, record, field):
    with pytest.raises(ConfigError) as e:
        build_model(ModelConfig(**{**SMALL, **model_fields})).eval()(_tokens(), interventions=record)
    assert e.value.field == field


def test_an_encoder_record_may_not_observe():
    model = build_model(ModelConfig(**SMALL, architecture="encoder_decoder")).eval()
    with pytest.raises(ConfigError) as e:
        model(_tokens(L=7), _tokens(L=5), interventions=Interventions(encoder=Interventions(observe_cores=print)))
    assert e.value.field == "encoder.observe_cores"


def test_ablate_heads_is_the_records_zero_on_those_heads():
    model = build_model(ModelConfig(**SMALL)).eval()
    ablated = build_model(ModelConfig(**SMALL, ablate_heads="0.1, 1.2, 1.3")).eval()
    ablated.load_state_dict(model.state_dict())
    zero = Interventions(replace_heads={(0, 1): "zero", (1, 2): "zero", (1, 3): "zero"})
    with torch.no_grad():
        assert torch.equal(ablated(_tokens()).logits, model(_tokens(), interventions=zero).logits)
