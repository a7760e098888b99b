"""docs/architecture.md says where each endpoint is defined: that table matches the app that is built.

Every endpoint the built page lists in its API (public ``api_name``) has a row, every row names an endpoint
that exists, and the file a row names either defines the endpoint's function or wires it (its name appears
there as an ``api_name``)."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"


def _table() -> dict:
    """``{endpoint: file}`` from the rows of 'Where each endpoint is defined'."""
    text = DOC.read_text(encoding="utf-8").split("**Where each endpoint is defined.**", 1)[1]
    rows = {}
    for line in text.splitlines():
        if not line.startswith("| `/"):
            if rows and not line.startswith("|"):
                break
            continue
        names, where = line.strip("|").split("|")[:2]
        path = re.search(r"`([\w/]+\.py)`", where).group(1)
        for name in re.findall(r"`/(\w+)`", names):
            rows[name] = path
    return rows


@pytest.fixture(scope="module")
def listed() -> dict:
    """``{api_name: module of its function}`` of the built page's public endpoints."""
    import app

    fns = app.demo.fns.values() if isinstance(app.demo.fns, dict) else app.demo.fns
    return {
        f.api_name: f.fn.__module__
        for f in fns
        if f.api_name and getattr(f, "api_visibility", "public") == "public" and f.fn is not None
    }


def test_the_table_lists_every_endpoint_of_the_built_page(listed):
    table = _table()
    assert set(table) == set(listed), (sorted(set(listed) - set(table)), sorted(set(table) - set(listed)))


def test_each_endpoint_is_defined_or_wired_in_the_file_its_row_names(listed):
    for name, path in _table().items():
        module = path.removesuffix(".py").replace("/", ".")
        source = (ROOT / path).read_text(encoding="utf-8")
        wired = re.search(rf"""api_name\s*=\s*["']{name}["']|\(\w+,\s*["']{name}["']\)""", source)
        assert listed[name] == module or wired, f"/{name}: neither defined ({listed[name]}) nor wired in {path}"
