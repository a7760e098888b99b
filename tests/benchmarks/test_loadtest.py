"""benchmarks.loadtest's pieces without a server: the request mix, the percentiles, the refusal test,
RSS reading, and the table (the script itself runs against ``python app.py``; see its docstring)."""

import json
import os
import random

import numpy as np
import pytest

from benchmarks import loadtest as lt
from explorer.runtime.configs import app_config
from models import ConfigError, ModelConfig


def test_each_user_sends_the_hostile_config_once_and_valid_configs_otherwise():
    rng = random.Random(0)
    reqs = [lt._request(rng, n) for n in range(12)]
    hostile = [r for r in reqs if r[2]]
    assert len(hostile) == 1 and json.loads(hostile[0][1][0]) == lt.HOSTILE
    with pytest.raises(ConfigError) as err:
        app_config(ModelConfig.from_dict(lt.HOSTILE))
    assert lt._is_refusal(err.value)
    for api, args, _ in (r for r in reqs if not r[2]):
        assert api in ("/analyze", "/gradients")
        app_config(ModelConfig.from_dict(json.loads(args[0])))  # the app accepts every other request


def test_percentiles_match_numpy_nearest_rank():
    values = list(np.random.default_rng(0).exponential(size=101))
    for q in (0.5, 0.95):
        assert lt._pct(values, q) == pytest.approx(np.percentile(values, 100 * q, method="nearest"))
    assert np.isnan(lt._pct([], 0.5))


def test_rss_of_this_process():
    rss = lt.rss_bytes(os.getpid())
    assert rss is not None and rss > 10 << 20
    assert lt.rss_bytes(2**22 + 12345) is None  # no such process


def test_table_reports_failures(capsys):
    row = {
        "users": 4,
        "ok": 10,
        "refused": 4,
        "busy": 2,
        "failed": 1,
        "p50": 0.5,
        "p95": 0.9,
        "max": 1.2,
        "throughput": 2.0,
        "rss_before": 500 << 20,
        "rss_peak": 600 << 20,
        "rss_after": 510 << 20,
        "errors": ["/analyze: boom"],
        "sweep": {"runs": 1},
    }
    lt.print_table([row], heavy=True)
    out = capsys.readouterr().out
    assert "failure: /analyze: boom" in out and "1 runs" in out and " 500 " in out


def test_a_full_queue_is_counted_as_busy_not_as_a_failure():
    tally = lt.Tally()
    queue_full = Exception("Queue is full! Please try again.")  # gradio_client's QueueError message
    tally.add(False, 0.1, busy=lt._is_busy(queue_full), error=str(queue_full))
    tally.add(False, 0.1, busy=lt._is_busy(RuntimeError("boom")), error="boom")
    assert (tally.busy, tally.failed, tally.errors) == (1, 1, ["boom"])
    assert not lt._is_refusal(queue_full) and not lt._is_busy(ConfigError("n_layers", 99, "at most 48"))
