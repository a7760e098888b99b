"""Train tab handlers without a browser: play streams figures, the stop flag ends the loop between
steps, a tampered upload is refused with a message, and a reproduction streams then draws."""
import json

from explorer.app.tabs import train as U
from explorer.training import reproductions

CFG = json.dumps(U.small_config().replace(d_model=32, n_layers=1).to_dict())


def _play(state, steps=10, task="copy", batch=8, seq_len=16, **kw):
    return U.play(state, CFG, task, steps, 3e-3, 0, "cosine", batch, seq_len, 0, "", "trained", **kw)


def test_play_streams_snapshots_and_figures():
    outs = list(_play(None))
    state, status, curves, att, grads = outs[-1]
    assert "step 10 / 10" in status and "Finished" in status
    assert len(curves.data) == 3 and len(att.data) >= 3 and len(grads.data) >= 2
    assert len(outs) >= 3  # step 0, then every few steps


def test_pause_flag_stops_between_steps():
    gen = _play(None, steps=500)
    state = next(gen)[0]  # the step-0 snapshot
    U.pause(state)  # what the Pause button does (another request, same session state)
    last = list(gen)[-1]
    assert "stopped at step" in last[1] and last[0]["trainer"].step < 500


def test_caps_and_bad_settings_warn_instead_of_raising():
    out = list(_play(None, batch=4096, seq_len=1024))
    assert "batch_size" in out[-1][1] and "tokens here" in out[-1][1]
    out = list(U.play(None, "{not json", "copy", 10, 3e-3, 0, "cosine", 8, 16, 0, "", "trained"))
    assert "config" in out[-1][1]


def test_download_then_upload_and_tampered_upload(tmp_path):
    state = list(_play(None))[-1][0]
    files = U.download(state)["value"]
    weights = next(f for f in files if f.endswith(".safetensors"))
    new_state, config, status = U.upload({}, weights)
    assert json.loads(config) == json.loads(CFG) and "Loaded" in status and "uploaded" in new_state
    data = bytearray(open(weights, "rb").read())
    data[-1] ^= 0xFF
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(bytes(data))
    _, config, status = U.upload({}, str(bad))
    assert "Refused" in status and "modified" in status


def test_trained_model_for_the_other_tabs():
    assert U.trained_model(None) is None
    state = list(_play(None))[-1][0]
    cfg, model = U.trained_model(state)
    assert cfg.to_dict() == json.loads(CFG) and model is state["trainer"].model and not model.training


def test_initial_weights_switch_draws_the_untrained_maps():
    state = list(_play(None, steps=20))[-1][0]
    trained = U._figures(state, "trained")[1]
    initial = U._figures(state, "initial")[1]
    assert "step 20" in trained.layout.title.text and "step 0" in initial.layout.title.text


def test_reproduction_streams_progress_then_figure(monkeypatch):
    real = reproductions.run
    monkeypatch.setattr(reproductions, "run", lambda name, progress=None: real(name, quick=True, progress=progress))
    outs = list(U.run_reproduction("kv_heads", {}))
    assert outs[0][1].startswith("Running")
    state, reading, fig, table = outs[-1]
    assert "MHA" in reading and len(fig.data) == 3 and list(table.columns) == reproductions.REPRODUCTIONS["kv_heads"].COLUMNS


def test_reproduction_stop_ends_the_work(monkeypatch):
    real = reproductions.run
    monkeypatch.setattr(reproductions, "run", lambda name, progress=None: real(name, quick=True, progress=progress))
    gen = U.run_reproduction("warmup", {})
    state = next(gen)[0]
    U.stop_reproduction(state)
    assert "stopped" in list(gen)[-1][1]
