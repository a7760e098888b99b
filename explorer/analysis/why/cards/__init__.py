"""Circuit cards: the same questions asked of every trained model shipped here, so architectures can be compared.

Which heads do what by the probe and by the cause (``explorer.analysis.why.grounded``), what each layer predicts
(the logit lens on a probe text), and the copy distance at which induction fails. ``compute.py`` computes a
card (``compute_card``); ``stored.py`` stores it beside the model (``<bundle>.card.json``, ``card.json`` in a
checkpoint's folder) and reads it back only while it matches the weights (``load_card``, ``load_cards``).
``python -m explorer.analysis.why.cards [NAME ...] [--write]`` prints the cards' table (every shipped model by
default) and, with ``--write``, stores them; ``table.py`` formats that table (``cards_table_md``) and
``explorer.figures.cards`` draws the cards side by side.
"""

from explorer.analysis.why.cards.compute import FAIL_ACCURACY, VERSION, compute_card
from explorer.analysis.why.cards.stored import (
    card_path,
    content_digest,
    fresh_card,
    load_card,
    load_cards,
    shipped,
    write_card,
)
from explorer.analysis.why.cards.table import cards_table_md

__all__ = [
    "compute_card",
    "fresh_card",
    "write_card",
    "load_card",
    "load_cards",
    "shipped",
    "card_path",
    "content_digest",
    "cards_table_md",
    "VERSION",
    "FAIL_ACCURACY",
]
