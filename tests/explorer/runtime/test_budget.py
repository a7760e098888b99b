"""The per-request budget and the size caps, through every entry point: the API handlers, a share
link, an uploaded file, the UI's config check; and, over the config space, the measured peak of
every request the app accepts stays within the budget it promised."""

import json

import gradio as gr
import pytest
from hypothesis import HealthCheck, example, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from explorer.analysis import attention_maps, clear_caches, gradient_norms
from explorer.app.api import endpoints as ui_api
from explorer.app.controls.share import from_query
from explorer.app.controls.sources import upload_config
from explorer.runtime import budget, settings
from explorer.runtime.configs import app_config
from explorer.runtime.limits import MAX_TEXT_BYTES, SIZE_LIMITS, check_budget
from kernels.tools.measure import measure_peak
from models import ConfigError, ModelConfig, registries

LINFORMER = {"attention": "linformer", "causal": False, "proj_len": 65536, "max_len": 8192, "n_layers": 12}


def _upload(tmp_path, data) -> str:
    """What the upload handler shows (the status output, last) for a file holding ``data``."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    with pytest.warns(UserWarning):  # gr.Warning outside a request is a UserWarning
        return upload_config(str(path))["status"].replace("\\", "")  # the status escapes Markdown


def _api(data) -> str:
    with pytest.raises(gr.Error) as err:
        ui_api.api_analyze(json.dumps(data), "abc")
    return str(err.value)


def test_linformer_config_is_refused_everywhere(tmp_path, monkeypatch):
    with pytest.raises(ConfigError) as err:
        app_config(ModelConfig.from_dict(LINFORMER))
    assert err.value.field == "proj_len" and "at most 1024" in str(err.value)
    assert "proj_len" in _api(LINFORMER)
    cfg, _, _, notice = from_query({k: str(v) for k, v in LINFORMER.items()})
    assert "proj_len" in notice and cfg.proj_len == ModelConfig().proj_len  # the link's other fields are kept
    assert "proj_len" in _upload(tmp_path, LINFORMER)
    # Within the library's caps (proj_len <= 4096) the same shape is still ~0.8e9 parameters: the
    # experiments' budget refuses it before anything is allocated.
    within = {**LINFORMER, "proj_len": 4096}
    monkeypatch.setenv(settings.REQUEST_BUDGET, "1G")
    with pytest.raises(ConfigError) as err:
        attention_maps(within, "abc")
    msg = str(err.value)  # E and F are (max_len, proj_len) per layer: any of the three halves them
    assert err.value.field in ("proj_len", "max_len", "n_layers") and "budget" in msg and "shrink" in msg
    assert all(f"{name} (now {within[name]}" in msg for name in ("proj_len", "max_len", "n_layers"))


def _over_cap(name):
    top = SIZE_LIMITS[name]
    return {name: top * 1.5 if isinstance(top, float) else top + 1}


@pytest.mark.parametrize("name", sorted(SIZE_LIMITS))
def test_every_size_field_has_a_cap_on_every_entry_point(name, tmp_path):
    data = _over_cap(name)
    with pytest.raises(ConfigError) as err:
        app_config(ModelConfig.from_dict(data))
    assert err.value.field == name
    assert name in _api(data)
    _, _, _, notice = from_query({name: str(data[name])})
    assert notice and name in notice
    assert name in _upload(tmp_path, data)


def test_every_integer_size_field_is_capped():
    from models.config import SIZE_RANGES

    assert set(SIZE_RANGES) - set(SIZE_LIMITS) == {"seed"}


def test_over_budget_names_what_to_shrink(monkeypatch):
    cfg = ModelConfig(n_layers=8, d_model=256, n_heads=8)
    need = budget.predict(cfg, "gradients", 64, 8)
    monkeypatch.setenv(settings.REQUEST_BUDGET, str(need - 1))
    with pytest.raises(ConfigError) as err:
        gradient_norms(cfg, 64, 8)
    msg = str(err.value)
    assert err.value.field in ("n_layers", "d_model", "batch", "seq_len") and "halving it saves" in msg
    monkeypatch.setenv(settings.REQUEST_BUDGET, str(need))
    assert budget.check(cfg, "gradients", 64, 8) == need  # exactly at the budget: accepted


# ---------------------------------------------------------------------------- the promise, measured
REQUEST_BUDGET = 96 << 20


@st.composite
def app_configs(draw):
    regs = registries()
    d = {cat: draw(st.sampled_from(list(regs[cat]))) for cat in ("attention", "position", "ffn", "memory", "layer")}
    d["norm_placement"] = draw(st.sampled_from(list(regs["norm_placement"])))
    n_heads = draw(st.sampled_from([1, 2, 4]))
    d.update(
        n_layers=draw(st.integers(1, 3)),
        n_heads=n_heads,
        d_model=n_heads * draw(st.sampled_from([8, 16, 32])),
        causal=draw(st.booleans()),
        n_experts=draw(st.integers(1, 6)),
        top_k=1,
        proj_len=draw(st.sampled_from([8, 64, 512])),
        n_features=draw(st.sampled_from([8, 64, 256])),
        max_len=draw(st.sampled_from([256, 1024, 4096])),
    )
    return d


@hypothesis_settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow]
)
@given(data=app_configs(), L=st.integers(2, MAX_TEXT_BYTES))
@example(
    data={
        "attention": "full",
        "position": "none",
        "ffn": "pkm",
        "norm_placement": "post",
        "n_layers": 1,
        "n_heads": 1,
        "d_model": 8,
        "max_len": 256,
    },
    L=2,
)  # the build's temporary of the value table
def test_accepted_requests_stay_within_the_promised_budget(data, L):
    """For a config the app accepts (under a small budget, so that acceptance means something),
    the peak PyTorch really allocates for its attention maps and gradient norms is at most the
    prediction, which is at most the budget."""
    import os

    os.environ[settings.REQUEST_BUDGET] = str(REQUEST_BUDGET)
    try:
        try:
            cfg = check_budget(app_config(ModelConfig.from_dict(data)))  # the budget set here, not a remembered pass
        except ConfigError:
            return  # refused: nothing to measure
        text = "".join(chr(97 + i % 26) for i in range(L))
        clear_caches()
        _, peak = measure_peak(lambda: attention_maps(cfg, text))
        promised = budget.predict(cfg, "attention", L, 1)
        assert peak <= promised <= REQUEST_BUDGET
        clear_caches()
        _, peak = measure_peak(lambda: gradient_norms(cfg, 64, 8))
        promised = budget.predict(cfg, "gradients", 64, 8)
        assert peak <= promised <= REQUEST_BUDGET
    finally:
        os.environ.pop(settings.REQUEST_BUDGET, None)
        clear_caches()


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"attention": "talking_heads"},
        {"ffn": "moe"},
        {"memory": "xl", "segment_len": 16, "mem_len": 16},
        {"layer": "reversible"},
        {"attention": "linformer", "causal": False, "proj_len": 16},
        {"architecture": "encoder_decoder"},
    ],
)
def test_a_training_step_stays_within_its_prediction(kw):
    """One optimizer step of a fresh run (the model, a forward and backward, AdamW's two moments per
    parameter) allocates at most what ``predict(cfg, "train", ...)`` promised before anything was built."""
    from explorer.training.trainer import RunConfig, Trainer

    cfg = ModelConfig(n_layers=2, d_model=64, n_heads=4, max_len=128, position="rope", **kw).validate()
    run = RunConfig(task="copy", steps=2, batch_size=8, seq_len=64, grad_norms=False, probe=False, eval_batches=1)

    def step():
        Trainer(cfg, run).train_step()

    _, peak = measure_peak(step)
    assert 0 < peak <= budget.predict(cfg, budget.TRAIN, 64, 8)
