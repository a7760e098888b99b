"""Where a checkpoint comes from besides the host's folders: an upload (checked, read, deleted) and a Hub
id (sized from the Hub's listing before anything is fetched; the Hub client is replaced by a fake here:
tests never download)."""
import shutil
import types

import pytest

from explorer.analysis import checkpoint_upload, checkpoints, hub
from models import ConfigError


def _copies(src, dst, names=("config.json", "model.safetensors", "tokenizer.json")):
    dst.mkdir(parents=True, exist_ok=True)
    return [str(shutil.copyfile(src / n, dst / n)) for n in names]


def test_upload_is_read_then_deleted_and_kept_by_digest(tiny_root, tmp_path):
    root, model, cfg, tok = tiny_root
    paths = _copies(root / "tiny", tmp_path / "up")
    loaded = checkpoint_upload.receive(paths)
    assert loaded.id.startswith("upload:") and len(loaded.id) == len("upload:") + 64
    assert loaded.config == cfg and loaded.tokenizer.pieces(tok.encode("password")) == tok.pieces(tok.encode("password"))
    assert not any((tmp_path / "up").iterdir())  # the uploaded files are gone
    assert checkpoints.load(loaded.id) is loaded  # later requests find it by its id
    again = checkpoint_upload.receive(_copies(root / "tiny", tmp_path / "up2"))
    assert again is loaded  # the same bytes are the same checkpoint


@pytest.mark.parametrize("name, why", [("pytorch_model.bin", "pickle"), ("model.pt", "pickle"),
                                       ("evil.py", "config.json, model.safetensors")])
def test_upload_refuses_other_files(tmp_path, name, why):
    path = tmp_path / name
    path.write_bytes(b"\x80\x04K\x01.")
    with pytest.raises(ConfigError, match=why) as e:
        checkpoint_upload.receive([str(path)])
    assert e.value.field == "checkpoint upload" and not path.exists()  # refused files are deleted too


def test_upload_needs_a_config(tiny_root, tmp_path):
    root, *_ = tiny_root
    with pytest.raises(ConfigError, match="a config.json"):
        checkpoint_upload.receive(_copies(root / "tiny", tmp_path / "noconf", ("model.safetensors",)))


def test_upload_size_cap(tiny_root, tmp_path, monkeypatch):
    root, *_ = tiny_root
    monkeypatch.setenv(checkpoint_upload.BYTES_ENV, "1k")
    with pytest.raises(ConfigError, match="at most 1,024 bytes"):
        checkpoint_upload.receive(_copies(root / "tiny", tmp_path / "big"))


def test_upload_of_a_malformed_config_says_so(tmp_path):
    (tmp_path / "u").mkdir()
    (tmp_path / "u" / "config.json").write_text('{"model_type": "llama", "hidden_size": 1e30}')
    (tmp_path / "u" / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      ")
    with pytest.raises(ConfigError):
        checkpoint_upload.receive([str(tmp_path / "u" / "config.json"), str(tmp_path / "u" / "model.safetensors")])


class FakeHub:
    """``HfApi`` / ``snapshot_download`` answering from a local folder."""
    def __init__(self, folder, sizes):
        self.folder, self.sizes, self.downloads = folder, sizes, []

    def install(self, monkeypatch):
        import huggingface_hub
        fake = self

        class Api:
            def model_info(self, repo_id, files_metadata=False):
                sib = [types.SimpleNamespace(rfilename=n, size=s) for n, s in fake.sizes.items()]
                return types.SimpleNamespace(siblings=sib)

        def snapshot(repo_id, allow_patterns=None, cache_dir=None):
            fake.downloads.append((repo_id, tuple(allow_patterns)))
            return str(fake.folder)

        monkeypatch.setattr(huggingface_hub, "HfApi", Api)
        monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot)


def test_hub_ids_need_the_host_switch_then_are_sized_first(tiny, tiny_root, monkeypatch):
    root, model, cfg, tok = tiny_root
    fake = FakeHub(root / "tiny", {"config.json": 600, "model.safetensors": 160_000, "tokenizer.json": 9000,
                                   "pytorch_model.bin": 10 ** 9})
    fake.install(monkeypatch)
    with pytest.raises(ConfigError, match=checkpoints.HUB_ENV):
        checkpoints.load("hub:someone/tiny")
    monkeypatch.setenv(checkpoints.HUB_ENV, "1")
    loaded = checkpoints.load("hub:someone/tiny")
    assert loaded.config == cfg and fake.downloads == [("someone/tiny", hub.PATTERNS)]
    assert "*.bin" not in hub.PATTERNS
    checkpoints._LOADED.clear()
    monkeypatch.setenv(checkpoints.MAX_PARAMS_ENV, "10000")  # 40 kB of float32 weights at most
    with pytest.raises(ConfigError, match="at most 0 MB"):
        checkpoints.load("hub:someone/tiny")
    assert len(fake.downloads) == 1  # refused from the listing: nothing fetched


def test_hub_model_without_safetensors_is_refused(tiny, tiny_root, monkeypatch):
    root, *_ = tiny_root
    fake = FakeHub(root / "tiny", {"config.json": 600, "pytorch_model.bin": 1000})
    fake.install(monkeypatch)
    monkeypatch.setenv(checkpoints.HUB_ENV, "1")
    with pytest.raises(ConfigError, match="pytorch_model.bin"):
        checkpoints.load("hub:someone/pickled")
    assert fake.downloads == []
