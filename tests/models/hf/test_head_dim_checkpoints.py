"""Checkpoints whose head width is not ``hidden_size / num_attention_heads`` (config.json ``head_dim``: Qwen3's
128 at hidden 1024 and 16 heads, Gemma's 256, gpt-oss's 64) load as the catalogue's ``head_dim`` and give the
logits of ``transformers``' own forward within 1e-4, with and without padding. Qwen3's config class defaults
``head_dim`` to 128: a config.json without the key is read with that width whatever the hidden size is."""

import json

import pytest
import torch
from hf_models import SMALL, make
from test_logits import RTOL, batch, reference, rel_err

from models import ConfigError
from models.hf import load, plan

transformers = pytest.importorskip("transformers")

# (family in hf_models, config changes, the head width transformers builds): 4 heads of 32 hidden
CASES = {
    "llama_wide": ("llama", dict(head_dim=12), 12),  # q, k, v: 48 (K/V: 2 heads, 24), o: 48 -> 32
    "llama_narrow_mha": ("llama", dict(head_dim=4, num_key_value_heads=4), 4),
    "qwen3_wide": ("qwen3", dict(head_dim=16), 16),
    "mistral_wide": ("mistral", dict(head_dim=12), 12),
    "qwen2_wide": ("qwen2", dict(head_dim=12), 12),
    "olmo2_wide": ("olmo2", dict(head_dim=12), 12),
}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    cache = {}

    def get(name):
        if name not in cache:
            family, changes, width = CASES[name]
            folder = tmp_path_factory.mktemp(name)
            hf = make(family, folder, **changes)
            assert hf.model.layers[0].self_attn.head_dim == width  # transformers built the width asked for
            cache[name] = folder, hf, width
        return cache[name]

    return get


def _check_logits(folder, hf, family):
    ckpt = load(folder)
    ids = batch()
    got, want = ckpt.logits(ids), reference(hf, family, ids)
    assert got.shape == want.shape
    assert rel_err(got, want) < RTOL
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0  # the second row is 7 tokens, right-padded
    ids[1, 7:] = 0
    got, want = ckpt.logits(ids, attention_mask=mask), reference(hf, family, ids, mask)
    assert rel_err(got[mask.bool()], want[mask.bool()]) < RTOL
    return ckpt


@pytest.mark.parametrize("name", list(CASES))
def test_a_head_width_of_its_own_gives_transformers_logits(checkpoints, name):
    folder, hf, width = checkpoints(name)
    family = CASES[name][0]
    ckpt = _check_logits(folder, hf, family)
    cfg = ckpt.config
    assert cfg.head_dim == width and cfg.d_head == width and cfg.n_heads * cfg.d_head != cfg.d_model
    attn = ckpt.model.stack.blocks[0].attn
    assert tuple(attn.q_proj.weight.shape) == (cfg.n_heads * width, cfg.d_model)
    assert tuple(attn.out_proj.weight.shape) == (cfg.d_model, cfg.n_heads * width)
    # the estimate is exact: the plan (no allocation), the built model and transformers' model agree
    n = sum(p.numel() for p in hf.parameters())
    assert plan(folder).n_params == ckpt.n_params == cfg.approx_params() == n


def test_qwen3_without_head_dim_reads_the_config_class_default_of_128(tmp_path):
    """Qwen3Config's head_dim is 128 unless given: 4 heads of 128 on a hidden size of 32."""
    config = transformers.Qwen3Config(**SMALL, num_key_value_heads=2)
    assert config.head_dim == 128
    torch.manual_seed(0)
    hf = transformers.Qwen3ForCausalLM(config).eval()
    with torch.no_grad():  # move the norms off 1 so that every weight matters
        for name, p in hf.named_parameters():
            if "norm" in name:
                p.add_(0.1 * torch.randn_like(p))
    hf.save_pretrained(tmp_path, safe_serialization=True)
    path = tmp_path / "config.json"
    hf_cfg = json.loads(path.read_text())
    hf_cfg.pop("head_dim", None)  # as a config.json that relies on the class default
    path.write_text(json.dumps(hf_cfg))
    ckpt = _check_logits(tmp_path, hf, "qwen3")
    assert ckpt.config.head_dim == 128 and ckpt.config.d_head == 128
    assert ckpt.config.approx_params() == sum(p.numel() for p in hf.parameters())


def test_llama_without_head_dim_keeps_the_default_width(tmp_path):
    """Llama's config class derives head_dim = hidden / heads: read back as the catalogue's default (None)."""
    make("llama", tmp_path)
    path = tmp_path / "config.json"
    hf_cfg = json.loads(path.read_text())
    assert hf_cfg.get("head_dim") in (None, 8)
    assert load(tmp_path).config.head_dim is None
    hf_cfg.pop("head_dim", None)
    path.write_text(json.dumps(hf_cfg))
    assert load(tmp_path).config.head_dim is None


def test_a_head_dim_that_does_not_fit_the_weights_is_refused(tmp_path):
    make("llama", tmp_path, head_dim=12)
    path = tmp_path / "config.json"
    hf_cfg = json.loads(path.read_text())
    hf_cfg["head_dim"] = 16  # the weights hold heads of 12
    path.write_text(json.dumps(hf_cfg))
    with pytest.raises(ConfigError) as e:
        load(tmp_path)
    assert "q_proj" in str(e.value)


@pytest.mark.parametrize("family", ["llama", "qwen3"])
@pytest.mark.parametrize("head_dim", [12, 8])  # a width of its own; the default width given explicitly
def test_a_catalogue_model_with_head_dim_exports_and_transformers_reads_it(tmp_path, family, head_dim):
    """``save_llama`` / ``save_qwen3`` write ``head_dim``; transformers and our loader read the same logits."""
    from models import ModelConfig, build_model
    from models.hf.export import save_llama, save_qwen3

    cfg = ModelConfig(
        vocab_size=256,
        max_len=64,
        n_layers=2,
        d_model=32,
        n_heads=4,
        n_kv_heads=2,
        head_dim=head_dim,
        norm="rmsnorm",
        ffn="swiglu",
        position="rope",
        norm_placement="pre",
        attention="full",
        norm_eps=1e-6,
        qk_norm="head" if family == "qwen3" else "none",
    ).validate()
    model = build_model(cfg).eval()
    (save_qwen3 if family == "qwen3" else save_llama)(model, cfg, tmp_path, dtype=torch.float32)
    assert json.loads((tmp_path / "config.json").read_text())["head_dim"] == head_dim
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).eval()
    assert hf.model.layers[0].self_attn.head_dim == head_dim
    x = torch.randint(0, 256, (2, 12), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        want = hf(input_ids=x).logits
        assert rel_err(model(x).logits, want) < RTOL
    back = load(tmp_path)
    assert rel_err(back.logits(x), want) < RTOL
    assert back.config.head_dim == (None if head_dim == 8 else head_dim)
