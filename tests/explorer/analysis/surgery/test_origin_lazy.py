"""Finding the weights a config reads, and checking a stored circuit card, read manifests and files only: the one
bundle drawn is loaded, never every bundle (at start-up the page asks both questions; loading all twelve bundles
there cost ~0.4 s of CPU and their memory)."""

import pytest

from explorer.analysis.surgery import origin
from explorer.analysis.weights import bundled
from explorer.analysis.why.cards import stored
from models import ModelConfig


@pytest.fixture
def no_bundle_loads(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError(f"a bundle was loaded: {args}")

    monkeypatch.setattr(bundled, "load", refuse)


def test_candidates_read_the_manifests_only(no_bundle_loads):
    found = origin.candidates(ModelConfig(attention="sliding_window", window=32))
    names = [n for n, _ in found]
    assert names[0] == "default"  # the weights on screen first: a window is a surgery of them
    assert "sliding_window" in names  # the bundle trained with a window reads it too
    assert dict(found)["default"] == ("attention", "window")


def test_config_of_is_the_manifest_config_the_bundle_loads_with():
    for name in bundled.names():
        assert bundled.config_of(name) == bundled.load(name).config, name


def test_a_stored_card_is_checked_without_building_its_model(no_bundle_loads):
    card = stored.load_card("default")
    assert card["weights_sha256"] == stored.sha256_file(bundled.BUNDLE_DIR / "default.safetensors")
