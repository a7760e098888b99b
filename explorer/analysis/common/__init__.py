"""What every analysis shares: the one memo of models and results (``memo.py``) and the forward pass
that is not finite, said by name (``finite.py``)."""
