"""The correctness cases of the report: what each one runs, for the GPU and for the interpreter.

An :class:`AttnCase` is one call of the attention kernels (outputs and the gradients of every input
checked); an :class:`OpCase` one of the other Triton operations (RoPE, norms, linear attention).
``attention_cases(gpu)`` / ``op_cases(gpu)`` list them: on a GPU the full matrix (bf16 / fp16 /
fp32 x head dim 32 / 64 / 128 x causal, tails, Lq < Lk, GQA / MQA with the dK/dV group split, a
non-contiguous layout, every structured pattern's block mask, a mask with empty rows, the score
modifiers, bitwise determinism, offsets past 2^31 elements); in the interpreter a subset on small
shapes (bf16 is listed as skipped there: the Triton 3.9 interpreter's bf16 ``tl.dot`` is wrong).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32
# Structured patterns of the catalogue that run as a BlockMask (``full`` runs dense).
PATTERNS = ("sliding_window", "dilated_window", "strided", "fixed", "block_local", "longformer", "bigbird")
INTERPRETER_SKIP = {BF16: "the Triton 3.9 interpreter's bf16 tl.dot returns wrong values (GPU only)"}


@dataclass(frozen=True)
class AttnCase:
    name: str
    dtype: torch.dtype
    B: int
    h: int
    h_kv: int
    lq: int
    lk: int
    d: int
    causal: bool = False
    pattern: str | None = None  # a catalogue pattern, "empty_rows" (random mask with empty rows) or None
    mods: tuple = ()  # any of "alibi", "softcap", "rel_bias"
    layout: str = "contiguous"  # or "transposed": [B, L, h, d] storage seen as [B, h, L, d]
    determinism: bool = False  # run twice; outputs and gradients must be bitwise equal
    check_heads: tuple | None = None  # compare only these heads with the reference (large cases)
    skip: str | None = None


@dataclass(frozen=True)
class OpCase:
    name: str
    # rope, layer_norm, rms_norm, linear_attention, norm_offset, pooled, nsa_selected, ssd, gated_delta
    op: str
    dtype: torch.dtype
    shape: tuple
    extra: dict = field(default_factory=dict)
    skip: str | None = None


def _dtypes(gpu: bool):
    return (BF16, FP16, FP32)


def _skip(dtype, gpu):
    return None if gpu else INTERPRETER_SKIP.get(dtype)


def _tag(dtype) -> str:
    return str(dtype).split(".")[1]


def attention_cases(gpu: bool) -> list[AttnCase]:
    cases = []
    L = 777 if gpu else 45  # not a multiple of any tile
    dims = (32, 64, 128) if gpu else (32, 64)
    for dt in _dtypes(gpu):
        for d in dims if (gpu or dt != BF16) else (32,):
            for causal in (False, True):
                if not gpu and dt == FP16 and d == 64 and not causal:
                    continue  # interpreter: keep the CI run short
                cases.append(
                    AttnCase(
                        f"dense {_tag(dt)} d{d} causal={causal} L={L}",
                        dt,
                        2 if gpu else 1,
                        4 if gpu else 2,
                        4 if gpu else 2,
                        L,
                        L,
                        d,
                        causal,
                        skip=_skip(dt, gpu),
                    )
                )
    for dt in _dtypes(gpu) if gpu else (FP32, FP16):
        s = _skip(dt, gpu)
        t = _tag(dt)
        lq, lk = (300, 1000) if gpu else (30, 50)
        cases.append(AttnCase(f"Lq<Lk {t} causal Lq={lq} Lk={lk}", dt, 2, 4, 4, lq, lk, 64, True, skip=s))
        cases.append(AttnCase(f"GQA 8/2 batch 1 (dK/dV split) {t} causal", dt, 1, 8, 2, L, L, 64, True, skip=s))
        cases.append(AttnCase(f"MQA 8/1 batch 1 (dK/dV split) {t}", dt, 1, 8, 1, L, L, 64, False, skip=s))
        cases.append(
            AttnCase(
                f"non-contiguous [B,L,h,d] view {t} causal", dt, 2, 4, 2, L, L, 64, True, layout="transposed", skip=s
            )
        )
    Lp = 1000 if gpu else 100  # 64 x 64 layout tiles: several blocks, a partial last one
    for dt in (BF16, FP32) if gpu else (FP32,):
        for pattern in PATTERNS:
            for causal in (False, True) if gpu else (True,):
                cases.append(
                    AttnCase(
                        f"pattern {pattern} {_tag(dt)} causal={causal} L={Lp}",
                        dt,
                        1,
                        4 if gpu else 2,
                        2 if gpu else 1,
                        Lp,
                        Lp,
                        64 if gpu else 32,
                        causal,
                        pattern=pattern,
                        skip=_skip(dt, gpu),
                    )
                )
    for dt in _dtypes(gpu) if gpu else (FP32, FP16):
        cases.append(
            AttnCase(
                f"block mask with empty rows {_tag(dt)} Lq<Lk",
                dt,
                1,
                2,
                1,
                Lp - 20,
                Lp,
                64,
                False,
                pattern="empty_rows",
                skip=_skip(dt, gpu),
            )
        )
    for dt in (BF16, FP32) if gpu else (FP32,):
        for mods in (("alibi",), ("softcap",), ("rel_bias",), ("alibi", "softcap", "rel_bias")):
            cases.append(
                AttnCase(
                    f"modifiers {'+'.join(mods)} {_tag(dt)} causal",
                    dt,
                    1,
                    4,
                    2,
                    L,
                    L,
                    64,
                    True,
                    mods=mods,
                    skip=_skip(dt, gpu),
                )
            )
        cases.append(
            AttnCase(
                f"modifiers alibi+rel_bias on a block mask {_tag(dt)}",
                dt,
                1,
                4 if gpu else 2,
                2 if gpu else 1,
                Lp,
                Lp,
                64 if gpu else 32,
                True,
                pattern="bigbird",
                mods=("alibi", "rel_bias"),
                skip=_skip(dt, gpu),
            )
        )
    det = BF16 if gpu else FP32
    cases.append(
        AttnCase(
            f"determinism GQA 8/1 batch 1 (dK/dV split) {_tag(det)}", det, 1, 8, 1, L, L, 64, True, determinism=True
        )
    )
    cases.append(
        AttnCase(
            f"determinism block mask + rel_bias {_tag(det)}",
            det,
            1,
            4 if gpu else 2,
            2 if gpu else 1,
            Lp,
            Lp,
            64 if gpu else 32,
            True,
            pattern="sliding_window",
            mods=("rel_bias",),
            determinism=True,
        )
    )
    if gpu:
        # B * h = 32768 heads of 576 x 128: q[:, -1] starts past 2^31 elements, so every offset that
        # is still computed in int32 (head * stride) wraps; the first and last heads are checked.
        cases.append(
            AttnCase(
                "large offsets B*h=32768 (offsets > 2^31 elements) bf16",
                BF16,
                1,
                32768,
                32768,
                576,
                576,
                128,
                True,
                check_heads=(0, 1, 32766, 32767),
            )
        )
    else:
        cases.append(
            AttnCase("many heads B*h=24 (offset arithmetic) fp32", FP32, 3, 8, 8, 16, 16, 32, True, check_heads=(0, 7))
        )
    return cases


def op_cases(gpu: bool) -> list[OpCase]:
    out = []
    for dt in _dtypes(gpu) if gpu else (FP32, FP16):
        t, s = _tag(dt), _skip(dt, gpu)
        rows, width = (4096, 1024) if gpu else (37, 96)
        out.append(OpCase(f"rope {t} d64", "rope", dt, (2, 4, 333 if gpu else 33, 64), skip=s))
        out.append(OpCase(f"layer_norm {t} width {width}", "layer_norm", dt, (rows, width), skip=s))
        out.append(OpCase(f"rms_norm {t} width {width}", "rms_norm", dt, (rows, width), skip=s))
    for causal in (False, True):
        shape = (2, 4, 2, 1000, 32, 64) if gpu else (1, 2, 1, 40, 16, 32)  # B, h, h_kv, L, m, d
        out.append(
            OpCase(f"linear_attention fp32 GQA causal={causal}", "linear_attention", FP32, shape, {"causal": causal})
        )
    # Pooled attention maps (kernels/triton/pooled.py): cells and per-query statistics of the two-pass
    # kernel against attention_ref's probabilities pooled in float64; dense causal, and a sliding window
    # with sinks as a BlockMask, with the score modifiers; B, h, h_kv, L, d.
    for dt in (FP16, FP32) if not gpu else (BF16, FP16, FP32):
        shape = (1, 8, 2, 2000, 64) if gpu else (1, 2, 1, 130, 32)
        s = _skip(dt, gpu)
        out.append(OpCase(f"pooled maps {_tag(dt)} dense causal GQA", "pooled", dt, shape, {"causal": True}, skip=s))
        out.append(
            OpCase(
                f"pooled maps {_tag(dt)} sliding_window + sinks, alibi + softcap",
                "pooled",
                dt,
                shape,
                {"pattern": "sliding_window", "mods": ("alibi", "softcap")},
                skip=s,
            )
        )
    # NSA's selected-block attention (kernels/triton/selected.py, fp32 only): B, h, h_kv, L, d, l', n; GQA groups of
    # 8 (one row group) and 1 (15 padding rows), l' below / at one key tile, a d_h = 128 with l' = 64 over two tiles.
    nsa = (
        [(1, 16, 2, 1024, 64, 64, 16), (2, 4, 4, 777, 32, 8, 6), (1, 8, 1, 600, 128, 64, 8)]
        if gpu
        else [(1, 4, 2, 21, 16, 8, 3), (1, 2, 2, 18, 32, 16, 2)]
    )
    for shape in nsa:
        B, h, h_kv, L, d, blk, n = shape
        out.append(OpCase(f"nsa_selected fp32 G={h // h_kv} L={L} d{d} l'={blk} n={n}", "nsa_selected", FP32, shape))
    # Mamba-2's chunked SSD (kernels/triton/ssd/, fp32): B, h, g, L, P, N; lengths not a multiple of the chunk,
    # groups of 1 and 4 heads, with and without an initial state; on a GPU Mamba-2's P 64, N 128 and a state width
    # (N 40) over several partial column blocks.
    ssd = (
        [((2, 8, 2, 1000, 64, 128), 64, True), ((1, 4, 1, 777, 32, 40), 32, False), ((1, 4, 4, 300, 128, 16), 16, True)]
        if gpu
        else [((1, 2, 1, 40, 16, 16), 16, True)]
    )
    for shape, chunk, h0 in ssd:
        B, h, g, L, P, N = shape
        name = f"ssd fp32 h={h} g={g} L={L} P{P} N{N} chunk {chunk}{' initial state' if h0 else ''}"
        out.append(OpCase(name, "ssd", FP32, shape, {"chunk": chunk, "h0": h0}))
    # The gated delta rule's chunked kernels (kernels/triton/delta_rule/, fp32): B, h, L, K, V; lengths not a
    # multiple of the chunk, with and without an initial state; on a GPU Gated DeltaNet's K = V = 128 at chunk 64,
    # K 256 (chunk 32) and a value width over partial column blocks.
    delta = (
        [((2, 4, 1000, 128, 128), 64, True), ((1, 4, 777, 256, 40), 32, False), ((1, 2, 300, 64, 72), 16, True)]
        if gpu
        else [((1, 2, 40, 16, 24), 16, True)]
    )
    for shape, chunk, h0 in delta:
        B, h, L, K, V = shape
        name = f"gated_delta fp32 h={h} L={L} K{K} V{V} chunk {chunk}{' initial state' if h0 else ''}"
        out.append(OpCase(name, "gated_delta", FP32, shape, {"chunk": chunk, "h0": h0}))
    if gpu:
        # rows * N past 2^31 elements: the norm kernels' row offsets must be int64.
        out.append(
            OpCase("layer_norm offsets > 2^31 elements bf16", "norm_offset", BF16, ((1 << 31) // 4096 + 64, 4096))
        )
    return out
