"""Export folders are the app's own: a session's next export deletes its previous folder (its clean-up
event may never run), at most ``MAX_EXPORT_DIRS`` live at once, and a path the app did not make is never
deleted, whatever names it."""

from __future__ import annotations

import os
import tempfile

import pytest

from explorer.app.api import export
from explorer.app.controls.fields import config_values
from models import ModelConfig

SMALL = ModelConfig(n_layers=1, d_model=16, n_heads=2)
TEXT = "abcabc"


@pytest.fixture(autouse=True)
def no_pngs(monkeypatch):
    """The zip without PNGs (no browser needed): the folders are what this file tests."""
    from explorer.export import archive, png

    real = archive.write_zip
    monkeypatch.setattr(archive, "write_zip", lambda *a, **k: real(*a, **{**k, "render": lambda figs: png.Rendered()}))


def click(export_dir=None) -> dict:
    return export.export_files(config_values(SMALL), TEXT, None, export_dir=export_dir)


def test_a_sessions_next_export_replaces_its_previous_folder():
    first = click()
    assert os.path.isdir(first["export_dir"]) and os.path.isfile(first["files"]["value"])
    second = click(first["export_dir"])  # the clean-up event of the first never ran
    assert not os.path.exists(first["export_dir"]) and os.path.isdir(second["export_dir"])
    export.cleanup_export(second["export_dir"])
    assert not os.path.exists(second["export_dir"])


def test_export_folders_are_bounded(monkeypatch):
    monkeypatch.setattr(export, "MAX_EXPORT_DIRS", 3)
    made = [click()["export_dir"] for _ in range(5)]  # five sessions, none cleaned up
    alive = [d for d in made if os.path.isdir(d)]
    assert alive == made[-3:]
    for d in alive:
        export.cleanup_export(d)
    assert not any(os.path.exists(d) for d in made)


def test_a_path_the_app_did_not_make_is_never_deleted(tmp_path):
    outside = tmp_path / "keep.txt"
    outside.write_text("mine")
    lookalike = tempfile.mkdtemp(prefix=export.TEMP_PREFIX)  # the export prefix, made by someone else
    try:
        for path in (str(outside), str(tmp_path), lookalike, "/", "../" * 8 + "tmp"):
            export.cleanup_export(path)
            export.export_files(config_values(SMALL), TEXT, None, export_dir=path)["export_dir"]
        assert outside.read_text() == "mine" and os.path.isdir(lookalike)
    finally:
        os.rmdir(lookalike)
        for d in list(export._OWNED):
            export.cleanup_export(d)
