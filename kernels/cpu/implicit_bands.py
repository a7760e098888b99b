"""The implicit attention of a recurrent layer near its diagonal, for every position at once: the dense blocks on
and just below the diagonal of ``A`` cut into blocks of ``W`` positions, from the chunk quantities of the
chunked algorithms (chunks of exactly ``W``), with no initial state.

``blocks(...) -> (diag (B, h, n, W, W), sub (B, h, n, W, W))``: ``diag[k] = A[chunk k, chunk k]`` and
``sub[k] = A[chunk k, chunk k - 1]`` (``sub[0] = 0``), rows the queries, columns the keys; positions past ``L``
are zero padding. Every pair ``(i, j)`` with ``0 <= i - j < W`` lies in one of the two, so the mass within a
window of ``W`` keys (``kernels.cpu.pooled_implicit``) is a masked row sum of them: ``O(L W (W + state))`` in
one batched pass, where cutting the band into separate dense maps costs a Python call per window.

Mamba-2 (``kernels/cpu/ssd.py``: ``M[t, s] = (c_t . b_s) exp(sum_{r=s+1..t} dt_r a) dt_s``), with ``A_t`` the
cumulative ``dt a`` inside a chunk:

    diag[k][t, s] = (c_t . b_s) exp(A_t - A_s) dt_s                         (s <= t)
    sub[k][t, s]  = (c_t . b_s) exp(A_t) exp(A^{k-1}_{W-1} - A^{k-1}_s) dt_s  (s in chunk k - 1)

The gated delta rule (``kernels/cpu/delta_rule.py``: per chunk ``T = (I + strict_lower(diag(beta) K K^T o Gam))^{-1}``,
``attn = Q K^T o Gam_incl``, ``w = T (beta e^G) K``, ``qg = e^G Q``, ``kd = e^{G_end - G} K``): a chunk's output from
its own values is ``attn T diag(beta) v``, and from the state the previous chunk leaves,
``S = kd_{k-1}^T T_{k-1} diag(beta_{k-1}) v_{k-1}``, it is ``(qg_k - attn_k w_k) S``:

    diag[k] = attn_k T_k diag(beta_k),   sub[k] = (qg_k - attn_k w_k) kd_{k-1}^T T_{k-1} diag(beta_{k-1})

``ssd_cells``: Mamba-2's map summed over every pair of position blocks (the pooled map's cells) from the blocks'
states, since a state-space layer's map is semiseparable: a block pair far apart costs ``N`` numbers, not its area.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .delta_rule import _decays, _ut_solve
from .ssd import _groups, segsum


def _shift(t: torch.Tensor) -> torch.Tensor:
    """``(B, h, n, ...)`` -> the same with chunk ``k`` holding chunk ``k - 1`` (chunk 0: zeros)."""
    return F.pad(t, (0,) * (2 * (t.dim() - 3)) + (1, 0))[:, :, :-1]


def ssd_blocks(dt, a, b, c, width: int) -> tuple:
    """``dt (B, h, L)``, ``a (h,)``, ``b, c (B, g, L, N)`` -> ``(diag, sub)`` (module docstring)."""
    h, L = dt.shape[1], dt.shape[2]
    acc = torch.promote_types(dt.dtype, torch.float32)
    W = int(width)
    pad = (-L) % W
    n = (L + pad) // W
    B = dt.shape[0]
    dt = F.pad(dt.to(acc), (0, pad)).view(B, h, n, W)  # padded steps: dt = 0, no decay and no write
    bh = F.pad(_groups(b.to(acc), h), (0, 0, 0, pad)).view(B, h, n, W, -1)  # (B, h, n, W, N)
    ch = F.pad(_groups(c.to(acc), h), (0, 0, 0, pad)).view(B, h, n, W, -1)
    la = dt * a.to(acc)[:, None, None]  # (B, h, n, W)
    cum = la.cumsum(-1)
    diag = (ch @ bh.transpose(-1, -2)) * torch.exp(segsum(la)) * dt[..., None, :]  # (B, h, n, W, W)
    left = _shift(torch.exp(cum[..., -1:] - cum) * dt)  # (B, h, n, W): chunk k - 1's keys decayed to its end
    sub = (ch @ _shift(bh).transpose(-1, -2)) * torch.exp(cum)[..., :, None] * left[..., None, :]
    return diag, sub


def delta_prep(q, k, beta, g, width: int) -> dict:
    """The chunk quantities both :func:`delta_blocks` and :func:`delta_cells` read, for chunks of ``width``: computed
    once when a pooled map needs both (``G``, ``Gam``, ``T diag(beta)``, ``w``, ``attn``, ``kd``, ``q``)."""
    B, h, L, _ = k.shape
    acc = torch.promote_types(k.dtype, torch.float32)
    W = int(width)
    pad = (-L) % W
    n = (L + pad) // W
    q, k = (F.pad(t.to(acc), (0, 0, 0, pad)).view(B, h, n, W, -1) for t in (q, k))  # (B, h, n, W, K)
    beta, g = (F.pad(t.to(acc), (0, pad)).view(B, h, n, W) for t in (beta, g))
    G, gam = _decays(g)  # (B, h, n, W), (B, h, n, W, W)
    eG = G.exp()
    T = _ut_solve(k, beta, gam, torch.eye(W, dtype=acc, device=k.device))  # (B, h, n, W, W): one solve
    return dict(
        q=q,
        G=G,
        eG=eG,
        t_beta=T * beta[..., None, :],  # T diag(beta)
        w=T @ ((beta * eG)[..., None] * k),  # (B, h, n, W, K)
        attn=(q @ k.transpose(-1, -2)) * gam,  # (B, h, n, W, W)
        kd=k * (G[..., -1:] - G).exp()[..., None],  # (B, h, n, W, K)
    )


def delta_blocks(q, k, beta, g, width: int, prep: dict | None = None) -> tuple:
    """``q, k (B, h, L, K)`` (normalised and scaled as the forward takes them), ``beta, g (B, h, L)`` ->
    ``(diag, sub)`` (module docstring); ``prep``: :func:`delta_prep` of the same arguments, if already computed."""
    p = prep if prep is not None else delta_prep(q, k, beta, g, width)
    diag = p["attn"] @ p["t_beta"]
    leaves = p["kd"].transpose(-1, -2) @ p["t_beta"]  # (B, h, n, K, W): the state a chunk leaves, per value of it
    sub = (p["q"] * p["eG"][..., None] - p["attn"] @ p["w"]) @ _shift(leaves)  # (B, h, n, W, W)
    return diag, sub


def window_mass(diag: torch.Tensor, sub: torch.Tensor, length: int) -> torch.Tensor:
    """``W_i = sum_{i - W < j <= i} A_ij`` as ``(B, h, L)`` from :func:`ssd_blocks` / :func:`delta_blocks`."""
    W = diag.shape[-1]
    p = torch.arange(W, device=diag.device)
    own = diag.tril().sum(-1)  # (B, h, n, W): keys j <= i of the row's own chunk
    later = (p[None, :] > p[:, None]).to(sub.dtype)  # previous chunk's keys j' > p: within W of row p
    prev = (sub * later).sum(-1)
    return (own + prev).flatten(2)[..., :length]


def ssd_cells(dt, a, b, c, block: int) -> torch.Tensor:
    """Mamba-2's implicit map summed over every pair of position blocks, ``(B, h, nb, nb)``: ``[u, w] = sum_{t in u}
    sum_{s in w} M[t, s]`` (blocks of ``block`` positions; 0 above the diagonal), from the blocks' states, never
    ``L x L``. A key block ``w`` leaves the state ``S_w = sum_{s in w} exp(A_end - A_s) dt_s b_s`` (``N`` numbers per
    head), a query block ``u`` reads an entering state through ``R_u = sum_{t in u} exp(A_t) c_t``, and between them
    the state decays by the blocks in between: ``[u, w] = (R_u . S_w) exp(sum_{w < r < u} T_r)`` (``T_r``: block
    ``r``'s total ``dt a``), ``O(L N + nb^2 N)``; the diagonal blocks are the dense blocks of :func:`ssd_blocks`."""
    B, h, L = dt.shape
    diag, _ = ssd_blocks(dt, a, b, c, block)  # (B, h, nb, S, S)
    f64 = torch.float64
    S = int(block)
    pad = (-L) % S
    nb = (L + pad) // S
    dtp = F.pad(dt.to(f64), (0, pad)).view(B, h, nb, S)
    bh = F.pad(_groups(b.to(f64), h), (0, 0, 0, pad)).view(B, h, nb, S, -1)  # (B, h, nb, S, N)
    ch = F.pad(_groups(c.to(f64), h), (0, 0, 0, pad)).view(B, h, nb, S, -1)
    cum = (dtp * a.to(f64)[:, None, None]).cumsum(-1)  # (B, h, nb, S)
    leaves = ((torch.exp(cum[..., -1:] - cum) * dtp)[..., None] * bh).sum(-2)  # (B, h, nb, N): S_w
    reads = (torch.exp(cum)[..., None] * ch).sum(-2)  # (B, h, nb, N): R_u
    between = torch.exp(F.pad(segsum(cum[..., -1]), (0, 0, 1, 0))[..., :-1, :])  # [u, w]: sum_{w < r < u} T_r
    cells = (reads @ leaves.transpose(-1, -2)) * between.tril(-1)  # (B, h, nb, nb): strictly below the diagonal
    return cells + torch.diag_embed(diag.to(f64).tril().sum((-1, -2)))


def delta_cells(q, k, beta, g, block: int, prep: dict | None = None) -> torch.Tensor:
    """The gated delta rule's implicit map summed over every pair of position blocks, ``(B, h, nb, nb)`` (as
    :func:`ssd_cells`). Its transitions are ``K x K`` matrices, not scalars, so the map is semiseparable of rank
    ``K``: a key block ``w`` leaves ``l_w = kd_w^T T_w beta_w`` (``K`` numbers: what its values add to the state, per
    unit of value), a block ``r`` carries an entering state on by ``Phi_r = e^{G_end} I - kd_r^T w_r``, and a query
    block ``u`` reads it through ``r_u = sum_{t in u} (e^G q - attn w)_t``: ``[u, w] = r_u^T Phi_{u-1} .. Phi_{w+1}
    l_w``. One walk over the blocks carries all earlier blocks' contributions at once (a ``K x nb`` state),
    ``O(L block K + nb^2 K^2)``, where the indicator-value route costs ``O(L block nb)``."""
    p = prep if prep is not None else delta_prep(q, k, beta, g, block)
    q, eG, t_beta, w, attn, kd = (p[n] for n in ("q", "eG", "t_beta", "w", "attn", "kd"))
    B, h, n = eG.shape[:3]
    f64 = torch.float64
    own = (attn @ t_beta).tril().sum((-1, -2)).to(f64)  # (B, h, n): the diagonal cells
    leaves = (kd.transpose(-1, -2) @ t_beta).sum(-1).to(f64)  # (B, h, n, K): l_w
    reads = (q * eG[..., None] - attn @ w).sum(-2).to(f64)  # (B, h, n, K): r_u
    eye = torch.eye(k.shape[-1], dtype=f64, device=k.device)
    carry = eG[..., -1, None, None].to(f64) * eye - (kd.transpose(-1, -2) @ w).to(f64)  # (B, h, n, K, K): Phi_r
    cells = torch.diag_embed(own)  # (B, h, n, n)
    state = leaves.new_zeros(B, h, k.shape[-1], n)  # (B, h, K, n): what each earlier block left, carried here
    for u in range(1, n):
        state = carry[:, :, u - 1] @ state
        state[..., u - 1] = state[..., u - 1] + leaves[:, :, u - 1]
        cells[:, :, u, :u] = (reads[:, :, u, None, :] @ state[..., :u])[:, :, 0]
    return cells
