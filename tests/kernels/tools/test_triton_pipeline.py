"""The block-sparse main loops are software-pipelined as deeply as the dense ones (compiled TTGIR).

Compiles (no GPU needed, in a subprocess without TRITON_INTERPRET) the plain fp16 d64 forward and
dQ kernels, dense and block-sparse, for sm_90 and reads their TTGIR with kernels.tools.pipeline_check:
every loop that holds the dots must issue asynchronous global -> shared copies, rotate a
shared-memory ring at least as deep, and keep at least as many copy groups in flight, as the
dense kernel's loops.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = """
import dataclasses, json, sys
from kernels.tools.aot_check import _flash_specs
from kernels.tools.pipeline_check import compile_ttgir, dot_loops
out = {}
for spec in _flash_specs(False):
    if spec[0].startswith(sys.argv[1] + " fp16 d64 ") and " mod " not in spec[0]:
        kind = "sparse" if " sparse " in spec[0] else "dense"
        out[kind] = [dataclasses.asdict(lp) | {"pipelined": lp.pipelined}
                     for lp in dot_loops(compile_ttgir(spec, 90)[0])]
print(json.dumps(out))
"""


@pytest.mark.slow
@pytest.mark.parametrize("kernel", ["_attn_fwd", "_attn_bwd_dq"])
def test_sparse_loops_are_pipelined_like_dense(kernel):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    res = subprocess.run(
        [sys.executable, "-c", SCRIPT, kernel],
        cwd=Path(__file__).resolve().parents[3],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    loops = json.loads(res.stdout.strip().splitlines()[-1])
    dense, sparse = loops["dense"], loops["sparse"]
    assert len(dense) == 2 and len(sparse) == 2  # unmasked + masked loop in both
    ring = max(lp["ring_depth"] for lp in dense)
    wait = max(lp["wait_depth"] for lp in dense)
    assert all(lp["pipelined"] for lp in dense + sparse)
    for lp in sparse:  # the full-block loop and the partial-block loop
        assert lp["ring_depth"] >= ring and lp["wait_depth"] >= wait, (lp, ring, wait)
