"""Mamba-2 checkpoints (Dao & Gu 2024, "Transformers are SSMs", ICML 2024; transformers' ``Mamba2ForCausalLM``).

Catalogue choices: decoder-only, causal, attention ``mamba2`` in every layer (``models/attention/mamba2.py``),
no position encoding, no FFN (``ffn="none"``: a Mamba-2 block is ``x + Mixer(RMSNorm(x))``), ``pre`` + ``rmsnorm``
with a final norm (``norm_f``), ``layer_norm_epsilon`` -> ``norm_eps`` (the block norms and the mixer's gated
norm alike). ``num_heads`` -> ``ssm_heads`` (and ``n_heads`` when it divides ``hidden_size``, else one head: no
other layer reads it), ``head_dim`` -> ``ssm_head_dim``, ``state_size`` -> ``ssm_state``, ``n_groups`` ->
``ssm_groups``, ``conv_kernel`` -> ``ssm_conv``, ``chunk_size`` -> ``ssm_chunk`` (speed only), ``use_bias`` ->
``attn_bias="all"`` (``in_proj`` and ``out_proj`` biases), ``use_conv_bias=false`` -> a zero convolution bias (the
same function), ``tie_word_embeddings`` -> the head tied to the embedding. Refused by name: ``expand`` with
``hidden_size * expand != num_heads * head_dim``, ``hidden_act`` other than ``silu``, ``rms_norm=false``
(transformers' model always applies the gated norm; mamba_ssm's would not), a ``time_step_limit`` other than
``(0, inf)`` (no clamp). Read and ignored: the initialisation fields (``time_step_min`` / ``max`` / ``floor`` /
``rank``, ``initializer_range``, ``rescale_prenorm_residual``) and ``residual_in_fp32`` (a float32 model's residual
is float32 already). Mamba has no position limit: ``max_len`` is the catalogue's interactive cap, ``MAX_LEN``.
"""

from __future__ import annotations

from .fields import Fields
from .mapping import Rule, Tie, Zeros

MODEL_TYPES = ("mamba2",)
NAMES = {
    "d_model": "hidden_size",
    "n_layers": "num_hidden_layers",
    "vocab_size": "vocab_size",
    "norm_eps": "layer_norm_epsilon",
    "ssm_heads": "num_heads",
    "ssm_head_dim": "head_dim",
    "ssm_state": "state_size",
    "ssm_groups": "n_groups",
    "ssm_conv": "conv_kernel",
    "ssm_chunk": "chunk_size",
}  # catalogue field -> config.json key
SIZES = {"expand": (1, 64, "d_inner / hidden_size")}
MAX_LEN = 16384  # no position table or rotation: the interactive cap of the catalogue's max_len
# Mamba2Config's defaults, for a config.json that leaves a key out
DEFAULTS = dict(num_heads=128, head_dim=64, state_size=128, n_groups=8, expand=2, conv_kernel=4, chunk_size=256)
NO_LIMIT = (0.0, {"__float__": "Infinity"})  # transformers' JSON of (0.0, float("inf"))


def _time_step_limit(f: Fields) -> None:
    value = f.hf.get("time_step_limit")
    if value is None:
        return
    if not isinstance(value, list) or len(value) != 2 or value[0] != 0 or value[1] != NO_LIMIT[1]:
        f.refuse(
            "time_step_limit",
            str(value)[:60],
            "[0.0, Infinity] (transformers writes {'__float__': 'Infinity'}): the step sizes are not clamped",
        )


def config(f: Fields) -> tuple:
    """``(ModelConfig fields, notes)``."""
    d = f.integer("hidden_size", lo=1)
    heads = f.integer("num_heads", DEFAULTS["num_heads"], lo=1)
    p = f.integer("head_dim", DEFAULTS["head_dim"], lo=1)
    expand = f.integer("expand", DEFAULTS["expand"], lo=1, hi=64)
    if d * expand != heads * p:
        f.refuse("expand", expand, f"hidden_size * expand = num_heads * head_dim = {heads * p} (d_inner)")
    act = f.text("hidden_act", "silu")
    if act != "silu":
        f.refuse("hidden_act", act, "'silu' (the convolution's and the gate's activation)")
    if not f.flag("rms_norm", True):
        f.refuse("rms_norm", False, "true: the gated RMSNorm before out_proj (transformers' Mamba2 always applies it)")
    _time_step_limit(f)
    f.flag("residual_in_fp32", True)  # typed, then unused: a float32 residual is float32 already
    tied = f.flag("tie_word_embeddings", False)
    conv_bias = f.flag("use_conv_bias", True)
    n_heads = heads if d % heads == 0 else 1
    fields = dict(
        architecture="decoder_only",
        causal=True,
        attention="mamba2",
        position="none",
        norm_placement="pre",
        norm="rmsnorm",
        ffn="none",
        attn_bias="all" if f.flag("use_bias", False) else "none",
        vocab_size=f.integer("vocab_size", lo=1),
        max_len=MAX_LEN,
        n_layers=f.integer("num_hidden_layers", lo=1),
        d_model=d,
        n_heads=n_heads,
        ssm_heads=None if n_heads == heads else heads,
        ssm_head_dim=p,
        ssm_state=f.integer("state_size", DEFAULTS["state_size"], lo=1),
        ssm_groups=f.integer("n_groups", DEFAULTS["n_groups"], lo=1),
        ssm_conv=f.integer("conv_kernel", DEFAULTS["conv_kernel"], lo=1),
        ssm_chunk=f.integer("chunk_size", DEFAULTS["chunk_size"], lo=1),
        norm_eps=f.number("layer_norm_epsilon", 1e-5),
    )
    notes = [
        f"mamba2: {heads} SSM heads of {p}, state {fields['ssm_state']}, {fields['ssm_groups']} B/C groups, "
        f"convolution of {fields['ssm_conv']}; no FFN, no positions",
        "LM head tied to the token embedding" if tied else "separate LM head (lm_head.weight)",
    ]
    if not conv_bias:
        notes.append("use_conv_bias=false: the convolution's bias is zero")
    return fields, notes


def _tied(f: Fields) -> bool:
    return f.flag("tie_word_embeddings", False)


def canonical(f: Fields, name: str):
    if name == "lm_head.weight" and _tied(f):
        return None  # the tied head is the embedding
    return name.removeprefix("backbone.")


def rules(f: Fields, cfg) -> dict:
    out = {
        "embed.weight": Rule(("embeddings.weight",)),
        "final_norm.weight": Rule(("norm_f.weight",)),
        "head.weight": Tie("embed.weight") if _tied(f) else Rule(("lm_head.weight",)),
    }
    conv_bias = f.flag("use_conv_bias", True)
    for i in range(cfg.n_layers):
        src, dst = f"layers.{i}.", f"stack.blocks.{i}."
        out[dst + "res_attn.norm.weight"] = Rule((src + "norm.weight",))
        out[dst + "attn.out_proj.weight"] = Rule((src + "mixer.out_proj.weight",))
        names = ["in_proj.weight", "conv1d.weight", "dt_bias", "A_log", "D", "norm.weight"]
        if cfg.attn_bias == "all":
            out[dst + "attn.out_proj.bias"] = Rule((src + "mixer.out_proj.bias",))
            names.append("in_proj.bias")
        for name in names:
            out[dst + "attn.core." + name] = Rule((src + "mixer." + name,))
        bias = dst + "attn.core.conv1d.bias"
        out[bias] = Rule((src + "mixer.conv1d.bias",)) if conv_bias else Zeros()
    return out
