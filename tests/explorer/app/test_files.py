"""Files the app does not own (docs/files.md): a file the app serves lands inside Gradio's cache whatever
its name says, and a model file handed to the Train tab is read, never written or deleted. (The other
places have theirs beside their code: uploads in test_request_limits and checkpoints/test_sources, export
folders in test_export_folders, Triton's cache in runtime/test_triton_cache.)"""

import os

from explorer.app.server.gradio_compat import cache_file
from explorer.app.tabs.parts import train_files
from explorer.training import checkpoint
from models import ModelConfig, build_model


def test_a_served_file_stays_inside_gradios_cache_whatever_its_name(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(cache))
    victim = tmp_path / "victim.txt"
    victim.write_text("the host's")
    for name in ("../victim.txt", "../../victim.txt", "/tmp/victim.txt", "a/../../victim.txt"):
        path = cache_file(b"payload", name)["path"]
        assert os.path.realpath(path).startswith(os.path.realpath(cache) + os.sep), (name, path)
    assert victim.read_text() == "the host's"


def test_a_model_file_handed_to_the_train_tab_is_read_not_written_or_deleted(tmp_path):
    cfg = ModelConfig(n_layers=1, d_model=16, n_heads=2)
    good = checkpoint.save(build_model(cfg), tmp_path / "good", cfg, extra={"step": 3}, stem="m")
    weights = next(p for p in good if str(p).endswith(".safetensors"))
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"\x00" * 64)
    said = []
    for path in (weights, junk):
        before = (os.path.getmtime(path), path.read_bytes())
        _, _, status = train_files.upload({}, str(path))
        said.append(status)
        assert (os.path.getmtime(path), path.read_bytes()) == before, status
    assert "Loaded" in said[0] and "Refused" in said[1]  # read in both cases, kept in both
