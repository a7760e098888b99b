"""The session's tiny saved checkpoints (``hf_models.make``), each built once."""

import pytest
from hf_models import make


@pytest.fixture(scope="session")
def saved(tmp_path_factory):
    """``saved(family, **changes) -> (folder, hf model)``, each built once per session."""
    cache = {}

    def get(family, **changes):
        key = (family, tuple(sorted(changes.items())))
        if key not in cache:
            folder = tmp_path_factory.mktemp(family)
            cache[key] = folder, make(family, folder, **changes)
        return cache[key]

    return get
