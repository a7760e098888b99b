"""The tabs, one module each, registered in ``TABS`` (read as ``explorer.app.tabs.TABS`` when the page is built,
so a test can register one more) (the order of the page, of the redraw chain within
a stage and of the export's sections); what a tab is to the page: ``explorer.app.tabs.contract``.
Pieces that are not tabs (pickers, zoom boxes, the Train and Why tabs' parts) live in ``parts/``.

A new tab: its module (``build``, its steps and events, its export part, its link parameters, and a
``TAB = Tab(...)`` record), its figures under ``explorer/figures/``, and one line here.
"""

from explorer.app.tabs import attention, compare, gradients, latency, long_context, model, surgery, train, views, why

TABS = (
    attention.TAB,
    views.TAB,
    gradients.TAB,
    latency.TAB,
    model.TAB,
    surgery.TAB,
    compare.TAB,
    long_context.TAB,
    why.TAB,
    train.TAB,
)


def ids() -> tuple:
    """The registered tabs' ids (the share link's ``tab=`` values)."""
    return tuple(tab.id for tab in TABS)


def link_params() -> frozenset:
    """The share-link parameters the registered tabs read themselves (the page's link reader leaves them alone)."""
    return frozenset(p for tab in TABS for p in tab.link)
