"""Every ``gradio_client`` call that docs/api.md shows runs as written against the served app.

The page's Python blocks are run in order in one namespace (the first creates ``client``), with the page's
address replaced by the served app's; a block that raises fails the test naming the block. And every
endpoint the app lists in its API (``Client.view_api``) has its section on the page, so a new endpoint
cannot go undocumented."""

import re
from pathlib import Path

import pytest
from gradio_client import Client

DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"
ADDRESS = "http://127.0.0.1:7860/"


def _blocks() -> list:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)


def test_the_page_shows_a_call_of_every_documented_endpoint():
    text = DOC.read_text()
    calls = set(re.findall(r'api_name="/(\w+)"', text))
    named = set(re.findall(r"^`(\w+)\(", text, flags=re.M)) | set(re.findall(r"## `/(\w+)`", text))
    assert named <= calls, f"endpoints described without a call: {sorted(named - calls)}"
    assert ADDRESS in _blocks()[0]


def test_every_block_runs_as_written(app_url, capsys):
    namespace: dict = {}
    for i, block in enumerate(_blocks()):
        code = block.replace(ADDRESS, app_url.rstrip("/") + "/")
        try:
            exec(compile(code, f"docs/api.md block {i}", "exec"), namespace)
        except Exception as exc:  # name the block that failed
            pytest.fail(f"docs/api.md block {i} raised {type(exc).__name__}: {exc}\n{block}")
    printed = capsys.readouterr().out
    assert "True" in printed  # the export block's path is a zip
    assert "attention" in printed.splitlines()[-1]  # the refused pattern is named by its field


def test_every_listed_endpoint_is_documented(app_url):
    listed = Client(app_url, verbose=False).view_api(print_info=False, return_format="dict")
    names = {name.lstrip("/") for name in listed["named_endpoints"]}
    documented = set(re.findall(r'api_name="/(\w+)"', DOC.read_text()))
    assert names - documented == set(), (
        f"endpoints in the API without a call in docs/api.md: {sorted(names - documented)}"
    )


def test_the_documented_endpoints_show_their_return_types(app_url):
    """``view_api()`` shows each endpoint's declared result (``explorer.app.server.api_types``), never ``Any``."""
    listed = Client(app_url, verbose=False).view_api(print_info=False, return_format="dict")["named_endpoints"]
    shown = {
        "/analyze": "dict(n_tokens: int",
        "/gradients": "dict(layer: list[int]",
        "/benchmark": "list[dict(seq_len: int",
        "/export": "filepath",
        "/compare_ab": "dict(diff: list[list[",
    }
    for name, start in shown.items():
        (result,) = listed[name]["returns"]
        assert result["python_type"]["type"].startswith(start), (name, result["python_type"]["type"][:120])
        assert all(p["python_type"]["type"] == "str" for p in listed[name]["parameters"]), name
