"""README's first command fits the machine: beside the plain install, the one that takes torch's CPU build.

On Linux, PyPI's ``torch`` is its CUDA build (18 ``nvidia-*`` packages that a machine without an NVIDIA GPU never
runs). README's "Run the app" shows, right at the first command, the same install with PyTorch's CPU index added;
pip then picks ``torch==X.Y.Z+cpu`` because requirements.txt pins a public version (``==X.Y.Z``), which admits the
local ``+cpu`` build (PEP 440: a specifier without a local label ignores the candidate's) and ranks it above
PyPI's ``X.Y.Z`` (a local label sorts after the public version). A pin with a local label, a range, or a CPU line
that left the section fails here."""

import re
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def _section(title: str) -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def _commands(section: str) -> list[str]:
    return [line for block in re.findall(r"```bash\n(.*?)\n```", section, re.S) for line in block.splitlines()]


def _torch_pin() -> Requirement:
    lines = (ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines()
    (line,) = [l.split("#", 1)[0].strip() for l in lines if re.match(r"torch\s*[=<>~!]", l)]
    return Requirement(line)


def test_run_the_app_shows_the_cpu_install_beside_the_plain_one():
    commands = _commands(_section("Run the app"))
    plain = "pip install -r requirements.txt && python app.py"
    cpu = f"pip install -r requirements.txt --extra-index-url {CPU_INDEX} && python app.py"
    assert commands[:2] == [plain, cpu], commands[:2]  # the plain one first: it works wherever PyPI does


def test_the_cpu_index_gives_the_pinned_torch_its_cpu_build():
    pin = _torch_pin()
    (spec,) = pin.specifier
    assert spec.operator == "==" and "+" not in spec.version, f"torch pinned as {spec}: pin a public version"
    pypi, cpu = Version(spec.version), Version(f"{spec.version}+cpu")
    assert pin.specifier.contains(cpu) and pin.specifier.contains(pypi)
    assert max(pypi, cpu) == cpu  # among the two indexes' matching builds, pip takes the CPU one


def test_the_venv_size_is_said_beside_the_install():
    section = _section("Run the app")
    assert re.search(r"virtual environment .{0,80}\d+(\.\d+)? [MG]B", section, re.S), "README: the venv's size"
