"""Idle sessions expire (``explorer.app.server.sessions``): on Gradio's own ``StateHolder``, idle sessions are
dropped with their states' delete callbacks, active ones kept; a state Gradio rebuilt after an
expiry makes the next commit redraw everything."""

import datetime

import gradio as gr
import pytest
from gradio.state_holder import StateHolder

from explorer.app.controls.fields import config_updates
from explorer.app.controls.state import new_state
from explorer.app.server import sessions
from explorer.app.tabs import attention as h
from models import ModelConfig


@pytest.fixture
def holder():
    freed = []
    with gr.Blocks() as demo:
        kept = gr.State({"big": "x"}, delete_callback=freed.append)
        gr.Textbox()
    holder = StateHolder()
    holder.set_blocks(demo)
    return holder, kept, freed


def test_idle_sessions_are_dropped_and_active_ones_kept(holder):
    holder, state, freed = holder
    for sid in ("idle", "busy"):
        holder[sid][state._id] = {"session": sid}  # what Gradio does when an event writes a state
    now = datetime.datetime.now()
    holder.time_last_used["idle"] = now - datetime.timedelta(seconds=120)
    holder.time_last_used["busy"] = now - datetime.timedelta(seconds=30)
    assert sessions.expire_idle(holder, ttl_s=60, now=now) == 1
    assert "idle" not in holder and "idle" not in holder.time_last_used and "busy" in holder
    assert freed == [{"session": "idle"}]  # its states' delete callbacks ran
    assert sessions.expire_idle(holder, ttl_s=60, now=now) == 0
    assert sessions.expire_idle(holder, ttl_s=60, now=now + datetime.timedelta(seconds=31)) == 1
    assert len(holder.session_data) == 0


def _values(**kw):
    return {n: u["value"] for n, u in config_updates(ModelConfig(**kw)).items()}


def test_a_rebuilt_state_redraws_what_a_live_one_skips():
    built = new_state(ModelConfig(), "hello")  # the page's initial state: the default figures are drawn
    live = sessions.page_state(built, loading=True)  # the page-load chain saw it
    out = h.refresh_attention(_values(), "hello", sessions.page_state(live, loading=False), stats=False)
    assert out["grid"] == gr.skip() and out["attention"] == gr.skip() and not out["state"]["fresh"]
    # the same commit on a state Gradio rebuilt from the defaults after the session expired
    out = h.refresh_attention(_values(), "hello", sessions.page_state(built, loading=False), stats=False)
    assert out["state"]["fresh"] and out["state"]["seen"]
    assert out["grid"] != gr.skip() and out["attention"] != gr.skip()  # figures and controls are resent


def _flood(holder, state, owner, sids):
    from explorer.app.server import visitors

    for sid in sids:
        token = visitors.CURRENT.set(owner)
        try:
            holder[sid][state._id] = {"session": sid}
        finally:
            visitors.CURRENT.reset(token)


def test_a_flood_from_one_address_evicts_only_that_addresses_sessions(holder):
    from explorer.app.server import visitors
    from explorer.app.server.gradio_compat import bound_sessions

    holder, state, freed = holder
    bound_sessions(holder, visitors.current, per_owner=4, total=10)
    _flood(holder, state, "10.0.0.1", ["victim"])
    _flood(holder, state, "10.0.0.2", [f"flood{i}" for i in range(250)])
    assert "victim" in holder and holder["victim"][state._id] == {"session": "victim"}  # its state kept
    flood = [sid for sid in holder.session_data if sid.startswith("flood")]
    assert flood == [f"flood{i}" for i in range(246, 250)]  # only the address's 4 most recent
    assert len(freed) == 246 and all(v["session"].startswith("flood") for v in freed)  # their callbacks ran
    assert set(holder.explorer_owners) == set(holder.session_data)


def test_past_the_total_the_address_holding_most_gives_way(holder):
    from explorer.app.server import visitors
    from explorer.app.server.gradio_compat import bound_sessions

    holder, state, _ = holder
    bound_sessions(holder, visitors.current, per_owner=5, total=6)
    _flood(holder, state, "10.0.0.1", ["a1", "a2"])
    _flood(holder, state, "10.0.0.2", ["b1", "b2", "b3", "b4", "b5"])
    assert set(holder.session_data) == {"a1", "a2", "b2", "b3", "b4", "b5"}  # b1, not a1, made room
    # Gradio's own least-recently-used rule of all sessions would have dropped a1 (for comparison)
    plain = StateHolder()
    plain.set_blocks(holder.blocks)
    plain.capacity = 6
    _flood(plain, state, None, ["a1", "a2", "b1", "b2", "b3", "b4", "b5"])
    assert "a1" not in plain


def test_expiry_forgets_the_owner_of_a_dropped_session(holder):
    from explorer.app.server import visitors
    from explorer.app.server.gradio_compat import bound_sessions

    holder, state, _ = holder
    bound_sessions(holder, visitors.current, per_owner=4, total=10)
    _flood(holder, state, "10.0.0.1", ["old"])
    holder.time_last_used["old"] = datetime.datetime.now() - datetime.timedelta(seconds=120)
    assert sessions.expire_idle(holder, ttl_s=60) == 1
    assert "old" not in holder.explorer_owners
