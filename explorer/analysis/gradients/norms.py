"""Per-layer gradient norms (Xiong et al. 2020) of any model the catalogue builds.

Xiong et al. compare, per layer, the gradient of the attention output projection, of the FFN output
projection, and of the loss with respect to the layer's input hidden states. ``gradient_norms(cfg)``
measures them with one backward of the next-token loss on a seeded random batch (one sequence per
input of the config's arrangement: the tokens, or a source and a target, where the loss is the
target's and the encoder's gradients arrive only through cross-attention), at initialisation or with
a session's trained weights; ``placement_results(cfg)`` does it under every norm placement.
``drawn_gradients(cfg, text, weights)`` is the one path of the page's Gradients tab, ``/gradients`` and
the export: a pretrained checkpoint's norms of its next-token loss on the visitor's text (its own
placement only: another needs other weights), any other weights' on the seeded batch under every
placement (the weights for the placement they belong to, the others at initialisation).

``branch_gradient_norms`` finds the branches by walking ``model.named_modules()``: every
``models.blocks.Attention`` (its ``out_proj``; of a parallel_hybrid layer the attention, not the mixer beside
it), every cross-attention sublayer, and every outermost
module with ``output_parameters()`` (the FFNs), in order; a model of several stacks reports each
layer's stack too. When there is one module per layer, its parameter gradient is that layer's. When
one module is applied several times (a shared-weight Universal Transformer), the per-application
gradient of a linear map ``y = x W^T`` is ``g^T x`` summed over tokens, computed from the call's
input ``x`` and the gradient ``g`` of its output, captured with forward hooks; the parameter gradient
is the sum of these. Anything else is reported per module, with a note.

The residual gradient (loss w.r.t. a layer's input hidden states) is taken on the tensors the
layers actually received. A memory model runs its input in segments, one pass of the stack per
segment, and reports each layer's input as the concatenation of the segments' inputs, which is
not on the loss path; so the gradient is taken with respect to every segment's own input (kept in
``LayerInfo.segments``) and a layer's norm is the norm over the whole sequence,
``sqrt(sum_s ||dloss/dx_s||^2)``. Memories are detached, so no gradient crosses segments and
this is exactly the norm of the gradient with respect to the full-sequence hidden states. The
reversible stack recomputes its layer inputs inside a custom ``autograd.Function`` (that is how
it saves memory), so no tensor holding them is on the autograd graph: reported as None, noted.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from explorer.analysis.common.memo import Request, fetch, memo, weights_key
from explorer.analysis.weights.trained import TrainedWeights, applicable, checked_for
from explorer.runtime import budget
from explorer.runtime.configs import as_config
from explorer.runtime.device import device, gpu
from explorer.runtime.text import default_text, model_input
from models import ConfigError, ModelConfig, build_model, registries
from models.architectures import arrangement, stack_depth
from models.blocks import Attention
from models.encdec import CrossAttention


# ---------------------------------------------------------------------------- the use case
def input_batch(cfg, seq_len: int = 64, batch: int = 8, seed: int = 0) -> tuple:
    """Seeded random token batches ``(batch, seq_len)``, one per input of ``cfg``'s arrangement, drawn
    in call order from one generator (``(tokens,)``, or ``(source, target)``)."""
    gen = torch.Generator().manual_seed(int(seed))
    return tuple(
        torch.randint(0, cfg.vocab_size, (int(batch), int(seq_len)), generator=gen) for _ in arrangement(cfg).inputs
    )


def next_token_loss(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of predicting token ``t + 1`` from position ``t``."""
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))


def gradient_norms(
    cfg, seq_len: int = 64, batch: int = 8, seed: int = 0, weights: TrainedWeights | None = None
) -> dict:
    """Per-layer gradient norms of one backward of the next-token loss, at initialisation or of the
    trained ``weights`` of this config (an argument, never read from a context: None is the initial weights).

    Returns ``{"layer": [0..], "attn_out": [...], "ffn_out": [...] (empty when ffn="none"),
    "residual": [...], "loss": float, "norm_placement": str, "notes": [...]}``, plus ``stack``,
    ``stack_layer`` and ``cross_out`` for a model of several stacks. The auxiliary losses of variants
    (MoE balance, ...) are not part of the loss: the quantities are those of the language-modelling
    objective, as in Xiong et al. 2020.
    """
    req = gradients_request(cfg, seq_len, batch, seed, weights)
    result = memo(req.key, lambda: req.compute(), need=req.need)  # on the caller's side: a hit costs no GPU call
    return json.loads(json.dumps(result))  # a fresh copy: callers may modify it


def text_gradient_norms(cfg, tokens, weights: TrainedWeights | None = None) -> dict:
    """``gradient_norms`` on one given sequence (a pretrained checkpoint's tokens of the visitor's text:
    its language-modelling loss on that text) instead of random batches."""
    tokens = tuple(int(t) for t in tokens)
    req = gradients_request(cfg, len(tokens), 1, 0, weights, tokens=tokens)
    return json.loads(json.dumps(memo(req.key, lambda: req.compute(), need=req.need)))


def gradients_request(
    cfg,
    seq_len: int = 64,
    batch: int = 8,
    seed: int = 0,
    weights: TrainedWeights | None = None,
    tokens: tuple | None = None,
) -> Request:
    """What ``gradient_norms`` computes, checked and keyed on the caller's side (no model runs);
    ``tokens``: one given sequence (batch 1, a decoder's) instead of seeded random batches."""
    cfg = as_config(cfg)
    if int(seq_len) < 2 or int(batch) < 1:
        raise ConfigError("seq_len", seq_len, "seq_len >= 2 and batch >= 1 (next-token loss)")
    if tokens is not None and (len(arrangement(cfg).inputs) != 1 or any(not 0 <= t < cfg.vocab_size for t in tokens)):
        raise ConfigError(
            "tokens", len(tokens), f"one sequence of ids below vocab_size={cfg.vocab_size} for a single-stack model"
        )
    w = checked_for(cfg, weights)
    need = budget.check(cfg, "gradients", int(seq_len), int(batch))
    key = ("gradients", cfg, int(seq_len), int(batch), int(seed), weights_key(w), tokens)
    return Request(key, need, compute_gradients, (cfg, int(seq_len), int(batch), int(seed), w, tokens))


@gpu(duration=60)
def compute_gradients(cfg: ModelConfig, seq_len: int, batch: int, seed: int, weights, tokens=None) -> dict:
    """The GPU call of ``gradient_norms``: one forward and backward (picklable in and out)."""
    return _measure(cfg, seq_len, batch, seed, weights, tokens)


def _measure(cfg, seq_len: int, batch: int, seed: int, weights, tokens=None) -> dict:
    if weights is not None and weights.shared:  # a checkpoint's read-only tensors: the backward only reads them
        model = weights.eval_model(cfg)
    else:
        model = build_model(cfg)  # a fresh model: gradients never touch the shared one
        if weights is not None:
            weights.load_into(model)
    model = model.to(device()).train()
    model.random.reseed(seed)  # dropout (if any) is seeded too, from the model's own source
    batches = input_batch(cfg, seq_len, batch, seed) if tokens is None else (torch.tensor([list(tokens)]),)
    inputs = tuple(t.to(device()) for t in batches)
    result = branch_gradient_norms(model, inputs, lambda logits, *args: next_token_loss(logits, args[-1]))
    result["norm_placement"] = cfg.norm_placement
    return result


def placement_results(cfg, weights: TrainedWeights | None = None) -> tuple:
    """Gradient norms of ``cfg`` under every registered norm placement -> (results, skipped);
    ``weights`` (trained for one of these configs) are used for that one, the others at initialisation.
    The placements not memoised yet are computed in one GPU call (``explorer.analysis.common.memo.fetch``)."""
    requests, skipped = {}, {}
    for placement in registries()["norm_placement"]:
        try:
            other = cfg.replace(norm_placement=placement)
            requests[placement] = gradients_request(other, weights=applicable(weights, other))
        except ConfigError as exc:
            skipped[placement] = str(exc)
    got = fetch(list(requests.values()))
    return {p: json.loads(json.dumps(r)) for p, r in zip(requests, got)}, skipped


CHECKPOINT_GRADIENT_TOKENS = 128  # a pretrained model's backward on a CPU: 128 tokens of the text


@dataclass(frozen=True)
class DrawnGradients:
    """The gradient norms a page, an API call and an export show for one config and weights."""

    results: dict  # norm placement -> ``gradient_norms``' result
    skipped: dict  # placement(s) -> why not measured
    tokens: int  # the sequence the norms were measured on (a checkpoint: its text's tokens)
    on_text: bool = False  # a checkpoint's loss on the visitor's text (else the seeded batch)
    notes: tuple = field(default=())


def drawn_gradients(
    cfg, text: str | None = None, weights: TrainedWeights | None = None, every_placement: bool = True
) -> DrawnGradients:
    """The gradient norms of ``cfg`` drawn with ``weights`` (the record drawn for ``cfg``, checked once by
    the caller: ``explorer.analysis.source.drawn_for``; None: the initial weights; see the module docstring).
    ``every_placement=False``: the config's own placement only (the API). ``text``: the visitor's text (None or "": the
    config's example text)."""
    cfg = as_config(cfg)
    w = weights
    if w is not None and w.checkpoint:
        return _checkpoint_gradients(cfg, text or default_text(cfg), w)
    seq = 64  # gradient_norms' seeded batch
    if not every_placement:
        return DrawnGradients({cfg.norm_placement: gradient_norms(cfg, weights=w)}, {}, seq)
    results, skipped = placement_results(cfg, w)
    return DrawnGradients(results, skipped, seq)


def _checkpoint_gradients(cfg, text: str, weights: TrainedWeights) -> DrawnGradients:
    ids = (
        model_input(cfg, text, max_bytes=CHECKPOINT_GRADIENT_TOKENS, tokenizer=weights.tokenizer).ids("tokens")
        if len(arrangement(cfg).inputs) == 1
        else ()
    )
    why = "a pretrained checkpoint is drawn with its own norm placement (another one needs other weights)"
    others = [p for p in registries()["norm_placement"] if p != cfg.norm_placement]
    skipped = {", ".join(others): why}
    if len(ids) < 2:
        note = "an encoder-decoder's" if ids == () else "a text of one token's"
        return DrawnGradients(
            {},
            {cfg.norm_placement: f"no next-token loss on {note} checkpoint text", **skipped},
            max(1, len(ids)),
            on_text=True,
        )
    return DrawnGradients({cfg.norm_placement: text_gradient_norms(cfg, ids, weights)}, skipped, len(ids), on_text=True)


# ---------------------------------------------------------------------------- the branches


def outermost(model: nn.Module, pred) -> list:
    """Modules satisfying ``pred`` that are not inside another such module, in definition order."""
    kept, names = [], []
    for name, mod in model.named_modules():
        if pred(mod) and not any(name.startswith(k + ".") for k in names):
            kept.append(mod)
            names.append(name)
    return kept


def _is_ffn(mod) -> bool:
    return callable(getattr(mod, "output_parameters", None))


def _owner_linears(model: nn.Module, params: list) -> list:
    """The ``nn.Linear`` whose weight is each parameter, or None when a parameter has none."""
    by_id = {id(m.weight): m for m in model.modules() if isinstance(m, nn.Linear)}
    return [by_id.get(id(p)) for p in params]


class _CallRecorder:
    """Forward hooks that keep each call's input and output of the given linear layers."""

    def __init__(self, linears: list):
        self.calls = {id(m): [] for m in linears}
        self.handles = [m.register_forward_hook(self._hook) for m in linears]

    def _hook(self, mod, args, out):
        self.calls[id(mod)].append((args[0], out))

    def remove(self):
        for h in self.handles:
            h.remove()


def _fro(tensors) -> float:
    """Frobenius norm of the concatenation; a missing gradient (unused tensor) counts as 0."""
    total = torch.zeros((), dtype=torch.float64)
    for t in tensors:
        if t is not None:
            total = total + (t.detach().double() ** 2).sum().cpu()
    return float(total.sqrt())


def branch_gradient_norms(model: nn.Module, inputs, loss_fn) -> dict:
    """One forward of ``model(*inputs)`` and one ``torch.autograd.grad`` of ``loss_fn(logits, *inputs)``
    (no ``.grad`` is written); see the module docstring. ``inputs``: a tensor or a tuple of them."""
    inputs = (inputs,) if isinstance(inputs, torch.Tensor) else tuple(inputs)
    cfg = model.cfg
    stacks = arrangement(cfg).stacks
    n_layers = sum(stack_depth(cfg, s) for s in stacks)  # applied layers of every stack
    attn_mods = outermost(model, lambda m: isinstance(m, Attention) and not m.parallel_mixer)  # a layer's attention
    cross_mods = outermost(model, lambda m: isinstance(m, CrossAttention))
    ffn_mods = outermost(model, _is_ffn)
    attn_params = [m.out_proj.weight for m in attn_mods]
    cross_params = [m.out_proj.weight for m in cross_mods]
    ffn_groups = [list(m.output_parameters()) for m in ffn_mods]
    shared = 0 < len(attn_mods) < n_layers
    recorder = None
    if shared:  # per-application gradients need each call's input and output
        linears = [m.out_proj for m in attn_mods]
        ffn_lin = [lin for g in ffn_groups for lin in _owner_linears(model, g)]
        if all(lin is not None for lin in ffn_lin):
            linears += ffn_lin
        recorder = _CallRecorder(linears)
    try:
        out = model(*inputs)
    finally:
        if recorder is not None:
            recorder.remove()
    loss = loss_fn(out.logits, *inputs)
    seg_inputs = [[p.input for p in info.parts()] for info in out.layers]
    hidden = [x for parts in seg_inputs for x in parts]
    flat_ffn = [p for g in ffn_groups for p in g]
    call_outs = []
    if recorder is not None:
        call_outs = [o for calls in recorder.calls.values() for _, o in calls]
    targets = attn_params + cross_params + flat_ffn + hidden + call_outs
    live = [k for k, t in enumerate(targets) if t.requires_grad]  # e.g. reversible layers detach inputs
    got = torch.autograd.grad(loss, [targets[k] for k in live], allow_unused=True)
    grads = [None] * len(targets)
    for k, g in zip(live, got):
        grads[k] = g
    n_a, n_c, n_f, n_h = len(attn_params), len(cross_params), len(flat_ffn), len(hidden)
    g_attn, g_cross = grads[:n_a], grads[n_a : n_a + n_c]
    g_ffn = grads[n_a + n_c : n_a + n_c + n_f]
    g_hidden, g_calls = grads[n_a + n_c + n_f : n_a + n_c + n_f + n_h], grads[n_a + n_c + n_f + n_h :]
    notes = []
    if any(g is None for g in g_hidden):
        why = (
            "the reversible stack recomputes each layer's input inside its custom autograd Function "
            "(activations are not stored), so"
            if cfg.layer == "reversible"
            else "some layer inputs are not on the loss's autograd path, so"
        )
        notes.append(f"{why} the gradient with respect to them cannot be measured: layer input ‖∇x‖ is None")
    if max(len(parts) for parts in seg_inputs) > 1:
        notes.append(
            f"the input ran in {len(seg_inputs[0])} memory segments: layer input ‖∇x‖ is the norm over "
            "all segments' inputs, sqrt(Σ_s ‖∇x_s‖²)"
        )
    seg_norms, k = [], 0
    for parts in seg_inputs:
        gs = g_hidden[k : k + len(parts)]
        k += len(parts)
        seg_norms.append(None if any(g is None for g in gs) else _fro(gs))
    residual = _per_layer(seg_norms, n_layers, notes, "hidden states")
    if recorder is None:
        attn = [_fro([g]) for g in g_attn]
        ffn, k = [], 0
        for group in ffn_groups:
            ffn.append(_fro(g_ffn[k : k + len(group)]))
            k += len(group)
    else:
        per_call = _per_call_weight_grads(recorder, g_calls)
        attn = _applications([per_call[id(m.out_proj)] for m in attn_mods], n_layers, notes, "attention")
        ffn = _ffn_applications(model, ffn_groups, per_call, g_ffn, n_layers, notes)
    result = {
        "layer": list(range(len(residual))),
        "attn_out": attn,
        "ffn_out": ffn,
        "residual": residual,
        "loss": loss.item(),
        "notes": notes,
    }
    if len(stacks) > 1:
        result.update(_stack_columns(out.layers, stacks, [_fro([g]) for g in g_cross]))
        notes.append(
            f"{cfg.architecture.replace('_', '-')}: loss = next-token cross-entropy of the "
            f"{stacks[-1].reads} given the {' and '.join(s.reads for s in stacks[:-1])} (teacher forcing); "
            f"the {' and '.join(s.name for s in stacks[:-1])}'s gradients arrive only through "
            "cross-attention"
        )
    return result


def _stack_columns(layers: list, stacks: tuple, cross: list) -> dict:
    """``stack`` and ``stack_layer`` of every applied layer, and ``cross_out`` (None for the layers of a
    stack without cross-attention, else its cross-attention sublayers' norms in order)."""
    names = [info.stack for info in layers]
    reads_other = {s.name: bool(s.attends) for s in stacks}
    counters, stack_layer, cross_out, k = {}, [], [], 0
    for name in names:
        stack_layer.append(counters.get(name, 0))
        counters[name] = stack_layer[-1] + 1
        if reads_other.get(name):
            cross_out.append(cross[k] if k < len(cross) else None)
            k += 1
        else:
            cross_out.append(None)
    return {"stack": names, "stack_layer": stack_layer, "cross_out": cross_out}


def _per_layer(norms: list, n_layers: int, notes: list, what: str) -> list:
    """Applications -> layers: several segments of one layer combine as the norm of the whole."""
    if len(norms) == n_layers or len(norms) % n_layers:
        if len(norms) != n_layers:
            notes.append(f"{what}: {len(norms)} applied layers for n_layers={n_layers}")
        return norms
    return [
        None if any(x is None for x in norms[i::n_layers]) else float(sum(x**2 for x in norms[i::n_layers]) ** 0.5)
        for i in range(n_layers)
    ]


def _per_call_weight_grads(recorder: _CallRecorder, g_calls) -> dict:
    """``{id(linear): [dW of call 0, call 1, ...]}`` with ``dW = g^T x`` summed over tokens."""
    out, k = {}, 0
    for mod_id, calls in recorder.calls.items():
        grads = []
        for x, _ in calls:
            g = g_calls[k]
            k += 1
            grads.append(None if g is None else torch.einsum("...o,...i->oi", g, x))
        out[mod_id] = grads
    return out


def _applications(per_module_calls: list, n_layers: int, notes: list, what: str) -> list:
    """Per-application norms, one module's calls after another's."""
    norms = [_fro([g]) for calls in per_module_calls for g in calls]
    if len(norms) != n_layers:
        notes.append(f"{what}: {len(norms)} applications for n_layers={n_layers}")
    return norms


def _ffn_applications(model, ffn_groups, per_call, g_ffn, n_layers, notes) -> list:
    """Per application when every FFN output parameter belongs to a linear layer called once per
    application; otherwise per module (noted)."""
    out = []
    for group in ffn_groups:
        lins = _owner_linears(model, group)
        counts = {len(per_call.get(id(lin), [])) for lin in lins if lin is not None}
        if None in lins or len(counts) != 1:
            notes.append("ffn: reported per module (calls differ per application)")
            k = sum(len(g) for g in ffn_groups[: ffn_groups.index(group)])
            out.append(_fro(g_ffn[k : k + len(group)]))
            continue
        for c in range(counts.pop()):
            out.append(_fro([per_call[id(lin)][c] for lin in lins]))
    return out
