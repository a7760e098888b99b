"""``python -m benchmarks.gpu_report`` on CPU (Triton interpreter, small shapes), and that its checks can fail.

The full CPU run is ``slow`` (about a minute of interpreted kernels); the fast tests feed the
correctness runner a deliberately wrong kernel and the targets synthetic timings.
"""

import json

import pytest
import torch

from benchmarks.gpu_report import correctness, targets
from benchmarks.gpu_report.cases import AttnCase, attention_cases, op_cases
from kernels.triton.flash.launcher import flash_attention

QUIET = lambda *a, **k: None  # noqa: E731


@pytest.mark.slow
def test_cpu_report_passes_and_marks_the_gpu_sections_skipped(tmp_path):
    from benchmarks.gpu_report.main import main

    assert main(["--out", str(tmp_path)], log=QUIET) == 0
    data = json.loads((tmp_path / "gpu_report.json").read_text())
    assert data["status"] == "complete"
    sec = data["sections"]
    assert list(sec) == ["environment", "compile", "correctness", "syncs", "speed", "targets"]
    cases = sec["correctness"]["cases"]
    assert len(cases) == len(attention_cases(False)) + len(op_cases(False))
    assert [c["name"] for c in cases if c["status"] not in ("passed", "skipped")] == []
    skipped = [c for c in cases if c["status"] == "skipped"]
    assert skipped and all("bfloat16" in c["name"] and "interpreter" in c["reason"] for c in skipped)
    assert sec["correctness"]["counts"]["passed"] >= 35
    for c in cases:
        if c["status"] == "passed" and "err" in c["checks"][0]:
            assert all(ch["ok"] and ch["err"] <= ch["tol"] for ch in c["checks"])
    for name in ("speed", "syncs", "compile"):
        assert sec[name]["status"] == "skipped" and sec[name]["reason"]
    assert sec["environment"]["info"]["TRITON_INTERPRET"] == "1"
    status = {t["target"]: t["status"] for t in sec["targets"]["targets"]}
    assert status["zero correctness failures"] == "met"
    assert sum(s == "not measured" for s in status.values()) == 6  # syncs + five speed targets
    md = (tmp_path / "gpu_report.md").read_text()
    assert "# GPU report (complete)" in md and "| status | case |" in md
    assert "skipped on CPU (Triton interpreter)" in md


CASE = AttnCase("dense fp32 d32 causal", torch.float32, 1, 2, 1, 20, 24, 32, True)


def test_the_right_kernel_passes():
    data, md = correctness.run("cpu", cases=[CASE], log=QUIET)
    assert data["counts"] == {"passed": 1, "FAILED": 0, "skipped": 0}, data


def test_a_wrong_kernel_output_is_reported_as_a_failure():
    def wrong(q, k, v, **kw):
        out = flash_attention(q, k, v, **kw)
        return out + 1e-3 * out.detach().abs().max()  # an output 0.1% off; gradients still right

    data, md = correctness.run("cpu", attn_fn=wrong, cases=[CASE], log=QUIET)
    rec = data["cases"][0]
    assert rec["status"] == "FAILED" and data["counts"]["FAILED"] == 1
    assert [c["tensor"] for c in rec["checks"] if not c["ok"]] == ["out"]
    assert "| FAILED | dense fp32 d32 causal |" in md


def test_an_exception_fails_its_case_and_the_next_case_still_runs():
    calls = []

    def flaky(q, k, v, **kw):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("boom: kernel exploded")
        return flash_attention(q, k, v, **kw)

    data, _ = correctness.run("cpu", attn_fn=flaky, cases=[CASE, CASE], log=QUIET)
    first, second = data["cases"]
    assert first["status"] == "FAILED" and "boom: kernel exploded" in first["error"]
    assert second["status"] == "passed"


def _speed(ratio_fwd, ratio_sparse_flex):
    dense = [
        {"mode": m, "d": 128, "causal": True, "L": 16384, "provider": p, "ms": ms}
        for m in ("fwd", "fwd_bwd")
        for p, ms in (("ours", 1.0), ("sdpa-flash", ratio_fwd))
    ]
    sparse = [
        {"mode": "fwd", "pattern": "bigbird", "L": 16384, "provider": p, "ms": ms}
        for p, ms in (("ours", 1.0), ("flex", ratio_sparse_flex), ("sdpa-flash dense causal", 5.0))
    ]
    return {"status": "ok", "dense": dense, "sparse": sparse}


@pytest.mark.parametrize(
    "fwd,flex,want",
    [
        (0.9, 0.9, ["met", "met", "met", "met"]),
        (0.5, 0.5, ["MISSED", "MISSED", "MISSED", "met"]),
        (0.7, 1.0, ["MISSED", "met", "met", "met"]),
    ],
)
def test_speed_targets_are_met_or_missed_from_the_measured_ratios(fwd, flex, want):
    data, md = targets.run(
        {
            "correctness": {"counts": {"passed": 3, "FAILED": 1, "skipped": 0}},
            "syncs": {"status": "ok", "total_syncs": 0},
            "speed": _speed(fwd, flex),
        }
    )
    status = [t["status"] for t in data["targets"]]
    assert status[:2] == ["MISSED", "met"]  # one correctness failure; zero syncs
    assert status[2:6] == want
    assert status[6] == "not measured"  # no pooled cell in this speed record
    assert "FlashAttention-2: about 335 TFLOP/s" in md


@pytest.mark.parametrize("ms,want", [((40.0, 99.0), "met"), ((40.0, 101.0), "MISSED"), ((None, None), "not measured")])
def test_pooled_maps_target_reads_the_slowest_pooled_cell(ms, want):
    pooled = [{"provider": "ours", "pattern": p, "L": 16384, "ms": t} for p, t in zip(("window", "full"), ms)]
    pooled.append({"provider": "flash forward", "pattern": "full", "L": 16384, "ms": 500.0})  # not ours: ignored
    data, _ = targets.run({"speed": {**_speed(0.9, 0.9), "pooled": pooled}})
    row = next(t for t in data["targets"] if t["target"].startswith("pooled maps of 16 heads at 16384"))
    assert row["status"] == want
    if ms[1] is not None:
        assert f"{ms[1]:.1f} ms (full)" in row["measured"]


SSD = next(c for c in op_cases(False) if c.op == "ssd")


def test_the_ssd_case_passes_and_a_wrong_final_state_fails(monkeypatch):
    """The SSD case (interpreted kernels against the float64 recurrence) passes; a final state 0.1% off fails on
    exactly that tensor."""
    import kernels.triton.ssd as ssd

    data, _ = correctness.run("cpu", cases=[SSD], log=QUIET)
    assert data["counts"]["passed"] == 1, data
    assert [c["tensor"] for c in data["cases"][0]["checks"]] == ["y", "state", "dx", "ddt", "da", "db", "dc", "dh0"]
    right = ssd.ssd_triton

    def wrong(*args, **kw):
        y, h = right(*args, **kw)
        return y, h + 1e-3 * h.detach().abs().max()

    monkeypatch.setattr(ssd, "ssd_triton", wrong)
    data, _ = correctness.run("cpu", cases=[SSD], log=QUIET)
    assert [c["tensor"] for c in data["cases"][0]["checks"] if not c["ok"]] == ["state"]


DELTA = next(c for c in op_cases(False) if c.op == "gated_delta")


def test_the_gated_delta_case_passes_and_a_wrong_output_fails(monkeypatch):
    """The gated delta rule's case (interpreted kernels against the float64 recurrence) passes; an output 0.1% off
    fails on exactly that tensor."""
    import kernels.triton.delta_rule as delta_rule

    data, _ = correctness.run("cpu", cases=[DELTA], log=QUIET)
    assert data["counts"]["passed"] == 1, data
    names = ["o", "state", "dq", "dk", "dv", "dbeta", "dg", "dh0"]
    assert [c["tensor"] for c in data["cases"][0]["checks"]] == names
    right = delta_rule.gated_delta_triton

    def wrong(*args, **kw):
        o, h = right(*args, **kw)
        return o + 1e-3 * o.detach().abs().max(), h

    monkeypatch.setattr(delta_rule, "gated_delta_triton", wrong)
    data, _ = correctness.run("cpu", cases=[DELTA], log=QUIET)
    assert [c["tensor"] for c in data["cases"][0]["checks"] if not c["ok"]] == ["o"]
