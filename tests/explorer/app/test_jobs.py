"""Heavy-job admission: slots per family, one heavy job per visitor, "busy" at once (or after a bounded
wait) instead of a queue, a stop that reaches the running work, low CPU priority for the worker, and a
slot freed only once its worker thread has ended."""

import asyncio
import os
import threading
import time
from types import SimpleNamespace

import pytest

from explorer.app.server import jobs
from explorer.runtime.pool import Busy


def request(name):
    return SimpleNamespace(session_hash=name)


def test_one_heavy_job_per_visitor_whatever_its_family():
    adm = jobs.Admission({"train": 2, "export": 1})

    async def main():
        t = await adm.admit("train", "v1")
        with pytest.raises(Busy, match="One heavy job at a time"):
            await adm.admit("export", "v1")
        other = await adm.admit("export", "v2")
        adm.release(t), adm.release(other)
        return await adm.admit("export", "v1")  # free again once released

    assert asyncio.run(main()).family == "export"


def test_a_full_family_answers_busy_at_once_or_after_its_bounded_wait():
    adm = jobs.Admission({"train": 1, "sweep": 1}, {"train": 0.0, "sweep": 0.5})

    async def main():
        await adm.admit("train", "a"), await adm.admit("sweep", "b")
        t0 = time.perf_counter()
        with pytest.raises(Busy, match="training run slot is in use"):
            await adm.admit("train", "c")
        at_once = time.perf_counter() - t0
        t0 = time.perf_counter()
        with pytest.raises(Busy, match="busy"):
            await adm.admit("sweep", "c")
        return at_once, time.perf_counter() - t0

    at_once, waited = asyncio.run(main())
    assert at_once < 0.1 and 0.4 < waited < 2


def test_a_waiting_job_gets_the_slot_when_it_frees():
    adm = jobs.Admission({"sweep": 1}, {"sweep": 5.0})

    async def main():
        first = await adm.admit("sweep", "a")
        asyncio.get_running_loop().call_later(0.3, adm.release, first)
        t = await adm.admit("sweep", "b")
        return t.visitor

    assert asyncio.run(main()) == "b"


def test_direct_calls_have_no_visitor_rule_but_keep_the_family_limit():
    adm = jobs.Admission({"export": 2})

    async def main():
        await adm.admit("export", None), await adm.admit("export", None)
        with pytest.raises(Busy):
            await adm.admit("export", None)

    asyncio.run(main())


def test_stop_reaches_the_visitors_running_work_and_its_slot_frees_when_the_work_ends():
    started, saw_stop = threading.Event(), []

    def work(should_stop):
        started.set()
        while not should_stop():
            time.sleep(0.01)
        saw_stop.append(time.perf_counter())
        time.sleep(0.2)  # winding down: the slot is still held
        return "stopped"

    async def main():
        task = asyncio.ensure_future(jobs.run_job("export", request("stopper"), work))
        while not started.is_set():
            await asyncio.sleep(0.01)
        assert jobs.HEAVY.stop("stopper") and jobs.HEAVY.running("export") == 1
        result = await task
        return result, jobs.HEAVY.running("export")

    result, running = asyncio.run(main())
    assert result == "stopped" and running == 0 and saw_stop


def test_a_cancelled_event_stops_the_work_and_waits_for_its_end():
    ended = []

    def work(should_stop):
        while not should_stop():
            time.sleep(0.01)
        time.sleep(0.2)
        ended.append(True)

    async def main():
        task = asyncio.ensure_future(jobs.run_job("sweep", request("canceller"), work))
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return bool(ended), jobs.HEAVY.running("sweep")

    assert asyncio.run(main()) == (True, 0)


def test_the_work_runs_at_the_lowest_priority_in_its_own_thread():
    def work(_should_stop):
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id()), threading.current_thread().name

    nice, name = asyncio.run(jobs.run_job("export", None, work))
    assert nice == 19 and name == "explorer-job"
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) < 19  # the caller's thread is untouched


def test_the_works_exception_reaches_the_caller_and_frees_the_slot():
    def work(_should_stop):
        raise ValueError("bad")

    with pytest.raises(ValueError, match="bad"):
        asyncio.run(jobs.run_job("export", None, work))
    assert jobs.HEAVY.running() == 0


def test_a_stream_yields_items_as_they_come_and_stops_when_closed():
    stopped = []

    def work(should_stop, emit):
        for i in range(1000):
            if should_stop():
                stopped.append(i)
                return
            emit(i)
            time.sleep(0.01)

    async def main():
        got = []
        gen = jobs.stream_job("train", request("streamer"), work, first="first")
        async for item in gen:
            got.append(item)
            if len(got) == 5:
                break
        await gen.aclose()
        return got, jobs.HEAVY.running("train")

    got, running = asyncio.run(main())
    assert got == ["first", 0, 1, 2, 3] and running == 0 and stopped


def test_one_heavy_job_per_client_address_whatever_its_sessions():
    adm = jobs.Admission({"train": 2, "reproduce": 1})

    async def main():
        t = await adm.admit("train", "tab1", "10.0.0.1")
        for family in ("train", "reproduce"):  # a second tab, or a fresh session, at the same address
            with pytest.raises(Busy, match="from your address"):
                await adm.admit(family, "tab2", "10.0.0.1")
        with pytest.raises(Busy, match="your training run is still running"):
            await adm.admit("train", "tab1", "10.0.0.1")
        other = await adm.admit("train", "tab3", "10.0.0.2")  # another visitor gets the second slot
        assert not adm.stop("tab2") and not t.stop.is_set()  # a stop reaches its own session's job only
        assert adm.stop("tab1") and t.stop.is_set()
        return other

    assert asyncio.run(main()).client == "10.0.0.2"


def test_the_client_address_comes_from_the_request(monkeypatch):
    monkeypatch.delenv("EXPLORER_CLIENT_ADDRESS", raising=False)
    monkeypatch.delenv("SPACE_ID", raising=False)

    def req(host, forwarded=None):
        return SimpleNamespace(
            session_hash="s",
            client=SimpleNamespace(host=host),
            headers={"x-forwarded-for": forwarded} if forwarded else {},
        )

    assert jobs.client_of(req("10.1.1.1", "9.9.9.9")) == "10.1.1.1"  # a forged header is not read here
    assert jobs.client_of(request("s")) is None and jobs.client_of(None) is None
