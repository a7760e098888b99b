"""models.footprint: weights counted on the meta device equal the real model's, for every registry
entry; the activation prediction bounds the peak PyTorch's allocator really reaches."""

import pytest
import torch

from kernels.tools.measure import measure_peak
from models import ConfigError, ModelConfig, build_model, registries
from models.footprint import footprint, weights

SMALL = dict(n_layers=2, d_model=32, n_heads=2)


def _variants():
    for cat, reg in registries().items():
        for key in reg:
            yield cat, key


def _valid(**kw):
    for causal in (True, False):
        try:
            return ModelConfig(**{**SMALL, **kw, "causal": causal}).validate()
        except ConfigError:
            continue
    return None


@pytest.mark.parametrize("cat,key", list(_variants()))
def test_meta_count_equals_the_built_model(cat, key):
    cfg = _valid(**{cat: key})
    if cfg is None:
        pytest.skip(f"{cat}={key}: no valid small config")
    model = build_model(cfg)
    n, pbytes, bbytes, widest = weights(cfg)
    assert n == sum(p.numel() for p in model.parameters())
    assert pbytes == sum(p.numel() * p.element_size() for p in model.parameters())
    assert bbytes == sum(b.numel() * b.element_size() for b in model.buffers())
    assert widest >= cfg.d_model


def test_linformer_projections_are_counted():
    """A Linformer config whose size hides in a product: each E/F projection is max_len x proj_len per layer, which a
    formula of d_model alone misses; counted on meta, nothing is allocated."""
    cfg = ModelConfig(attention="linformer", causal=False, proj_len=4096, max_len=8192, n_layers=12)
    n, pbytes, _, _ = weights(cfg)  # proj_len 65536 is past the library's cap now (4096)
    assert n >= 12 * 2 * 8192 * 4096 and pbytes == 4 * n


@pytest.mark.parametrize("cat,key", list(_variants()))
def test_prediction_bounds_the_measured_peak(cat, key):
    cfg = _valid(**{cat: key})
    if cfg is None:
        pytest.skip(f"{cat}={key}: no valid small config")
    tokens = torch.randint(0, cfg.vocab_size, (2, 48), generator=torch.Generator().manual_seed(0))
    # an encoder-decoder reads a source and a target: the same tokens on both sides
    inputs = (tokens, tokens) if cfg.architecture == "encoder_decoder" else (tokens,)

    def forward():
        model = build_model(cfg).eval()
        with torch.no_grad():
            return model(*inputs, return_attention=True).logits.shape

    def backward():
        model = build_model(cfg).train()
        out = model(*inputs)
        (out.logits.float().logsumexp(-1).mean() + out.aux_loss).backward()
        return out.logits.shape

    _, fwd = measure_peak(forward)
    _, bwd = measure_peak(backward)
    assert 0 < fwd <= footprint(cfg, "attention", 48, 2).total
    assert 0 < bwd <= footprint(cfg, "gradients", 48, 2).total


def test_footprint_grows_with_the_request():
    cfg = ModelConfig(**SMALL)
    a = footprint(cfg, "attention", 64, 1)
    assert footprint(cfg, "attention", 128, 1).activation_bytes > a.activation_bytes
    assert footprint(cfg, "gradients", 64, 8).total > footprint(cfg, "gradients", 64, 1).total
    assert footprint(cfg, "gradients", 64, 1).total >= 2 * a.param_bytes  # weights and their gradients
    with pytest.raises(ValueError):
        footprint(cfg, "bogus", 64, 1)


@pytest.mark.parametrize(
    "attention,position",
    [
        ("full", "rope"),
        ("full", "alibi"),
        ("sliding_window", "rope"),
        ("bigbird", "t5"),
        ("strided", "rope"),
        ("mamba2", "none"),
        ("gated_deltanet", "rope"),
        ("gated_deltanet*3,full", "rope"),
    ],
)
def test_sweep_points_stay_within_the_prediction(attention, position):
    """A sweep point (no weights returned): SDPA, the block-sparse path and a recurrent mixer's chunked scan
    never hold every score, and the prediction counts only the keys they compute; still an upper bound of the
    real peak. (``"gated_deltanet*3,full"``: the hybrid's layer schedule.)"""
    kind = dict(attention="full", layer_schedule=attention, n_layers=4) if "*" in attention else {}
    cfg = ModelConfig(**{"attention": attention, "n_layers": 2, **kind, "position": position, "max_len": 4096})
    cfg = cfg.validate()
    tokens = torch.randint(0, cfg.vocab_size, (1, 1024), generator=torch.Generator().manual_seed(0))

    def step():
        model = build_model(cfg)
        out = model(tokens)
        (out.logits.float().logsumexp(-1).mean() + out.aux_loss).backward()

    _, peak = measure_peak(step)
    fp = footprint(cfg, "forward_backward", 1024, 1)
    assert peak <= fp.total
    if attention != "full" or position == "rope":  # only the computed keys are counted
        assert fp.activation_bytes < footprint(cfg, "attention", 1024, 1).activation_bytes


@pytest.mark.parametrize("kw", [dict(attention="mamba2", position="none"), dict(attention="gated_deltanet")])
def test_a_recurrent_mixers_sweep_prediction_is_linear_in_the_length(kw):
    """Without maps the chunked scan holds one chunk's block and the chunks' states: the prediction of a
    sweep point grows linearly in L (doubling L at most doubles it), not as the L x L map it never forms."""
    cfg = ModelConfig(**kw, n_layers=2, max_len=16384).validate()
    a, b = (footprint(cfg, "forward_backward", n, 1).activation_bytes for n in (4096, 8192))
    assert b <= 2 * a
    assert footprint(cfg, "attention", 4096, 1).activation_bytes > 8 * a  # the maps are L x L
