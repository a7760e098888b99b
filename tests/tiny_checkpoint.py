"""A tiny pretrained-format checkpoint for the app's tests, made here without ``transformers``.

``make_checkpoint(folder, **changes)`` builds a random catalogue Llama (RoPE, RMSNorm, SwiGLU, GQA) of a
few thousand parameters, writes it as a Hugging Face Llama folder (``models.hf.export.save_llama``,
float32) with a byte-level BPE ``tokenizer.json`` trained on ``CORPUS`` (so words become multi-byte
pieces such as ``␣password``, unlike the app's byte tokens), and returns ``(model, cfg, tokenizer)``.
Norm weights are moved off 1 so every weight matters. Seeded: the same folder every time.
"""

from pathlib import Path

import torch

from models import ModelConfig, build_model

CORPUS = [
    "The password is Xq7Rv9Lm2; type Xq7Rv9Lm2 again to confirm it. Heads find the first copy. "
    "The quick brown fox jumps over the lazy dog. Attention maps show which token reads which. "
] * 40
VOCAB = 400


def bpe_tokenizer_json(vocab: int = VOCAB) -> str:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[], show_progress=False
    )
    tok.train_from_iterator(CORPUS, trainer)
    return tok.to_str()


def tiny_config(**changes) -> ModelConfig:
    base = dict(
        architecture="decoder_only",
        causal=True,
        position="rope",
        norm="rmsnorm",
        norm_placement="pre",
        ffn="swiglu",
        attention="full",
        vocab_size=VOCAB,
        d_model=32,
        d_ff=64,
        n_layers=2,
        n_heads=4,
        n_kv_heads=2,
        max_len=512,
    )
    return ModelConfig(**{**base, **changes}).validate()


def make_checkpoint(folder, **changes):
    from models.hf.export import save_llama
    from models.hf.tokenizer import Tokenizer

    cfg = tiny_config(**changes)
    torch.manual_seed(0)
    model = build_model(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.1 * torch.randn_like(p))
    folder = Path(folder)
    save_llama(model, cfg, folder, dtype=torch.float32, tokenizer_json=bpe_tokenizer_json())
    return model, cfg, Tokenizer.from_file(folder / "tokenizer.json")
