"""The unigram figures of explorer.runtime.corpus against a direct count, and what they say about the split.

Reference: the entropy and cross-entropy written out from ``bytes.count`` over the 256 byte values.
"""

import hashlib
import json
import math
from pathlib import Path

import pytest

from explorer.runtime import corpus


def _direct_entropy(data: bytes) -> float:
    n = len(data)
    return -sum(data.count(b) / n * math.log(data.count(b) / n) for b in range(256) if data.count(b))


def _direct_loss(train: bytes, held: bytes) -> float:
    total = len(train) + 256
    return -sum(math.log((train.count(b) + 1) / total) for b in held) / len(held)


def test_unigram_entropy_is_the_direct_count():
    text = b"abracadabra, the quick brown fox\n\x00\xff"
    assert corpus.unigram_entropy(text) == pytest.approx(_direct_entropy(text), rel=1e-12)
    assert corpus.unigram_entropy(b"aaaa") == 0.0
    assert corpus.unigram_entropy(bytes(range(256))) == pytest.approx(math.log(256))


def test_unigram_loss_is_the_direct_count_with_one_extra_count_per_byte():
    train, held = b"hello world, hello bytes", b"held out: new bytes!"
    assert corpus.unigram_loss(train, held) == pytest.approx(_direct_loss(train, held), rel=1e-12)
    assert corpus.unigram_loss(train, b"q") == pytest.approx(math.log(len(train) + 256))  # never seen


def test_the_documentation_split_has_the_unigram_figures_the_docs_cite():
    """docs/training.md: the post-LN stall (3.31 nats/byte held-out) is the byte-frequency model's loss."""
    data = corpus.python_docs()
    manifest = json.loads((Path(__file__).resolve().parents[3] / "assets/bundles/default.json").read_text())
    if hashlib.sha256(data).hexdigest() != manifest["data"]["sha256"]:
        pytest.skip("this Python's pydoc_data.topics differs from the one the docs measured")
    train, held = corpus.split_corpus(data)
    assert round(corpus.unigram_entropy(train), 2) == 3.26
    assert round(corpus.unigram_loss(train, held), 2) == 3.30
    assert corpus.unigram_entropy(train) < corpus.unigram_loss(train, held) < math.log(256)
