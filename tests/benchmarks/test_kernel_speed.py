"""``python -m benchmarks.kernel_speed``: every cell gets a record and a status, masks equal the catalogue's.

No timing is asserted. ``torch.compile(flex_attention)`` takes a minute per pattern on CPU, too slow
for CI, so the sweep tests swap in eager ``flex_attention`` (same masks and code path around it).
"""

import json
import warnings

import pytest
import torch
from torch.nn.attention.flex_attention import create_mask, flex_attention

from benchmarks import kernel_providers as bench_providers
from benchmarks import kernel_speed as bench
from benchmarks.kernel_providers import PATTERNS, PROVIDERS, Unavailable, dense_causal_flops, pattern_config

LENGTHS = [128, 256]


@pytest.fixture
def eager_flex(monkeypatch):
    def eager():
        def run(*a, **kw):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "flex_attention called without torch.compile()"
                return flex_attention(*a, **kw)

        return run

    monkeypatch.setattr(bench_providers, "compiled_flex", eager)


def _by_key(records):
    keys = [(r["mode"], r["pattern"], r["provider"], r["L"]) for r in records]
    assert len(keys) == len(set(keys)), "one record per cell"
    return dict(zip(keys, records))


def test_main_full_sweep(eager_flex, tmp_path, capsys):
    path = tmp_path / "bench.json"
    records = bench.main(["--lengths", "128,256", "--repeats", "1", "--mode", "both", "--json", str(path)])
    out = capsys.readouterr().out
    assert json.loads(path.read_text()) == records
    cells = _by_key(records)
    assert set(cells) == {
        (m, p, pr, L) for m in ("fwd", "fwd_bwd") for p in PATTERNS for pr in PROVIDERS for L in LENGTHS
    }
    for (mode, _pattern, provider, _L), r in cells.items():
        assert set(r) >= {"pattern", "provider", "backend", "mode", "L", "ms", "tflops", "status"}
        assert isinstance(r["status"], str) and r["status"]
        if provider == "flex" and mode == "fwd_bwd":
            assert r["status"] == "n/a"  # FlexAttention has no CPU backward
        else:
            assert r["status"] == "ok", r
            assert r["ms"] > 0 and r["tflops"] > 0
            assert r["tflops"] == pytest.approx(r["flops"] / (r["ms"] / 1e3) / 1e12)
        if provider in ("flex", "ref") and r["status"] == "ok":
            assert r["max_diff"] < 1e-4  # same pattern as ours, same output
    assert cells[("fwd", "sliding_window", "ours", 256)]["backend"] == "torch-cpu block-sparse"
    assert "baseline" in cells[("fwd", "bigbird", "sdpa", 128)]["backend"]
    for mode in ("fwd", "fwd_bwd"):
        assert f"== {mode}: ms (TFLOP/s)" in out
        for pattern in PATTERNS:
            assert f"{pattern} ({mode}, L=256): ours vs SDPA causal: " in out
    assert out.count("sliding_window  flex") == 2  # one row per table


def test_flops_follow_the_convention(eager_flex):
    from models.attention.sparse import pattern_block_mask

    q = torch.zeros(1, 8, 256, 64)
    assert (
        bench_providers.prepare("sdpa", "bigbird", q).flops_fwd
        == 2 * 8 * 256**2 * 64
        == dense_causal_flops(1, 8, 256, 64)
    )
    bm = pattern_block_mask(pattern_config("sliding_window"), 256)
    assert bench_providers.prepare("ours", "sliding_window", q).flops_fwd == bm.n_visited * 64 * 64 * 4 * 8 * 64
    # Flex's causal layout at L=256, 128-blocks: 3 visited tiles of 128 x 128.
    assert bench_providers.prepare("flex", "full", q).flops_fwd == 3 * 128 * 128 * 4 * 8 * 64
    records = bench.main(["--lengths", "128", "--repeats", "1", "--patterns", "full", "--providers", "sdpa"])
    fwd, fwd_bwd = (r["flops"] for r in records)
    assert fwd_bwd == pytest.approx(3.5 * fwd)


@pytest.mark.parametrize("pattern", list(PATTERNS))
def test_flex_mask_mod_is_the_catalogue_pattern(pattern):
    from models.attention import pattern_mask

    L = 640  # longer than the window, several bigbird random blocks
    dense = create_mask(bench_providers.flex_mask_mod(pattern, L), None, None, L, L, device="cpu")[0, 0]
    assert torch.equal(dense, pattern_mask(pattern_config(pattern), L))


def test_timeout_skips_longer_lengths():
    records = bench.main(
        [
            "--lengths",
            "128,256",
            "--repeats",
            "1",
            "--patterns",
            "sliding_window",
            "--providers",
            "ours,sdpa",
            "--mode",
            "fwd",
            "--budget",
            "0",
        ]
    )
    cells = _by_key(records)
    for provider in ("ours", "sdpa"):
        assert cells[("fwd", "sliding_window", provider, 128)]["status"] == "timeout"
        assert cells[("fwd", "sliding_window", provider, 128)]["ms"] is None
        assert cells[("fwd", "sliding_window", provider, 256)]["status"] == "skipped"


def test_ref_skipped_above_memory_budget():
    records = bench.main(
        [
            "--lengths",
            "128",
            "--repeats",
            "1",
            "--patterns",
            "full",
            "--providers",
            "ref",
            "--mode",
            "fwd",
            "--ref-max-gb",
            "1e-6",
        ]
    )
    assert [r["status"] for r in records] == ["skipped"]


@pytest.mark.parametrize("failure", ["import", "compile"])
def test_flex_failure_is_marked_unavailable(monkeypatch, failure, capsys):
    def broken():
        if failure == "import":
            raise Unavailable("no flex_attention")

        def run(*a, **kw):
            raise RuntimeError("InductorError: no working C++ compiler")

        return run

    monkeypatch.setattr(bench_providers, "compiled_flex", broken)
    records = bench.main(
        [
            "--lengths",
            "128,256",
            "--repeats",
            "1",
            "--patterns",
            "full,sliding_window",
            "--providers",
            "ours,flex",
            "--mode",
            "fwd",
        ]
    )
    flex = [r for r in records if r["provider"] == "flex"]
    assert len(flex) == 4 and all(r["status"].startswith("unavailable: ") for r in flex)
    assert all(r["status"] == "ok" for r in records if r["provider"] == "ours")
    assert "ours vs flex: n/a (unavailable)" in capsys.readouterr().out


def test_bad_flags_are_rejected():
    with pytest.raises(SystemExit):
        bench.parse_args(["--patterns", "nope"])
    with pytest.raises(SystemExit):
        bench.parse_args(["--providers", "ours,cudnn"])
