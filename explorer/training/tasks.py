"""Training tasks generated on the fly: seeded, byte tokens, no downloads.

Every task turns ``(batch, seq_len, torch.Generator)`` into a ``Batch``: ``tokens (B, L)`` and
``mask (B, L)``, where ``mask[b, t]`` says the token at ``t`` is scored (predicted from position
``t - 1``; position 0 is never scored). The metric is next-token loss and accuracy over the masked
tokens, so every task shares one loss function and "chance" is easy to read off: ``log(n)`` for a
uniform choice among ``n`` symbols.

The synthetic tasks are the classic probes of what attention can learn (copy, reverse, sort,
associative recall, induction, long-range retrieval); where a task has one, ``ideal(L)`` gives the
attention pattern a model that solved it would use, drawn beside the learned maps:
copy attends the offset diagonal (the token one copy-length back), induction the stripe one after
the earlier occurrence of the current token (Olsson et al. 2022), reverse the anti-diagonal.
``lm`` is byte-level language modelling on text that ships with Python (``pydoc_data.topics``,
the interpreter's own documentation, ~460 KB) or on the user's text, with a held-out tail split;
``masked`` scores a random 15% of the same bytes, the objective bidirectional-only attention
(linformer, nystrom) can train on. A non-causal model reads every scored token replaced by
``MASK`` (``model_input``), so no task lets a model see the answer it is scored on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from explorer.runtime.corpus import (
    paragraphs,  # noqa: F401
    python_docs,
    split_corpus,
)
from models import ConfigError

SYMBOLS = list(range(ord("0"), ord("0") + 64))  # 64 content symbols: '0'..'o' (chance ln 64 = 4.16)
KEYS = list(range(ord("a"), ord("z") + 1))  # associative recall / retrieval keys
VALUES = list(range(ord("0"), ord("9") + 1))  # ... and their values (chance ln 10 = 2.30)
FILLER = list(range(ord("A"), ord("Z") + 1))  # retrieval: the distractors between fact and question
PREFIX = list(range(ord("p"), ord("~") + 1))  # induction: random lead-in, disjoint from SYMBOLS
WIDE_SYMBOLS = SYMBOLS + list(range(128, 256))  # induction strings longer than 64 symbols: 192, all distinct
MAX_INDUCTION_LEN = 2 * len(WIDE_SYMBOLS)
SEP = ord("|")
PAD = ord(".")
QUERY = ord("?")
MASK = ord("#")  # non-causal models see the scored tokens replaced by this (else they read the answer)
MASKED_FRACTION = 0.15  # the ``masked`` task scores 15% of the bytes (BERT)
REPEAT_FRACTION = 0.5  # ``lm_repeat``: half the training windows repeat a random string
PRINTABLE = (32, 126)  # ... of random printable ASCII bytes
MIN_LEN = 8


@dataclass
class Batch:
    tokens: torch.Tensor  # (B, L) long
    mask: torch.Tensor  # (B, L) bool: scored positions


@dataclass(frozen=True)
class Task:
    name: str
    summary: str
    make: Callable  # (batch, L, generator, split) -> Batch
    ideal: Callable | None = None  # probe tokens -> (L, L) float array, one-hot rows where defined (else 0)
    chance: str = ""

    def batch(self, batch: int, seq_len: int, gen: torch.Generator, split: str = "train") -> Batch:
        check_length(self.name, seq_len)
        return self.make(int(batch), int(seq_len), gen, split)

    def probe(self, seq_len: int, seed: int = 1234) -> Batch:
        """One fixed held-out example whose attention is drawn while the model trains."""
        return self.batch(1, seq_len, torch.Generator().manual_seed(seed), split="heldout")


def check_length(name: str, seq_len: int) -> None:
    if not isinstance(seq_len, (int, np.integer)) or seq_len < MIN_LEN:
        raise ConfigError("seq_len", seq_len, f"an integer >= {MIN_LEN} for task {name!r}")


def _pick(pool: list, shape: tuple, gen: torch.Generator) -> torch.Tensor:
    """Uniform draws from ``pool`` with replacement, shape ``shape``."""
    idx = torch.randint(0, len(pool), shape, generator=gen)
    return torch.tensor(pool)[idx]


def _distinct(pool: list, batch: int, n: int, gen: torch.Generator) -> torch.Tensor:
    """Per row ``n`` distinct draws from ``pool`` (with replacement when ``n > len(pool)``)."""
    if n > len(pool):
        return _pick(pool, (batch, n), gen)
    order = torch.rand(batch, len(pool), generator=gen).argsort(dim=1)[:, :n]  # (B, n)
    return torch.tensor(pool)[order]


def _seq2seq(batch: int, L: int, gen: torch.Generator, transform) -> Batch:
    """``x SEP f(x) PAD*``: ``n = (L - 1) // 2`` symbols, the answer half scored."""
    n = (L - 1) // 2
    x = _pick(SYMBOLS, (batch, n), gen)
    tokens = torch.full((batch, L), PAD, dtype=torch.long)
    tokens[:, :n] = x
    tokens[:, n] = SEP
    tokens[:, n + 1 : 2 * n + 1] = transform(x)
    mask = torch.zeros(batch, L, dtype=torch.bool)
    mask[:, n + 1 : 2 * n + 1] = True
    return Batch(tokens, mask)


def _copy(batch, L, gen, split):
    return _seq2seq(batch, L, gen, lambda x: x)


def _reverse(batch, L, gen, split):
    return _seq2seq(batch, L, gen, lambda x: x.flip(1))


def _sort(batch, L, gen, split):
    return _seq2seq(batch, L, gen, lambda x: x.sort(dim=1).values)


def _ideal_copy(tokens) -> np.ndarray:
    """Query ``p`` (predicting the token at ``p + 1`` = source ``p + 1 - (n + 1)``) reads key ``p - n``."""
    L = len(tokens)
    n = (L - 1) // 2
    a = np.zeros((L, L), np.float32)
    for p in range(n, 2 * n):
        a[p, p - n] = 1.0
    return a


def _ideal_reverse(tokens) -> np.ndarray:
    """Query ``p`` predicts source ``2n - 1 - p``: the anti-diagonal of the answer half."""
    L = len(tokens)
    n = (L - 1) // 2
    a = np.zeros((L, L), np.float32)
    for p in range(n, 2 * n):
        a[p, 2 * n - 1 - p] = 1.0
    return a


def _recall_layout(L: int, gap: int) -> tuple:
    """(n_pairs, n_queries) for ``k v k v ... [filler * gap] SEP ? q a ? q a ...`` in ``L`` tokens."""
    room = L - gap - 1
    n_q = max(1, min(8, room // 8))
    n_pairs = min(len(KEYS), (room - 3 * n_q) // 2)
    if n_pairs < 2:
        raise ConfigError("seq_len", L, f"a length with room for at least 2 pairs (>= {gap + 3 * n_q + 5})")
    return n_pairs, n_q


def _recall_batch(batch: int, L: int, gen: torch.Generator, gap: int) -> Batch:
    """Key-value pairs, optional filler, then queries ``? key value``: the values are scored."""
    n_pairs, n_q = _recall_layout(L, gap)
    keys = _distinct(KEYS, batch, n_pairs, gen)  # (B, P)
    vals = _pick(VALUES, (batch, n_pairs), gen)  # (B, P)
    which = torch.randint(0, n_pairs, (batch, n_q), generator=gen)  # (B, Q) pair asked
    tokens = torch.full((batch, L), PAD, dtype=torch.long)
    tokens[:, 0 : 2 * n_pairs : 2] = keys
    tokens[:, 1 : 2 * n_pairs : 2] = vals
    pos = 2 * n_pairs
    if gap:
        tokens[:, pos : pos + gap] = _pick(FILLER, (batch, gap), gen)
        pos += gap
    tokens[:, pos] = SEP
    q0 = pos + 1
    mask = torch.zeros(batch, L, dtype=torch.bool)
    for q in range(n_q):
        t = q0 + 3 * q
        tokens[:, t] = QUERY
        tokens[:, t + 1] = keys.gather(1, which[:, q : q + 1]).squeeze(1)
        tokens[:, t + 2] = vals.gather(1, which[:, q : q + 1]).squeeze(1)
        mask[:, t + 2] = True
    return Batch(tokens, mask)


def _recall(batch, L, gen, split):
    return _recall_batch(batch, L, gen, gap=0)


def retrieval_gap(L: int) -> int:
    """Filler between the facts and the questions: 3/4 of the sequence, so the answer sits more than
    ``L / 2`` tokens back, beyond any window smaller than that."""
    return (3 * L) // 4


def _retrieval(batch, L, gen, split):
    return _recall_batch(batch, L, gen, gap=retrieval_gap(L))


def _induction(batch, L, gen, split):
    """``prefix x x``: ``n`` distinct symbols repeated, after a random prefix from another alphabet.
    ``n`` varies per sequence (``L // 4 .. L // 2``), so the distance back to the earlier copy is not
    a constant a model could learn from positions alone: only looking up the earlier occurrence of
    the current token works. The second copy (after its first token, which nothing predicts) is scored.
    The string's symbols are always distinct: past 64 of them (L > 128) they come from a wider alphabet
    (the 64 symbols and the bytes 128-255), and L > 384 is refused."""
    if L > MAX_INDUCTION_LEN:
        raise ConfigError(
            "seq_len",
            L,
            f"at most {MAX_INDUCTION_LEN} for the induction task: a repeated string "
            f"of up to L/2 distinct symbols, and the byte alphabet has {len(WIDE_SYMBOLS)} of them",
        )
    tokens = torch.empty(batch, L, dtype=torch.long)
    mask = torch.zeros(batch, L, dtype=torch.bool)
    lo, hi = max(2, L // 4), L // 2
    n_all = torch.randint(lo, hi + 1, (batch,), generator=gen)
    for b, n in enumerate(n_all.tolist()):
        r = L - 2 * n
        x = _distinct(SYMBOLS if n <= len(SYMBOLS) else WIDE_SYMBOLS, 1, n, gen)[0]
        tokens[b, :r] = _pick(PREFIX, (r,), gen)
        tokens[b, r : r + n] = x
        tokens[b, r + n :] = x
        mask[b, r + n + 1 :] = True
    return Batch(tokens, mask)


def ideal_induction(tokens) -> np.ndarray:
    """Query ``p`` whose token occurred earlier at ``j`` reads key ``j + 1``, the token after that
    earlier occurrence (the last one before ``p - 1``); rows of first occurrences stay 0."""
    tokens = list(tokens)
    L = len(tokens)
    a = np.zeros((L, L), np.float32)
    last = {}
    for p, t in enumerate(tokens):
        j = last.get(t)
        if j is not None and j + 1 < p and t not in PREFIX:
            a[p, j + 1] = 1.0
        last[t] = p
    return a


# ---------------------------------------------------------------------------- language modelling
def _repeat_rows(tokens: torch.Tensor, mask: torch.Tensor, gen: torch.Generator) -> tuple:
    """A random ``REPEAT_FRACTION`` of the rows become a random string of printable bytes (8 to L/4 of
    them) written again and again until the window is full; the first copy is not scored (nothing can
    predict it). The string is new to the model, so the only way to predict its repeats is to find the
    previous copy and read what came next there (an induction head); a passage of the corpus would not
    do, since a small model soon knows the corpus by heart."""
    B, L = tokens.shape
    rows = (torch.rand(B, generator=gen) < REPEAT_FRACTION).nonzero().flatten().tolist()
    for r in rows:
        n = int(torch.randint(8, max(L // 4, 9) + 1, (1,), generator=gen))
        s = torch.randint(PRINTABLE[0], PRINTABLE[1] + 1, (n,), generator=gen)
        tokens[r] = s.repeat(L // n + 1)[:L]
        mask[r, :n] = False
    return tokens, mask


def lm_task(text: str | None = None, name: str = "lm", fraction: float = 1.0, repeat: bool = False) -> Task:
    """Byte-level LM on ``text`` (None: the Python documentation); every position but 0 scored, or
    (``fraction < 1``: the ``masked`` task) a random ``fraction`` of them, which a bidirectional
    model sees hidden behind ``MASK`` (masked-byte prediction, as BERT's masked LM). ``repeat`` (the
    ``lm_repeat`` task): half the training windows are a random string repeated (held-out
    windows never are, so the held-out loss is the plain one)."""
    data = python_docs() if text is None else str(text).encode("utf-8")
    train, held = split_corpus(data)
    arrays = {
        "train": torch.tensor(list(train), dtype=torch.long),
        "heldout": torch.tensor(list(held), dtype=torch.long),
    }

    def make(batch, L, gen, split):
        src = arrays[split]
        if len(src) < L + 1:
            raise ConfigError(
                "seq_len",
                L,
                f"at most {len(src) - 1} for a {split} text of {len(src)} bytes "
                "(paste a longer text or choose a shorter sequence)",
            )
        start = torch.randint(0, len(src) - L + 1, (batch,), generator=gen)
        tokens = torch.stack([src[s : s + L] for s in start.tolist()])  # (B, L)
        if fraction >= 1:
            mask = torch.ones(batch, L, dtype=torch.bool)
        else:
            mask = torch.rand(batch, L, generator=gen) < fraction
        if repeat and split == "train":
            tokens, mask = _repeat_rows(tokens, mask, gen)
        mask[:, 0] = False
        return Batch(tokens, mask)

    what = "the Python documentation (pydoc_data.topics)" if text is None else f"your text ({len(data)} bytes)"
    how = "next-byte prediction" if fraction >= 1 else f"prediction of a random {fraction:.0%} of the bytes"
    if repeat:
        how += f"; {REPEAT_FRACTION:.0%} of the training windows are a random string repeated (induction pays)"
    return Task(
        name,
        f"byte-level language modelling ({how}) on {what}; the last 10% is held out, less "
        "any paragraph that, joined to the others, would repeat training text",
        make,
        chance="ln 256 = 5.55 for a uniform byte",
    )


TASKS = {
    "copy": Task("copy", "copy a random string after the separator", _copy, _ideal_copy, "ln 64 = 4.16"),
    "reverse": Task(
        "reverse", "write a random string backwards after the separator", _reverse, _ideal_reverse, "ln 64 = 4.16"
    ),
    "sort": Task("sort", "write the symbols of a random string in sorted order", _sort, None, "ln 64 = 4.16"),
    "recall": Task(
        "recall", "associative recall: key-value pairs, then '? key' asks for its value", _recall, None, "ln 10 = 2.30"
    ),
    "induction": Task(
        "induction",
        "a random string repeated; the second copy is scored",
        _induction,
        ideal_induction,
        "ln 64 = 4.16 (or ln of the symbols left)",
    ),
    "retrieval": Task(
        "retrieval",
        "key-value pairs, a long run of filler, then questions: the answer sits more than half the sequence back",
        _retrieval,
        None,
        "ln 10 = 2.30",
    ),
}


def get_task(name: str, text: str | None = None) -> Task:
    """The task called ``name`` (``lm`` with ``text`` = the user's corpus, None = Python docs)."""
    if name == "lm":
        return lm_task(text)
    if name == "masked":
        return lm_task(text, name="masked", fraction=MASKED_FRACTION)
    if name == "lm_repeat":
        return lm_task(text, name="lm_repeat", repeat=True)
    if name not in TASKS:
        raise ConfigError("task", name, f"one of {task_names()}")
    return TASKS[name]


# What each task needs to learn visibly at the Train tab's defaults (the default 4 x 128 model, batch 32,
# 32 tokens, lr 3e-3 cosine after 30 warm-up steps, data seed 0), measured on two CPU cores with the
# Trainer's held-out accuracy: (steps the tab proposes, what the measurement showed). The lm tasks have no
# accuracy to reach: their loss falls from ln 256 = 5.55.
LEARNS_IN = {
    "copy": (300, "100% held-out accuracy by step 100 (about 30 s for 300 steps here)"),
    "sort": (300, "90% held-out accuracy at step 300 (about 30 s here)"),
    "retrieval": (300, "61% held-out accuracy at step 300, chance 10% (about 30 s here)"),
    "reverse": (1000, "46% at step 300; 91% by step 330 and 100% by 830 of a 1000-step run (about 95 s here)"),
    "induction": (1000, "29% at step 300; 93% at step 1000 (about 90 s here)"),
    "recall": (
        1000,
        "does not learn at these settings: 21% after 1000 steps, chance 10%; try a smaller model "
        "or a lower learning rate",
    ),
}


def learns_in(name: str) -> tuple:
    """``(steps, note)``: the steps the Train tab proposes for task ``name`` and what they were measured to do."""
    return LEARNS_IN.get(name, (300, "the loss falls from ln 256 = 5.55 (a language model has no accuracy target)"))


def task_names() -> list:
    return [*TASKS, "lm", "lm_repeat", "masked"]


def ideal_pattern(name: str, tokens) -> np.ndarray | None:
    """The attention that solves task ``name`` on these tokens (e.g. the probe's), or None."""
    task = TASKS.get(name)
    return None if task is None or task.ideal is None else task.ideal(list(tokens))


def model_input(batch: Batch, causal: bool) -> torch.Tensor:
    """The tokens a model reads: for a bidirectional (non-causal) model every scored token is hidden
    behind ``MASK``, since it could otherwise attend to the very token it must predict."""
    if causal:
        return batch.tokens
    return torch.where(batch.mask, torch.full_like(batch.tokens, MASK), batch.tokens)


def scored_loss(logits: torch.Tensor, batch: Batch, reduction: str = "mean") -> torch.Tensor:
    """Cross-entropy of the scored tokens, each predicted from the position before it."""
    logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)  # (B, L-1, V)
    target = batch.tokens[:, 1:].to(logits.device)  # (B, L-1)
    nll = -logp.gather(-1, target.unsqueeze(-1)).squeeze(-1)  # (B, L-1)
    m = batch.mask[:, 1:].to(logits.device)
    if reduction == "none":
        return torch.where(m, nll, torch.zeros_like(nll))
    return nll[m].mean()


def scored_accuracy(logits: torch.Tensor, batch: Batch) -> float:
    """Fraction of scored tokens whose argmax prediction is right."""
    pred = logits[:, :-1].argmax(-1).cpu()
    m = batch.mask[:, 1:]
    return float((pred == batch.tokens[:, 1:])[m].float().mean())
