"""A/B comparison of two configurations: which fields differ (the Compare tab's table, ``/compare_ab``),
and everything the tab draws for both sides, computed in at most one GPU call (``compare_pair``)."""

from __future__ import annotations

import json

from explorer.analysis.common import finite
from explorer.analysis.common.memo import fetch
from explorer.analysis.cost.summary import summary_request
from explorer.analysis.gradients.norms import gradients_request
from explorer.analysis.maps.attention import maps_request
from explorer.analysis.weights.trained import TrainedWeights
from explorer.runtime.configs import as_config
from models import ModelConfig
from models.architectures import arrangement


def config_diff(a: ModelConfig, b: ModelConfig) -> list:
    """``[(field, value in A, value in B)]`` for every ModelConfig field that differs, in field order."""
    da, db = a.to_dict(), b.to_dict()
    return [(k, da[k], db[k]) for k in da if da[k] != db.get(k)]


def compare_pair(
    a,
    b,
    text: str,
    separator: str | None = None,
    weights_a: TrainedWeights | None = None,
    weights_b: TrainedWeights | None = None,
) -> dict:
    """A's and B's attention maps on ``text``, gradient norms and model cards (at B's token count), as
    ``{"maps": (A, B), "gradients": (A, B), "summaries": (A, B)}``: the six analyses of a Compare click,
    those not memoised yet computed in one GPU call (``explorer.analysis.common.memo.fetch``)."""
    maps = (
        maps_request(a, text, separator=separator, weights=weights_a),
        maps_request(b, text, separator=separator, weights=weights_b),
    )
    cfg_b, inp_b = as_config(b), maps[1].args[1]
    seq = max(1, len(inp_b.ids(arrangement(cfg_b).head.reads)))  # B's query tokens: what its maps show
    got = fetch(
        [
            *maps,
            gradients_request(a, weights=weights_a),
            gradients_request(b, weights=weights_b),
            summary_request(a, seq),
            summary_request(b, seq),
        ]
    )
    for m, cfg, w in ((got[0], a, weights_a), (got[1], b, weights_b)):
        finite.refuse(m.nonfinite, "attention maps", cfg, w)
    fresh = [json.loads(json.dumps(r)) for r in got[2:]]  # fresh copies: callers may modify them
    return {"maps": (got[0], got[1]), "gradients": (fresh[0], fresh[1]), "summaries": (fresh[2], fresh[3])}
