"""``plan(path)`` and ``load(path)``: a Hugging Face checkpoint folder as a catalogue model.

``plan`` reads only text: ``config.json``, the safetensors headers and the index. It checks every size
of the config against the catalogue's ranges (``sizes``), then maps the config onto catalogue choices
(the family's ``config``; anything not expressible is refused by name),
validates the ``ModelConfig``, counts the parameters from the config (nothing is allocated) and checks
them against ``max_params``, then builds the model on the meta device and checks every tensor's name,
shape and dtype against it through the family's weight mapping. ``load`` does the same, then allocates
the model, reads each tensor (refusing NaN / Inf), copies it in, and reads ``tokenizer.json``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import torch

from ..config import ModelConfig
from ..errors import ConfigError
from ..meta import materialize, on_meta
from ..model import build_model
from . import (
    bert,
    deepseek_v3,
    falcon_h1,
    files,
    gemma2,
    gemma3,
    gpt2,
    gpt_oss,
    llama,
    llama4,
    mamba2,
    mapping,
    olmo2,
    qwen3,
    qwen3_next,
    sizes,
    t5,
)
from .fields import Fields
from .tokenizer import Tokenizer

FAMILIES = {
    "gpt2": gpt2,
    "llama": llama,
    "qwen3": qwen3,
    "qwen3_next": qwen3_next,
    "olmo2": olmo2,
    "gemma2": gemma2,
    "gemma3": gemma3,
    "deepseek_v3": deepseek_v3,
    "gpt_oss": gpt_oss,
    "llama4": llama4,
    "falcon_h1": falcon_h1,
    "mamba2": mamba2,
    "bert": bert,
    "t5": t5,
}
MODEL_TYPES = {mt: name for name, module in FAMILIES.items() for mt in module.MODEL_TYPES}

# The largest model served interactively by default on a 2-core CPU: a 128-token forward costs
# 2 * 128 * params FLOPs, 51 GFLOP at the cap, about 1.4 s at the 36 GFLOP/s float32 matmuls reached
# here on two cores that other work shared, less on a quiet machine (python -m benchmarks.checkpoint_load;
# docs/checkpoints.md).
DEFAULT_MAX_PARAMS = 200_000_000


@dataclass(frozen=True)
class Plan:
    """What a checkpoint is, known before any weight is read."""

    name: str
    family: str  # a key of FAMILIES
    config: ModelConfig  # validated
    n_params: int  # unique parameters (a tied head counted once)
    n_bytes: int  # of the parameters in the loaded dtype
    source: str  # the folder, as given
    files: files.Files
    notes: tuple  # how the checkpoint maps onto the catalogue, one line each
    hf_config: dict = field(repr=False, default_factory=dict)
    headers: dict = field(repr=False, default_factory=dict)  # tensor name -> files.TensorEntry
    # the model built on the meta device while planning: ``load(planned=...)`` allocates a copy of it
    meta: torch.nn.Module | None = field(repr=False, default=None, compare=False)


@dataclass
class Checkpoint:
    """A loaded checkpoint: the catalogue model with its weights, and its tokenizer."""

    name: str
    family: str
    config: ModelConfig
    model: torch.nn.Module  # eval mode
    tokenizer: Tokenizer | None  # None when the folder has no tokenizer.json
    n_params: int
    source: str
    notes: tuple
    hf_config: dict = field(repr=False, default_factory=dict)

    def logits(
        self,
        ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        decoder_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Logits ``(B, L, vocab)`` for ``ids (B, L)``; an encoder-decoder reads ``ids`` as the source and
        returns logits for ``decoder_ids (B, Lt)``. ``attention_mask (B, L)`` (1 = token, 0 = padding):
        the encoder-decoder keeps padding out of its encoder and cross-attention; a single stack runs
        each row on its own tokens (what a padding mask gives), and padded positions get zeros."""
        with torch.no_grad():
            if self.config.architecture == "encoder_decoder":
                if decoder_ids is None:
                    raise ConfigError("decoder_ids", None, "the target ids of an encoder-decoder (B, Lt)")
                mask = None if attention_mask is None else _mask(attention_mask, ids)
                return self.model(ids, decoder_ids, src_mask=mask).logits
            if attention_mask is None or bool(_mask(attention_mask, ids).all()):
                return self.model(ids).logits
            mask = _mask(attention_mask, ids)
            out = None
            for row in range(ids.shape[0]):
                keep = mask[row].nonzero().flatten()
                if keep.numel() == 0:
                    continue
                logits = self.model(ids[row : row + 1, keep]).logits[0]  # (n, vocab)
                if out is None:
                    out = logits.new_zeros(*ids.shape, logits.shape[-1])
                out[row, keep] = logits
            if out is None:
                raise ConfigError("attention_mask", "all zeros", "at least one real token")
            return out


def _mask(mask, ids) -> torch.Tensor:
    if not isinstance(mask, torch.Tensor) or mask.shape != ids.shape:
        raise ConfigError(
            "attention_mask",
            getattr(mask, "shape", type(mask).__name__),
            f"a tensor of the ids' shape {tuple(ids.shape)} (1 = token, 0 = padding)",
        )
    return mask.bool()


def _family(f: Fields) -> str:
    model_type = f.hf.get("model_type")
    if not isinstance(model_type, str) or model_type not in MODEL_TYPES:  # a list or an object is no name
        arch = f.hf.get("architectures")
        shown = model_type if isinstance(model_type, str) else str(model_type)[:40]
        raise ConfigError(
            "config.json: model_type",
            shown,
            f"a string naming an architecture this loader maps: "
            f"{', '.join(sorted(MODEL_TYPES))} (architectures={str(arch)[:60]} is not supported)",
        )
    return MODEL_TYPES[model_type]


def _config(family: str, f: Fields) -> tuple:
    fields, notes = FAMILIES[family].config(f)
    try:
        cfg = ModelConfig(**fields).validate()
    except ConfigError as e:
        theirs = FAMILIES[family].NAMES.get(e.field)
        name = f"config.json: {theirs} (the catalogue's {e.field})" if theirs else e.field
        raise ConfigError(name, e.value, f"{e.allowed} (mapped from config.json of a {family} checkpoint)") from None
    return cfg, tuple(notes)


def _cap(n_params: int, max_params: int) -> None:
    if n_params > max_params:
        raise ConfigError(
            "checkpoint",
            f"{n_params / 1e6:.1f} M parameters",
            f"at most {max_params / 1e6:.0f} M parameters (the cap for a model served interactively on this machine)",
        )


def _tied_numel(rules: dict, shapes: dict) -> int:
    return sum(int(torch.Size(shapes[t]).numel()) for t, r in rules.items() if isinstance(r, mapping.Tie))


def plan(path, *, max_params: int = DEFAULT_MAX_PARAMS, dtype: torch.dtype = torch.float32) -> Plan:
    """Everything about the checkpoint in folder ``path`` that its text says, checked; no weight read,
    nothing of the model's size allocated. ConfigError for anything refused."""
    found = files.find(path)
    hf = files.read_config(found.config)
    headers = files.read_headers(found.weights)
    f = Fields(hf, headers)
    family = _family(f)
    module = FAMILIES[family]
    sizes.check(module, hf)  # every size bounded before the family's code loops or allocates by one
    cfg, notes = _config(family, f)
    rules = module.rules(f, cfg)
    tied = sum(cfg.vocab_size * cfg.d_model for r in rules.values() if isinstance(r, mapping.Tie))
    _cap(cfg.approx_params() - tied, max_params)  # from the config alone, before anything is built
    with on_meta():
        meta = build_model(cfg)
    shapes = {k: tuple(v.shape) for k, v in meta.state_dict().items()}
    tensors = mapping.canonical_names(headers, lambda name: module.canonical(f, name))
    mapping.check(rules, tensors, shapes)
    buffers = sum(int(b.numel()) for name, b in meta.named_buffers() if name in shapes)  # state, not parameters
    n_params = sum(int(torch.Size(s).numel()) for s in shapes.values()) - _tied_numel(rules, shapes) - buffers
    _cap(n_params, max_params)
    itemsize = torch.empty((), dtype=dtype).element_size()
    name = found.folder.resolve().name
    return Plan(name, family, cfg, n_params, n_params * itemsize, str(path), found, notes, hf, headers, meta)


def load(
    path,
    *,
    max_params: int = DEFAULT_MAX_PARAMS,
    dtype: torch.dtype = torch.float32,
    tokenizer: bool = True,
    planned: Plan | None = None,
) -> Checkpoint:
    """The checkpoint in folder ``path`` as a catalogue model (eval mode, ``dtype``) with its tokenizer;
    ``planned``: ``plan(path)``'s result when the caller made it already (a caller that budgets the read
    between the two: the config, headers and model are then read and built once)."""
    p = planned if planned is not None else plan(path, max_params=max_params, dtype=dtype)
    tok = None
    if tokenizer and p.files.tokenizer is not None:  # read before the model is allocated: a refusal costs nothing
        tok = Tokenizer.from_file(p.files.tokenizer)
        if tok.vocab_size > p.config.vocab_size:
            raise ConfigError(
                "tokenizer.json",
                f"{tok.vocab_size} tokens",
                f"at most the model's vocab_size={p.config.vocab_size} (its ids index the embedding)",
            )
    headers = p.headers
    f = Fields(p.hf_config, headers)
    module = FAMILIES[p.family]
    rules = module.rules(f, p.config)
    tensors = mapping.canonical_names(headers, lambda name: module.canonical(f, name))
    if p.meta is not None:
        model = copy.deepcopy(p.meta)  # the plan's meta model (no storage to copy): not built again
    else:
        with on_meta():
            model = build_model(p.config)
    if any(True for _ in model.buffers()):  # to_empty would leave buffers unset: build for real instead
        model = build_model(p.config)
    else:
        model = materialize(model, "cpu")
    model = model.to(dtype)
    with files.open_tensors(p.files.weights) as read:
        mapping.fill(model, rules, tensors, read, dtype)
    model.eval()
    notes = p.notes + (() if tok is not None else ("no tokenizer.json: token ids only",))
    n_params = sum(t.numel() for t in model.parameters())
    return Checkpoint(p.name, p.family, p.config, model, tok, n_params, p.source, notes, p.hf_config)
