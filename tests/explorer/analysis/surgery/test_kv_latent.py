"""The K/V latent conversion (explorer/analysis/surgery/latent.py) against Eckart-Young and the model's own loss."""

import pytest
import torch

from explorer.analysis.surgery import heldout_text, latent, nats_per_token
from models import ModelConfig, build_model


def _model(**kw):
    cfg = ModelConfig(n_layers=2, d_model=32, n_heads=4, vocab_size=256, max_len=64, seed=1, **kw).validate()
    return cfg, build_model(cfg).eval().requires_grad_(False)


def test_ranks_start_at_the_lossless_width_and_stay_below_the_full_one():
    cfg, _ = _model()
    assert latent.ranks(cfg) == [32, 24, 16, 8, 4]  # full 2 h d_h = 64; d = 32 is lossless
    gqa, _ = _model(n_kv_heads=1)  # full 2 * 1 * 8 = 16 < d: no lossless point below it
    assert latent.ranks(gqa) == [8, 6, 4, 2, 1]


def test_each_pair_is_its_best_rank_r_approximation():
    cfg, model = _model()
    r = 5
    low = latent.low_rank_kv(model, r)
    for before, after in zip(latent.projections(model), latent.projections(low)):
        w = torch.cat([before.k_proj.weight, before.v_proj.weight]).double()
        w_r = torch.cat([after.k_proj.weight, after.v_proj.weight]).double()
        assert torch.linalg.matrix_rank(w_r, atol=1e-5) == r
        s = torch.linalg.svdvals(w)
        # Eckart-Young: the error of the best rank-r approximation is the discarded singular values
        assert torch.linalg.matrix_norm(w - w_r) ** 2 == pytest.approx(float((s[r:] ** 2).sum()), rel=1e-4)
        assert torch.equal(before.q_proj.weight, after.q_proj.weight)  # queries untouched


def test_the_lossless_rank_scores_as_the_model_and_the_model_is_not_changed():
    cfg, model = _model()
    keep = {k: v.clone() for k, v in model.state_dict().items()}
    data = list(heldout_text()[:512])
    full = nats_per_token(model, data, 64)
    assert nats_per_token(latent.low_rank_kv(model, cfg.d_model), data, 64) == pytest.approx(full, abs=1e-5)
    assert nats_per_token(latent.low_rank_kv(model, 2), data, 64) != pytest.approx(full, abs=1e-3)
    assert all(torch.equal(keep[k], v) for k, v in model.state_dict().items())


def test_latent_rows_say_their_cache_and_a_model_without_kv_projections_has_none():
    cfg, model = _model()
    rows = latent.latent_rows(model, cfg, list(heldout_text()[:256]), (32,))
    assert [r["rank"] for r in rows] == latent.ranks(cfg)
    assert all(r["cache_bytes_per_token"]["32"] == r["rank"] * cfg.n_layers * 2 for r in rows)
    mla, mla_model = _model(attention="mla")
    assert latent.latent_rows(mla_model, mla, [1, 2, 3], (2,)) == []
