"""A checkpoint is read once: one plan, one read of its safetensors headers, one model built (the plan's meta
model is allocated, not built again), the same tensors as ``models.hf.load`` alone; a refused upload is
remembered by its digest (asked again, it is refused at once without parsing its files), and a folder of
the host, which may be fixed, is not."""

from __future__ import annotations

import json

import pytest
import torch

from explorer.analysis.weights import checkpoints
from models import ConfigError, hf

UPLOAD = checkpoints.UPLOAD_PREFIX + "ab" * 32


def counting(monkeypatch) -> dict:
    import models.hf.files as files
    import models.hf.loader as loader

    calls = {"plan": 0, "headers": 0, "build": 0}

    def wrap(module, name, key):
        real = getattr(module, name)

        def counted(*a, **k):
            calls[key] += 1
            return real(*a, **k)

        monkeypatch.setattr(module, name, counted)

    wrap(loader, "plan", "plan")
    wrap(hf, "plan", "plan")
    wrap(files, "read_headers", "headers")
    wrap(loader, "build_model", "build")
    return calls


def test_a_cold_read_plans_reads_headers_and_builds_once(tiny_root, monkeypatch):
    root = tiny_root[0]
    calls = counting(monkeypatch)
    loaded = checkpoints.read(root / "tiny", "tiny")
    assert calls == {"plan": 1, "headers": 1, "build": 1}
    plain = hf.load(root / "tiny").model.state_dict()  # the loader on its own: plans and builds for itself
    mine = loaded.weights.tensors
    assert set(mine) == set(plain) and all(torch.equal(mine[k], plain[k]) for k in plain)


def _refused_folder(path):
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"model_type": "not-a-model", "hidden_size": 8}))
    (path / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      ")
    return path


def test_a_refused_upload_is_remembered_by_its_digest(tmp_path, monkeypatch):
    folder = _refused_folder(tmp_path / "bad")
    monkeypatch.setattr(checkpoints, "_REFUSED", type(checkpoints._REFUSED)())
    calls = counting(monkeypatch)
    with pytest.raises(ConfigError) as first:
        checkpoints.read(folder, UPLOAD)
    assert calls["plan"] == 1
    with pytest.raises(ConfigError) as again:
        checkpoints.read(folder, UPLOAD)
    assert calls["plan"] == 1 and str(again.value) == str(first.value) and "model_type" in str(again.value)


def test_a_hosts_folder_is_read_again_and_the_memo_is_bounded(tmp_path, monkeypatch):
    folder = _refused_folder(tmp_path / "bad")
    monkeypatch.setattr(checkpoints, "_REFUSED", type(checkpoints._REFUSED)())
    monkeypatch.setattr(checkpoints, "MAX_REFUSED", 2)
    calls = counting(monkeypatch)
    for _ in range(2):
        with pytest.raises(ConfigError):
            checkpoints.read(folder, "bad")  # a folder of the host: its files may be fixed, asked again
    assert calls["plan"] == 2 and not checkpoints._REFUSED
    ids = [checkpoints.UPLOAD_PREFIX + f"{i:064x}" for i in range(3)]
    for i in ids:
        with pytest.raises(ConfigError):
            checkpoints.read(folder, i)
    assert list(checkpoints._REFUSED) == ids[1:]  # the oldest forgotten
    with pytest.raises(ConfigError):
        checkpoints.read(folder, ids[0])
    assert calls["plan"] == 2 + 3 + 1  # forgotten: parsed again


def test_a_loaded_record_is_passed_on_not_looked_up(tiny):
    loaded = checkpoints.load(tiny[0])
    assert checkpoints.load(loaded) is loaded
