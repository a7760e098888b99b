"""Compiled Triton kernels go to a lasting folder under the user's cache (never the repository), made only
when a GPU call first runs on CUDA; a TRITON_CACHE_DIR set by the host wins; the compile budget is a setting."""

import os

import torch

from explorer.runtime import device, settings

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def test_the_default_is_under_the_users_cache_and_made_on_first_use(monkeypatch, tmp_path):
    monkeypatch.setenv("TRITON_CACHE_DIR", "")  # recorded, so the value triton_cache() sets is undone
    monkeypatch.delenv("TRITON_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    want = tmp_path / "transformer-explorer" / "triton"
    assert settings.triton_cache_dir() == str(want) and not want.exists()  # reading the setting makes nothing
    assert device.triton_cache() == str(want) and want.is_dir()
    assert os.environ["TRITON_CACHE_DIR"] == str(want)  # what Triton reads
    assert not str(want).startswith(ROOT)


def test_a_folder_the_host_set_is_kept(monkeypatch, tmp_path):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "mine"))
    assert device.triton_cache() == str(tmp_path / "mine") and (tmp_path / "mine").is_dir()


def test_a_gpu_call_on_the_cpu_makes_no_cache_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("TRITON_CACHE_DIR", "")  # recorded, so the value triton_cache() sets is undone
    monkeypatch.delenv("TRITON_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))

    @device.gpu(duration=5)
    def where():
        return str(device.device())

    assert where() == ("cuda" if torch.cuda.is_available() else "cpu")
    assert (tmp_path / "transformer-explorer").exists() == torch.cuda.is_available()
    assert str(device.device()) == "cpu"  # outside a GPU call nothing runs on the GPU


def test_the_compile_budget_setting(monkeypatch):
    monkeypatch.delenv("EXPLORER_COMPILE_BUDGET", raising=False)
    assert settings.compile_budget() == 120.0
    monkeypatch.setenv("EXPLORER_COMPILE_BUDGET", "0.2")
    assert settings.compile_budget() == 1.0  # at least a second
    monkeypatch.setenv("EXPLORER_COMPILE_BUDGET", "soon")
    assert settings.compile_budget() == 120.0  # unusable: the default, logged
