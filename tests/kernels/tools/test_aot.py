"""Every kernel specialisation the app can launch compiles ahead of time for sm_80 and sm_90.

Runs ``python -m kernels.tools.aot_check`` (no GPU needed: ptxas ships with triton) once, in a
subprocess without TRITON_INTERPRET. Which check depends on the stamp of the last full pass
(``kernels/tools/aot_stamp.py``): when it matches the kernel sources and triton, a smoke compile
(``--quick``: each kernel once per target, seconds); when it does not, or ``EXPLORER_AOT_FULL=1``,
the full check (minutes of CPU on two cores), and a stale stamp fails the test until it is renewed.
The session starts the run in the background at the lowest priority right after collection
(``tests/aot_job.py``) and this test reads its result.
"""

import re

import pytest
from aot_job import full_check_reason

from kernels.tools.aot_stamp import COMMAND, STAMP

FAMILIES = [
    *(
        f"{fn} {kind}"
        for fn in ("_attn_fwd", "_attn_bwd_dkdv", "_attn_bwd_dq")
        for kind in ("dense", "dense mod", "sparse", "sparse mod")
    ),
    "bwd_preprocess",
    "rope",
    "layer_norm fwd",
    "layer_norm bwd",
    "rms_norm fwd",
    "rms_norm bwd",
    "_la_chunk_kv",
    "_la_fwd_chunk",
    "_la_bwd_dq_chunk",
    "_la_chunk_grad",
    "_la_bwd_dkdv_chunk",
    *(f"_pooled_fwd {kind}" for kind in ("dense", "dense mod", "sparse", "sparse mod")),
    "_ssd_chunk_state",
    "_ssd_state_pass",
    "_ssd_chunk_scan",
    "_ssd_chunk_dstate",
    "_ssd_state_pass_bwd",
    "_ssd_chunk_bwd_dx",
    "_ssd_chunk_bwd_dbdc",
]
FLASH_DTYPE_DIMS = [
    "fp16 d32",
    "fp16 d64",
    "fp16 d128",
    "bf16 d32",
    "bf16 d64",
    "bf16 d128",
    "fp32 d32",
    "fp32 d64",
    "fp32 d128",
]
# The smoke compile: every jit function once (norms share one kernel pair for both norms).
KERNELS = [
    "_attn_fwd",
    "_attn_bwd_dkdv",
    "_attn_bwd_dq",
    "bwd_preprocess",
    "rope",
    "layer_norm",
    "_la_chunk_kv",
    "_la_fwd_chunk",
    "_la_bwd_dq_chunk",
    "_la_chunk_grad",
    "_la_bwd_dkdv_chunk",
    "_pooled_fwd",
    "_ssd_chunk_state",
    "_ssd_state_pass",
    "_ssd_chunk_scan",
    "_ssd_chunk_dstate",
    "_ssd_state_pass_bwd",
    "_ssd_chunk_bwd_dx",
    "_ssd_chunk_bwd_dbdc",
]


def _is_family(name: str, family: str) -> bool:
    """``name`` starts with the family's kernel and carries its tags (and "mod" only if it does)."""
    words, fam = name.split(), family.split()
    return words[0] == fam[0] and all(w in words for w in fam[1:]) and ("mod" in words) == ("mod" in fam)


def _table(out: str) -> list[tuple[str, int]]:
    """(name, sm) of every compiled row. Table rows: name words..., sm, smem, regs, spill, sec."""
    rows = [line.split() for line in out.splitlines()]
    return [(" ".join(r[:-5]), int(r[-5])) for r in rows if len(r) > 5 and r[-5] in ("80", "90") and r[-4].isdigit()]


def _check_full(table) -> None:
    for cc in (80, 90):
        names = [n for n, c in table if c == cc]
        for fam in FAMILIES:
            assert any(_is_family(n, fam) for n in names), (cc, fam)
        for dd in FLASH_DTYPE_DIMS:
            for fn in ("_attn_fwd", "_attn_bwd_dkdv", "_attn_bwd_dq"):
                assert any(n.startswith(f"{fn} {dd} ") for n in names), (cc, fn, dd)


def _check_smoke(table) -> None:
    for cc in (80, 90):
        first = [n.split()[0] for n, c in table if c == cc]
        for kernel in KERNELS:
            assert first.count(kernel) >= 1, (cc, kernel)


@pytest.mark.slow
def test_aot_compile(aot_result):
    code, out, err = aot_result
    mode = re.search(r"^mode: (\w+)", out, re.M)
    full = mode is not None and mode.group(1) == "full"
    renew = (
        f"run the full check, `python -m kernels.tools.aot_check` (TRITON_INTERPRET unset), fix what "
        f"fails, then `{COMMAND}` and commit kernels/tools/{STAMP.name}"
    )
    assert code == 0, f"{'full' if full else 'smoke'} compile check failed: {renew}\n" + out[-4000:] + err[-3000:]
    assert re.search(r"\n\d+ compilations, 0 failed", out), out[-2000:]
    table = _table(out)
    if not full:
        _check_smoke(table)
        return
    _check_full(table)
    stale = full_check_reason(env=False)
    if stale is not None:
        pytest.fail(
            f"{stale}. The full check passed here; record it: `{COMMAND}` (runs it again and "
            f"writes kernels/tools/{STAMP.name}), then commit the stamp with the kernel change."
        )
