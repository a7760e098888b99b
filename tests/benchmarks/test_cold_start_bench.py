"""``python -m benchmarks.cold_start``: every phase is reported and the phases add up (no time is asserted)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_one_run_reports_every_phase_and_they_add_up(tmp_path):
    path = tmp_path / "cold.json"
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.cold_start", "--runs", "1", "--json", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "ours (CPU, median)" in out.stdout and "torch._dynamo imported: False" in out.stdout
    summary = json.loads(path.read_text())
    (run,) = summary["runs"]
    for clock in ("cpu", "wall"):
        p = {k: v[clock] for k, v in run.items() if isinstance(v, dict)}
        assert all(v >= 0 for k, v in p.items() if k != "blocks") and p["figures"] > 0 and p["analyses"] > 0
        assert p["ours"] == pytest.approx(p["our_imports"] + p["build"], abs=1e-6)
        assert p["build"] == pytest.approx(p["analyses"] + p["figures"] + p["blocks"], abs=1e-6)
        assert p["total"] == pytest.approx(p["torch"] + p["gradio"] + p["ours"], abs=1e-6)
    assert summary["median"]["ours"]["cpu"] == run["ours"]["cpu"]
