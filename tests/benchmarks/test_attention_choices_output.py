"""A benchmark's output is its table: no profiler log lines, and a line on how busy the machine was."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_models_bench_prints_no_profiler_noise_and_says_how_busy_the_machine_was():
    env = {k: v for k, v in os.environ.items() if k != "KINETO_LOG_LEVEL"}  # the default, as a user has it
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.attention_choices", "--lengths", "64,128"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    text = out.stdout + out.stderr
    assert not re.search(r"USDT|STAGE:|profiler_(start|stop)|Completed Stage", text), text[-2000:]
    assert re.search(r"\d+MiB", out.stdout), "memory is still measured (through the profiler)"
    assert re.search(r"^machine: .*(quiet enough|TOO BUSY)", out.stdout, re.M), out.stdout


@pytest.mark.slow
def test_the_sweep_table_compares_each_pattern_with_full_forward_and_attention_alone():
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.attention_choices", "--sweep", "--lengths", "64,128"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    rows = {
        line.split()[0]: line
        for line in out.stdout.splitlines()
        if len(line.split()) > 2
        and line.split()[0] in ("full", "sliding_window", "longformer", "bigbird")
        and line.split()[1] != "at"
    }
    assert set(rows) == {"full", "sliding_window", "longformer", "bigbird"}
    assert re.search(r"\d+\s+x\d+\.\d \|\s+\d+\s+x\d+\.\d", rows["bigbird"]), rows["bigbird"]  # forward | alone
    assert "bigbird at L=8192: not compared" in out.stdout  # 8192 was not among the lengths
    assert re.search(r"default sweep of bigbird \(with its full baseline\): \d+\.\d s", out.stdout)
    assert re.search(r"^machine: ", out.stdout, re.M)


@pytest.mark.slow
def test_the_head_to_head_table_gives_each_pattern_against_full():
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.attention_choices", "--head-to-head", "1", "--lengths", "128"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "Head to head at L=128" in out.stdout and "fastest of 1 round-robin" in out.stdout
    for key in ("sliding_window", "longformer", "bigbird"):
        assert re.search(
            rf"^{key} at L=128: forward \d+\.\d\dx, attention alone \d+\.\d\dx faster than full "
            r"\(at least 2x: (yes|NO)\)$",
            out.stdout,
            re.M,
        ), out.stdout
    assert re.search(r"^full\s+\d+\s+1\.00\s+\d+\s+1\.00$", out.stdout, re.M)  # full against itself
    assert re.search(r"^machine: ", out.stdout, re.M)
