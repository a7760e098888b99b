"""A session's trained weights, as the Attention, Variant views and Gradients tabs use them.

``snapshot(cfg, model)`` copies a model's ``state_dict`` into a ``TrainedWeights`` record: the
config it belongs to (the frozen ``ModelConfig``), the tensors (CPU clones, so the run can keep
training without changing what the tabs show), their SHA-256 digest (``tensor_digest``) and the step. The record
lives in one session's ``gr.State`` only, never in a module global; it is refused above
``MAX_TRAINED_BYTES`` so that the sessions the server keeps stay bounded.

The analyses take the record as their ``weights`` argument, passed down from the session that owns
it (never a global or a context variable): results are cached under the digest, so two sessions never
see each other's weights. An analysis refuses weights of another config (``checked_for``); the UI passes
them only for the config they belong to (``applicable``: another norm placement, another size is
computed from its initial weights; a request's ``explorer.analysis.source.WeightsSource`` gives its
record through ``source.drawn_for``). ``mismatch(weights, cfg)`` names the fields that differ, for the switch's message.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import torch

from explorer.runtime.configs import as_config
from models import ConfigError, ModelConfig

# 2M parameters (the training cap) in float32 are 8 MB; the buffers (RoPE tables, masks) add a little
MAX_TRAINED_BYTES = 24 << 20


def tensor_digest(tensors: dict) -> str:
    """SHA-256 over (name, dtype, shape, raw bytes) of every tensor, in name order."""
    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


@dataclass(frozen=True)
class TrainedWeights:
    config: ModelConfig  # the config of the model the tensors belong to (frozen: compared and hashed as is)
    tensors: dict  # name -> CPU tensor (a copy of the model's state_dict)
    digest: str  # SHA-256 of the tensors: the cache key
    step: int  # optimizer steps done (0: an uploaded file without a step)
    nbytes: int
    source: str = ""  # where they come from, as the page says it ("your run", a bundle's description)
    surgery: tuple = ()  # fields changed from the config they were trained with (``explorer.analysis.surgery``)
    # a pretrained checkpoint's (``explorer.analysis.weights.checkpoints``): the tokenizer its ids come from
    # (None: bytes)
    tokenizer: object = field(default=None, repr=False, compare=False)
    shared: bool = False  # tensors held read-only by the host: an eval model uses them without a copy
    checkpoint: str = ""  # the checkpoint's id (what a share link carries instead of the weights)
    bundle: str = ""  # the bundle the tensors are (or were moved from): the weights on screen

    def matches(self, cfg) -> bool:
        return as_config(cfg) == self.config

    def load_into(self, model: torch.nn.Module) -> torch.nn.Module:
        model.load_state_dict(self.tensors, strict=True)
        return model

    def eval_model(self, cfg) -> torch.nn.Module:
        """A model of ``cfg`` holding these weights, for inference only: ``shared`` weights are assigned (the
        model's parameters are these tensors, so a 500 MB checkpoint is not held twice), others copied."""
        from models import build_model
        from models.meta import on_meta

        if not self.shared:
            return self.load_into(build_model(cfg))
        with on_meta():
            model = build_model(cfg)
        if any(True for _ in model.buffers()):  # buffers (random features, tables) are the config's own: real build
            model = build_model(cfg)
        model.load_state_dict(self.tensors, strict=True, assign=True)
        return model


def snapshot(cfg, model: torch.nn.Module, step: int = 0) -> TrainedWeights:
    """A frozen copy of ``model``'s weights; ``ConfigError`` when they exceed ``MAX_TRAINED_BYTES``."""
    cfg = as_config(cfg)
    state = model.state_dict()
    size = sum(t.numel() * t.element_size() for t in state.values())
    if size > MAX_TRAINED_BYTES:
        raise ConfigError(
            "weights",
            f"{size:,} bytes",
            f"trained weights of at most {MAX_TRAINED_BYTES:,} bytes to show in the other tabs",
        )
    with torch.no_grad():
        tensors = {k: v.detach().to("cpu", copy=True).contiguous() for k, v in state.items()}
    return TrainedWeights(cfg, tensors, tensor_digest(tensors), int(step), size)


def mismatch(weights: TrainedWeights, cfg) -> list:
    """The config fields whose values differ between ``cfg`` and the weights' config, as ``k=v`` of the weights."""
    mine, other = weights.config.to_dict(), as_config(cfg).to_dict()
    return [f"{k}={mine[k]!r}" for k in mine if other.get(k) != mine[k]]


def checked_for(cfg, weights: TrainedWeights | None = None) -> TrainedWeights | None:
    """``weights`` checked against the config an analysis runs (a ``ModelConfig`` or its JSON;
    ``ConfigError`` naming the fields that differ when they belong to another config); None: the initial
    weights."""
    if weights is not None and weights.config != as_config(cfg):
        diff = mismatch(weights, cfg)
        raise ConfigError(
            "weights", "trained", f"a config equal to the one the weights were trained with ({', '.join(diff[:4])})"
        )
    return weights


def applicable(weights: TrainedWeights | None, cfg) -> TrainedWeights | None:
    """``weights`` when they belong to ``cfg``, else None: what an analysis draws for a config the
    controls may have moved away from (another norm placement in the gradient figure, say). A request's
    ``WeightsSource`` goes through ``explorer.analysis.source.drawn_for`` instead."""
    return weights if weights is not None and weights.matches(cfg) else None
