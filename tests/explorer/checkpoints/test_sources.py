"""Where a checkpoint comes from besides the host's folders: an upload (checked, copied, read; the handed
files never written or deleted, a path outside the upload cache refused) and a Hub
id (sized from the Hub's listing before anything is fetched; the Hub client is replaced by a fake here:
tests never download)."""

import os
import shutil
import types
from pathlib import Path

import pytest

from explorer.analysis.weights import checkpoint_upload, checkpoints, hub
from models import ConfigError


def _copies(src, dst, names=("config.json", "model.safetensors", "tokenizer.json")):
    dst.mkdir(parents=True, exist_ok=True)
    return [str(shutil.copyfile(src / n, dst / n)) for n in names]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """Gradio's upload cache for the test: uploads lie here, as Gradio's upload route puts them."""
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_upload_is_read_kept_by_digest_and_left_where_it_was(tiny_root, cache):
    root, model, cfg, tok = tiny_root
    paths = _copies(root / "tiny", cache / "up")
    before = {p: Path(p).read_bytes() for p in paths}
    loaded = checkpoint_upload.receive(paths)
    assert loaded.id.startswith("upload:") and len(loaded.id) == len("upload:") + 64
    assert loaded.config == cfg and loaded.tokenizer.pieces(tok.encode("password")) == tok.pieces(
        tok.encode("password")
    )
    assert {p: Path(p).read_bytes() for p in paths} == before  # the handed files: untouched, not deleted
    assert checkpoints.load(loaded.id) is loaded  # later requests find it by its id
    again = checkpoint_upload.receive(_copies(root / "tiny", cache / "up2"))
    assert again is loaded  # the same bytes are the same checkpoint


@pytest.mark.parametrize(
    "name, why",
    [("pytorch_model.bin", "pickle"), ("model.pt", "pickle"), ("evil.py", "config.json, model.safetensors")],
)
def test_upload_refuses_other_files(cache, name, why):
    cache.mkdir()
    path = cache / name
    path.write_bytes(b"\x80\x04K\x01.")
    with pytest.raises(ConfigError, match=why) as e:
        checkpoint_upload.receive([str(path)])
    assert e.value.field == "checkpoint upload" and path.read_bytes() == b"\x80\x04K\x01."  # refused, kept


SAVED_EXTRAS = (  # what transformers' save_pretrained writes beside the weights (a GPT-2 and a Llama)
    "generation_config.json",
    "special_tokens_map.json",
    "tokenizer_config.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "chat_template.jinja",
)


def test_a_save_pretrained_folder_uploads_whole_its_extra_files_ignored(tiny_root, cache):
    root, model, cfg, tok = tiny_root
    paths = _copies(root / "tiny", cache / "saved")
    for name in SAVED_EXTRAS:
        (cache / "saved" / name).write_text("{}")
    extras = [str(cache / "saved" / n) for n in SAVED_EXTRAS]
    loaded = checkpoint_upload.receive(paths + extras)
    assert loaded.config == cfg
    assert checkpoint_upload.ignored(paths + extras) == sorted(SAVED_EXTRAS)
    assert checkpoint_upload.ignored(paths) == []
    pickle = cache / "saved" / "training_args.bin"  # a pickle beside them still refuses the upload, with why
    pickle.write_bytes(b"\x80\x04K\x01.")
    with pytest.raises(ConfigError, match="pickle"):
        checkpoint_upload.receive(paths + extras + [str(pickle)])


def test_a_path_outside_the_upload_cache_is_refused_unread_and_kept(tiny_root, cache, tmp_path, monkeypatch):
    root, *_ = tiny_root
    outside = _copies(root / "tiny", tmp_path / "host")  # files of the host, not uploads
    inside = _copies(root / "tiny", cache / "up")
    read = []
    monkeypatch.setattr(checkpoint_upload, "digest", lambda files: read.append(files) or "0" * 64)
    for paths in (outside, [inside[0], outside[1]]):
        with pytest.raises(ConfigError, match="not one of them") as e:
            checkpoint_upload.receive(paths)
        assert e.value.field == "checkpoint upload"
    assert read == [] and all(os.path.exists(p) for p in outside + inside)
    link = cache / "link"
    link.mkdir()
    os.symlink(outside[0], link / "config.json")  # a link inside the cache to a file outside it
    with pytest.raises(ConfigError, match="not one of them"):
        checkpoint_upload.receive([str(link / "config.json")])
    assert os.path.exists(outside[0])


def test_an_upload_the_caller_disowns_is_refused(tiny_root, cache):
    root, *_ = tiny_root
    paths = _copies(root / "tiny", cache / "theirs")
    with pytest.raises(ConfigError, match="not one of them"):
        checkpoint_upload.receive(paths, owned=lambda p: False)
    assert all(os.path.exists(p) for p in paths)


def test_the_upload_cache_is_gradios(monkeypatch, tmp_path):
    from gradio.utils import get_upload_folder

    from explorer.runtime import settings

    monkeypatch.delenv("GRADIO_TEMP_DIR", raising=False)
    assert settings.upload_dir() == get_upload_folder()
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path))
    assert settings.upload_dir() == get_upload_folder()


def test_upload_needs_a_config(tiny_root, cache):
    root, *_ = tiny_root
    with pytest.raises(ConfigError, match="a config.json"):
        checkpoint_upload.receive(_copies(root / "tiny", cache / "noconf", ("model.safetensors",)))


def test_upload_size_cap(tiny_root, cache, monkeypatch):
    root, *_ = tiny_root
    monkeypatch.setenv(checkpoint_upload.BYTES_ENV, "1k")
    with pytest.raises(ConfigError, match="at most 1,024 bytes"):
        checkpoint_upload.receive(_copies(root / "tiny", cache / "big"))


def test_upload_of_a_malformed_config_says_so(cache):
    (cache / "u").mkdir(parents=True)
    (cache / "u" / "config.json").write_text('{"model_type": "llama", "hidden_size": 1e30}')
    (cache / "u" / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      ")
    with pytest.raises(ConfigError):
        checkpoint_upload.receive([str(cache / "u" / "config.json"), str(cache / "u" / "model.safetensors")])


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
    fake = FakeHub(
        root / "tiny",
        {"config.json": 600, "model.safetensors": 160_000, "tokenizer.json": 9000, "pytorch_model.bin": 10**9},
    )
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
