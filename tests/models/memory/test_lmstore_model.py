"""kNN-LM / SPALM through the whole model.

These run once ``knn_lm`` / ``spalm`` are registered, which needs the model to call the memory's
``head_input`` / ``final_logits`` around its head (until then the module is tested on its own in
test_lmstore.py)."""

import pytest
import torch

from models import ModelConfig, build_model, choices
from models.memory.lmstore import StoreState

pytestmark = pytest.mark.skipif(
    "knn_lm" not in choices()["memory"],
    reason="knn_lm / spalm are registered once models/model.py calls the output hook",
)

SMALL = dict(n_layers=2, d_model=32, n_heads=4, segment_len=8, knn_size=64, knn_k=1, causal=True)


@pytest.mark.parametrize("memory", ["knn_lm", "spalm"])
def test_with_an_empty_store_the_model_equals_the_plain_model(memory):
    plain = build_model(ModelConfig(**SMALL))
    mem = build_model(ModelConfig(**SMALL, memory=memory))
    mem.load_state_dict(plain.state_dict(), strict=False)
    t = torch.randint(0, 256, (2, 8), generator=torch.Generator().manual_seed(0))  # one segment
    torch.testing.assert_close(mem(t).logits, plain(t).logits)


def test_knn_lm_store_holding_the_exact_context_gives_lambda_plus_lm_share():
    cfg = ModelConfig(**SMALL, memory="knn_lm", knn_lambda=0.4)
    model = build_model(cfg).eval()
    plain = build_model(ModelConfig(**SMALL)).eval()
    plain.load_state_dict(model.state_dict(), strict=False)
    t = torch.randint(0, 256, (1, 8), generator=torch.Generator().manual_seed(1))
    out_plain = plain(t)
    hid = {}
    model.stack.register_forward_hook(lambda m, i, o: hid.setdefault("h", o))
    model(t)
    ctx_h = hid["h"]  # (1, 8, d) final hidden states of this very input from an empty state
    # a store holding exactly position 3's context, paired with a chosen next token
    state = StoreState(
        kind="knn_lm",
        batch_size=1,
        pos=0,
        store_keys=ctx_h[:, 3:4].detach(),
        store_next=torch.tensor([[42]]),
        store_pos=torch.tensor([0]),
        mem_pos=torch.zeros(0, dtype=torch.long),
        cmem_ids=torch.zeros(0, dtype=torch.long),
        cmem_first=torch.zeros(0, dtype=torch.long),
    )
    out = model(t, state=state)
    p = out.logits.exp()
    p_lm = torch.softmax(out_plain.logits, -1)
    want = 0.4 * 1.0 + 0.6 * p_lm[0, 3, 42]
    assert p[0, 3, 42].item() == pytest.approx(want.item(), rel=1e-5)
    torch.testing.assert_close(p.sum(-1), torch.ones(1, 8))


@pytest.mark.parametrize("memory", ["knn_lm", "spalm"])
def test_forward_backward_over_segments(memory):
    model = build_model(ModelConfig(**{**SMALL, "memory": memory, "knn_k": 4}))
    t = torch.randint(0, 256, (2, 30))
    out = model(t)
    out2 = model(t, state=out.state)
    (out2.logits.float().pow(2).mean()).backward()
    assert out2.state.store_size() == 59
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
