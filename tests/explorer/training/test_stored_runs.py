"""Stored reproduction runs (assets/reproductions): present for every reproduction, small, made by the
code as it is now (the first steps replayed from the code agree with the stored ones), and the
timeline / overlay figures show what they say (the snapshot's step, the stored curves under the live ones).
"""

import json

import numpy as np
import plotly.graph_objects as go
import pytest

from explorer.figures import training as plots
from explorer.training import reproductions
from explorer.training.reproductions import induction, stored


@pytest.fixture(scope="module")
def records():
    return {name: stored.load(name) for name in reproductions.REPRODUCTIONS}


def test_every_reproduction_has_a_full_stored_run_with_its_provenance(records):
    for name, r in records.items():
        assert r is not None, f"no stored run of {name}: python -m explorer.reproduce {name} --store"
        assert r["name"] == name and not r["settings"]["quick"] and r["rows"] and r["reading"]
        assert {"date", "commit", "machine", "python", "torch"} <= set(r["stored"])
    total = sum(stored.path(n).stat().st_size for n in records)
    assert total <= stored.MAX_TOTAL_BYTES, f"{total:,} bytes"


@pytest.mark.parametrize("name", list(reproductions.REPRODUCTIONS))
def test_replaying_the_first_steps_matches_the_stored_run(name, records):
    """The stored losses of the first steps come back from the code: a change that would give another
    run (settings, seeds, data, model) fails here until the stored run is made again."""
    got = stored.replay(name)
    assert got == pytest.approx(records[name]["replay"], rel=1e-3, abs=1e-4), (
        f"{name}: the stored run is stale; python -m explorer.reproduce {name} --store"
    )


def test_the_stored_induction_run_learned_and_its_timeline_shows_it(records):
    r = records["induction"]
    tl = r["timeline"]
    assert tl[0]["step"] == 0 and tl[-1]["step"] == r["settings"]["steps"]
    assert tl[-1]["second_half_loss"] < 0.2 < 3.0 < tl[0]["second_half_loss"]
    d = str(r["stripe"])  # the stripe this run learned: t-n+1 or t-n+2
    assert r["stripe_score"][d] == max(r["stripe_score"][k] for k in ("0", "1"))  # the stronger of the two
    best = [max(max(row) for row in t["stripes"][d]) for t in tl]
    assert best[-1] > 0.5 > best[0]
    assert f"key t-n+{int(d) + 1}" in r["reading"]
    assert tl[0]["step"] < r["phase_change"] <= tl[-1]["step"]
    # the stored maps decode to attention rows that sum to one (up to the uint8 levels)
    maps = plots.decode_maps(tl[-1]["maps"], r["maps_shape"])
    rows = maps.sum(-1)
    assert np.allclose(rows, 1.0, atol=0.06)


@pytest.mark.parametrize("step", [0, 110, 10_000])
def test_the_timeline_shows_the_snapshot_at_the_chosen_step(step, records):
    r = records["induction"]
    fig = plots.timeline_figure(r, step)
    snap = plots.snapshot_at(r["timeline"], step)
    assert f"at step {snap['step']} of" in fig.layout.title.text
    assert fig.layout.shapes[0].x0 == snap["step"]  # the red line sits at the snapshot
    heat = next(t for t in fig.data if t.name == "induction score")
    assert np.allclose(np.asarray(heat.z), np.asarray(snap["stripes"][str(r["stripe"])]))
    w = records["warmup"]
    wfig = plots.timeline_figure(w, step)
    wsnap = plots.snapshot_at(w["rows"][0]["grad_norms"], step)
    assert f"at step {wsnap['step']}" in wfig.layout.title.text


def test_overlay_draws_the_stored_curves_under_the_live_ones(records):
    stored_fig = plots.repro_figure(records["warmup"])
    live = json.loads(json.dumps(records["warmup"]))
    for row in live["rows"]:
        row["curve"] = [{**p, "loss": p["loss"] + 0.5} for p in row["curve"]]
    fig = plots.overlay(plots.repro_figure(live), stored_fig)
    names = [t.name for t in fig.data]
    assert len(fig.data) == 2 * len(stored_fig.data)
    assert all(n.startswith("stored: ") for n in names[: len(stored_fig.data)])
    assert fig.data[0].line.dash == "dash" and list(fig.data[0].y) == list(stored_fig.data[0].y)
    assert isinstance(fig, go.Figure) and "stored run" in fig.layout.title.text


def test_encoded_maps_round_trip():
    maps = np.random.default_rng(0).dirichlet(np.ones(6), size=(2, 3, 6)).astype(np.float32)
    back = plots.decode_maps(induction.encode_maps(maps), maps.shape)
    assert np.abs(back - maps).max() <= 0.5 / 255 + 1e-6
