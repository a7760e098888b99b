"""Task generators and their metric against hand-written examples."""

import math
import random

import numpy as np
import pytest
import torch

from explorer.training import tasks as T
from models import ConfigError


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("name,transform", [("copy", lambda x: x), ("reverse", lambda x: x[::-1]), ("sort", sorted)])
def test_seq2seq_layout(name, transform):
    b = T.get_task(name).batch(3, 12, _gen())  # n = 5: x(5) SEP answer(5) PAD
    for row, m in zip(b.tokens.tolist(), b.mask.tolist()):
        x = row[:5]
        assert all(t in T.SYMBOLS for t in x)
        assert row[5] == T.SEP and row[11] == T.PAD
        assert row[6:11] == list(transform(x))
        assert m == [False] * 6 + [True] * 5 + [False]


def test_induction_layout_and_ideal_stripe():
    b = T.get_task("induction").batch(16, 20, _gen())
    lengths = set()
    for row, m in zip(b.tokens.tolist(), b.mask.tolist()):
        r = sum(t in T.PREFIX for t in row)  # the lead-in, then x x
        n = (20 - r) // 2
        lengths.add(n)
        assert 5 <= n <= 10 and all(t in T.PREFIX for t in row[:r])
        assert row[r : r + n] == row[r + n :] and len(set(row[r : r + n])) == n  # distinct symbols, repeated
        assert m == [False] * (r + n + 1) + [True] * (n - 1)  # the first token of the copy is unpredictable
    assert len(lengths) > 2  # the copy distance varies: positions alone cannot solve it
    # hand example: lead-in 'p', x = 'ABC': query 5 holds 'B' (earlier at 2): it reads key 3 ('C')
    ideal = T.ideal_induction([ord(c) for c in "pABCABC"])
    assert ideal[5, 3] == 1 and ideal[5].sum() == 1 and ideal[4, 2] == 1 and ideal[6, 4] == 1
    assert ideal[:4].sum() == 0


def test_copy_ideal_is_offset_diagonal():
    ideal = T.ideal_pattern("copy", range(11))  # n = 5; query 5 (SEP) predicts x[0] at key 0
    assert [int(np.argmax(ideal[p])) for p in range(5, 10)] == [0, 1, 2, 3, 4]
    assert ideal[:5].sum() == 0 and ideal[10].sum() == 0


@pytest.mark.parametrize("name", ["recall", "retrieval"])
def test_recall_answers_match_their_keys(name):
    L = 64
    b = T.get_task(name).batch(4, L, _gen(3))
    for row, m in zip(b.tokens.tolist(), b.mask.tolist()):
        sep = row.index(T.SEP)
        facts = {}
        k = 0
        while row[k] in T.KEYS:
            facts[row[k]] = row[k + 1]
            k += 2
        if name == "retrieval":
            assert sep - k == T.retrieval_gap(L) and all(t in T.FILLER for t in row[k:sep])
        scored = [t for t in range(L) if m[t]]
        assert scored
        for t in scored:
            assert row[t - 2] == T.QUERY and row[t] == facts[row[t - 1]]


def _shared_windows(held: bytes, train: bytes, width: int = 64) -> list:
    """The ``width``-byte windows of ``held`` that occur in ``train`` (a set of every window, built here)."""
    seen = set(train[i : i + width] for i in range(len(train) - width + 1))
    return [held[i : i + width] for i in range(len(held) - width + 1) if held[i : i + width] in seen]


def test_no_window_of_the_scored_heldout_text_occurs_in_training():
    """Measure: no 64-byte window of the held-out text, as it is scored (the kept paragraphs joined, so
    windows across joins and short paragraphs count), occurs in the training bytes (a plain 10% tail of
    pydoc_data.topics has 8.5% of its 64-byte windows in the rest; checking paragraph by paragraph left
    116 joined windows), and the held-out text is the tail's paragraphs, in order."""
    data = T.python_docs()
    assert len(data) > 300_000
    train, held = T.split_corpus(data)
    held_paras = T.paragraphs(held)
    assert len(held) > 20_000 and data.startswith(train)
    assert _shared_windows(held, train) == []
    tail = T.paragraphs(data[len(train) :])
    assert set(held_paras) <= set(tail) and len(held_paras) < len(tail)  # some paragraphs were dropped
    assert held == b"\n\n".join(held_paras)


def test_a_join_that_rebuilds_a_training_run_is_not_held_out():
    """Two paragraphs shorter than the window, copied in order from the training part, rebuild a training
    run across their join: the second is dropped (each alone is too short to be checked)."""
    rng = random.Random(1)
    paras = [bytes(rng.choice(b"abcdefghijklmnopqrstuvwxyz ") for _ in range(100)) for _ in range(30)]
    first, second = b"A" + paras[0][:39], b"B" + paras[1][:39]  # 40 bytes each
    paras[5:7], paras[-3:-1] = [first, second], [first, second]
    train, held = T.split_corpus(b"\n\n".join(paras))
    assert first in T.paragraphs(held) and second not in T.paragraphs(held)
    assert (
        _shared_windows(held, train) == []
        and _shared_windows(paras[-4] + b"\n\n" + first + b"\n\n" + second, train) != []
    )


def test_a_repeated_paragraph_is_not_held_out():
    rng = random.Random(0)
    paras = [bytes(rng.choice(b"abcdefghijklmnopqrstuvwxyz ") for _ in range(100)) for _ in range(30)]
    paras[-2] = paras[3]  # a verbatim repeat in the tail
    train, held = T.split_corpus(b"\n\n".join(paras))
    assert paras[3] in T.paragraphs(train) and T.paragraphs(held) == [paras[-3], paras[-1]]


def test_a_short_text_is_split_as_a_contiguous_tail():
    task = T.get_task("lm", text="abcdefghij" * 20)  # 200 bytes, one paragraph: train 180, held 20
    b = task.batch(2, 12, _gen(), "heldout")
    text = ("abcdefghij" * 20).encode()[180:]
    for row in b.tokens.tolist():
        assert bytes(row) in text
    assert b.mask[:, 0].sum() == 0 and b.mask[:, 1:].all()
    with pytest.raises(ConfigError, match="seq_len"):
        task.batch(1, 40, _gen(), "heldout")


def test_loss_and_accuracy_by_hand():
    tokens = torch.tensor([[1, 2, 3]])
    mask = torch.tensor([[False, False, True]])  # only token 3 (predicted at position 1) is scored
    logits = torch.zeros(1, 3, 4)
    logits[0, 1, 3] = math.log(3.0)  # p(3) = 3 / (3 + 3) = 1/2 at position 1
    logits[0, 0, 0] = 100.0  # position 0 is wrong but unscored
    b = T.Batch(tokens, mask)
    assert float(T.scored_loss(logits, b)) == pytest.approx(math.log(2.0), abs=1e-6)
    assert T.scored_accuracy(logits, b) == 1.0
    logits[0, 1, 2] = 10.0
    assert T.scored_accuracy(logits, b) == 0.0


def test_noncausal_input_hides_scored_tokens():
    b = T.get_task("copy").batch(1, 11, _gen())
    seen = T.model_input(b, causal=False)
    assert (seen[b.mask] == T.MASK).all() and torch.equal(seen[~b.mask], b.tokens[~b.mask])
    assert torch.equal(T.model_input(b, causal=True), b.tokens)


def test_seeded_and_validated():
    a = T.get_task("sort").batch(2, 16, _gen(7))
    b = T.get_task("sort").batch(2, 16, _gen(7))
    assert torch.equal(a.tokens, b.tokens)
    with pytest.raises(ConfigError, match="task"):
        T.get_task("nope")
    with pytest.raises(ConfigError, match="seq_len"):
        T.get_task("copy").batch(1, 3, _gen())


@pytest.mark.parametrize("L", [48, 128, 160, 384])
def test_the_induction_string_never_repeats_a_symbol(L):
    b = T.get_task("induction").batch(50, L, _gen(), "train")
    for row, m in zip(b.tokens.tolist(), b.mask.tolist()):
        first = m.index(True) - 1  # the second copy starts one before its first scored token
        n = L - first
        x = row[first - n : first]
        assert row[first:] == x and len(set(x)) == n


def test_the_induction_task_refuses_a_length_it_cannot_serve():
    with pytest.raises(ConfigError, match="seq_len"):
        T.get_task("induction").batch(1, 386, _gen(), "train")


def test_lm_repeat_repeats_random_strings_in_training_windows_only():
    task = T.get_task("lm_repeat")
    b = task.batch(64, 128, _gen(), "train")
    repeated = 0
    for row, m in zip(b.tokens.tolist(), b.mask.tolist()):
        n = next((k for k in range(8, 33) if row[k:] == (row[:k] * (128 // k + 1))[k:128]), None)
        if n is None:
            assert all(m[1:])  # a plain window: every byte but the first scored
            continue
        repeated += 1
        assert all(32 <= t <= 126 for t in row[:n])  # printable bytes
        assert not any(m[:n]) and all(m[n:])  # the first copy is not scored, its repeats are
    assert 16 <= repeated <= 48  # about half of 64 (REPEAT_FRACTION)
    held = task.batch(64, 128, _gen(), "heldout")
    docs = T.split_corpus(T.python_docs())[1]
    assert all(bytes(r) in docs for r in held.tokens.tolist()) and held.mask[:, 1:].all()
