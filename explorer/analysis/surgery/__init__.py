"""Architecture surgery: keep a trained model's weights, change the architecture, and say what it costs.

One set of verbs for a bundled model and a pretrained checkpoint alike (``checkpoint``: a checkpoint's
id; without it, the bundles). When the controls leave trained weights valid (``models.surgery``: a
pattern and its sizes, attention sinks, a mechanism reading the same Q/K/V, K/V heads merged or
repeated, RoPE's base and scale, the softcap, ablated heads), the analyses draw those weights moved to
the new config, and this package says what the move costs:

- ``origin.py``: ``Origin``, the model a surgery starts from (a bundle or a checkpoint, as trained:
  config, weights, trained length, tokens, whether a next-token loss means something: ``is_lm``);
  ``origin_of(cfg, checkpoint)`` finds it.
- ``moved.py``: ``weights_for(cfg, checkpoint)`` the weights that serve ``cfg``; ``config_for`` a
  checkpoint's config with the controls' changes; ``why_not(cfg)`` why no bundle serves ``cfg``;
  ``difference`` the maps after the change beside those of the model as trained; ``same_pairs`` whether the
  change allows exactly the pairs the model as trained allows at a length.
- ``loss.py``: ``loss_change(cfg, text, checkpoint)`` a ``LossChange`` of ``Loss`` records (the model as
  trained and after the change, held out and on the visitor's text, each saying its length against the
  trained length); ``heldout_loss(origin)`` the model's one held-out number.
- ``stored.py`` and ``tabulate.py``: the Surgery table (``table``, ``write_table``, ``stored_table``), every change that
  keeps the weights at the trained length and 4x it. ``python -m explorer.analysis.surgery NAME`` prints it
  for bundle NAME (``--checkpoint ID`` for a checkpoint); ``--write`` stores it beside the model.

Everything here is read-only and memoised by config (the bundles and checkpoints are shared like the code).
"""

from explorer.analysis.surgery.loss import (
    HELDOUT_BYTES,
    Loss,
    LossChange,
    heldout_loss,
    heldout_text,
    loss_change,
    nats_per_token,
)
from explorer.analysis.surgery.moved import config_for, difference, same_pairs, weights_for, why_not
from explorer.analysis.surgery.origin import Origin, bundle_origin, checkpoint_origin, is_lm, origin_of
from explorer.analysis.surgery.stored import as_trained, rows_for, stored_loss, stored_table
from explorer.analysis.surgery.tabulate import table, write_table

__all__ = [
    "Origin",
    "origin_of",
    "bundle_origin",
    "checkpoint_origin",
    "is_lm",
    "weights_for",
    "config_for",
    "why_not",
    "difference",
    "same_pairs",
    "Loss",
    "LossChange",
    "loss_change",
    "heldout_loss",
    "heldout_text",
    "nats_per_token",
    "HELDOUT_BYTES",
    "rows_for",
    "table",
    "write_table",
    "stored_table",
    "stored_loss",
    "as_trained",
]
