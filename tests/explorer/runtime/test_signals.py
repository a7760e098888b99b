"""A StopToken crosses a process boundary: pickled it is its slot, and a forked process sees the stop the
caller sets after the fork (the worker model of ZeroGPU)."""

import multiprocessing
import pickle
import threading
import time

from explorer.runtime import signals
from explorer.runtime.signals import NEVER, StopToken, stop_channel


def _wait_for_stop(queue, answers):
    token = queue.get()  # unpickled here, in the child
    deadline = time.monotonic() + 20
    while not token() and time.monotonic() < deadline:
        time.sleep(0.01)
    answers.put(token())


def test_a_forked_process_sees_a_stop_set_after_it_started():
    ctx = multiprocessing.get_context("fork")
    queue, answers = ctx.SimpleQueue(), ctx.SimpleQueue()
    child = ctx.Process(target=_wait_for_stop, args=(queue, answers), daemon=True)
    child.start()  # forked before the token exists, as a reused ZeroGPU worker is
    pressed = threading.Event()
    try:
        with stop_channel(pressed.is_set, poll_s=0.01) as token:
            queue.put(token)
            time.sleep(0.2)
            assert not token()
            pressed.set()
            assert answers.get() is True
    finally:
        child.join(10)
    assert child.exitcode == 0


def test_pickling_keeps_only_the_slot_and_the_channel_frees_it():
    free = len(signals._FREE)
    with stop_channel(lambda: False) as token:
        assert len(signals._FREE) == free - 1
        again = pickle.loads(pickle.dumps(token))
        assert again == token and not again()
        token.set()
        assert again()  # the same byte of the shared page
    assert len(signals._FREE) == free
    with stop_channel(lambda: False) as reused:  # a slot given back starts cleared
        assert not reused()


def test_a_caller_that_already_stopped_gets_a_set_token_and_none_gets_never():
    with stop_channel(lambda: True) as token:
        assert token()
    with stop_channel(None) as token:
        assert token is NEVER and not token()
    NEVER.set()
    assert not NEVER() and StopToken(-1) == NEVER


def test_progress_reported_on_the_token_reaches_the_caller():
    import pickle as _pickle
    import time as _time

    from explorer.runtime.signals import stop_channel as _channel

    seen = []
    with _channel(None, poll_s=0.01, progress=seen.append) as token:
        worker_side = _pickle.loads(_pickle.dumps(token))  # what a worker receives: the slot only
        for f in (0.0, 0.25, 0.5):
            worker_side.report(f)
            deadline = _time.time() + 5
            while (not seen or seen[-1] != f) and _time.time() < deadline:
                _time.sleep(0.005)
    assert seen == [0.0, 0.25, 0.5] and not token()  # exact quarters; progress never stops the work
