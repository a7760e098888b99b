"""The event graph the page receives (``demo.config``): the bookkeeping that Gradio's page does on
every status change stays small, and the grid is painted before the next event of its chain.

Gradio's page updates the loading status of every component that was ever a progress target of an
event, on every status change of every event; an event with many outputs and no
``show_progress_on`` makes all of them targets (measured: ~0.36 s of the browser's main thread per
status change on this page before the fix)."""

import pytest

gr = pytest.importorskip("gradio")

MANY = 8  # outputs above which an event must name where its progress shows


@pytest.fixture(scope="module")
def deps():
    from explorer.app.page.layout import build_app

    demo = build_app()
    return demo.config["dependencies"]


def test_events_with_many_outputs_show_progress_on_at_most_two_components(deps):
    big = [d for d in deps if d["backend_fn"] and len(d["outputs"]) > MANY]
    assert len(big) >= 14, len(big)  # the seven redraw chains' first events and the controls' fills
    for d in big:
        targets = d["show_progress_on"]
        assert targets and len(targets) <= 2, (d["api_name"], len(d["outputs"]), targets)
    targets = {t for d in deps if d["backend_fn"] for t in (d["show_progress_on"] or d["outputs"])}
    assert len(targets) <= 60, len(targets)  # every component that can ever hold a loading status (the Why tab: 60)


def test_each_redraw_chain_paints_the_grid_before_its_detail_event(deps):
    by_id = {d["id"]: d for d in deps}
    chains = [d for d in deps if (d["api_name"] or "").endswith("_attention")]
    assert {d["api_name"] for d in chains} >= {"refresh_attention", "preset_attention", "load_attention"}
    for att in chains:
        after = [d for d in deps if d["trigger_after"] == att["id"]]  # (a link also opens the comparison)
        paint = [d for d in after if not d["backend_fn"]]
        assert len(paint) == 1 and paint[0]["js"], att["api_name"]
        detail = [d for d in deps if d["trigger_after"] == paint[0]["id"]]
        assert [d["api_name"] for d in detail] == [att["api_name"].replace("_attention", "_detail")]
        assert "requestAnimationFrame" in paint[0]["js"]
        assert by_id[detail[0]["id"]]["backend_fn"]
