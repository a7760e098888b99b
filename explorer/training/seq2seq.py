"""Training an encoder-decoder on the sequence-to-sequence tasks (copy, reverse, sort).

The tasks lay an example out as one stream ``x SEP f(x) PAD*`` (``explorer.training.tasks``) so that a
decoder-only model can learn it. An encoder-decoder reads the same example as a source ``x`` (``n``
symbols) and a target ``SEP f(x)`` (``n + 1`` tokens; SEP is the start token): the decoder predicts
``f(x)[p]`` at target position ``p`` from the source and ``SEP f(x)[:p]``. The scored tokens are the
same ``n`` answer symbols, so losses and accuracies compare with a decoder-only run of the task.

The probe's attention is the cross-attention (target x source): a trained model's alignment, drawn
next to the alignment that solves the task (the anti-diagonal for reverse).
"""

from __future__ import annotations

import numpy as np

from explorer.training.tasks import Batch
from models import ConfigError

SEQ2SEQ_TASKS = ("copy", "reverse", "sort")


def check_task(name: str) -> None:
    if name not in SEQ2SEQ_TASKS:
        raise ConfigError(
            "task",
            name,
            f"one of {', '.join(SEQ2SEQ_TASKS)} with architecture='encoder_decoder' "
            "(the sequence-to-sequence tasks: a source and its transformed target)",
        )


def split_batch(batch: Batch) -> tuple:
    """``x SEP f(x) PAD*`` -> (source ``x`` [B, n], target batch ``SEP f(x)`` [B, n + 1] with the
    answer positions 1..n scored)."""
    L = batch.tokens.shape[1]
    n = (L - 1) // 2
    src = batch.tokens[:, :n]  # (B, n)
    tgt = Batch(batch.tokens[:, n : 2 * n + 1], batch.mask[:, n : 2 * n + 1])  # (B, n + 1)
    return src, tgt


def forward(model, batch: Batch, return_attention: bool = False) -> tuple:
    """``model(src, tgt)`` on the split batch -> (ModelOutput, the target Batch the loss scores)."""
    src, tgt = split_batch(batch)
    dev = next(model.parameters()).device
    return model(src.to(dev), tgt.tokens.to(dev), return_attention=return_attention), tgt


def cross_ideal(task: str, tokens) -> np.ndarray | None:
    """The cross-attention that solves ``task`` on the probe ``tokens`` (one stream): row ``p`` of the
    ``(n + 1, n)`` target x source map is one-hot on the source symbol predicted at ``p`` (the last
    row, after the final answer, predicts padding: zero). Sort reads the ``p``-th smallest symbol
    (stable order for ties)."""
    if task not in SEQ2SEQ_TASKS:
        return None
    L = len(tokens)
    n = (L - 1) // 2
    x = np.asarray(tokens[:n])
    order = {"copy": np.arange(n), "reverse": np.arange(n)[::-1], "sort": np.argsort(x, kind="stable")}[task]
    a = np.zeros((n + 1, n), np.float32)
    a[np.arange(n), order] = 1.0
    return a


def gradient_inputs(batch: Batch) -> tuple:
    """(source, target tokens) of a held-out batch for ``analysis.gradients.branch_gradient_norms``, whose loss
    (the target's next-token cross-entropy) is exactly the scored loss: every target position after
    SEP is an answer."""
    src, tgt = split_batch(batch)
    return src, tgt.tokens
