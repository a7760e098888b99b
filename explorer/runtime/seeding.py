"""One lock around every use of torch's process-wide RNG in the app.

``build_model`` seeds the *global* RNG (``fork_rng`` + ``manual_seed(cfg.seed)``) and draws the
initial weights from it; the gradient pass seeds it for dropout. The app serves requests from
several threads, so without a lock a build in one request interleaves its draws with a build (or a
``fork_rng`` restore) in another, and the same config gets different weights depending on what
ran next to it (seen as a preset whose maps differ when reached from another preset). Holding
``GLOBAL_RNG`` around those sections makes every model a function of its config alone.
"""
from __future__ import annotations

import threading

from models import build_model

GLOBAL_RNG = threading.RLock()


def build(cfg):
    """``build_model(cfg)`` with the global RNG to itself."""
    with GLOBAL_RNG:
        return build_model(cfg)
