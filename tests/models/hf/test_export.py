"""``models.hf.export.save_llama`` and ``byte_tokenizer_json``: a catalogue model written as a Hub Llama
folder reads back through ``models.hf.load`` as the same model (float32: the same logits; bfloat16: the
logits of the weights rounded to bfloat16), and ``transformers``' own Llama / Mistral read from the
folder gives our logits (1e-4 relative); its tensors are named and shaped as ``transformers`` itself
saves them; the byte tokenizer's ids are the UTF-8 bytes in every reader; a config a Llama cannot
express is refused naming the field."""

import copy
import json

import pytest
import torch
from safetensors import safe_open
from tokenizers import Tokenizer as HFTokenizer

from models import ConfigError, ModelConfig, build_model
from models.hf import Tokenizer, load
from models.hf.byte_tokenizer import byte_tokenizer_json
from models.hf.export import save_llama

transformers = pytest.importorskip("transformers")

RTOL = 1e-4
TEXT = "héllo wörld\n"
LLAMA = ModelConfig(
    vocab_size=256,
    max_len=64,
    n_layers=2,
    d_model=32,
    n_heads=4,
    n_kv_heads=2,
    norm="rmsnorm",
    ffn="swiglu",
    position="rope",
    norm_placement="pre",
    attention="full",
    norm_eps=1e-6,
    rope_base=500.0,
)


def rel_err(got, want) -> float:
    return float((got - want).abs().max() / want.abs().max())


def catalogue_model(cfg=LLAMA, tied=False):
    """A random catalogue model of ``cfg``; norms moved off 1 so every weight matters; ``tied``: the head
    shares the embedding's Parameter (as ``models.hf.load`` ties a checkpoint's)."""
    model = build_model(cfg).eval()
    if tied:
        model.head.weight = model.embed.weight
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.1 * torch.randn(p.shape, generator=g))
    return model


def ids(B=2, L=12, seed=3):
    return torch.randint(0, 256, (B, L), generator=torch.Generator().manual_seed(seed))


def logits(model, x):
    with torch.no_grad():
        return model(x).logits


@pytest.mark.parametrize("tied", [False, True])
def test_float32_export_loads_as_the_same_model(tmp_path, tied):
    model = catalogue_model(tied=tied)
    save_llama(model, LLAMA, tmp_path, dtype=torch.float32)
    ckpt = load(tmp_path)
    assert ckpt.family == "llama"
    assert ckpt.n_params == sum(p.numel() for p in model.parameters())  # a tied head counted once, as here
    assert (ckpt.model.head.weight is ckpt.model.embed.weight) == tied
    x = ids()
    assert rel_err(ckpt.logits(x), logits(model, x)) < 1e-6


@pytest.mark.parametrize("tied", [False, True])
def test_bfloat16_export_is_the_model_rounded_to_bfloat16(tmp_path, tied):
    model = catalogue_model(tied=tied)
    save_llama(model, LLAMA, tmp_path)  # bfloat16 by default
    with safe_open(str(tmp_path / "model.safetensors"), "pt") as f:
        assert f.metadata() == {"format": "pt"}
        assert {f.get_slice(k).get_dtype() for k in f.keys()}  # noqa: SIM118 (safe_open is not iterable) == {"BF16"}
    rounded = copy.deepcopy(model)
    with torch.no_grad():
        for p in rounded.parameters():
            p.copy_(p.to(torch.bfloat16).float())
    x = ids()
    got = load(tmp_path).logits(x)
    assert rel_err(got, logits(rounded, x)) < 1e-6
    assert rel_err(got, logits(model, x)) > 1e-5  # the rounding is real: the check above can fail


@pytest.mark.parametrize("tied", [False, True])
def test_tensor_names_and_config_are_what_transformers_saves(tmp_path, tied):
    model = catalogue_model(tied=tied)
    save_llama(model, LLAMA, tmp_path / "ours", dtype=torch.float32, extra={"bos_token_id": 10, "eos_token_id": 10})
    hf = transformers.LlamaForCausalLM.from_pretrained(tmp_path / "ours")
    assert (hf.config.bos_token_id, hf.config.eos_token_id, hf.config.tie_word_embeddings) == (10, 10, tied)
    hf.save_pretrained(tmp_path / "theirs", safe_serialization=True)

    def header(folder):
        with safe_open(str(folder / "model.safetensors"), "pt") as f:
            return {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}  # noqa: SIM118 (safe_open is not iterable)

    assert header(tmp_path / "ours") == header(tmp_path / "theirs")
    ours = json.loads((tmp_path / "ours" / "config.json").read_text())
    assert ours["architectures"] == ["LlamaForCausalLM"] and ours["torch_dtype"] == "float32"


@pytest.mark.parametrize(
    "change", [{}, {"tied": True}, {"rope_scale": 4.0}, {"n_kv_heads": 1}, {"attention": "sliding_window", "window": 4}]
)
def test_transformers_reads_the_same_logits(tmp_path, change):
    change = dict(change)
    tied = change.pop("tied", False)
    cfg = LLAMA.replace(**change)
    model = catalogue_model(cfg, tied=tied)
    save_llama(model, cfg, tmp_path, dtype=torch.float32)
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).eval()
    assert type(hf).__name__ == ("MistralForCausalLM" if cfg.attention == "sliding_window" else "LlamaForCausalLM")
    x = ids(L=16)
    with torch.no_grad():
        want = hf(input_ids=x).logits
    assert rel_err(load(tmp_path).logits(x), want) < RTOL
    assert rel_err(logits(model, x), want) < RTOL


@pytest.fixture(scope="module")
def byte_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("bytes") / "tokenizer.json"
    path.write_text(byte_tokenizer_json(), encoding="utf-8")
    return path


@pytest.mark.parametrize("text", [TEXT, "  two  spaces\tand 🙂 東京", "x"])
def test_byte_tokenizer_ids_are_the_utf8_bytes(byte_file, text):
    want = list(text.encode("utf-8"))
    ours = Tokenizer.from_file(byte_file)
    theirs = HFTokenizer.from_str(byte_file.read_text(encoding="utf-8"))
    fast = transformers.PreTrainedTokenizerFast(tokenizer_file=str(byte_file))
    assert ours.encode(text) == theirs.encode(text).ids == fast(text)["input_ids"] == want
    assert ours.decode(want) == theirs.decode(want) == fast.decode(want) == text
    assert ours.vocab_size == theirs.get_vocab_size() == len(fast) == 256


def test_byte_tokenizer_pieces_are_readable(byte_file):
    tok = Tokenizer.from_file(byte_file)
    assert tok.byte_level
    assert tok.pieces(list(TEXT.encode())) == [
        "h",
        "<0xC3>",
        "<0xA9>",
        "l",
        "l",
        "o",
        "␣",
        "w",
        "<0xC3>",
        "<0xB6>",
        "r",
        "l",
        "d",
        "↵",
    ]
    assert tok.pieces([9, 65, 0x7F]) == ["⇥", "A", "<0x7F>"]
    assert [tok.decode([b]).encode("utf-8") for b in range(128)] == [bytes([b]) for b in range(128)]


def test_checkpoint_carries_the_byte_tokenizer(tmp_path):
    save_llama(catalogue_model(), LLAMA, tmp_path, tokenizer_json=byte_tokenizer_json())
    ckpt = load(tmp_path)
    x = torch.tensor([ckpt.tokenizer.encode(TEXT)])
    assert x[0].tolist() == list(TEXT.encode())
    assert ckpt.logits(x).shape == (1, len(TEXT.encode()), 256)


@pytest.mark.parametrize(
    "field,change",
    [
        ("norm", {"norm": "layernorm"}),
        ("ffn", {"ffn": "gelu"}),
        ("position", {"position": "alibi"}),
        ("norm_placement", {"norm_placement": "post"}),
        ("attention", {"attention": "strided"}),
        ("attn_bias", {"attn_bias": "all"}),
        ("architecture", {"architecture": "encoder_decoder"}),
        ("causal", {"causal": False}),
        ("softcap", {"softcap": 30.0}),
        ("memory", {"memory": "xl"}),
        ("n_sinks", {"attention": "sliding_window", "n_sinks": 2}),
    ],
)
def test_a_config_a_llama_cannot_express_is_refused_by_name(tmp_path, field, change):
    cfg = LLAMA.replace(**change).validate()
    with pytest.raises(ConfigError) as e:
        save_llama(build_model(cfg), cfg, tmp_path)
    assert e.value.field == field
    assert not (tmp_path / "model.safetensors").exists()


def test_extra_cannot_override_a_derived_key(tmp_path):
    with pytest.raises(ConfigError) as e:
        save_llama(catalogue_model(), LLAMA, tmp_path, extra={"hidden_size": 64})
    assert e.value.field == "extra" and e.value.value == "hidden_size"
