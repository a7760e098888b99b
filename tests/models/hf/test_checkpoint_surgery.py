"""A loaded checkpoint is an ordinary catalogue model: surgery moves its weights like a bundled model's,
K/V biases included (Qwen2's q/k/v biases are merged with their heads), and tied embeddings survive
through ``state_dict()``."""

import torch

from models.hf import load
from models.surgery import transplant


def test_merging_identical_kv_heads_of_a_checkpoint_with_biases_is_exact(saved):
    ckpt = load(saved("qwen2")[0])
    cfg = ckpt.config
    d_h = cfg.d_head
    with torch.no_grad():  # make K/V head 1 a copy of head 0 in every layer, weights and biases
        for block in ckpt.model.stack.blocks:
            for proj in (block.attn.k_proj, block.attn.v_proj):
                proj.weight[d_h : 2 * d_h] = proj.weight[:d_h]
                proj.bias[d_h : 2 * d_h] = proj.bias[:d_h]
    ids = torch.randint(0, cfg.vocab_size, (2, 10), generator=torch.Generator().manual_seed(0))
    want = ckpt.logits(ids)
    merged = transplant(ckpt.model.state_dict(), cfg, cfg.replace(n_kv_heads=1))
    assert merged.stack.blocks[0].attn.k_proj.bias.shape == (d_h,)
    with torch.no_grad():
        got = merged(ids).logits
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    # a head that is not a copy changes the answer: the test can fail
    with torch.no_grad():
        ckpt.model.stack.blocks[0].attn.k_proj.bias[d_h] += 1.0
    moved = transplant(ckpt.model.state_dict(), cfg, cfg.replace(n_kv_heads=1))
    with torch.no_grad():
        assert not torch.allclose(moved(ids).logits, ckpt.logits(ids), rtol=1e-5, atol=1e-5)


def test_a_tied_checkpoint_moves_through_its_state_dict(saved):
    ckpt = load(saved("smollm")[0])
    assert ckpt.model.head.weight is ckpt.model.embed.weight  # one parameter, as in the checkpoint
    cfg = ckpt.config
    window = transplant(ckpt.model.state_dict(), cfg, cfg.replace(attention="sliding_window", window=64))
    ids = torch.randint(0, cfg.vocab_size, (1, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():  # a window wider than the text is full attention
        torch.testing.assert_close(window(ids).logits, ckpt.logits(ids), rtol=1e-5, atol=1e-5)
