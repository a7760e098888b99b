"""What the figures say about their own curves (a leaf module of the figures; numpy only): curves that
coincide and why, exact zeros, and where a failed sweep length sits on its own curve."""

from __future__ import annotations

import numpy as np

ZERO_WHY = {"rezero": "its residual gate α starts at 0, so no gradient reaches the branch weights"}


def coinciding(results: dict, key: str, rtol: float = 1e-4) -> list:
    """Groups (of 2 or more) of placements whose per-layer norms in panel ``key`` agree to ``rtol``."""
    groups = []
    for name, r in results.items():
        vals = np.array([np.nan if v is None else v for v in r[key]], dtype=np.float64)
        if not vals.size:
            continue
        for g in groups:
            ref = g[1]
            if ref.shape == vals.shape and np.allclose(vals, ref, rtol=rtol, atol=0, equal_nan=True):
                g[0].append(name)
                break
        else:
            groups.append(([name], vals))
    return [names for names, _ in groups if len(names) > 1]


def coincidence_notes(results: dict, panels) -> list:
    """Why curves of ``figures.gradients.gradient_figure`` lie on top of each other: exact zeros, identical norms.
    ``panels``: ``((key, label), ...)`` of the figure's panels."""
    notes = []
    for key, label in panels:
        for names in coinciding(results, key):
            vals = results[names[0]][key]
            if all(v == 0 for v in vals if v is not None):
                continue  # said with the zeros below
            notes.append(f"{' = '.join(names)} coincide in {label.split(' ‖')[0]} (identical norms)")
    zeros = {}
    for name, r in results.items():
        where = [
            label.split(" ‖")[0] for key, label in panels if r[key] and all(v == 0 for v in r[key] if v is not None)
        ]
        if where:
            zeros[name] = where
    for name, where in zeros.items():
        why = ZERO_WHY.get(name, "no gradient reaches these weights at initialisation")
        notes.append(f"{name} is exactly 0 in {' and '.join(where)} (drawn on the bottom edge); {why}")
    return notes


def failure_y(ok: list, key: str, scale: float, slope, seq_len: int) -> float:
    """Where a failed length sits on its own curve: the curve extended from its last point with the
    fitted slope (or 1 with a single point); a curve without any point puts it at 1."""
    if not ok:
        return 1.0
    last = max(ok, key=lambda r: r["seq_len"])
    power = slope if slope is not None and slope > 0 else 1.0
    return last[key] * scale * (seq_len / last["seq_len"]) ** power


def same_curve(current: list, baseline: list) -> bool:
    """Both curves measured at the same lengths and within 5% of each other in time and memory."""
    a = {r["seq_len"]: r for r in current if r["status"] == "ok"}
    b = {r["seq_len"]: r for r in baseline if r["status"] == "ok"}
    if len(a) < 2 or set(a) != set(b):
        return False
    return all(
        a[n].get(k) and b[n].get(k) and abs(a[n][k] - b[n][k]) <= 0.05 * max(a[n][k], b[n][k])
        for n in a
        for k in ("ms", "peak_bytes")
    )
