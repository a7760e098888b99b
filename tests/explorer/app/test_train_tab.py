"""Train tab handlers without a browser: a press streams figures, Pause and Reset stop it inside a step,
every input is bounded with a field-named message, a visitor has one heavy job at a time, the slot is
freed only once the work has ended, downloads leave nothing behind, and uploads are checked from their
header before anything is built."""

import asyncio
import glob
import json
import os
import tempfile
import time
from types import SimpleNamespace

import pytest
import torch

from explorer.app.server import jobs
from explorer.app.tabs import train as U
from explorer.app.tabs.parts import train_files, train_repro, train_runs
from explorer.runtime.pool import POOL
from explorer.training import checkpoint, reproductions
from models import ModelConfig, build_model

CFG = json.dumps(U.small_config().replace(d_model=32, n_layers=1).to_dict())


def visitor(name="a"):
    return SimpleNamespace(session_hash=f"visitor-{name}-{time.monotonic_ns()}")


def args(steps=10, task="copy", batch=8, seq_len=16, cfg=CFG, text="", lr=3e-3, seed=0):
    return (cfg, task, steps, lr, 0, "cosine", batch, seq_len, seed, text, "trained")


def drain(agen) -> list:
    async def run():
        return [out async for out in agen]

    return asyncio.run(run())


def play(state=None, request=None, **kw) -> list:
    return drain(train_runs.play(state, *args(**kw), request=request))


async def _until(agen, predicate, limit=400):
    """Items of ``agen`` up to the first one for which ``predicate`` holds."""
    seen = []
    async for out in agen:
        seen.append(out)
        if predicate(out) or len(seen) >= limit:
            return seen
    return seen


def test_a_press_answers_at_once_then_streams_snapshots_and_figures():
    outs = play()
    assert outs[0][1].startswith("⏳")  # the first answer, before any work
    state, status, curves, att, grads = outs[-1]
    assert "step 10 / 10" in status and "Finished" in status
    assert len(curves.data) == 3 and len(att.data) >= 3 and len(grads.data) >= 2
    assert len(outs) >= 3  # the first answer, step 0, then the newest snapshot at most every SEND_EVERY_S
    assert jobs.HEAVY.running() == 0


@pytest.mark.parametrize("when", ["first answer", "first snapshot"])
def test_pause_stops_the_press_inside_a_step_even_at_its_start(when):
    who = visitor()

    async def run():
        gen = train_runs.play(None, *args(steps=2000, batch=32, seq_len=64), request=who)
        seen = await _until(gen, lambda o: o[1].startswith("⏳") if when == "first answer" else "step 0" in o[1])
        t0 = time.perf_counter()
        train_runs.pause(seen[-1][0], request=who)  # what the Pause button does: another request, same visitor
        rest = [out async for out in gen]
        return seen + rest, time.perf_counter() - t0

    outs, took = asyncio.run(run())
    last = outs[-1]
    assert "stopped at step" in last[1] and last[0]["trainer"].step < 2000
    assert took < 5.0  # stopped within one module's run, not after the press's 180 s
    assert jobs.HEAVY.running() == 0


@pytest.mark.parametrize(
    "field, kw",
    [
        ("steps", {"steps": "abc"}),
        ("steps", {"steps": 10**9}),
        ("steps", {"steps": 2.5}),
        ("lr", {"lr": float("nan")}),
        ("lr", {"lr": 5.0}),
        ("batch_size", {"batch": -1}),
        ("seq_len", {"seq_len": [1, 2]}),
        ("seed", {"seed": True}),
        ("task", {"task": "<b>x</b>"}),
        ("text", {"task": "lm", "text": "x" * (600 * 1024)}),
        ("batch_size", {"batch": 512, "seq_len": 1024}),  # tokens per batch past the cap
        ("config", {"cfg": "{not json"}),
    ],
)
def test_every_input_is_bounded_with_a_message_naming_its_field(field, kw):
    outs = play(**kw)
    shown = outs[0][1].replace("\\", "")  # the status is Markdown-escaped
    assert len(outs) == 1 and "⚠️" in shown and field in shown, shown[:300]
    assert "Traceback" not in shown and "<b>" not in shown and len(shown) < 2000


def test_a_press_that_would_exhaust_the_memory_is_refused_from_its_config_before_building(monkeypatch):
    """Talking heads at 8192 tokens: the full score matrix of each layer, refused by the budget of one
    optimizer step (or a cap) before a model is built."""
    built = []
    monkeypatch.setattr(train_runs, "Trainer", lambda *a, **k: built.append(1))
    cfg = json.dumps(
        {"n_layers": 12, "d_model": 64, "n_heads": 4, "attention": "talking_heads", "max_len": 8192, "position": "rope"}
    )
    c0 = time.process_time()  # this process's CPU: what the refusal costs, whatever else the machine runs
    outs = play(cfg=cfg, steps=2, batch=1, seq_len=8192)
    assert "⚠️" in outs[-1][1] and not built and time.process_time() - c0 < 5


def test_one_heavy_job_per_visitor_and_a_busy_message_when_the_slots_are_taken():
    a, b, c = visitor("a"), visitor("b"), visitor("c")

    async def run():
        ga = train_runs.play(None, *args(steps=2000, batch=32, seq_len=64), request=a)
        gb = train_runs.play(None, *args(steps=2000, batch=32, seq_len=64), request=b)
        await _until(ga, lambda o: "step 0" in o[1])
        await _until(gb, lambda o: "step 0" in o[1])
        again = [o async for o in train_runs.play(None, *args(), request=a)]  # a's second press
        repro = [o async for o in train_repro.run_reproduction("induction", None, request=a)]
        third = [o async for o in train_runs.play(None, *args(), request=c)]  # both train slots taken
        train_runs.pause(None, request=a), train_runs.pause(None, request=b)
        [o async for o in ga], [o async for o in gb]
        return again, repro, third

    again, repro, third = asyncio.run(run())
    assert "One heavy job at a time" in again[-1][1]
    assert "One heavy job at a time" in repro[-1][1]
    assert "busy" in third[-1][1] and "training run slots" in third[-1][1]
    assert jobs.HEAVY.running() == 0


def test_a_cancelled_press_frees_its_slot_only_once_its_work_has_ended():
    who = visitor()

    async def run():
        gen = train_runs.play(None, *args(steps=2000, batch=32, seq_len=64), request=who)
        seen = await _until(gen, lambda o: "step 0" in o[1])
        trainer = seen[-1][0]["trainer"]
        await gen.aclose()  # what Gradio does when the event is cancelled or the page goes away
        return trainer, jobs.HEAVY.running("train")

    trainer, running_after = asyncio.run(run())
    assert running_after == 0
    step = trainer.step
    time.sleep(0.5)
    assert trainer.step == step  # nothing trains on behind the visitor's back


def test_a_press_waits_for_nothing_when_the_memory_pool_is_held(monkeypatch):
    monkeypatch.setenv("EXPLORER_SERVER_MEMORY", "2G")
    with POOL.reserve(POOL.total - (1 << 20), "others' work"):
        outs = play(request=visitor())
    assert "busy" in outs[-1][1].lower() and "MiB" in outs[-1][1]


def test_reset_stops_the_press_and_forgets_the_run():
    who = visitor()

    async def run():
        gen = train_runs.play(None, *args(steps=2000, batch=32, seq_len=64), request=who)
        seen = await _until(gen, lambda o: "step 0" in o[1])
        out = train_runs.reset(seen[-1][0], request=who)
        rest = [o async for o in gen]
        return out, rest

    out, rest = asyncio.run(run())
    assert out[0] == {} and "Reset" in out[1]
    assert "stopped at step" in rest[-1][1]


def test_download_leaves_nothing_behind_then_upload_continues_and_a_tampered_file_is_refused(tmp_path):
    state = play()[-1][0]
    before = set(glob.glob(os.path.join(tempfile.gettempdir(), "train-*")))
    for _ in range(3):
        files = train_files.download(state)["value"]
    assert set(glob.glob(os.path.join(tempfile.gettempdir(), "train-*"))) == before
    weights = next(f for f in files if f.endswith(".safetensors"))
    new_state, config, status = train_files.upload({}, weights)
    assert json.loads(config) == json.loads(CFG) and "Loaded" in status and "uploaded" in new_state
    outs = play(new_state)
    assert "uploaded weights" in outs[-1][1]
    with open(weights, "rb") as f:
        data = bytearray(f.read())
    data[-1] ^= 0xFF
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(bytes(data))
    _, config, status = train_files.upload({}, str(bad))
    assert "Refused" in status and "modified" in status


def _crafted(path, config: dict) -> None:
    """A valid file of one small tensor whose header asks for ``config`` (digest right)."""
    data = checkpoint.to_bytes(torch.nn.Linear(2, 2), U.small_config())
    header = checkpoint.read_header(data)
    header["__metadata__"]["config"] = json.dumps(config)
    body = json.dumps(header).encode()
    body += b" " * (-len(body) % 8)
    n = int.from_bytes(data[:8], "little")
    path.write_bytes(len(body).to_bytes(8, "little") + body + data[8 + n :])


def test_an_upload_asking_for_a_huge_model_is_refused_from_its_header(tmp_path, monkeypatch):
    built = []
    monkeypatch.setattr(checkpoint, "build_model", lambda cfg: built.append(cfg) or build_model(cfg))
    path = tmp_path / "huge.safetensors"
    _crafted(path, {"n_layers": 9, "d_model": 4096, "n_heads": 32, "d_ff": 16384, "max_len": 1024})
    assert path.stat().st_size < 4096
    t0 = time.perf_counter()
    _, _, status = train_files.upload({}, str(path))
    assert "Refused" in status and not built and time.perf_counter() - t0 < 2


def test_a_valid_model_over_the_training_cap_is_refused(tmp_path):
    cfg = ModelConfig(n_layers=2, d_model=256, n_heads=4, max_len=256, ffn="moe")  # 4.86 M parameters
    assert cfg.approx_params() > 2_000_000
    weights, _ = checkpoint.save(build_model(cfg), tmp_path, cfg)
    state, _, status = train_files.upload({}, str(weights))
    assert "Refused" in status and "2,000,000" in status and "uploaded" not in state


def test_a_header_whose_tensors_do_not_match_its_config_is_refused_before_building(tmp_path, monkeypatch):
    path = tmp_path / "mismatch.safetensors"
    _crafted(path, json.loads(CFG))  # the tensors are a 2 x 2 linear layer's
    built = []
    monkeypatch.setattr(checkpoint, "build_model", lambda cfg: built.append(build_model(cfg)) or built[-1])
    _, _, status = train_files.upload({}, str(path))
    assert "Refused" in status and "weights" in status
    assert built and all(p.device.type == "meta" for m in built for p in m.parameters())  # compared, not built


def test_reproduction_streams_progress_then_figure(monkeypatch):
    real = reproductions.run
    monkeypatch.setattr(reproductions, "run", lambda name, progress=None: real(name, quick=True, progress=progress))
    outs = drain(train_repro.run_reproduction("kv_heads", {}, request=visitor()))
    first = outs[0]
    assert first[1].startswith("⏳ Running **kv_heads** live") and "on two CPU cores" in first[1] and "▱" in first[1]
    assert "shows the stored run until" in first[1]
    stored = train_repro.show_stored("kv_heads")[1]  # the figure at the start: the stored run, not a past live one
    assert [t.name for t in first[2].data] == [t.name for t in stored.data] and first[6] is None
    logged = [o[1] for o in outs[1:-1] if "\n- kv" in o[1]]
    assert logged and all(line.count("\n- ") <= train_repro.LOG_LINES for line in logged)
    state, reading, fig, table, slider, timeline, live = outs[-1]
    assert "MHA" in reading and list(table.columns) == reproductions.REPRODUCTIONS["kv_heads"].COLUMNS
    assert "live run" in reading and "dashed: the stored run" in reading  # the stored run drawn under the live one
    assert len(fig.data) == 6 and [t.name.startswith("stored: ") for t in fig.data] == [True] * 3 + [False] * 3
    assert live["name"] == "kv_heads" and slider["visible"] is False  # no snapshots to step through


def test_picking_a_reproduction_shows_its_stored_run_at_once():
    reading, fig, table, slider, timeline, live = train_repro.show_stored("induction")
    assert "stored run of" in reading and "commit" in reading and len(table) > 0 and live is None
    assert slider["visible"] and slider["value"] == slider["maximum"] > slider["minimum"] == 0
    assert "at step" in timeline.layout.title.text
    early = train_repro.show_step("induction", 25, None)
    assert "at step 25 of" in early.layout.title.text
    assert "no snapshots" in train_repro.show_step("efficiency", 0, None).layout.annotations[0].text
    bad = train_repro.show_stored("<b>x</b>")
    assert "reproduction" in bad[0] and "<b>" not in bad[0]


def test_reproduction_stop_ends_the_work_inside_a_training_step(monkeypatch):
    who = visitor()

    async def run():
        gen = train_repro.run_reproduction("warmup", {}, request=who)
        seen = await _until(gen, lambda o: "step" in o[1])
        t0 = time.perf_counter()
        train_repro.stop_reproduction(None, request=who)
        rest = [o async for o in gen]
        return seen + rest, time.perf_counter() - t0

    outs, took = asyncio.run(run())
    assert "stopped" in outs[-1][1] and took < 5.0 and jobs.HEAVY.running() == 0


def test_an_unknown_reproduction_is_refused_with_the_valid_names():
    outs = drain(train_repro.run_reproduction("<script>", {}, request=visitor()))
    assert "reproduction" in outs[-1][1] and "induction" in outs[-1][1] and "<script>" not in outs[-1][1]


def test_trained_model_for_the_other_tabs():
    assert U.trained_model(None) is None
    state = play()[-1][0]
    cfg, model = U.trained_model(state)
    assert cfg.to_dict() == json.loads(CFG) and model is state["trainer"].model and not model.training


def test_initial_weights_switch_draws_the_untrained_maps():
    state = play(steps=20)[-1][0]
    trained = train_runs.figures(state, "trained")[1]
    initial = train_runs.figures(state, "initial")[1]
    assert "step 20" in trained.layout.title.text and "step 0" in initial.layout.title.text


def test_the_app_writes_no_interface_files_into_the_source_tree():
    """Gradio writes a ``.pyi`` beside the source of every component subclass: the app defines none."""
    import pathlib

    import explorer.app.page.layout  # noqa: F401  (every tab's components)

    root = pathlib.Path(U.__file__).resolve().parents[3]
    assert not list((root / "explorer").rglob("*.pyi"))


def test_a_task_brings_the_steps_it_needs_and_says_what_they_do():
    from explorer.app.tabs import train as train_tab
    from explorer.training.tasks import LEARNS_IN, task_names

    up = train_tab.task_steps("induction")
    assert up["value"] == LEARNS_IN["induction"][0] >= 1000 and "93%" in up["info"]
    assert train_tab.task_steps("copy")["value"] == 300
    assert "no accuracy target" in train_tab.task_steps("lm")["info"]
    assert train_tab.task_steps("<script>") == train_tab.gr.skip()
    assert set(LEARNS_IN) <= set(task_names())
    for steps, _ in LEARNS_IN.values():  # every proposal within the tab's own bound on steps
        lo, hi, _ = train_tab.NUMBERS["steps"]
        assert lo <= steps <= hi


# ---------------------------------------------------------------------------- a finished run, uploads, throttling
@pytest.mark.parametrize("press", [train_runs.play, train_runs.step])
def test_a_press_after_a_finished_run_keeps_its_summary_and_says_how_to_continue(press):
    state = play(steps=10)[-1][0]
    outs = drain(press(state, *args(steps=10)))
    assert len(outs) == 1
    state2, status, *figs = outs[0]
    assert "⚠️" not in status and "not valid" not in status  # the user typed nothing wrong
    assert "step 10 / 10" in status and "held-out loss" in status  # the final summary stays
    assert "finished (10 of 10 steps)" in status and "raise Steps" in status
    assert all(f == train_runs.gr.skip() for f in figs) and state2["trainer"].step == 10
    more = play(state2, steps=15)  # Steps raised: the same run continues to the new total
    assert "step 15 / 15" in more[-1][1] and more[-1][0]["trainer"] is state["trainer"]
    assert more[-1][0]["trainer"].step == 15


def test_a_press_with_steps_below_the_steps_done_trains_nothing_and_says_so():
    state = None
    for _ in range(2):  # two Steps of a 10-step run: not finished, 2 steps done
        state = drain(train_runs.step(state, *args(steps=10)))[-1][0]
    assert state["trainer"].step == 2 and not state["trainer"].done
    outs = play(state, steps=2)
    assert len(outs) == 1 and "⚠️" not in outs[0][1] and "has done 2 steps and Steps is 2" in outs[0][1]
    assert "step 2 / 10" in outs[0][1] and state["trainer"].step == 2


def _snapshot_answers(outs) -> list:
    return [o for o in outs if not o[1].startswith("⏳")]


def test_snapshots_reach_the_page_at_most_every_send_interval_and_the_last_always(monkeypatch):
    monkeypatch.setattr(train_runs, "SEND_EVERY_S", 1e6)  # nothing is due after the first: only first and last
    outs = _snapshot_answers(play(steps=40))  # snapshots at steps 0, 5, ..., 40
    assert 1 <= len(outs) <= 2 and "step 40 / 40" in outs[-1][1] and "Finished" in outs[-1][1]
    assert len(outs) == 1 or "step 0 / 40" in outs[0][1]  # (step 0 dropped if the last was ready first)
    one = _snapshot_answers(drain(train_runs.step(None, *args(steps=40))))  # Step: the step's snapshot, always
    assert "step 1 / 40" in one[-1][1] and 1 <= len(one) <= 2  # step 0 is dropped when step 1 is ready first
    monkeypatch.setattr(train_runs, "SEND_EVERY_S", 0.0)  # every snapshot due
    assert len(_snapshot_answers(play(steps=40))) >= 2


def test_snapshots_the_page_has_not_taken_are_dropped_for_the_newest(monkeypatch):
    monkeypatch.setattr(train_runs, "SEND_EVERY_S", 0.0)  # the worker sends every snapshot
    drawn, figures = [], train_runs.figures
    monkeypatch.setattr(train_runs, "figures", lambda *a: drawn.append(1) or figures(*a))

    async def run():
        gen = train_runs.play(None, *args(steps=40), request=visitor())
        seen = await _until(gen, lambda o: not o[1].startswith("⏳"))  # the first snapshot the page gets
        trainer = seen[-1][0]["trainer"]
        for _ in range(1200):  # a slow page: it reads nothing while the run trains to its end
            if len(trainer.history) == 9:  # (it waited for 9 drawings, which a page that reads nothing never
                break  # makes: every run sat out the whole minute)
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.2)
        return seen, [o async for o in gen], trainer

    seen, rest, trainer = asyncio.run(run())
    assert len(trainer.history) == 9  # 9 snapshots trained (steps 0, 5, ..., 40) ...
    assert len(rest) <= 1 and "step 40 / 40" in (seen + rest)[-1][1]  # ... the page gets the newest, not 8 stale


def test_an_uploaded_model_restores_its_task_and_draws_its_probe_map():
    state = play(steps=10, task="reverse")[-1][0]
    trained = state["snap"].attention  # the probe's attention under these weights, as the run drew it
    files = train_files.download(state)["value"]
    weights = next(f for f in files if f.endswith(".safetensors"))
    new_state, _, status = train_files.upload({}, weights)
    assert new_state["uploaded_task"] == "reverse" and "on reverse" in status
    task, fig = train_files.restored(new_state, "trained")
    assert task["value"] == "reverse"
    heat = [t for t in fig.data if t.name.startswith("layer")]
    assert len(heat) == trained.shape[0] * trained.shape[1] and "step 10" in fig.layout.title.text
    assert any(t.name == "ideal pattern" for t in fig.data)  # the pattern that solves reverse, beside it
    for t in heat:
        layer, head = int(t.name.split()[1]), int(t.name.split()[3])
        assert torch.allclose(
            torch.as_tensor(t.z, dtype=torch.float32),
            torch.as_tensor(trained[layer, head], dtype=torch.float32),
            atol=1e-5,
        )
    curves, att, _ = train_runs.figures(new_state, "trained")  # the weights switch draws it too
    assert "step 10" in att.layout.title.text
    assert "step 0" in train_runs.figures(new_state, "initial")[1].layout.title.text


def test_a_hostile_run_in_an_uploaded_header_restores_nothing_and_breaks_nothing(tmp_path):
    cfg = U.small_config().replace(d_model=32, n_layers=1)
    for run in ('{"task": "<script>", "seq_len": "abc"}', "[1, 2]", "not json", '{"task": 5, "seq_len": 1e99}'):
        path, _ = checkpoint.save(build_model(cfg), tmp_path, cfg, extra={"step": 3, "run": run})
        state, _, status = train_files.upload({}, str(path))
        assert "Loaded" in status and state["uploaded_task"] is None and state["uploaded_seq_len"] is None
        task, fig = train_files.restored(state)
        assert task == train_files.gr.skip() and "step 3" in fig.layout.title.text  # the default probe
    assert train_files.restored({}) == (train_files.gr.skip(), train_files.gr.skip())


def test_the_maps_follow_at_most_every_maps_interval_and_with_the_last_snapshot(monkeypatch):
    monkeypatch.setattr(train_runs, "SEND_EVERY_S", 0.0)  # every snapshot sends the curves ...
    monkeypatch.setattr(train_runs, "MAPS_EVERY_S", 1e6)  # ... the maps only with the first and the last
    outs = _snapshot_answers(play(steps=40))
    titles = [o[3].layout.title.text for o in outs if not isinstance(o[3], dict)]
    assert all("step 0" in t or "step 40" in t for t in titles)  # never a map of a step in between
    assert "step 40" in outs[-1][3].layout.title.text and "step 40 / 40" in outs[-1][1]
    assert all(len(o[2].data) == 3 for o in outs)  # the curves come with every answer


def test_a_live_reproduction_draws_its_curves_so_far(monkeypatch):
    """While warmup runs, the panel draws each run's held-out loss so far (from its Point progress lines),
    then the full figure; each partial figure holds only the points reported before it."""
    real = reproductions.run
    monkeypatch.setattr(reproductions, "run", lambda name, progress=None: real(name, quick=True, progress=progress))
    monkeypatch.setattr(train_repro, "REDRAW_S", 0.0)
    outs = drain(train_repro.run_reproduction("warmup", {}, request=visitor()))
    partial = [o[2] for o in outs[1:-1] if hasattr(o[2], "layout") and "live run in progress" in o[2].layout.title.text]
    assert len(partial) >= 2
    counts = [sum(len(t.x) for t in fig.data) for fig in partial]
    assert counts == sorted(counts) and counts[-1] > counts[0]  # curves grow as the run goes on
    assert {t.name for t in partial[-1].data} <= {
        f"{p}-LN, warm-up {w}" for p in ("post", "pre") for w in ("on", "off")
    }
    final = outs[-1][2]
    assert "live run in progress" not in final.layout.title.text  # the finished run's own figure
