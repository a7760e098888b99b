"""DeBERTa (He et al. 2021) and TUPE (Ke et al. 2021): the scores their modifiers imply, against the
papers' formulas written per pair in plain Python / PyTorch."""

import math

import pytest
import torch

from kernels.reference import clipped_index, relative_positions
from models import ModelConfig
from models.positions import t5_relative_bucket
from models.positions.untied import TUPE, DeBERTa, deberta_log_bucket


def _implied_scores(q, k, mods):
    """Scores of the modifier convention: ``(q.k + q.rel_k[r]) / sqrt(d_h) + rel_bias + pair_bias``."""
    B, h, lq, dh = q.shape
    lk = k.shape[2]
    k = k.repeat_interleave(h // k.shape[1], dim=1)
    s = q @ k.transpose(-1, -2)
    rel = relative_positions(lq, lk)
    if "rel_k" in mods:
        qr = q @ mods["rel_k"].transpose(-1, -2)  # (B, h, Lq, R)
        s = s + qr.gather(-1, clipped_index(rel, mods["rel_k"].shape[-2]).expand(B, h, lq, lk))
    s = s / math.sqrt(dh)
    if "rel_bias" in mods:
        s = s + mods["rel_bias"][:, rel + lk - 1]
    return s + mods["pair_bias"]


def _bucket(r, size, max_pos):
    """DeBERTa-v2 make_log_bucket_position for one integer, written out."""
    mid = size // 2
    if -mid < r < mid:
        return r
    a = abs(r)
    if a <= mid:
        return r
    return int(math.copysign(math.ceil(math.log(a / mid) / math.log((max_pos - 1) / mid) * (mid - 1)) + mid, r))


@pytest.mark.parametrize("size,max_pos", [(8, 20), (32, 128), (256, 512)])
def test_deberta_log_buckets_match_the_written_out_rule(size, max_pos):
    rel = torch.arange(-3 * max_pos, 3 * max_pos)
    got = deberta_log_bucket(rel, size, max_pos)
    assert got.tolist() == [_bucket(int(r), size, max_pos) for r in rel]
    assert int(got[rel == max_pos - 1]) == size - 1  # the last log bucket at max_position - 1


def _cfg(**kw):
    return ModelConfig(**{"d_model": 12, "n_heads": 3, "n_layers": 2, "max_len": 32, **kw})


@pytest.mark.parametrize("n_kv,prefix", [(3, 0), (1, 4)])
def test_deberta_scores_are_the_three_disentangled_terms(n_kv, prefix):
    cfg = _cfg(deberta_buckets=4, deberta_max_distance=9)
    mod = DeBERTa(cfg).double()
    g = torch.Generator().manual_seed(0)
    B, h, dh, lq = 2, 3, 4, 7
    lk = lq + prefix
    q = torch.randn(B, h, lq, dh, generator=g, dtype=torch.float64)
    k = torch.randn(B, n_kv, lk, dh, generator=g, dtype=torch.float64)
    q2, k2, mods = mod.modify(q, k, layer=1)
    got = _implied_scores(q2, k2, mods)
    S = 4
    kr = (mod.rel_embed @ mod.w_kr[1].weight.T).view(2 * S, h, dh)
    qr = (mod.rel_embed @ mod.w_qr[1].weight.T).view(2 * S, h, dh)
    want = torch.empty_like(got)
    for b in range(B):
        for n in range(h):
            kv = n // (h // n_kv)
            for i in range(lq):
                ia = i + prefix  # absolute position of the query among the keys
                for j in range(lk):
                    dc = min(max(_bucket(ia - j, 4, 9) + S, 0), 2 * S - 1)
                    dp = min(max(-_bucket(ia - j, 4, 9) + S, 0), 2 * S - 1)
                    want[b, n, i, j] = (
                        q[b, n, i] @ k[b, kv, j] + q[b, n, i] @ kr[dc, n] + k[b, kv, j] @ qr[dp, n]
                    ) / math.sqrt(3 * dh)
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("relative", [False, True])
@pytest.mark.parametrize("causal", [True, False])
def test_tupe_scores_are_the_untied_word_and_position_correlations(relative, causal):
    cfg = _cfg(tupe_relative=relative, causal=causal, t5_num_buckets=8, t5_max_distance=16)
    mod = TUPE(cfg, t5_relative_bucket).double()
    if relative:
        with torch.no_grad():
            mod.bias.normal_()
    g = torch.Generator().manual_seed(1)
    B, h, dh, lq, lk, k_start = 2, 3, 4, 5, 9, 3
    q = torch.randn(B, h, lq, dh, generator=g, dtype=torch.float64)
    k = torch.randn(B, h, lk, dh, generator=g, dtype=torch.float64)
    x = torch.randn(B, 6, 12, dtype=torch.float64)
    assert torch.equal(mod.embed(x, torch.arange(6)), x)  # untied: nothing enters the embeddings
    q2, k2, mods = mod.modify(q, k, layer=0, k_start=k_start)
    got = _implied_scores(q2, k2, mods)
    uq = mod.table @ mod.u_q.weight.T  # (max_len, h * d_h)
    uk = mod.table @ mod.u_k.weight.T
    want = torch.empty_like(got)
    for n in range(h):
        for i in range(lq):
            pi = k_start + lk - lq + i  # absolute position of query i
            for j in range(lk):
                pj = k_start + j
                pos = uq[pi, n * dh : (n + 1) * dh] @ uk[pj, n * dh : (n + 1) * dh]
                bias = 0.0
                if relative:
                    bias = mod.bias[t5_relative_bucket(torch.tensor(pj - pi), not causal, 8, 16), n]
                want[:, n, i, j] = (
                    (q[:, n, i] @ k[:, n, j].T).diagonal() / math.sqrt(2 * dh) + pos / math.sqrt(2 * dh) + bias
                )
    torch.testing.assert_close(got, want)


def test_tupe_positions_past_its_table_are_a_config_error():
    from models import ConfigError

    mod = TUPE(_cfg(max_len=8), t5_relative_bucket)
    q = torch.randn(1, 3, 4, 4)
    with pytest.raises(ConfigError, match="max_len"):
        mod.modify(q, q, layer=0, k_start=6)


def test_tupe_keys_before_position_zero_get_no_position_term():
    """Learned memory tokens are prepended at negative positions: only their word term remains."""
    mod = TUPE(_cfg(), t5_relative_bucket)
    q, k = torch.randn(1, 3, 4, 4), torch.randn(1, 3, 6, 4)
    _, _, mods = mod.modify(q, k, layer=0, k_start=-2)
    assert (mods["pair_bias"][..., :2] == 0).all() and (mods["pair_bias"][..., 2:] != 0).all()


def test_deberta_and_tupe_send_gradients_to_every_parameter():
    for mod in (DeBERTa(_cfg()), TUPE(_cfg(tupe_relative=True), t5_relative_bucket)):
        q = torch.randn(1, 3, 6, 4, requires_grad=True)
        k = torch.randn(1, 3, 6, 4, requires_grad=True)
        q2, k2, mods = mod.modify(q, k, layer=0)
        _implied_scores(q2, k2, mods).softmax(-1).pow(2).sum().backward()
        for name, p in mod.named_parameters():
            if name.startswith("w_kr.1") or name.startswith("w_qr.1"):
                continue  # layer 1's projections are not used by layer 0
            assert p.grad is not None and p.grad.abs().sum() > 0, name
