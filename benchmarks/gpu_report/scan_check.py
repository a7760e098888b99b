"""The correctness check both recurrent scans share (``ssd.py``, ``delta_rule.py``): ours, a float64 recurrence and a
PyTorch yardstick on the same inputs, each returning its output and final state, then the gradients of one random
projection of both with respect to every input."""

from __future__ import annotations

import torch


def scan_check(ins, with_h0: bool, d_out, d_state, ours, recurrence, yardstick, names, dtype, compare) -> tuple:
    """``ins``: the scan's five inputs and the initial state (or None); ``ours`` / ``yardstick``: ``(fn, kwargs)``;
    ``recurrence``: the float64 reference; ``d_out``, ``d_state``: the random cotangents -> ``compare``'s ``(ok,
    checks)`` over ``names`` (output, state, then one gradient per input)."""

    def outputs(fn, ts, **kw):
        out, state = fn(*ts[:5], initial_state=ts[5] if with_h0 else None, return_state=True, **kw)
        loss = (out * d_out.to(out.dtype)).sum() + (state * d_state.to(state.dtype)).sum()
        return [out.detach(), state.detach()] + list(torch.autograd.grad(loss, ts))

    got = outputs(ours[0], ins, **ours[1])
    refs = outputs(recurrence, [t.detach().double().requires_grad_() for t in ins])
    yard = outputs(yardstick[0], [t.detach().requires_grad_() for t in ins], **yardstick[1])
    return compare(names, got, refs, yard, dtype)
