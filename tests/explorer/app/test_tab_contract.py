"""The tab contract: the page, its redraw chain, the export and the link reader come from the registry
(``explorer.app.tabs.TABS``), the page frame names no tab, and no module of ``explorer/app`` imports a higher floor."""

import ast
from pathlib import Path

import gradio as gr
import plotly.graph_objects as go
import pytest

import explorer.app
from explorer.app import tabs as registry
from explorer.app.api.export import export_sections
from explorer.app.controls.share import from_query
from explorer.app.page.layout import build_app
from explorer.app.tabs.contract import STAGES, Step, Tab
from models import ModelConfig

APP = Path(explorer.app.__file__).parent
FLOORS = {"server": 0, "controls": 1, "tabs": 2, "api": 3, "page": 4}  # bottom to top


def app_imports(path: Path) -> set:
    """The ``explorer.app`` modules (or names in them) that ``path`` imports, anywhere in the file."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("explorer.app"):
            out |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("explorer.app")}
    return out


def modules(folder: str) -> list:
    return sorted((APP / folder).rglob("*.py"))


def test_every_module_of_the_app_sits_on_a_floor_and_imports_none_above_it():
    loose = [p.name for p in APP.glob("*.py") if p.name != "__init__.py"]
    assert not loose, f"modules outside the floors' folders: {loose}"
    bad = []
    for folder, floor in FLOORS.items():
        for path in modules(folder):
            for name in app_imports(path):
                parts = name.split(".")
                if len(parts) > 2 and parts[2] in FLOORS and FLOORS[parts[2]] > floor:
                    bad.append(f"{path.relative_to(APP)} imports {name}")
    assert not bad, "\n".join(bad)


def test_the_frame_the_export_and_the_controls_name_no_tab():
    tab_modules = {
        f"explorer.app.tabs.{p.stem}" for p in (APP / "tabs").glob("*.py") if p.stem not in ("__init__", "contract")
    }
    assert {t.build.__module__ for t in registry.TABS} <= tab_modules  # every registered tab is such a module
    for folder in ("page", "api", "controls", "server"):
        for path in modules(folder):
            named = {n for n in app_imports(path) if any(n == m or n.startswith(m + ".") for m in tab_modules)}
            # the chain's head is the Attention tab's grid, which also writes the controls and the share link
            allowed = (
                {
                    "explorer.app.tabs.attention",
                    "explorer.app.tabs.attention.FIGURES",
                    "explorer.app.tabs.attention.refresh_attention",
                }
                if path.name == "wiring.py"
                else set()
            )
            assert named <= allowed, f"{path.relative_to(APP)} names tabs: {sorted(named - allowed)}"


def test_tabs_import_no_other_tab():
    stems = {p.stem for p in (APP / "tabs").glob("*.py")} - {"__init__", "contract"}
    for path in (APP / "tabs").glob("*.py"):
        if path.stem in ("__init__", "contract"):
            continue
        others = {
            n
            for n in app_imports(path)
            for s in stems - {path.stem}
            if n == f"explorer.app.tabs.{s}" or n.startswith(f"explorer.app.tabs.{s}.")
        }
        assert not others, f"{path.name} imports {sorted(others)}"


def test_the_registry_lists_each_tab_once_with_steps_in_known_stages():
    ids = registry.ids()
    assert len(ids) == len(set(ids)) and {"attention", "gradients", "latency", "long_context", "train"} <= set(ids)
    assert all(step.stage in STAGES for tab in registry.TABS for step in tab.steps)
    assert registry.link_params() >= {"pin", "lc_len", "why_pos"}
    with pytest.raises(ValueError, match="stage"):
        Step("nowhere", lambda values, **kw: {}, (), ())


def _toy_tab() -> Tab:
    def build(landing):
        with gr.Tab("Toy", id="toy"):
            return {"toy_md": gr.Markdown(f"landing: {landing.cfg.attention}", elem_id="toy-md")}

    def step(values, weights=None, state=None):
        return {"toy_md": f"drawn: {values.get('attention')}"}

    def export(scene):
        return [("Toy section", [("toy-figure", go.Figure(layout_title_text=scene.cfg.attention))])]

    return Tab("toy", build, steps=(Step("views", step, ("state",), ("toy_md",)),), export=export, link=("toy_q",))


@pytest.fixture
def with_toy():
    mp = pytest.MonkeyPatch()
    mp.setattr(registry, "TABS", (*registry.TABS, _toy_tab()))
    try:
        yield build_app()
    finally:
        mp.undo()


def test_a_new_tab_is_one_registry_entry(with_toy):
    """A tab added to the registry alone is built, runs in its chain stage, exports its part and owns its link."""
    config = with_toy.config
    toy = [c["id"] for c in config["components"] if c.get("props", {}).get("elem_id") == "toy-md"]
    assert len(toy) == 1
    stage = [d for d in config["dependencies"] if d.get("api_name") == "refresh_views"]
    assert len(stage) == 1 and toy[0] in stage[0]["outputs"]  # the views stage's one request fills it too
    sections, _ = export_sections(ModelConfig(n_layers=1, d_model=32, n_heads=2), "hello")
    assert [title for title, _ in sections][-1] == "Toy section"  # after every registered tab's part
    _cfg, _text, _preset, notice = from_query({"toy_q": "1", "attention": "sliding_window"}, registry.link_params())
    assert notice is None and _cfg.attention == "sliding_window"  # its parameter left to it, not refused


def test_without_the_tab_its_parameter_is_refused_by_name():
    _cfg, _text, _preset, notice = from_query({"toy_q": "1"}, registry.link_params())
    assert notice and "toy_q" in notice
