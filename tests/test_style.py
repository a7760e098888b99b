"""The tree stays formatted and lint-clean, and pytest can import every test module.

``ruff format --check`` and ``ruff check`` run from the repository root with the settings in
pyproject.toml (``[tool.ruff]``), as the fast loop and CI run them; ``--no-cache`` so the check writes
nothing into the checkout. Without ``__init__.py`` files pytest imports each test module by its
basename (the default ``prepend`` import mode), so two modules with the same basename in different
folders stop the collection ("import file mismatch"): every basename under tests/ is unique
(``conftest.py`` excepted, which pytest imports per folder).
"""

import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args, "--no-cache", "."],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize("command", [("format", "--check"), ("check",)], ids=["format", "check"])
def test_ruff_passes_on_the_whole_tree(command):
    run = _ruff(*command)
    assert run.returncode == 0, (
        f"python -m ruff {' '.join(command)} . failed (fix: ruff format . / ruff check --fix .):\n"
        f"{run.stdout}{run.stderr}"
    )


@pytest.mark.parametrize(
    "command, text",
    [(("format", "--check"), "x = {  'a':1 }\n"), (("check",), "import os\n")],
    ids=["format", "check"],
)
def test_ruff_fails_on_a_bad_file(tmp_path, command, text):
    # the same commands with the repository's settings refuse an unformatted file and an unused import
    (tmp_path / "bad.py").write_text(text)
    run = subprocess.run(
        [sys.executable, "-m", "ruff", *command, "--no-cache", "--config", str(ROOT / "pyproject.toml"), "bad.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 1, run.stdout + run.stderr


def _duplicate_basenames(folder: Path) -> dict[str, list[str]]:
    seen = defaultdict(list)
    for path in sorted(folder.rglob("*.py")):
        if path.name != "conftest.py":
            seen[path.name].append(str(path.relative_to(folder)))
    return {name: paths for name, paths in seen.items() if len(paths) > 1}


def test_every_test_module_basename_is_unique():
    duplicates = _duplicate_basenames(ROOT / "tests")
    assert not duplicates, f"modules under tests/ sharing a basename (rename one of each): {duplicates}"


def test_the_basename_check_sees_a_duplicate(tmp_path):
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "test_same.py").write_text("")
        (tmp_path / folder / "conftest.py").write_text("")
    assert _duplicate_basenames(tmp_path) == {"test_same.py": ["a/test_same.py", "b/test_same.py"]}
