"""``byte_tokenizer_json()``: the tokenizer of the app's byte-level models as a ``tokenizer.json``.

Every catalogue model the app trains reads bytes: vocabulary 256, token id = the byte's value. A
checkpoint written from such a model (``models.hf.export``) needs a ``tokenizer.json`` that gives the
same ids, so ``models.hf.load``, ``tokenizers`` and ``transformers`` all read text as the model saw it.

It is byte-level BPE with nothing merged: the ByteLevel pre-tokenizer turns each UTF-8 byte into the
printable character GPT-2's alphabet gives it (without the split regex and without a prefix space, so
the text is not cut into words or changed), the vocabulary maps the character of byte ``b`` to id ``b``,
and there are no merges, so every byte is its own token; the ByteLevel decoder turns the characters back
into bytes. Pieces render through ``models.hf.Tokenizer.piece`` like any byte-level BPE token (a space
as ``␣``, a byte inside a longer UTF-8 character as ``<0xC3>``).
"""

from __future__ import annotations

from .tokenizer import byte_alphabet


def byte_tokenizer_json() -> str:
    """The ``tokenizer.json`` text whose ids are the UTF-8 bytes (256 tokens, no merges, no special tokens)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    chars = byte_alphabet()
    tok = Tokenizer(models.BPE(vocab={chars[b]: b for b in range(256)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    return tok.to_str()
