"""docs/catalogue.md has exactly one row per registry key, in the section of its category."""

import re
from pathlib import Path

import pytest

from models import choices

DOC = Path(__file__).resolve().parent.parent / "docs" / "catalogue.md"


def _rows_by_section() -> dict:
    rows, section = {}, None
    for line in DOC.read_text(encoding="utf-8").splitlines():
        head = re.match(r"^## (\w+)\s*$", line)
        if head:
            section = head.group(1)
            continue
        cell = re.match(r"^\| `([^`]+)` \|", line)
        if cell and section is not None:
            rows.setdefault(section, []).append(cell.group(1))
    return rows


ROWS = _rows_by_section()


@pytest.mark.parametrize("category", sorted(choices()))
def test_every_key_has_one_row(category):
    keys = choices()[category]
    documented = ROWS.get(category, [])
    assert sorted(documented) == sorted(set(documented)), f"duplicate rows in ## {category}"
    assert set(keys) - set(documented) == set(), f"keys without a row in ## {category}"
    assert set(documented) - set(keys) == set(), f"rows without a registry key in ## {category}"


def test_no_section_without_a_category():
    assert set(ROWS) <= set(choices()), f"sections that are not categories: {set(ROWS) - set(choices())}"
