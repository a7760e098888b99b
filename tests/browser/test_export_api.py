"""``/export`` from ``gradio_client``: the zip of a config, checked against the config sent, the PNG
header and the README; a bad config is the client's error naming the field; no temporary folder of
the app survives the call."""

import glob
import importlib.util
import json
import os
import struct
import tempfile
import zipfile

import pytest
from gradio_client import Client

SMALL = {"n_layers": 2, "d_model": 32, "n_heads": 2, "attention": "sliding_window", "window": 4}


def _exports() -> set:
    return set(glob.glob(os.path.join(tempfile.gettempdir(), "explorer-export-*")))


@pytest.fixture(scope="module")
def client(app_url):
    return Client(app_url, verbose=False)


def test_export_endpoint_returns_the_zip(client):
    from models import ModelConfig

    before = _exports()
    path = client.predict(json.dumps(SMALL), "abcdef", api_name="/export")
    assert os.path.basename(path).startswith("transformer-explorer-") and path.endswith(".zip")
    with zipfile.ZipFile(path) as zf:
        names = set(zf.namelist())
        assert {"README.txt", "config.json", "figures.html"} <= names and "sweep.csv" not in names
        assert ModelConfig.from_dict(json.loads(zf.read("config.json"))) == ModelConfig(**SMALL)
        readme = zf.read("README.txt").decode()
        assert "Input text (first 256 bytes, one token per byte): abcdef" in readme
        pngs = sorted(n for n in names if n.endswith(".png"))
        if importlib.util.find_spec("kaleido") is not None and os.path.exists("/usr/bin/chromium"):
            assert pngs[:2] == ["01-attention-maps.png", "02-attention-stats.png"], readme
        for n in pngs:
            png = zf.read(n)
            assert png.startswith(b"\x89PNG\r\n\x1a\n") and png[12:16] == b"IHDR"
            assert struct.unpack(">I", png[16:20])[0] == 1400  # the export's PNG width
    assert _exports() <= before


def test_export_endpoint_names_a_bad_field(client):
    with pytest.raises(Exception, match="n_heads"):
        client.predict(json.dumps({**SMALL, "n_heads": 3}), "abc", api_name="/export")
