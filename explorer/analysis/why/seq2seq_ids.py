"""The ids the Why analyses (lens, attribution, ablation, patching) run a model on.

A single-stack model (``decoder_only``, ``encoder_only``) reads one ``(B, L)`` tensor. An encoder-decoder reads
a :class:`Seq2SeqIds`: the source the encoder reads and the decoder's input, which is the start token followed
by the target, as the model is trained (``explorer.training.seq2seq``: the decoder reads ``SEP f(x)`` and
predicts ``f(x)[p]`` at position ``p``; teacher forcing). "The next token" of a decoder position is then
the next token of the decoder's input, exactly as for a decoder-only model, and the last position (after
the whole target) predicts nothing that was scored in training.

``reversal_probes`` are the fixed strings the encoder-decoder's card and mean ablation read: random strings
of the task alphabet (``SYMBOLS``, the training tasks') and their reversals, at a chosen length.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from models import ConfigError

# the training tasks' separator and symbols (``explorer.training.tasks.SEP``, ``SYMBOLS``; analysis may not import
# training, so they are repeated here and a test holds them equal)
START = ord("|")  # the decoder's first input token in the seq2seq tasks
SYMBOLS = list(range(ord("0"), ord("0") + 64))
# the encoder-decoder bundle's source length: its recipe's seq_len 48 split as ``explorer.training.seq2seq`` splits
# it, (48 - 1) // 2 symbols (the bundle saw no other length; tests hold this to the recipe)
TRAINED_SOURCE = 23


@dataclass(frozen=True)
class Seq2SeqIds:
    source: torch.Tensor  # (B, Ls) the encoder's input
    target: torch.Tensor  # (B, Lt) the decoder's input: START, then the target

    def to(self, device) -> Seq2SeqIds:
        return Seq2SeqIds(self.source.to(device), self.target.to(device))

    @property
    def shape(self) -> tuple:
        """The decoder input's shape (the positions every Why view scores)."""
        return tuple(self.target.shape)


Ids = torch.Tensor | Seq2SeqIds


def pair_ids(source, target, device=None) -> Seq2SeqIds:
    """``(1, Ls)`` source and ``(1, 1 + Lt)`` decoder input (START + ``target``) from two id sequences."""
    return Seq2SeqIds(torch.tensor([list(source)], device=device), torch.tensor([[START, *target]], device=device))


def seq2seq(cfg) -> bool:
    return getattr(cfg, "architecture", None) == "encoder_decoder"


def check_ids(cfg, ids) -> None:
    """``ConfigError`` naming ``ids`` when the ids do not fit the model's arrangement."""
    if seq2seq(cfg) and not isinstance(ids, Seq2SeqIds):
        raise ConfigError("ids", type(ids).__name__, "a Seq2SeqIds (source, START + target) for an encoder_decoder")
    if not seq2seq(cfg) and not isinstance(ids, torch.Tensor):
        raise ConfigError("ids", type(ids).__name__, f"a LongTensor (B, L) for architecture={cfg.architecture!r}")


def decoder_ids(ids: Ids) -> torch.Tensor:
    """The ids of the positions the head predicts at: the decoder's input, or the one sequence."""
    return ids.target if isinstance(ids, Seq2SeqIds) else ids


def call(model, ids: Ids, **kw):
    """``model(ids, **kw)`` or ``model(source, target, **kw)``."""
    check_ids(model.cfg, ids)
    if isinstance(ids, Seq2SeqIds):
        return model(ids.source, ids.target, **kw)
    return model(ids, **kw)


def head_layers(out) -> list:
    """The ``LayerInfo`` of the stack the output head reads (an encoder-decoder's decoder; else every layer)."""
    return [i for i in out.layers if getattr(i, "stack", None) in (None, "decoder")]


def encoder_layers(out) -> list:
    return [i for i in out.layers if getattr(i, "stack", None) == "encoder"]


def reversal_probes(n: int, length: int, seed: int = 0, device=None) -> Seq2SeqIds:
    """``n`` random strings of ``length`` task symbols and START + their reversals (the reverse task)."""
    g = torch.Generator().manual_seed(seed)
    alphabet = torch.tensor(SYMBOLS)
    src = alphabet[torch.randint(0, len(SYMBOLS), (n, length), generator=g)]  # (n, length)
    tgt = torch.cat([torch.full((n, 1), START), src.flip(1)], dim=1)  # (n, 1 + length)
    return Seq2SeqIds(src, tgt).to(device) if device is not None else Seq2SeqIds(src, tgt)
