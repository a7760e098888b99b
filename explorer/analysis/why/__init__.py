"""Why a model predicts what it does: the Why tab's analyses and the head labels grounded in them.

Per-layer predictions (``lens.py``, the logit lens), direct logit attribution (``attribution.py``), head
ablation and activation patching (``patching.py``), head circuits from the weights alone (``circuits.py``),
on the ids of ``seq2seq_ids.py`` (one sequence, or an encoder-decoder's source and target). The grounded
head labels: fixed probe texts (``probes.py``), labels from a probe and a cause (``grounded.py``) and as the
page answers them (``grounded_view.py``); the circuit cards of every shipped model (``cards/``).
"""
