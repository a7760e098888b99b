"""The encoder-decoder's experiments: a source and a target instead of one token stream.

An encoder-decoder (Vaswani et al. 2017) is called as ``model(src, tgt)``. The app has one text
box, so the text is split into source and target at a separator the user sees and can change
(``split_text``); the bytes of each side are the token ids, as for the other architectures.

- ``seq2seq_maps``: the decoder's self-attention as the main ``AttentionMaps`` (what the existing
  views read), plus ``stacks["encoder"]`` (source x source, bidirectional) and ``stacks["cross"]``
  (query = target position, key = source position), each a complete ``AttentionMaps``.
- ``seq2seq_gradient_norms``: Xiong et al. 2020's per-layer norms for each stack, with the decoder's
  cross-attention output projection as a third branch; the loss is the target's next-token
  cross-entropy (teacher forcing), the gradient reaching the encoder only through cross-attention.

Pure functions of the config and the text; memoisation is the caller's (``explorer.analysis.experiments``).
"""
from __future__ import annotations

import unicodedata

import numpy as np
import torch
import torch.nn.functional as F

from explorer.analysis.views import compute_views
from explorer.runtime.limits import MAX_TEXT_BYTES
from explorer.runtime.tokens import token_label
from models import ConfigError, ModelConfig
from models.architectures import decoder_config, encoder_config
from models.attention import RULES, pattern_mask

DEFAULT_SEPARATOR = "=>"
MAX_SEPARATOR_CHARS = 16
SEQ2SEQ_AXES = ("both", "source", "target")  # what a latency / memory sweep varies (explorer.analysis.sweep)


def is_seq2seq(cfg: ModelConfig) -> bool:
    """True when the model is called as ``model(src, tgt)``."""
    return getattr(cfg, "architecture", "decoder_only") == "encoder_decoder"


def seq2seq_lengths(L: int, axis: str, fixed_len: int) -> tuple:
    """(source length, target length) of sweep length ``L`` on an encoder-decoder."""
    return {"both": (L, L), "source": (L, fixed_len), "target": (fixed_len, L)}[axis]


def check_separator(separator) -> str:
    """The separator as given (never stripped: spaces may be part of it), or a ``ConfigError``.

    Refused: anything but a string, the empty string, more than ``MAX_SEPARATOR_CHARS`` characters,
    and control or format characters (a newline, a NUL, a right-to-left override): the box is one
    line, and an invisible separator could not be seen where it splits. The echoed value is cut."""
    if separator is None:
        return DEFAULT_SEPARATOR
    bad = (not isinstance(separator, str) or not separator or len(separator) > MAX_SEPARATOR_CHARS
           or any(unicodedata.category(ch).startswith("C") for ch in separator))
    if bad:
        shown = separator[:MAX_SEPARATOR_CHARS] + "…" if isinstance(separator, str) and \
            len(separator) > MAX_SEPARATOR_CHARS else separator
        raise ConfigError("separator", shown,
                          f"a non-empty string of at most {MAX_SEPARATOR_CHARS} visible characters (no control "
                          "characters) that occurs in the text between the source and the target")
    return separator


def split_text(text: str, separator: str = DEFAULT_SEPARATOR, max_bytes: int = MAX_TEXT_BYTES) -> tuple:
    """``"source<sep>target"`` -> (source ids, target ids, truncated?) at the first separator.

    Each side is cut to ``max_bytes // 2`` bytes so the pair fits the same budget as one text."""
    separator = check_separator(separator)
    text = str(text)
    if separator not in text:
        raise ConfigError("separator", separator,
                          f"a separator present in the text: write the source, then {separator!r}, then the target")
    src, tgt = text.split(separator, 1)
    half = max(1, int(max_bytes) // 2)
    s, t = src.encode("utf-8"), tgt.encode("utf-8")
    if not s or not t:
        side = "source (before" if not s else "target (after"
        raise ConfigError("text", text, f"a non-empty {side} {separator!r})")
    return list(s[:half]), list(t[:half]), len(s) > half or len(t) > half


def _pattern(cfg: ModelConfig, lq: int, L: int):
    """The stack's section-1 pattern (L x L) when it has one and the maps are unsegmented."""
    if cfg.attention in RULES and lq == L:
        return pattern_mask(cfg, L).cpu().numpy(), "pattern"
    return None, "support"


def seq2seq_maps(cfg: ModelConfig, model, src_ids, tgt_ids, truncated: bool, dev, maps_of):
    """Forward ``model(src, tgt, return_attention=True)`` -> the decoder's ``AttentionMaps`` with
    ``stacks = {"encoder": ..., "cross": ...}``.

    ``maps_of(attentions, stack_cfg, q_labels, k_labels, pattern)`` builds one ``AttentionMaps``
    (``explorer.analysis.experiments``); ``pattern`` is ``(mask, kind)`` or ``(None, "support")``."""

    src = torch.tensor([list(src_ids)], device=dev)  # (1, Ls)
    tgt = torch.tensor([list(tgt_ids)], device=dev)  # (1, Lt)
    with torch.no_grad():
        out = model(src, tgt, return_attention=True)
    s_lab = [token_label(b) for b in src_ids]
    t_lab = [token_label(b) for b in tgt_ids]
    enc_cfg, dec_cfg = encoder_config(cfg), decoder_config(cfg)
    Ls, Lt = len(src_ids), len(tgt_ids)

    def pattern(stack_cfg, atts, L):
        lq = max((a.shape[-2] for a in atts if isinstance(a, torch.Tensor)), default=L)
        return _pattern(stack_cfg, lq, L)

    encoder = maps_of(out.encoder_attentions or [], enc_cfg, s_lab, s_lab,
                      pattern(enc_cfg, out.encoder_attentions or [], Ls), truncated)
    cross = maps_of(out.cross_attentions or [], dec_cfg, t_lab, s_lab,
                    (np.ones((Lt, Ls), bool), "full"), truncated)  # full softmax over the source
    decoder = maps_of(out.attentions or [], dec_cfg, t_lab, t_lab,
                      pattern(dec_cfg, out.attentions or [], Lt), truncated)
    decoder.stacks = {"encoder": encoder, "cross": cross}
    # the variant views (explorer.analysis.views) of the decoder's layers: what the single-stack app shows
    decoder.views = compute_views(dec_cfg, [i for i in out.layers if getattr(i, "stack", None) == "decoder"], t_lab)
    decoder.notes = decoder.notes + [f"encoder-decoder: the text split into a source of {Ls} and a target of {Lt} "
                                     "tokens; the main maps are the decoder's self-attention"]
    return decoder


def stack_sizes(model) -> dict:
    """Layers and parameters of each stack (positions and final norm included; the shared token
    embedding and the head in neither), and the decoder's cross-attention parameters."""
    def count(*mods):
        return int(sum(p.numel() for m in mods for p in m.parameters()))
    return {"encoder_layers": len(model.encoder.blocks), "decoder_layers": len(model.decoder.blocks),
            "encoder_params": count(model.enc_position, model.encoder, model.enc_norm),
            "decoder_params": count(model.dec_position, model.decoder, model.dec_norm),
            "cross_params": count(*(b.cross for b in model.decoder.blocks))}


# ---------------------------------------------------------------------------- gradient norms
def seq2seq_batch(cfg: ModelConfig, seq_len: int, batch: int, seed: int) -> tuple:
    """Seeded random (source, target) token batches, both ``(batch, seq_len)``."""
    gen = torch.Generator().manual_seed(int(seed))
    src = torch.randint(0, cfg.vocab_size, (int(batch), int(seq_len)), generator=gen)
    tgt = torch.randint(0, cfg.vocab_size, (int(batch), int(seq_len)), generator=gen)
    return src, tgt


def _fro(t) -> float | None:
    return None if t is None else float(t.detach().double().pow(2).sum().sqrt().cpu())


def seq2seq_gradient_norms(model, src: torch.Tensor, tgt: torch.Tensor) -> dict:
    """One forward of ``model(src, tgt)`` and one ``torch.autograd.grad`` of the target's
    next-token loss (no ``.grad`` written). Per layer, in the order encoder then decoder:
    ``stack``, ``attn_out`` (self-attention output projection), ``cross_out`` (decoder only, None
    for the encoder), ``ffn_out`` (FFN output parameters) and ``residual`` (loss w.r.t. the layer's
    input hidden states). The encoder-decoder takes only the standard layer structure, so each
    layer owns its modules (no shared-weight applications to separate)."""
    enc_blocks = list(model.encoder.blocks)
    dec_blocks = list(model.decoder.blocks)
    out = model(src, tgt)
    logits = out.logits  # (B, Lt, vocab)
    loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), tgt[:, 1:].reshape(-1))
    blocks = enc_blocks + dec_blocks
    attn = [b.attn.out_proj.weight for b in blocks]
    cross = [b.cross.out_proj.weight for b in dec_blocks]
    ffn = [list(b.ffn.output_parameters()) if b.ffn is not None else [] for b in blocks]
    hidden = [info.input for info in out.layers]
    flat_ffn = [p for g in ffn for p in g]
    targets = attn + cross + flat_ffn + hidden
    live = [k for k, t in enumerate(targets) if t.requires_grad]
    got = torch.autograd.grad(loss, [targets[k] for k in live], allow_unused=True)
    grads = [None] * len(targets)
    for k, g in zip(live, got):
        grads[k] = g
    na, nc, nf = len(attn), len(cross), len(flat_ffn)
    g_attn, g_cross = grads[:na], grads[na:na + nc]
    g_ffn, g_hidden = grads[na + nc:na + nc + nf], grads[na + nc + nf:]
    ffn_norms, k = [], 0
    for group in ffn:
        gs = [g for g in g_ffn[k:k + len(group)] if g is not None]
        k += len(group)
        ffn_norms.append(float(sum(_fro(g) ** 2 for g in gs) ** 0.5) if group else None)
    n_enc = len(enc_blocks)
    return {
        "layer": list(range(len(blocks))),
        "stack": ["encoder"] * n_enc + ["decoder"] * len(dec_blocks),
        "stack_layer": list(range(n_enc)) + list(range(len(dec_blocks))),
        "attn_out": [_fro(g) if g is not None else 0.0 for g in g_attn],
        "cross_out": [None] * n_enc + [_fro(g) if g is not None else 0.0 for g in g_cross],
        "ffn_out": ffn_norms if any(g for g in ffn) else [],
        "residual": [_fro(g) for g in g_hidden],
        "loss": loss.item(),
        "notes": ["encoder-decoder: loss = next-token cross-entropy of the target given the source "
                  "(teacher forcing); the encoder's gradients arrive only through cross-attention"],
    }
