"""What ``python app.py`` hands Gradio's launch exists (a module moved a folder deeper once pointed the
stylesheet at ``explorer/assets``, and the served app exited at start)."""

from pathlib import Path

from explorer.app.page.layout import LAUNCH_OPTIONS

ROOT = Path(__file__).resolve().parents[3]


def test_the_stylesheets_are_the_repositorys_and_exist():
    paths = [Path(p) for p in LAUNCH_OPTIONS["css_paths"]]
    assert paths and all(p.is_file() for p in paths), paths
    assert all(p.resolve().parent == ROOT / "assets" for p in paths)


def test_launch_says_where_it_serves_then_serves_with_these_options(capsys, monkeypatch):
    from explorer.app.page import start

    monkeypatch.setenv("GRADIO_SERVER_PORT", "7999")
    monkeypatch.delenv("GRADIO_SERVER_NAME", raising=False)
    launched = []
    start.launch(type("Demo", (), {"launch": lambda self, **kw: launched.append(kw)})())
    assert launched == [LAUNCH_OPTIONS]
    assert "[explorer] starting the server on http://127.0.0.1:7999" in capsys.readouterr().err
