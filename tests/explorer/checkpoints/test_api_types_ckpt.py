"""A checkpoint's ``/analyze`` and ``/gradients`` answers match their declared types
(``explorer.app.server.api_types``): the keys only a checkpoint's answer has (its id, the perplexity and loss of a
change) included, each seen (the other keys: ``tests/explorer/app/test_api_types.py``)."""

from api_shapes import Shapes

from explorer.app.api import endpoints as api
from explorer.app.server.api_types import (
    AnalyzeResult,
    AnalyzeWeights,
    GradientsResult,
    LossSummary,
    Perplexity,
    WeightsUsed,
)

TEXT = "The password is Xq7Rv9Lm2; type Xq7Rv9Lm2 again to confirm it."
CHOICE = "checkpoint:tiny"


def test_a_checkpoints_answers_match_their_types(tiny):
    shapes = Shapes()
    changed = api.api_analyze('{"attention": "sliding_window", "window": 3}', TEXT, weights=CHOICE)
    shapes.check(changed, AnalyzeResult, "/analyze with a change")
    shapes.check(api.api_analyze("", TEXT, weights=CHOICE), AnalyzeResult, "/analyze as trained")
    shapes.check(api.api_gradients("", weights=CHOICE, text=TEXT), GradientsResult, "/gradients")
    assert {"checkpoint", "surgery", "perplexity", "loss"} <= shapes.seen[AnalyzeWeights]
    assert "checkpoint" in shapes.seen[WeightsUsed]
    assert shapes.unseen(Perplexity, LossSummary) == {}  # the loss on the text too: TEXT is long enough
