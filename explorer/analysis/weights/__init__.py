"""The weights the analyses draw, as ``TrainedWeights`` records, and where they come from.

``trained.py``: the record (``TrainedWeights``: a config, its tensors, their digest) and ``snapshot`` of a
session's run; ``bundled.py``: the trained models shipped in ``assets/bundles/``; ``checkpoints.py``: the
pretrained checkpoints this host offers, loaded once; ``checkpoint_upload.py``: a visitor's uploaded
checkpoint, checked and read; ``hub.py``: Hugging Face Hub downloads, where the host allows them. Which of
them a request draws is decided once, above this package, by ``explorer.analysis.source``.
"""
