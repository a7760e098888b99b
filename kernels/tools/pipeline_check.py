"""Are the block-sparse main loops software-pipelined like the dense ones? Read the compiled TTGIR.

    python -m kernels.tools.pipeline_check [--cc 80,90] [--only REGEX] [--dump DIR]

No GPU needed: each flash-attention specialisation (the ones kernels.tools.aot_check compiles) is
compiled for the target and its TTGIR is searched for the ``scf.for`` loops that contain a dot.
For each such loop we print the asynchronous global -> shared copies issued inside it
(``ttg.async_copy_global_to_local``), the waits (``ttg.async_wait``, with how many copy groups
they leave in flight) and the depth of the shared-memory ring buffers the loop rotates through:
a pipelined loop (num_stages > 1) issues the copies of a later iteration's K / V tiles while this
one computes, waits only for the oldest, and rotates its buffers. A loop that loads with plain ``tt.load``
(nothing asynchronous) was not pipelined. ``--dump DIR`` writes the TTGIR and PTX for reading.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from dataclasses import dataclass

os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")


@dataclass
class LoopInfo:
    line: int  # line of the scf.for in the TTGIR
    dots: int  # tt.dot / ttng.warp_group_dot inside (nested included)
    async_copies: int  # ttg.async_copy_global_to_local inside
    async_waits: int  # ttg.async_wait inside
    plain_loads: int  # tt.load inside (not asynchronous)
    ring_depth: int  # deepest shared-memory ring buffer the loop indexes (tiles in flight + 1)
    wait_depth: int  # largest ``num`` of its async_waits: copy groups left in flight

    @property
    def pipelined(self) -> bool:
        return self.async_copies > 0 and self.async_waits > 0


def dot_loops(ttgir: str) -> list[LoopInfo]:
    """Every ``scf.for`` of the TTGIR that contains a dot, innermost information included."""
    lines = ttgir.splitlines()
    # Multi-buffered shared allocations: %name -> leading (ring) dimension.
    rings = {
        m.group(1): int(m.group(2))
        for m in re.finditer(r"(%[\w.]+) = ttg\.local_alloc : \(\) -> !ttg\.memdesc<(\d+)x\d+x\d+x", ttgir)
    }
    out = []
    for i, line in enumerate(lines):
        if "scf.for" not in line or not line.rstrip().endswith("{"):
            continue
        depth, body = 0, []
        for j in range(i, len(lines)):
            depth += lines[j].count("{") - lines[j].count("}")
            body.append(lines[j])
            if depth <= 0:
                break
        text = "\n".join(body)
        dots = len(re.findall(r"= tt\.dot |= ttng\.warp_group_dot ", text))
        if not dots:
            continue
        depth = max([rings.get(m, 0) for m in re.findall(r"ttg\.memdesc_index (%[\w.]+)\[", text)] + [0])
        waits = [int(n) for n in re.findall(r"ttg\.async_wait [^{]*\{num = (\d+)", text)]
        out.append(
            LoopInfo(
                i + 1,
                dots,
                text.count("ttg.async_copy_global_to_local"),
                len(waits),
                len(re.findall(r"= tt\.load ", text)),
                depth,
                max(waits + [0]),
            )
        )
    return out


def compile_ttgir(spec, cc: int):
    """(ttgir, ptx) of one kernels.tools.aot_check specialisation compiled for ``sm_<cc>``."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from .aot_check import _signature

    name, fn, ptrs, consts, warps, stages = spec
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(fn.arg_names) if n in ptrs}
    src = ASTSource(fn=fn, signature=_signature(fn, ptrs, consts), constexprs=consts, attrs=attrs)
    k = triton.compile(src, target=GPUTarget("cuda", cc, 32), options={"num_warps": warps, "num_stages": stages})
    return k.asm["ttgir"], k.asm["ptx"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cc", default="80,90", help="compute capabilities, comma separated")
    ap.add_argument(
        "--only",
        default=r"^_attn_fwd fp16 d64 |^_attn_bwd_(dkdv|dq) fp16 d64 ",
        help="regex over kernels.tools.aot_check names (default: fp16 d64 fwd, dkdv, dq)",
    )
    ap.add_argument("--dump", default=None, help="write <name>_sm<cc>.ttgir / .ptx here")
    args = ap.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        print("pipeline_check: unset TRITON_INTERPRET")
        return 2
    from .aot_check import _flash_specs

    specs = [s for s in _flash_specs(False) if re.search(args.only, s[0])]
    print(f"{'kernel':52s} {'sm':>3s} loop@line dots async_copies async_waits tt.load ring wait_num")
    bad = 0
    for cc in (int(c) for c in args.cc.split(",")):
        for spec in specs:
            ttgir, ptx = compile_ttgir(spec, cc)
            if args.dump:
                os.makedirs(args.dump, exist_ok=True)
                tag = re.sub(r"[^A-Za-z0-9_.-]+", "_", spec[0])
                for ext, text in (("ttgir", ttgir), ("ptx", ptx)):
                    with open(os.path.join(args.dump, f"{tag}_sm{cc}.{ext}"), "w") as f:
                        f.write(text)
            loops = dot_loops(ttgir)
            bad += not any(lp.pipelined for lp in loops)
            for lp in loops:
                print(
                    f"{spec[0]:52s} {cc:3d} {lp.line:9d} {lp.dots:4d} {lp.async_copies:12d} "
                    f"{lp.async_waits:11d} {lp.plain_loads:7d} {lp.ring_depth:4d} {lp.wait_depth:8d}"
                    f"{'' if lp.pipelined else '  NOT PIPELINED'}",
                    flush=True,
                )
    print(f"{len(specs)} kernels per target; {bad} without any pipelined dot loop")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
