"""Direct logit attribution: how much each head and each FFN writes toward one token's logit at one position.

With the pre-LN (or no-norm) placement the stream the final norm reads at position ``p`` is a plain sum,
``x = e + r + sum_l (sum_h o_lh + b_l + f_l)``: token embedding ``e``, position embedding ``r`` (zero for
encodings that act on queries and keys: RoPE, ALiBi, ...), each head's write ``o_lh = z_lh W_O^h``, each
attention output bias ``b_l`` and each FFN output ``f_l``. The logit of token ``t`` is
``u_t . norm(x) + c_t`` with ``u_t`` the head's row and ``c_t`` its bias (none in the LM head). The norm is
linear in ``x`` once its scale is frozen at its value on this forward pass, ``s = sqrt(var(x) + eps)``
(LayerNorm, which also subtracts the mean over features, a linear map) or ``sqrt(mean(x^2) + eps)``
(RMSNorm). Each component ``c`` then contributes

    LayerNorm:  (gamma * u_t) . (c - mean(c)) / s        RMSNorm:  (gamma * u_t) . c / s

and the norm's bias adds ``beta . u_t``. These terms add up to the logit (to float rounding): the scale is
the one thing held fixed, so a component's number says what it writes given the others, not what the logit
would be without it (that is ablation's question, ``explorer.analysis.why.patching``).

Post-LN normalises after every sublayer, so no sum of per-component terms equals the logit there; sandwich
normalises each sublayer's output and ReZero scales it, which the decomposition does not model: those
placements are refused by ``ConfigError`` naming ``norm_placement``.

An ``encoder_decoder`` is decomposed on its decoder (ids: a ``Seq2SeqIds``, ``explorer.analysis.why.seq2seq_ids``):
its stream is ``e + r + sum_l (sum_h o_lh + b_l + sum_h c_lh + b'_l + f_l)`` with each decoder layer's
self-attention heads ``o_lh`` and cross-attention heads ``c_lh = z_lh W_O^h`` (bias ``b'_l``), read through the
decoder's final norm. The encoder has no term of its own: everything it computes reaches the decoder's stream
only through the cross-attention heads' writes, so an encoder head's share of a logit is inside the cross
heads' terms (ablate or patch the encoder head to measure its effect).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from explorer.analysis.why.lens import cached_run
from explorer.analysis.why.seq2seq_ids import Ids, decoder_ids, head_layers
from explorer.runtime.tokens import token_label
from models import ConfigError
from models.interventions import check_head_layout

PLACEMENTS = ("pre", "none")
NORMS = ("layernorm", "rmsnorm")


ARCHITECTURES = ("decoder_only", "encoder_decoder")


def check(cfg) -> None:
    check_head_layout(cfg)  # the (layer, head) grid: one head layout (a mixer's own head count must match)
    if cfg.architecture not in ARCHITECTURES:
        raise ConfigError(
            "architecture",
            cfg.architecture,
            f"one of {list(ARCHITECTURES)} for direct logit attribution (the masked-LM head is not linear)",
        )
    if cfg.norm_placement not in PLACEMENTS:
        raise ConfigError(
            "norm_placement",
            cfg.norm_placement,
            f"one of {list(PLACEMENTS)} for direct logit "
            "attribution (a linear decomposition of the logit holds only there)",
        )
    if cfg.norm_placement == "pre" and cfg.norm not in NORMS:
        raise ConfigError("norm", cfg.norm, f"one of {list(NORMS)} for direct logit attribution")


@dataclass(frozen=True)
class Attribution:
    position: int
    token: int  # the token to predict (the actual next token unless chosen)
    alternative: int | None
    heads: torch.Tensor  # (n_layers, n_heads) contribution of each head to logit[token] (- logit[alternative])
    ffn: torch.Tensor  # (n_layers,)
    embedding: float  # token embedding's term
    position_term: float  # position embedding's term (0 for RoPE / ALiBi / none)
    biases: float  # attention output biases + the final norm's bias + the head's bias
    logit: float  # the model's own logit (or logit difference)
    scale: float  # the final norm's scale s, frozen at its forward value (1 without a norm)
    cross: torch.Tensor | None = None  # (n_layers, n_heads) an encoder-decoder's cross-attention heads

    @property
    def total(self) -> float:
        cross = 0.0 if self.cross is None else float(self.cross.sum())
        return float(self.heads.sum() + self.ffn.sum()) + cross + self.embedding + self.position_term + self.biases

    def to_json(self, label=None) -> dict:
        label = label or token_label
        return {
            "position": self.position,
            "token": label(self.token),
            "token_id": self.token,
            "alternative": None if self.alternative is None else label(self.alternative),
            "alternative_id": self.alternative,
            "heads": self.heads.tolist(),
            "ffn": self.ffn.tolist(),
            "embedding": self.embedding,
            "position_embedding": self.position_term,
            "biases": self.biases,
            "total": self.total,
            "logit": self.logit,
            "final_norm_scale": self.scale,
            "measure": "logit difference" if self.alternative is not None else "logit",
            "note": "final norm's scale frozen at its value on this forward pass",
            **(
                {}
                if self.cross is None
                else {
                    "cross": self.cross.tolist(),
                    "note": "decoder heads: self-attention (heads) and cross-attention (cross); the encoder "
                    "reaches the logit only through the cross-attention heads; the decoder's final "
                    "norm's scale frozen at its value on this forward pass",
                }
            ),
        }


def attribute(model, ids: Ids, position: int, token: int | None = None, alternative: int | None = None) -> Attribution:
    """Each head's and FFN's direct contribution to the logit of ``token`` (default: the actual next token)
    at ``position`` of ``ids (1, L)`` (an encoder-decoder: of its decoder's input), minus the same for
    ``alternative`` when given."""
    cfg = model.cfg
    check(cfg)
    run_ids, ids = ids, decoder_ids(ids)
    L = ids.shape[1]
    if not isinstance(position, int) or not 0 <= position < L:
        raise ConfigError("position", position, f"an integer in 0..{L - 1}")
    if token is None:
        if position == L - 1:
            raise ConfigError("token", None, "a token id: the last position has no next token in the text")
        token = int(ids[0, position + 1])
    for name, t in (("token", token), ("alternative", alternative)):
        if t is not None and (not isinstance(t, int) or not 0 <= t < cfg.vocab_size):
            raise ConfigError(name, t, f"a token id in 0..{cfg.vocab_size - 1}")
    out = cached_run(model, run_ids)
    layers = head_layers(out)
    seq2seq = cfg.architecture == "encoder_decoder"
    final_norm, embed_norm, blocks = (
        (model.dec_norm, model.dec_embed_norm, model.decoder.blocks)
        if seq2seq
        else (model.final_norm, model.embed_norm, model.stack.blocks)
    )
    u = model.head.weight[token].detach().double()  # (d,)
    if alternative is not None:
        u = u - model.head.weight[alternative].detach().double()
    read, bias_term, scale = _reader(final_norm, cfg.norm, layers[-1].output[0, position].double(), u)

    x0 = layers[0].input[0, position].double()
    tok = model.embed.weight[ids[0, position]].detach().double()
    if isinstance(embed_norm, torch.nn.Identity):
        embedding, position_term = read(tok), read(x0 - tok)
    else:  # a norm of the summed embeddings (BERT): one term for token + position
        embedding, position_term = read(x0), 0.0
    heads = torch.stack([read(info.head_outputs[0, :, position].double()) for info in layers])
    # a block without an FFN (``ffn="none"``: Mamba-2's blocks are the mixer alone) writes nothing there: 0
    zero = torch.zeros((), dtype=torch.float64)
    ffn = torch.stack([zero if i.ffn_output is None else read(i.ffn_output[0, position].double()) for i in layers])
    cross = (
        torch.stack([read(info.cross_head_outputs[0, :, position].double()) for info in layers]) if seq2seq else None
    )
    biases = bias_term
    for block in blocks:
        for proj in (block.attn.out_proj, *((block.cross.out_proj,) if seq2seq else ())):
            if proj.bias is not None:
                biases = biases + float(read(proj.bias.detach().double()))
    logits = out.logits[0, position].double()
    logit = logits[token] - (logits[alternative] if alternative is not None else 0.0)
    return Attribution(
        position,
        token,
        alternative,
        heads.float(),
        ffn.float(),
        float(embedding),
        float(position_term),
        float(biases),
        float(logit),
        scale,
        None if cross is None else cross.float(),
    )


def _reader(norm, kind: str, x: torch.Tensor, u: torch.Tensor):
    """``(read, constant, scale)``: ``read(c)`` is component ``c``'s term of ``u . norm(x)`` with the norm's
    scale frozen at ``x``'s; ``constant`` the norm's bias term (``kind``: the config's ``norm``)."""
    if isinstance(norm, torch.nn.Identity):
        return (lambda c: c @ u), 0.0, 1.0
    g = norm.weight.detach().double() * u
    if kind == "layernorm":
        s = float(torch.sqrt(x.var(unbiased=False) + norm.eps))
        return (lambda c: ((c - c.mean(-1, keepdim=True)) @ g) / s), float(norm.bias.detach().double() @ u), s
    s = float(torch.sqrt((x * x).mean() + norm.eps))
    return (lambda c: (c @ g) / s), 0.0, s
