"""A root folder holding the tiny checkpoint (``tests/tiny_checkpoint.py``) offered to the app through
``EXPLORER_CHECKPOINTS``, for this folder's tests; the memo of loaded checkpoints is emptied around each."""

import pytest
from tiny_checkpoint import make_checkpoint


@pytest.fixture(scope="session")
def tiny_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("checkpoints")
    model, cfg, tok = make_checkpoint(root / "tiny")
    return root, model, cfg, tok


@pytest.fixture
def tiny(tiny_root, monkeypatch):
    """``(checkpoint id, original model, its config, its tokenizer)`` with the root offered."""
    from explorer.analysis.surgery import moved
    from explorer.analysis.weights import checkpoints

    root, model, cfg, tok = tiny_root
    monkeypatch.setenv(checkpoints.ROOTS_ENV, str(root))
    checkpoints._LOADED.clear()
    moved._MOVED.clear()
    yield "tiny", model, cfg, tok
    checkpoints._LOADED.clear()
    moved._MOVED.clear()
