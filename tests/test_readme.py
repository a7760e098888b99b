"""The README's test command is exactly what CI runs, and the Spaces front matter is present."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _readme_test_command() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Run the tests", 1)[1]
    block = re.search(r"```bash\n(.*?)\n```", section, re.S)
    assert block, "the README's 'Run the tests' section has no bash block"
    return block.group(1).strip()


def test_ci_runs_the_readme_test_command_verbatim():
    command = _readme_test_command()
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert command in ci.splitlines(), f"{command!r} is not a line of .ci/run"


def test_spaces_front_matter():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert text.startswith("---\n")
    meta = dict(line.split(": ", 1) for line in text.split("---\n")[1].strip().splitlines())
    assert meta["sdk"] == "gradio" and meta["app_file"] == "app.py" and meta["license"] == "mit"
    pinned = [l for l in (ROOT / "requirements.txt").read_text().splitlines() if l.startswith("gradio==")]
    assert pinned and meta["sdk_version"] == pinned[0].split("==")[1]
    assert len(meta["short_description"]) <= 60
    for shot in re.findall(r"\]\((assets/screenshots/[^)]+)\)", text):
        assert (ROOT / shot).is_file(), shot
