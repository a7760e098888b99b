"""Task generators and their metric against hand-written examples."""
import math

import numpy as np
import pytest
import torch

from explorer.training import tasks as T
from models import ConfigError


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("name,transform", [("copy", lambda x: x), ("reverse", lambda x: x[::-1]),
                                            ("sort", sorted)])
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
        assert row[r:r + n] == row[r + n:] and len(set(row[r:r + n])) == n  # distinct symbols, repeated
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


def test_lm_split_is_heldout_tail():
    data = T.python_docs()
    assert len(data) > 300_000
    train, held = T.split_corpus(data)
    assert train + held == data and abs(len(held) / len(data) - 0.1) < 1e-3
    task = T.get_task("lm", text="abcdefghij" * 20)  # 200 bytes: train 180, held 20
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
