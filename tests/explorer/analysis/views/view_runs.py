"""What the variant-view tests share: small configs, texts, and two ways to get a config's views
with the forward pass they were read from (the model is seeded, so both ways see the same weights)."""

import torch

from explorer.analysis import attention_maps
from explorer.analysis.views import compute_views
from explorer.runtime.tokens import token_label
from models import build_model
from models.layers.feedback import sublayer_input

TINY = dict(n_layers=2, d_model=16, n_heads=2)
TEXT = "hello world, it's me"  # 20 bytes
TINY_ROPE = dict(TINY, position="rope")
REPEATED_TEXT = "the cat sat; the cat sat; the cat sat on the mat"  # repeats give retrieval something to find


def app_run(cfg, text: str = TEXT):
    """(views as the app computes them, an independent forward pass of the same model, that model)."""
    views = attention_maps(cfg, text).views
    model = build_model(cfg).eval()
    with torch.no_grad():
        out = model(torch.tensor([list(text.encode())]), return_attention=True)
    return views, out, model


def model_run(cfg, ids: list, edit=None):
    """(views, model output, model) for the byte ``ids``; ``edit(model)`` may set weights first."""
    model = build_model(cfg).eval()
    if edit is not None:
        with torch.no_grad():
            edit(model)
    with torch.no_grad():
        out = model(torch.tensor([ids]), return_attention=True)
    return compute_views(cfg, out.layers, [token_label(b) for b in ids]), out, model


def softmax64(s):
    return torch.softmax(s.double(), -1)


def block_values(block, info, cfg):
    """``V (1, h, L, d_h)`` of a standard block, from the stream entering it (no memory)."""
    x = sublayer_input(block.res_attn, info.input)
    return block.attn.v_proj(x).view(1, x.shape[1], cfg.n_heads, cfg.d_head).transpose(1, 2)
