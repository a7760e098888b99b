"""Direct logit attribution: each term against a plain re-implementation with the final norm's scale frozen,
and the sum rule (the terms add up to the model's own logit) across norms, positions and biases."""

import pytest
import torch
from plain_forward import perturbed, plain_run, sample_ids

from explorer.analysis.why.attribution import attribute
from models import ConfigError


def test_terms_match_a_plain_forward_with_the_scale_frozen():
    model, ids = perturbed(), sample_ids()
    p, alt = 12, 7
    got = attribute(model, ids, p, alternative=alt)
    ref = plain_run(model, ids)
    x = ref["streams"][-1][p]
    s = torch.sqrt(x.var(unbiased=False) + model.final_norm.eps)
    w = model.head.weight.detach().double()
    u = (w[int(ids[0, p + 1])] - w[alt]) * model.final_norm.weight.detach().double()
    term = lambda c: float(((c - c.mean()) @ u) / s)  # noqa: E731
    for l in range(2):
        for h in range(4):
            assert got.heads[l, h] == pytest.approx(term(ref["heads"][l][h, p]), abs=1e-5)
        assert got.ffn[l] == pytest.approx(term(ref["ffn"][l][p]), abs=1e-5)
    assert got.embedding == pytest.approx(term(model.embed.weight.detach()[ids[0, p]].double()), abs=1e-6)
    assert got.position_term == pytest.approx(term(model.position.table.weight.detach()[p].double()), abs=1e-6)
    logit = ref["logits"][p, int(ids[0, p + 1])] - ref["logits"][p, alt]
    assert got.logit == pytest.approx(float(logit), abs=1e-4)
    assert got.scale == pytest.approx(float(s), rel=1e-6)


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"norm": "rmsnorm"},
        {"position": "rope"},
        {"attn_bias": "none"},
        {"norm_placement": "none"},
        {"n_kv_heads": 2},
    ],
)
def test_the_terms_add_up_to_the_logit(fields):
    model, ids = perturbed(**fields), sample_ids(5)
    for p in (0, 9, 28):
        a = attribute(model, ids, p)
        assert a.total == pytest.approx(a.logit, abs=1e-4)
        assert a.token == int(ids[0, p + 1])
    last = attribute(model, ids, 29, token=3, alternative=4)
    logits = model(ids).logits[0, 29].detach()
    assert last.total == pytest.approx(float(logits[3] - logits[4]), abs=1e-4)
    assert set(last.to_json()) >= {"heads", "ffn", "embedding", "biases", "total", "logit"}


@pytest.mark.parametrize(
    "fields, field",
    [
        ({"norm_placement": "post"}, "norm_placement"),
        ({"norm_placement": "sandwich"}, "norm_placement"),
        ({"norm": "scalenorm"}, "norm"),
    ],
)
def test_placements_without_a_linear_decomposition_are_refused(fields, field):
    with pytest.raises(ConfigError) as e:
        attribute(perturbed(**fields), sample_ids(), 3)
    assert e.value.field == field and ("'pre'" in e.value.allowed or "layernorm" in e.value.allowed)


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"position": 30}, "position"),
        ({"position": 29}, "token"),
        ({"position": 3, "token": 40}, "token"),
        ({"position": 3, "alternative": -1}, "alternative"),
    ],
)
def test_out_of_range_requests_are_refused(kwargs, field):
    with pytest.raises(ConfigError) as e:
        attribute(perturbed(), sample_ids(), **kwargs)
    assert e.value.field == field
