"""The ``span`` view: the learned span of every head, as the layers recorded it."""

import numpy as np
from view_runs import TINY, app_run

from models import ModelConfig


def test_adaptive_span_comes_from_the_layers():
    views, out, _ = app_run(ModelConfig(attention="adaptive_span", max_span=8, span_ramp=4, **TINY))
    s = views.items["span"]
    np.testing.assert_allclose(s.span, np.stack([i.span.numpy() for i in out.layers]))
    assert s.max_span == 8 and set(views.items) == {"approximation", "span"}
