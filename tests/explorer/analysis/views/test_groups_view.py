"""The ``groups`` view: routing clusters are the layers' own assignments, and clustered attention's
k-means query clusters are labelled as such (a query takes its centroid's row over all keys, it is
not confined to its cluster's keys)."""

import numpy as np
from view_runs import TINY, app_run

from explorer.figures import views as pv
from explorer.figures.views import views_reading
from models import ModelConfig


def test_routing_clusters_come_from_the_layers():
    views, out, _ = app_run(ModelConfig(attention="routing", n_clusters=3, **TINY))
    g = views.items["groups"]
    assert g.what == "routing cluster" and g.n_groups == 3
    for i in range(2):
        np.testing.assert_array_equal(g.labels[i], out.layers[i].clusters[0].numpy())


def test_clustered_queries_are_labelled_k_means_query_clusters():
    cfg = ModelConfig(attention="clustered", n_clusters=3, causal=False, position="rope", **TINY)
    views, out, _ = app_run(cfg)
    g = views.items["groups"]
    assert g.what == "k-means query cluster"
    # clustered attention does not confine a query to its cluster's keys: it takes the centroid's row over all keys
    assert "centroid's attention row over all keys" in views_reading(views)
    assert "attends only keys" not in views_reading(views)
    assert "k-means cluster's attention row" in pv.view_figures(views)["groups"].layout.title.text
    assert np.array_equal(g.labels, np.stack([i.clusters[0].numpy() for i in out.layers]))
    assert "groups" in pv.view_figures(views)
