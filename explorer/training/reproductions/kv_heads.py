"""MHA vs GQA vs MQA (Shazeer 2019, "Fast Transformer Decoding"; Ainslie et al. 2023, "GQA"):
fewer K/V heads shrink the cache decoding keeps and the bytes each generated token reads, for a
small cost in quality.

For each ``n_kv_heads`` the same model is trained on the same byte-level LM, then decoded with a
K/V cache: ``prefill`` tokens go through once, each following token runs alone against the cache.
``kv_cache_bytes`` is measured (bytes of the cache tensors actually held after the prefill), the
decode latency is the median per generated token, and the cached decode is checked against the
model's own full forward (max |logit difference| in the settings) so the timing is of the real model.

The decoder (``CachedDecoder``) reuses the model's modules for the standard pre-LN / rope / full
attention stack: the embedding, each block's residual wrappers, projections and FFN, and the
classifier; only the attention of the new tokens against the cache is written here, with PyTorch's
SDPA (``enable_gqa``: grouped heads read their shared K/V without copies).
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.nn.functional as F

from explorer.runtime.stopping import check_stop
from explorer.training.bursts import run_in_bursts
from explorer.training.reproductions.cost import Cost
from explorer.training.trainer import RunConfig, Trainer
from models import ConfigError, ModelConfig
from models.positions import apply_rope

TITLE = "MHA vs GQA vs MQA: KV cache, decode latency, quality"
COST = Cost(seconds=29, peak_bytes=261230592)  # python -m benchmarks.repro_costs kv_heads
COLUMNS = ["n_kv_heads", "kind", "kv_cache_bytes", "decode_ms_per_token", "quality", "heldout_loss"]


def settings(quick: bool) -> dict:
    if quick:
        return {
            "n_layers": 1,
            "d_model": 32,
            "n_heads": 4,
            "kv_heads": [4, 1],
            "seq_len": 16,
            "batch_size": 4,
            "steps": 2,
            "lr": 3e-3,
            "prefill": 32,
            "decode_tokens": 4,
        }
    return {
        "n_layers": 2,
        "d_model": 128,
        "n_heads": 8,
        "kv_heads": [8, 2, 1],
        "seq_len": 64,
        "batch_size": 16,
        "steps": 150,
        "lr": 3e-3,
        "prefill": 2048,
        "decode_tokens": 32,
    }


class CachedDecoder:
    """Incremental decoding with a K/V cache for a standard, pre-LN, rope, full-attention model."""

    def __init__(self, model):
        cfg = model.cfg
        if (cfg.layer, cfg.norm_placement, cfg.position, cfg.attention, cfg.memory) != (
            "standard",
            "pre",
            "rope",
            "full",
            "none",
        ):
            raise ConfigError(
                "config",
                cfg.attention,
                "the standard pre-LN rope full-attention stack for the cached decoder of this reproduction",
            )
        self.model, self.cfg = model.eval(), cfg
        self.k = [None] * cfg.n_layers  # per layer (B, h_kv, T, d_h)
        self.v = [None] * cfg.n_layers

    def cache_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.k + self.v if t is not None)

    @torch.no_grad()
    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits of ``tokens (B, T)`` that follow the cached ones; the cache grows by ``T``."""
        m = self.model
        B, T = tokens.shape
        start = 0 if self.k[0] is None else self.k[0].shape[2]
        pos = torch.arange(start, start + T)
        x = m.embed(tokens)  # (B, T, d); rope adds nothing to the embedding
        for n, block in enumerate(m.stack.blocks):
            x = block.res_attn(x, lambda h, n=n, a=block.attn: self._attend(a, h, n, pos))
            if block.ffn is not None:
                x = block.res_ffn(x, lambda h, f=block.ffn: f(h, tokens)[0])
        return m.classify(x)

    def _attend(self, attn, h, n, pos):
        cfg = self.cfg
        B, T, _ = h.shape
        q = attn.q_proj(h).view(B, T, cfg.n_heads, cfg.d_head).transpose(1, 2)  # (B, h, T, d_h)
        k = attn.k_proj(h).view(B, T, cfg.kv_heads, cfg.d_head).transpose(1, 2)  # (B, h_kv, T, d_h)
        v = attn.v_proj(h).view(B, T, cfg.kv_heads, cfg.d_head).transpose(1, 2)
        q, k = apply_rope(q, pos, cfg.rope_base), apply_rope(k, pos, cfg.rope_base)
        if self.k[n] is not None:
            k, v = torch.cat([self.k[n], k], dim=2), torch.cat([self.v[n], v], dim=2)
        self.k[n], self.v[n] = k, v
        Lk = k.shape[2]
        allowed = torch.arange(Lk)[None, :] <= pos[:, None]  # (T, Lk) causal against the cache
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, enable_gqa=cfg.kv_heads != cfg.n_heads)
        return attn.out_proj(y.transpose(1, 2).reshape(B, T, cfg.n_heads * cfg.d_head))  # (B, T, d)


def decode_check(model, tokens: torch.Tensor) -> float:
    """max |logits| difference of prefill + one-token steps vs the model's full forward."""
    dec = CachedDecoder(model)
    half = tokens.shape[1] // 2
    parts = [dec.step(tokens[:, :half])] + [dec.step(tokens[:, t : t + 1]) for t in range(half, tokens.shape[1])]
    with torch.no_grad():
        full = model(tokens).logits
    return float((torch.cat(parts, dim=1) - full).abs().max())


def decode_latency(model, prefill: int, n_tokens: int) -> tuple:
    """(cache bytes after the prefill, median ms per generated token) for greedy decoding."""
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(32, 127, (1, prefill), generator=gen)
    dec = CachedDecoder(model)
    logits = dec.step(prompt)
    cache = dec.cache_bytes()
    times = []
    for _ in range(n_tokens):
        check_stop()
        nxt = logits[:, -1:].argmax(-1)
        t0 = time.perf_counter()
        logits = dec.step(nxt)
        times.append((time.perf_counter() - t0) * 1e3)
    return cache, statistics.median(times)


def _trainer(s: dict, kv: int, threads: int = 1) -> Trainer:
    cfg = ModelConfig(
        n_layers=s["n_layers"],
        d_model=s["d_model"],
        n_heads=s["n_heads"],
        n_kv_heads=kv,
        position="rope",
        max_len=max(s["prefill"] + s["decode_tokens"], s["seq_len"]),
        seed=0,
    )
    rc = RunConfig(
        task="lm",
        steps=s["steps"],
        lr=s["lr"],
        warmup=s["steps"] // 10,
        batch_size=s["batch_size"],
        seq_len=s["seq_len"],
        every=s["steps"],
        seed=0,
        threads=threads,
        grad_norms=False,
        probe=False,
    )
    return Trainer(cfg, rc)


def first_trainer(quick: bool = False, threads: int = 1) -> Trainer:
    """The run's first trainer, as ``run`` builds it (``explorer.training.reproductions.stored.replay``)."""
    s = settings(quick)
    return _trainer(s, s["kv_heads"][0], threads)


def run(quick: bool = False, threads: int = 1, progress=lambda _m: None) -> dict:
    s = settings(quick)
    rows, check = [], 0.0
    for kv in s["kv_heads"]:
        trainer = _trainer(s, kv, threads)
        # GPU bursts where there is a GPU; ``snap`` keeps the last snapshot, read after the loop
        for snap in run_in_bursts(trainer):  # noqa: B007
            pass
        check_stop()
        model = trainer.model.eval()
        check = max(check, decode_check(model, trainer.heldout[0].tokens[:2]))
        cache, ms = decode_latency(model, s["prefill"], s["decode_tokens"])
        kind = "MHA" if kv == s["n_heads"] else "MQA" if kv == 1 else "GQA"
        rows.append(
            {
                "n_kv_heads": kv,
                "kind": kind,
                "kv_cache_bytes": cache,
                "decode_ms_per_token": round(ms, 3),
                "quality": round(snap.heldout_acc, 4),
                "heldout_loss": round(snap.heldout_loss, 4),
            }
        )
        progress(
            f"kv_heads: {kind} ({kv}): cache {cache / 2**20:.2f} MiB, {ms:.2f} ms/token, "
            f"accuracy {snap.heldout_acc:.3f}"
        )
    return {
        "settings": {
            **s,
            "task": "byte LM on pydoc_data.topics",
            "quality": "held-out next-byte accuracy",
            "cache_dtype": "float32",
            "decode_max_abs_diff_vs_forward": check,
            "latency": f"median over {s['decode_tokens']} greedy tokens after a {s['prefill']}-token prefill, batch 1",
        },
        "rows": rows,
    }


def table_rows(result: dict) -> list:
    return result["rows"]


def extra_lines(result: dict) -> list:
    return [
        f"cached decode vs full forward: max |logit diff| = {result['settings']['decode_max_abs_diff_vs_forward']:.2e}"
    ]


def reading(result: dict) -> str:
    rows = result["rows"]
    mha, mqa = rows[0], rows[-1]
    return (
        f"{mqa['kind']} keeps {mqa['kv_cache_bytes'] / mha['kv_cache_bytes']:.0%} of the {mha['kind']} cache "
        f"({mqa['kv_cache_bytes'] / 2**20:.2f} vs {mha['kv_cache_bytes'] / 2**20:.2f} MiB at "
        f"{result['settings']['prefill']} tokens), decodes at {mqa['decode_ms_per_token']:.2f} vs "
        f"{mha['decode_ms_per_token']:.2f} ms/token, and reaches accuracy {mqa['quality']:.3f} vs "
        f"{mha['quality']:.3f} after the same training."
    )
