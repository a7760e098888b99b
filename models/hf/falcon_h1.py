"""Falcon-H1 (TII 2025, "Falcon-H1: A Family of Hybrid-Head Language Models"): in every layer a softmax attention
and a Mamba-2 mixer read the same RMS-normed input side by side; their outputs are summed into the residual stream,
then a SwiGLU MLP (``model_type = "falcon_h1"``, transformers' ``FalconH1ForCausalLM``, its torch path).

transformers' forward, with ``h = input_layernorm(x)`` (RMSNorm, ``rms_norm_eps``) and the config's multipliers::

    x0    = embed_tokens(ids) * embedding_multiplier
    mamba = Mixer(h * ssm_in_multiplier) * ssm_out_multiplier      in_proj's output times mup_vector (below)
    attn  = o_proj(Attn(q_proj(h a), k_proj(h a) * key_multiplier, v_proj(h a))) * attention_out_multiplier
                                                                    a = attention_in_multiplier; RoPE, GQA
    x     = x + mamba + attn
    x     = x + down_proj(up_proj(g) * silu(gate_proj(g) * m_gate)) * m_down      g = pre_ff_layernorm(x),
                                                                    (m_gate, m_down) = mlp_multipliers
    logits = lm_head(final_layernorm(x)) * lm_head_multiplier

``Mixer`` is Mamba-2 (``models/attention/mamba2.py``) with ``mamba_n_heads`` heads of ``mamba_d_head`` numbers
(``mamba_d_ssm = heads * head``; ``mamba_expand * hidden_size`` when null; ``mamba_d_head="auto"``: ``d_ssm /
heads``), ``mamba_n_groups`` groups, state ``mamba_d_state``, convolution ``mamba_d_conv``; its output is ``y *
silu(z)`` when ``mamba_rms_norm`` is false (``ssm_norm="none"``), else the grouped gated RMSNorm, normed before
the gate when ``mamba_norm_before_gate`` (``"before_gate"``) or after (``"gated"``). ``mup_vector`` multiplies
the five parts of ``in_proj``'s output ``[z, x, B, C, dt]`` (widths ``d_ssm, d_ssm, G N, G N, heads``) by
``ssm_multipliers[0..4]``.

The catalogue model is ``layer="parallel_hybrid"`` with ``parallel_mixer="mamba2"``: pre-norm ``rmsnorm``,
``swiglu``, ``rope``. Every multiplier is a constant scaling of a linear map, so it is folded into that map's
weights as they are read (exact up to float rounding, and the forward is then the plain layer): the embedding
table times ``embedding_multiplier``; the head times ``lm_head_multiplier`` (a tied head with multipliers other
than 1 becomes two tables, each its product: the same logits, untied); q and v weights times ``a``, k's weight
times ``a * key_multiplier`` and its bias times ``key_multiplier``; o_proj's weight and bias times
``attention_out_multiplier``; in_proj's rows times ``ssm_in_multiplier`` and their part's ``ssm_multipliers``
(bias rows times the latter); the mixer's ``out_proj`` times ``ssm_out_multiplier``; gate_proj times ``m_gate``,
down_proj times ``m_down``. Biases: ``attention_bias`` (q, k, v, o), ``mamba_proj_bias`` (in_proj),
``projectors_bias`` (the mixer's out_proj), ``mamba_conv_bias``; the catalogue's ``attn_bias="all"`` when any
of the first three is set, the others' biases and an absent convolution bias filled with zeros (what the
checkpoint computes). Refused by name: ``hidden_act`` other than silu, ``mlp_bias``, a ``time_step_limit``
other than ``(0, inf)``, an inconsistent Mamba width, RoPE scalings the catalogue lacks (``fields.rope``).
"""

from __future__ import annotations

import math

import torch

from .fields import Fields, rope
from .mapping import Rule, Tie, Zeros

MODEL_TYPES = ("falcon_h1",)

NAMES = {
    "d_model": "hidden_size",
    "n_heads": "num_attention_heads",
    "n_kv_heads": "num_key_value_heads",
    "n_layers": "num_hidden_layers",
    "d_ff": "intermediate_size",
    "vocab_size": "vocab_size",
    "max_len": "max_position_embeddings",
    "norm_eps": "rms_norm_eps",
    "head_dim": "head_dim",
    "ssm_heads": "mamba_n_heads",
    "ssm_state": "mamba_d_state",
    "ssm_groups": "mamba_n_groups",
    "ssm_conv": "mamba_d_conv",
    "ssm_chunk": "mamba_chunk_size",
}  # catalogue field -> config.json key
SIZES = {
    "mamba_d_ssm": (1, 1 << 18, "the Mamba-2 mixer's inner width, heads x head width"),
    "mamba_expand": (1, 64, "the Mamba-2 inner width over hidden_size when mamba_d_ssm is null"),
}
# FalconH1Config's defaults where config.json has no value
DEFAULTS = {"mamba_n_heads": 128, "mamba_n_groups": 1, "mamba_d_state": 256, "mamba_d_conv": 4, "mamba_expand": 2}
MULTIPLIERS = (
    "embedding_multiplier",
    "lm_head_multiplier",
    "key_multiplier",
    "attention_in_multiplier",
    "attention_out_multiplier",
    "ssm_in_multiplier",
    "ssm_out_multiplier",
)


def _multipliers(f: Fields) -> dict:
    """Every multiplier of the module docstring (absent: 1), finite; ``mlp`` and ``ssm`` as tuples."""
    out = {key: f.number(key, 1.0) for key in MULTIPLIERS}
    for key, n in (("mlp_multipliers", 2), ("ssm_multipliers", 5)):
        value = f.hf.get(key)
        if value is None:
            out[key] = (1.0,) * n
            continue
        if (
            not isinstance(value, list)
            or len(value) != n
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value)
        ):
            f.refuse(key, str(value)[:80], f"a list of {n} finite numbers")
        out[key] = tuple(float(v) for v in value)
    return out


def _mamba(f: Fields, d: int) -> dict:
    """The Mamba-2 fields: heads, head width, groups, state, convolution, chunk, output norm."""
    heads = f.integer("mamba_n_heads", DEFAULTS["mamba_n_heads"], lo=1)
    d_ssm = f.hf.get("mamba_d_ssm")
    inner = f.integer("mamba_d_ssm", lo=1, hi=1 << 18) if d_ssm is not None else None
    if inner is None:
        inner = f.integer("mamba_expand", DEFAULTS["mamba_expand"], lo=1, hi=64) * d
    head = f.hf.get("mamba_d_head", "auto")
    head = inner // heads if head in ("auto", None) else f.integer("mamba_d_head", lo=1, hi=4096)
    if head * heads != inner:
        f.refuse(
            "mamba_d_head",
            head,
            f"mamba_d_ssm / mamba_n_heads = {inner} / {heads} (the mixer's width is heads x head width)",
        )
    norm = "none"
    if f.flag("mamba_rms_norm", False):
        norm = "before_gate" if f.flag("mamba_norm_before_gate", True) else "gated"
    else:
        f.flag("mamba_norm_before_gate", True)  # read for its type: transformers ignores it without the norm
    limit = f.hf.get("time_step_limit")
    if limit is not None and not (isinstance(limit, list) and len(limit) == 2 and _no_clamp(*limit)):
        f.refuse("time_step_limit", str(limit)[:60], "[0.0, Infinity] (the catalogue's Mamba-2 does not clamp dt)")
    return dict(
        ssm_heads=heads,
        ssm_head_dim=head,
        ssm_groups=f.integer("mamba_n_groups", DEFAULTS["mamba_n_groups"], lo=1),
        ssm_state=f.integer("mamba_d_state", DEFAULTS["mamba_d_state"], lo=1),
        ssm_conv=f.integer("mamba_d_conv", DEFAULTS["mamba_d_conv"], lo=1),
        ssm_chunk=f.integer("mamba_chunk_size", 256, lo=1),
        ssm_norm=norm,
    )


def _no_clamp(lo, hi) -> bool:
    """Whether ``[lo, hi]`` clamps no softplus step: ``lo = 0`` and ``hi = +inf``, written as the literal
    ``Infinity`` (read by ``strict_json``) or as transformers 5 writes it, ``{"__float__": "Infinity"}``."""
    if isinstance(hi, dict):
        hi = math.inf if hi == {"__float__": "Infinity"} else None
    return type(lo) in (int, float) and lo == 0 and hi == math.inf


def _biases(f: Fields) -> dict:
    return {
        "attention": f.flag("attention_bias", False),
        "in_proj": f.flag("mamba_proj_bias", False),
        "out_proj": f.flag("projectors_bias", False),
        "conv": f.flag("mamba_conv_bias", True),
    }


def config(f: Fields) -> tuple:
    d, heads = f.integer("hidden_size", lo=1), f.integer("num_attention_heads", lo=1)
    kv = f.integer("num_key_value_heads", heads, lo=1)
    act = f.text("hidden_act", "silu")
    if act != "silu":
        f.refuse("hidden_act", act, "'silu' (the MLP's SwiGLU and the Mamba-2 convolution's activation)")
    if f.hf.get("mlp_bias", False) is not False:
        f.refuse("mlp_bias", f.hf.get("mlp_bias"), "false (the catalogue's SwiGLU has no biases)")
    head_dim = f.integer("head_dim", lo=1, hi=1 << 16) if f.hf.get("head_dim") is not None else None
    if head_dim is not None and d % heads == 0 and head_dim == d // heads:
        head_dim = None
    mults = _multipliers(f)
    biases = _biases(f)
    mamba = _mamba(f, d)
    tied = f.flag("tie_word_embeddings", False)
    folded = [k for k in (*MULTIPLIERS, "mlp_multipliers", "ssm_multipliers") if set(_tuple(mults[k])) != {1.0}]
    notes = [
        f"falcon_h1: attention ({heads} heads, {kv} K/V heads, RoPE) and Mamba-2 ({mamba['ssm_heads']} heads of "
        f"{mamba['ssm_head_dim']}, state {mamba['ssm_state']}) side by side in every layer (parallel_hybrid), SwiGLU",
        f"Mamba-2 output: ssm_norm={mamba['ssm_norm']!r}",
        "multipliers folded into the weights: " + (", ".join(folded) if folded else "none (all 1)"),
    ]
    if tied:
        notes.append(
            "LM head tied to the token embedding"
            if _same_table(mults)
            else "LM head tied in the checkpoint, read as two tables (embedding and head multipliers differ)"
        )
    fields = dict(
        architecture="decoder_only",
        causal=True,
        layer="parallel_hybrid",
        attention="full",
        parallel_mixer="mamba2",
        position="rope",
        norm_placement="pre",
        norm="rmsnorm",
        ffn="swiglu",
        attn_bias="all" if biases["attention"] or biases["in_proj"] or biases["out_proj"] else "none",
        vocab_size=f.integer("vocab_size", lo=1),
        max_len=f.integer("max_position_embeddings", 8192, lo=1),
        n_layers=f.integer("num_hidden_layers", lo=1),
        d_model=d,
        n_heads=heads,
        n_kv_heads=kv,
        head_dim=head_dim,
        d_ff=f.integer("intermediate_size", lo=1),
        norm_eps=f.number("rms_norm_eps", 1e-5),
        **mamba,
        **rope(f),
    )
    return fields, notes


def _tuple(v) -> tuple:
    return v if isinstance(v, tuple) else (v,)


def _same_table(mults: dict) -> bool:
    return mults["embedding_multiplier"] == mults["lm_head_multiplier"] == 1.0


def canonical(f: Fields, name: str):
    name = name.removeprefix("model.")
    if name.endswith("rotary_emb.inv_freq") or name.endswith("mamba.mup_vector"):
        return None  # buffers recomputed from the config (mup_vector: from ssm_multipliers)
    if name == "lm_head.weight" and f.flag("tie_word_embeddings", False):
        return None  # the tied head is the embedding
    return name


def _scaled(c: float):
    return lambda t: t * c


def _mup(f: Fields, cfg, c_in: float, bias: bool):
    """in_proj's rows (or bias) times their part's ``ssm_multipliers`` (and the weight times ``ssm_in_multiplier``)."""
    m = _multipliers(f)["ssm_multipliers"]
    inner, gn, h = cfg.ssm_heads * cfg.ssm_head_dim, cfg.ssm_groups * cfg.ssm_state, cfg.ssm_heads
    widths = (inner, inner, gn, gn, h)

    def fn(t):
        vec = torch.cat([torch.full((w,), v, dtype=t.dtype, device=t.device) for w, v in zip(widths, m)])
        vec = vec if bias else vec * c_in
        return t * (vec if bias else vec[:, None])

    return fn


def rules(f: Fields, cfg) -> dict:
    m = _multipliers(f)
    b = _biases(f)
    tied = f.flag("tie_word_embeddings", False)
    a_in, key = m["attention_in_multiplier"], m["key_multiplier"]
    head_src = "embed_tokens.weight" if tied else "lm_head.weight"
    out = {
        "embed.weight": Rule(("embed_tokens.weight",), _scaled(m["embedding_multiplier"])),
        "final_norm.weight": Rule(("final_layernorm.weight",)),
        "head.weight": Tie("embed.weight")
        if tied and _same_table(m)
        else Rule((head_src,), _scaled(m["lm_head_multiplier"])),
    }
    all_bias = cfg.attn_bias == "all"
    gate_m, down_m = m["mlp_multipliers"]
    for i in range(cfg.n_layers):
        src, dst = f"layers.{i}.", f"stack.blocks.{i}."
        attn, mixer = src + "self_attn.", src + "mamba."
        scale = {"q_proj": a_in, "k_proj": a_in * key, "v_proj": a_in, "o_proj": m["attention_out_multiplier"]}
        bias_scale = {"q_proj": 1.0, "k_proj": key, "v_proj": 1.0, "o_proj": m["attention_out_multiplier"]}
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            mine = dst + "attn." + ("out_proj" if proj == "o_proj" else proj)
            out[mine + ".weight"] = Rule((attn + proj + ".weight",), _scaled(scale[proj]))
            if all_bias:
                out[mine + ".bias"] = (
                    Rule((attn + proj + ".bias",), _scaled(bias_scale[proj])) if b["attention"] else Zeros()
                )
        core = dst + "mixer.core."
        out[core + "in_proj.weight"] = Rule((mixer + "in_proj.weight",), _mup(f, cfg, m["ssm_in_multiplier"], False))
        if all_bias:
            out[core + "in_proj.bias"] = (
                Rule((mixer + "in_proj.bias",), _mup(f, cfg, 1.0, True)) if b["in_proj"] else Zeros()
            )
        out[dst + "mixer.out_proj.weight"] = Rule((mixer + "out_proj.weight",), _scaled(m["ssm_out_multiplier"]))
        if all_bias:
            out[dst + "mixer.out_proj.bias"] = (
                Rule((mixer + "out_proj.bias",), _scaled(m["ssm_out_multiplier"])) if b["out_proj"] else Zeros()
            )
        out[core + "conv1d.weight"] = Rule((mixer + "conv1d.weight",))
        out[core + "conv1d.bias"] = Rule((mixer + "conv1d.bias",)) if b["conv"] else Zeros()
        for name in ("dt_bias", "A_log", "D"):
            out[core + name] = Rule((mixer + name,))
        if cfg.ssm_norm != "none":
            out[core + "norm.weight"] = Rule((mixer + "norm.weight",))
        out[dst + "res_attn.norm.weight"] = Rule((src + "input_layernorm.weight",))
        out[dst + "res_ffn.norm.weight"] = Rule((src + "pre_ff_layernorm.weight",))
        out[dst + "ffn.w.weight"] = Rule((src + "feed_forward.gate_proj.weight",), _scaled(gate_m))
        out[dst + "ffn.v.weight"] = Rule((src + "feed_forward.up_proj.weight",))
        out[dst + "ffn.w2.weight"] = Rule((src + "feed_forward.down_proj.weight",), _scaled(down_m))
    return out
