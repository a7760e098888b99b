"""Variant views: what is special about a config, read from one forward pass (no gradio, no plots).

Each view is found from what ``ModelOutput.layers`` (one typed ``models.context.LayerInfo`` per
applied layer) contains, so any variant that reports the same statistics gets the same view without
a change here. ``VIEWS`` maps each view's name to the function that reads it from the layers (or
returns ``None`` when they lack its statistics); one module per concept holds the views and says
which fields they read:

- ``approximation``: approximate attention vs exact softmax (``approximation``);
- ``groups``: LSH buckets, routing and k-means clusters (``groups``); ``span``: adaptive spans (``spans``);
- ``sinkhorn``: Sinkhorn block sorting (``sorting``); ``probsparse``: ProbSparse's active queries
  (``active_queries``); ``talking_heads``, ``residual``: head mixing and the previous layer's share
  of the scores (``mixing``); ``induced``: ISAB / Luna's two steps (``two_step``); ``lite``: Lite
  Transformer's convolution taps (``convolution``);
- ``experts``: expert load and drops (``experts``); ``pkm``: product-key memory rows read (``product_keys``);
- ``memory``: memory length and reach (``memory``); ``retrieval``: kNN-LM / SPALM neighbours (``retrieval``);
- ``exit``, ``act``: exit depth and ACT steps per token (``depth``); ``funnel``, ``feedback``,
  ``sandwich``: funnel lengths, feedback layer weights, sublayer order (``structure``).

With segmented memories the model merges per-segment infos into one per layer; views that count
(experts, memory length, product-key reads) read every segment from ``info.parts()``. Every
view is a small dataclass of numpy arrays with a JSON-safe ``summary()``; batch element 0 is shown.
"""

from __future__ import annotations

from dataclasses import dataclass

from explorer.analysis.views.active_queries import probsparse_view
from explorer.analysis.views.approximation import approximation_view
from explorer.analysis.views.convolution import lite_view
from explorer.analysis.views.depth import act_view, exit_view
from explorer.analysis.views.experts import expert_view
from explorer.analysis.views.groups import group_view
from explorer.analysis.views.memory import memory_view
from explorer.analysis.views.mixing import head_mix_view, prior_view
from explorer.analysis.views.product_keys import slot_view
from explorer.analysis.views.retrieval import retrieval_view
from explorer.analysis.views.sorting import sinkhorn_view
from explorer.analysis.views.spans import span_view
from explorer.analysis.views.structure import feedback_view, funnel_view, sandwich_view
from explorer.analysis.views.two_step import induced_view

# view name -> reader of ModelOutput.layers; the order is the order of Views.items and of the figures
VIEWS = {
    "approximation": approximation_view,
    "groups": group_view,
    "span": span_view,
    "experts": expert_view,
    "memory": memory_view,
    "exit": exit_view,
    "act": act_view,
    "sinkhorn": sinkhorn_view,
    "probsparse": probsparse_view,
    "talking_heads": head_mix_view,
    "residual": prior_view,
    "pkm": slot_view,
    "funnel": funnel_view,
    "induced": induced_view,
    "lite": lite_view,
    "retrieval": retrieval_view,
    "feedback": feedback_view,
    "sandwich": sandwich_view,
}


@dataclass
class Views:
    tokens: list  # label of each token
    items: dict  # name -> view dataclass, only the views this output has

    def summary(self) -> dict:
        return {name: view.summary() for name, view in self.items.items()}


def compute_views(cfg, layers: list, tokens: list) -> Views:
    """Every view whose statistics ``layers`` (``ModelOutput.layers``) contains, in ``VIEWS`` order."""
    items = {}
    for name, fn in VIEWS.items():
        view = fn(cfg, layers)
        if view is not None:
            items[name] = view
    return Views(tokens=list(tokens), items=items)
