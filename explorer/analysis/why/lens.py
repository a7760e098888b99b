"""Per-layer predictions (the logit lens, nostalgebraist 2020): what the model would predict if it stopped
after each layer.

For each position, the residual stream after the embedding and after each block goes through the model's
own classifier (final norm + LM head, ``model.classify``): top-k tokens, the probability and rank of the
target, and the loss per layer. The target is the next token for a causal model (``decoder_only``) and the
token itself for a bidirectional one (``encoder_only``: what the masked-LM head reads back out of an unmasked
input). The last row is the classifier applied to the stack's output: the model's own logits, bit for bit.

An ``encoder_decoder`` is read on its decoder: the ids are a ``Seq2SeqIds`` (``explorer.analysis.why.seq2seq_ids``:
the source, and the decoder's input START + target), the rows are the decoder's stream after its embedding and
after each decoder layer, through the decoder's final norm and the LM head, and the target of a position is
the next token of the decoder's input (teacher forcing, as the model is trained). The encoder's layers have
no row: the head never reads the encoder's stream, only what the cross-attention heads bring of it.

"The residual stream" is what one block hands the next (``LayerInfo.output``, cached by the
``models.interventions`` record). With pre-LN, sandwich, ReZero or no norm that is the un-normalised sum of
the embedding and the sublayers' writes, and the final norm normalises it as it would the last one; with
post-LN each block's output is already normalised (its second norm's output) and the model has no final
norm, so the head reads it directly.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from explorer.analysis.why.seq2seq_ids import Ids, Seq2SeqIds, call, decoder_ids, head_layers
from explorer.runtime.tokens import token_label
from models.interventions import Interventions, check_model

TOP_K = 5


def cached_run(model, ids: Ids):
    """``model(ids)`` with every block's activations cached (``ModelOutput``; ``layers[i]`` holds them; an
    encoder-decoder's encoder layers come first, each ``LayerInfo.stack`` says which)."""
    check_model(model.cfg)
    with torch.no_grad():
        return call(model, ids, interventions=Interventions(cache=True))


def streams(out) -> list:
    """The residual stream the head reads after the embedding and after each block (an encoder-decoder: its
    decoder's): ``n_layers + 1`` tensors ``(B, L, d)``."""
    layers = head_layers(out)
    return [layers[0].input] + [info.output for info in layers]


def stream_meaning(cfg) -> str:
    who = "each decoder block's" if cfg.architecture == "encoder_decoder" else "each block's"
    if cfg.norm_placement == "post":
        return f"{who} output (post-LN: already normalised by the block's second norm; no final norm)"
    return (
        f"{who} output, the un-normalised residual sum ({cfg.norm_placement} placement), "
        "read through the final norm and the head"
    )


def targets(cfg, ids: Ids) -> tuple:
    """``(positions, target ids)`` scored: next tokens for a causal model (an encoder-decoder's: of the
    decoder's input), the tokens themselves otherwise."""
    ids = decoder_ids(ids)
    L = ids.shape[1]
    if cfg.architecture in ("decoder_only", "encoder_decoder"):
        return torch.arange(L - 1), ids[0, 1:]
    return torch.arange(L), ids[0]


@dataclass(frozen=True)
class LogitLens:
    rows: tuple  # "embedding", "layer 0", ..., "layer n-1"
    tokens: tuple  # (L,) the input ids
    positions: tuple  # scored positions (the target of position i is target_ids[i])
    target_ids: tuple
    top_ids: torch.Tensor  # (R, L, k)
    top_probs: torch.Tensor  # (R, L, k)
    target_prob: torch.Tensor  # (R, P) probability of the target at each scored position
    target_rank: torch.Tensor  # (R, P) long: 0 = the top prediction
    loss: torch.Tensor  # (R,) mean -log p(target) over the scored positions, nats per token
    stream: str  # what "the residual stream" is for this model
    source: tuple = ()  # an encoder-decoder's source ids (the tokens are the decoder's input)

    def to_json(self, label=None) -> dict:
        """Plain lists (the API's shape); ``label(id) -> str`` names tokens (bytes by default)."""
        label = label or token_label
        extra = (
            {"source_tokens": [label(t) for t in self.source], "source_ids": list(self.source)} if self.source else {}
        )
        return {
            "rows": list(self.rows),
            "stream": self.stream,
            **extra,
            "tokens": [label(t) for t in self.tokens],
            "token_ids": list(self.tokens),
            "positions": list(self.positions),
            "targets": [label(t) for t in self.target_ids],
            "top_tokens": [[[label(int(t)) for t in pos] for pos in row] for row in self.top_ids],
            "top_ids": self.top_ids.tolist(),
            "top_probs": _rounded(self.top_probs),
            "target_prob": _rounded(self.target_prob),
            "target_rank": self.target_rank.tolist(),
            "loss_per_layer": _rounded(self.loss),
            "unit": "nats per token",
        }


def logit_lens(model, ids: Ids, k: int = TOP_K) -> LogitLens:
    """The logit lens of ``model`` on ``ids (1, L)`` (an encoder-decoder: a ``Seq2SeqIds``; see the module
    docstring)."""
    cfg = model.cfg
    out = cached_run(model, ids)
    pos, tgt = targets(cfg, ids)
    lps, ranks, top_ids, top_lp = [], [], [], []
    for x in streams(out):  # one row at a time: (L, V) logits, never (R, L, V) (a checkpoint's V is large)
        with torch.no_grad():
            logp = torch.log_softmax(model.classify(x)[0].float(), dim=-1)  # (L, V)
        lp = logp[pos, tgt]  # (P,)
        lps.append(lp)
        ranks.append((logp[pos] > lp.unsqueeze(-1)).sum(-1))  # tokens strictly more likely than the target
        top = logp.topk(min(k, logp.shape[-1]), dim=-1)
        top_ids.append(top.indices), top_lp.append(top.values)
    lp = torch.stack(lps)
    rows = ("embedding",) + tuple(f"layer {i}" for i in range(len(head_layers(out))))
    source = tuple(ids.source[0].tolist()) if isinstance(ids, Seq2SeqIds) else ()
    return LogitLens(
        rows,
        tuple(decoder_ids(ids)[0].tolist()),
        tuple(pos.tolist()),
        tuple(tgt.tolist()),
        torch.stack(top_ids),
        torch.stack(top_lp).exp(),
        lp.exp(),
        torch.stack(ranks),
        -lp.mean(-1),
        stream_meaning(cfg),
        source,
    )


def _rounded(t: torch.Tensor, digits: int = 5):
    return torch.round(t.float(), decimals=digits).tolist()
