"""The kernels compile ahead of time for sm_80 and sm_90 (no GPU needed: ptxas ships with triton)."""
import os
import subprocess
import sys
from pathlib import Path


def test_aot_check_quick():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    root = Path(__file__).resolve().parents[2]
    res = subprocess.run([sys.executable, "-m", "kernels.aot_check", "--quick"], cwd=root, env=env,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "0 failed" in res.stdout
