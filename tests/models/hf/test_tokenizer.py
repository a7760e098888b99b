"""The checkpoint's tokenizer: tokenizer.json read through ``tokenizers`` (built here, nothing downloaded),
text round-trips, and every piece is drawn readably (a space as ␣, a newline as ↵, WordPiece's ##
kept), checked against the bytes each piece stands for."""

import pytest
import torch
from hf_models import make
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, normalizers, pre_tokenizers, trainers

from models import ConfigError
from models.hf import Tokenizer, load
from models.hf.tokenizer import byte_alphabet, render

CORPUS = [
    "def main():\n    return 42\n",
    "The quick brown fox jumps over the lazy dog.",
    "naïve café — 東京 🙂",
    "tabs\tand  double  spaces\n\nnewlines",
] * 20
TEXTS = ["def fox():\n\treturn 'café'", "東京 🙂 the dog", "  leading spaces\n", "x"]


@pytest.fixture(scope="module")
def byte_bpe_file(tmp_path_factory):
    tok = HFTokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        CORPUS,
        trainers.BpeTrainer(
            vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=["<|endoftext|>"]
        ),
    )
    path = tmp_path_factory.mktemp("bpe") / "tokenizer.json"
    tok.save(str(path))
    return path


@pytest.fixture(scope="module")
def byte_bpe(byte_bpe_file):
    return Tokenizer.from_file(byte_bpe_file)


@pytest.fixture(scope="module")
def wordpiece(tmp_path_factory):
    tok = HFTokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    tok.train_from_iterator(
        CORPUS, trainers.WordPieceTrainer(vocab_size=200, special_tokens=["[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    )
    path = tmp_path_factory.mktemp("wordpiece") / "tokenizer.json"
    tok.save(str(path))
    return Tokenizer.from_file(path)


def unrender(text: str) -> bytes:
    """The bytes a rendered piece stands for (inverse of the drawing rules)."""
    out, i = b"", 0
    visible = {"␣": " ", "↵": "\n", "⇥": "\t", "␍": "\r"}
    while i < len(text):
        if text.startswith("<0x", i) and text[i + 5 : i + 6] == ">":
            out += bytes([int(text[i + 3 : i + 5], 16)])
            i += 6
        else:
            out += visible.get(text[i], text[i]).encode("utf-8")
            i += 1
    return out


@pytest.mark.parametrize("text", TEXTS)
def test_byte_level_round_trip_and_pieces(byte_bpe, text):
    ids = byte_bpe.encode(text)
    assert byte_bpe.decode(ids) == text
    pieces = byte_bpe.pieces(ids)
    assert len(pieces) == len(ids)
    assert b"".join(unrender(p) for p in pieces) == text.encode("utf-8")  # each piece is its bytes, drawn
    assert all(c not in "".join(pieces) for c in "ĠĊ\n\t ")  # GPT-2's byte letters and raw whitespace never shown


def test_byte_level_pieces_draw_whitespace(byte_bpe):
    ids = byte_bpe.encode("a b\nc")
    joined = "".join(byte_bpe.pieces(ids))
    assert joined == "a␣b↵c"
    emoji = byte_bpe.pieces(byte_bpe.encode("🙂"))  # 4 UTF-8 bytes, rarely one token in a 300-token vocabulary
    assert b"".join(unrender(p) for p in emoji) == "🙂".encode()


def test_special_tokens_are_shown_as_they_are(byte_bpe):
    eot = byte_bpe.tokens.index("<|endoftext|>")
    assert byte_bpe.pieces([eot]) == ["<|endoftext|>"]


def test_wordpiece_keeps_its_continuation_marker(wordpiece):
    ids = wordpiece.encode("jumping quickly")
    pieces = wordpiece.pieces(ids)
    assert pieces == [wordpiece.token(i) for i in ids]
    assert any(p.startswith("##") for p in pieces)
    assert "".join(p.removeprefix("##") if i else p for i, p in enumerate(pieces)) == "jumpingquickly"
    assert wordpiece.decode(ids) == "jumping quickly"


def test_render_rules():
    assert render(b"\xe6\x9d\xb1") == "東"
    assert render(b"\xe6\x9d") == "<0xE6><0x9D>"  # part of a character: its bytes
    assert render(b" \n\t\x00") == "␣↵⇥<0x00>"
    alphabet = byte_alphabet()
    assert alphabet[ord(" ")] == "Ġ" and alphabet[ord("\n")] == "Ċ" and len(set(alphabet.values())) == 256


def test_checkpoint_loads_its_tokenizer(tmp_path, byte_bpe_file):
    make("gpt2", tmp_path, vocab_size=320)  # room for the tokenizer's 300 ids
    (tmp_path / "tokenizer.json").write_bytes(byte_bpe_file.read_bytes())
    ckpt = load(tmp_path)
    ids = ckpt.tokenizer.encode("def fox():\n")
    assert ckpt.tokenizer.decode(ids) == "def fox():\n"
    assert ckpt.logits(torch.tensor([ids])).shape == (1, len(ids), 320)


def test_a_broken_tokenizer_file_is_refused(tmp_path):
    path = tmp_path / "tokenizer.json"
    path.write_text('{"model": {"type": "BPE"}')
    with pytest.raises(ConfigError, match="tokenizer.json"):
        Tokenizer.from_file(path)
