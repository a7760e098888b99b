"""``import app`` in a fresh process (what a Space does on waking): the page carries the default
config's figures and model card, and nothing on that path imports ``torch._dynamo`` (~1.7 s of a
cold start: ``benchmarks.cold_start`` times the phases; this checks the property, not a time)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("gradio")

ROOT = Path(__file__).resolve().parents[3]

COLD = r"""
import json, sys
import gc
import app
dynamo = "torch._dynamo" in sys.modules
collector = [gc.isenabled(), gc.get_freeze_count()]

import torch
from torch.utils.flop_counter import FlopCounterMode
from explorer.analysis import model_summary
from explorer.analysis.common.memo import eval_model
from explorer.analysis.cost.summary import sdpa_cpu_flops
from explorer.runtime import settings
from explorer.runtime.text import DEFAULT_TEXT
from models import ModelConfig

cfg = ModelConfig()
seq = len(DEFAULT_TEXT.encode())
tokens = torch.randint(0, cfg.vocab_size, (1, seq), generator=torch.Generator().manual_seed(0))
custom = {torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: sdpa_cpu_flops}
with torch.no_grad(), FlopCounterMode(display=False, custom_mapping=custom) as ref:  # the reference counter
    eval_model(cfg)(tokens)
props = {c["props"].get("elem_id"): c["props"] for c in app.demo.config["components"] if "props" in c}
plots, backgrounds = {}, set()
for name in ("attention-grid", "attention-stats", "grad-plot", "kv-plot"):
    value = props[name].get("value") or {}
    fig = json.loads(value["plot"]) if value.get("type") == "plotly" else {"data": []}
    plots[name] = len(fig["data"])
    backgrounds.add(fig.get("layout", {}).get("template", {}).get("layout", {}).get("plot_bgcolor"))
print(json.dumps({"dynamo": dynamo, "collector": collector, "plots": plots, "backgrounds": sorted(map(str, backgrounds)),
                  "card": props["model-card"]["value"],
                  "card_flops": model_summary(cfg, seq_len=seq)["flops_per_token"],
                  "ref_flops": ref.get_total_flops() / seq,
                  "queue": [app.demo._queue.max_size, app.demo._queue.default_concurrency_limit],
                  "settings": [settings.queue_size(), settings.compute_slots()]}))
"""  # noqa: E501 (a Python script kept verbatim)


@pytest.fixture(scope="module")
def cold():
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GRADIO_ANALYTICS_ENABLED": "False"}
    got = subprocess.run([sys.executable, "-c", COLD], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert got.returncode == 0, got.stderr[-3000:]
    return {**json.loads(got.stdout.strip().splitlines()[-1]), "stderr": got.stderr}


def test_the_start_up_says_each_step_as_it_begins(cold):
    """A minute of start-up on a busy machine is not silent: each step is said (stderr) as it begins."""
    steps = [line for line in cold["stderr"].splitlines() if line.startswith("[explorer] ")]
    assert steps[:2] == ["[explorer] importing torch, gradio and the explorer...", "[explorer] building the page..."]


def test_the_first_paint_does_not_import_torch_dynamo(cold):
    assert cold["dynamo"] is False


def test_the_page_opens_with_the_default_figures_drawn(cold):
    assert all(n > 0 for n in cold["plots"].values()), cold["plots"]
    assert cold["backgrounds"] == ["white"]  # each with the plotly_white template


def test_the_model_card_says_the_flops_torch_flop_counter_measures(cold):
    assert cold["card_flops"] == pytest.approx(cold["ref_flops"]) and cold["ref_flops"] > 0
    assert "parameters" in cold["card"] and "FLOPs per token" in cold["card"]


def test_the_queue_has_the_settings_limits(cold):
    assert cold["queue"] == cold["settings"]


def test_the_garbage_collector_is_back_on_with_the_start_up_frozen(cold):
    """app.py turns the collector off while the page is built (~1 s of a 5 s start); a server left without it
    would never free cyclic garbage: it is on again, the start-up's objects frozen out of its way."""
    enabled, frozen = cold["collector"]
    assert enabled and frozen > 100_000, cold["collector"]
