"""Every kernel specialisation the app can launch compiles ahead of time for sm_80 and sm_90.

Runs the FULL ``python -m kernels.tools.aot_check`` (no GPU needed: ptxas ships with triton) once, in a
subprocess without TRITON_INTERPRET. It takes minutes of CPU on two cores, so the session starts it
in the background at the lowest priority right after collection (``tests/aot_job.py``) and this
test reads its result.
"""
import re

import pytest

FAMILIES = [
    *(f"{fn} {kind}" for fn in ("_attn_fwd", "_attn_bwd_dkdv", "_attn_bwd_dq")
      for kind in ("dense", "dense mod", "sparse", "sparse mod")),
    "bwd_preprocess", "rope", "layer_norm fwd", "layer_norm bwd", "rms_norm fwd", "rms_norm bwd",
    "_la_chunk_kv", "_la_fwd_chunk", "_la_bwd_dq_chunk", "_la_chunk_grad", "_la_bwd_dkdv_chunk",
    *(f"_pooled_fwd {kind}" for kind in ("dense", "dense mod", "sparse", "sparse mod")),
]
FLASH_DTYPE_DIMS = ["fp16 d32", "fp16 d64", "fp16 d128", "bf16 d32", "bf16 d64", "bf16 d128",
                    "fp32 d32", "fp32 d64", "fp32 d128"]


def _is_family(name: str, family: str) -> bool:
    """``name`` starts with the family's kernel and carries its tags (and "mod" only if it does)."""
    words, fam = name.split(), family.split()
    return words[0] == fam[0] and all(w in words for w in fam[1:]) \
        and ("mod" in words) == ("mod" in fam)


@pytest.mark.slow
def test_aot_check_full(aot_result):
    code, out, err = aot_result
    assert code == 0, out[-4000:] + err[-3000:]
    assert re.search(r"\n\d+ compilations, 0 failed", out), out[-2000:]
    rows = [line.split() for line in out.splitlines()]
    # Table rows: name words..., sm, smem, regs, spill, sec.
    table = [(" ".join(r[:-5]), int(r[-5])) for r in rows
             if len(r) > 5 and r[-5] in ("80", "90") and r[-4].isdigit()]
    for cc in (80, 90):
        names = [n for n, c in table if c == cc]
        for fam in FAMILIES:
            assert any(_is_family(n, fam) for n in names), (cc, fam)
        for dd in FLASH_DTYPE_DIMS:
            for fn in ("_attn_fwd", "_attn_bwd_dkdv", "_attn_bwd_dq"):
                assert any(n.startswith(f"{fn} {dd} ") for n in names), (cc, fn, dd)
