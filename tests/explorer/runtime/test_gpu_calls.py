"""Every GPU call the app makes can cross a process boundary (ZeroGPU pickles each call's arguments
and result and runs the function in a forked worker), a Compare click is one GPU call, and neither
building the app nor importing any module touches CUDA (ZeroGPU forbids it before a GPU call)."""

import asyncio
import os
import pickle
import subprocess
import sys
import threading

import numpy as np

from explorer.analysis import clear_caches, gradient_norms
from explorer.app.api import endpoints as ui_api
from explorer.app.controls.fields import config_values
from explorer.app.controls.state import new_state
from explorer.app.page.wiring import stage_handler
from explorer.app.tabs import attention as attention_tab
from explorer.app.tabs import compare as compare_tab
from explorer.app.tabs.latency import run_sweep
from explorer.runtime.device import gpu, record_gpu_calls
from explorer.runtime.signals import StopToken
from models import ModelConfig

# the chain's analysis stage as the page runs it: the Gradients, Model and Latency (KV cache) tabs' steps
analysis_stage = stage_handler("analysis")


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SMALL = ModelConfig(n_layers=2, d_model=32, n_heads=2, seed=4321)  # a seed no other test draws: nothing memoised
OTHER = SMALL.replace(attention="sliding_window", window=4)


def _same(a, b) -> bool:
    """Structural equality of what a GPU call sent or returned, arrays and dataclasses included."""
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.shape == b.shape and np.array_equal(a, b, equal_nan=True)
    if hasattr(a, "__dataclass_fields__"):
        return type(a) is type(b) and all(_same(getattr(a, f), getattr(b, f)) for f in a.__dataclass_fields__)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and a != a:
        return b != b
    if hasattr(a, "__dict__") and not isinstance(a, type):
        return type(a) is type(b) and _same(vars(a), vars(b))
    return a == b


def test_every_gpu_call_of_the_app_survives_pickling():
    clear_caches()
    stop = threading.Event()
    with record_gpu_calls() as calls:
        attention_tab.refresh_attention(config_values(SMALL), "hello gpu", new_state())
        analysis_stage(config_values(SMALL), text="hello gpu")
        run_sweep(config_values(OTHER), "16,32", "forward", new_state(), should_stop=stop.is_set)
        compare_tab.refresh_compare(config_values(OTHER), "hello gpu", SMALL.to_dict())
        compare_tab.run_ab_sweep(
            config_values(OTHER), SMALL.to_dict(), "16", "forward", new_state(), should_stop=stop.is_set
        )
        ui_api.api_analyze(SMALL.to_json(), "hello api")
        ui_api.api_gradients(SMALL.to_json())
        asyncio.run(ui_api.api_benchmark(SMALL.to_json(), "16", "forward"))
        ui_api.api_compare(SMALL.to_json(), OTHER.to_json(), "hello api")
        gradient_norms(OTHER, seed=5)
    names = {name.rsplit(".", 1)[-1] for name, *_ in calls}
    assert {"compute_maps", "compute_batch", "compute_summary", "compute_gradients", "measure_length"} <= names, names
    for name, args, kwargs, result in calls:
        sent = pickle.loads(pickle.dumps((args, kwargs)))
        back = pickle.loads(pickle.dumps(result))
        assert _same(sent, (args, kwargs)), name
        assert _same(back, result), name
    configs = [args[0] for name, args, _, _ in calls if name.rsplit(".", 1)[-1] != "compute_batch"]
    assert configs and all(isinstance(c, ModelConfig) for c in configs)  # the frozen config crosses, never its JSON
    assert all(pickle.loads(pickle.dumps(c)) == c and hash(pickle.loads(pickle.dumps(c))) == hash(c) for c in configs)
    stops = [kw["stop"] for name, _, kw, _ in calls if name.endswith("measure_length")]
    assert stops and all(isinstance(s, StopToken) for s in stops)  # the stop crosses as a token, not a lambda


def test_a_compare_click_is_one_gpu_call_and_a_memoised_one_none():
    clear_caches()
    with record_gpu_calls() as calls:
        out = compare_tab.refresh_compare(config_values(OTHER), "one call", SMALL.to_dict())
    assert [name.rsplit(".", 1)[-1] for name, *_ in calls] == ["compute_batch"]
    assert len(calls[0][1][0]) == 6  # both sides' maps, gradients and model cards
    assert out["grid_a"] is not None and "FLOPs" in out["compare_md"]
    with record_gpu_calls() as again:
        same = compare_tab.refresh_compare(config_values(OTHER), "one call", SMALL.to_dict())
    assert again == [] and same["compare_md"] == out["compare_md"]


def test_a_redraw_of_memoised_maps_makes_no_gpu_call():
    clear_caches()
    with record_gpu_calls() as calls:
        attention_tab.refresh_attention(config_values(SMALL), "drawn once", new_state())
        attention_tab.refresh_attention(config_values(SMALL.replace(seed=4322)), "drawn once", new_state())
        attention_tab.refresh_attention(config_values(SMALL), "drawn once", new_state())
    assert [name.rsplit(".", 1)[-1] for name, *_ in calls] == ["compute_maps", "compute_maps"]


def test_a_gpu_function_inside_another_is_not_a_second_gpu_call():
    @gpu(duration=5)
    def inner(x):
        return x + 1

    @gpu(duration=10)
    def outer(x):
        return inner(x) * 2

    with record_gpu_calls() as calls:
        assert outer(1) == 4 and inner(1) == 2
    assert [name.rsplit(".", 1)[-1] for name, *_ in calls] == ["outer", "inner"]
    assert outer.gpu_duration == 10 and inner.gpu_function(1) == 2


NO_CUDA = r"""
import importlib, pkgutil, sys
import torch

def refuse(name):
    def call(*args, **kwargs):
        raise AssertionError(f"torch.cuda.{name} called while importing / building the app")
    return call

for name in ("is_available", "device_count", "current_device", "init", "_lazy_init", "get_device_name",
             "get_device_capability", "get_device_properties", "mem_get_info", "synchronize", "set_device",
             "memory_allocated", "max_memory_allocated", "reset_peak_memory_stats", "empty_cache"):
    setattr(torch.cuda, name, refuse(name))

import explorer, kernels, models
for pkg in (explorer, models, kernels):
    for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
        if info.name.endswith("__main__"):
            continue
        importlib.import_module(info.name)
from explorer.app.page.layout import build_app
build_app()
import app

print("no cuda")
"""


def test_building_the_app_and_importing_every_module_touch_no_cuda():
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    got = subprocess.run(
        [sys.executable, "-c", NO_CUDA], cwd=ROOT, capture_output=True, text=True, timeout=300, env=env
    )
    assert got.returncode == 0 and "no cuda" in got.stdout, got.stderr[-3000:]
