"""Fair shares (``explorer.runtime.fair``): per-address turns in the queue, guest slots for light visitors, the
ledger of CPU seconds over a window. Deterministic: times are passed in, nothing sleeps."""

from explorer.runtime import fair, settings


def light_all(_address):
    return True


def test_turns_go_to_the_address_with_least_running_then_the_lightest_then_the_oldest():
    assert fair.pick(["a", "b"], {}, 2, 0, light_all) == 0  # alike: the oldest
    waiting = ["a", "a", "a", "b", "c"]
    assert fair.pick(waiting, {}, 2, 0, light_all) == 3  # a floods the queue: b (light) first
    assert fair.pick(waiting, {"a": 1}, 2, 0, light_all) == 3  # a runs one: b's turn
    assert fair.pick(waiting, {"a": 1, "b": 1}, 3, 0, light_all) == 4  # then c's
    assert fair.pick(["a", "b"], {"a": 1, "b": 1}, 2, 0, light_all) is None  # the slots are full


def test_a_light_newcomer_takes_a_guest_slot_when_the_slots_are_full():
    waiting = ["a", "a", "b", "b", "new"]
    heavy = {"a", "b"}
    light = lambda address: address not in heavy  # noqa: E731
    assert fair.pick(waiting, {"a": 1, "b": 1}, 2, 4, light) == 4
    # a heavy address with nothing running waits for a slot; guests full: nobody starts
    assert fair.pick(["a", "b"], {"x": 1, "y": 1}, 2, 4, light) is None
    assert fair.pick(["new"], {"a": 1, "b": 1, "c": 1, "d": 1, "e": 1, "f": 1}, 2, 4, light) is None


def test_four_attackers_never_put_a_fifth_visitor_behind_their_queues():
    """Four addresses with 8 events each, the fifth's one event at the end: it starts in the first pick that
    can start anything beyond the attackers' one running event each."""
    waiting = [f"10.0.0.{i}" for i in range(4) for _ in range(8)] + ["10.0.0.9"]
    running = {f"10.0.0.{i}": 1 for i in range(4)}
    attackers = set(running)
    assert fair.pick(waiting, running, 2, 4, lambda a: a not in attackers) == len(waiting) - 1


def test_no_limit_still_orders_by_turns():
    assert fair.pick(["a", "a", "b"], {"a": 1}, None, 0, light_all) == 2


def test_the_ledger_counts_seconds_over_its_window():
    ledger = fair.Ledger(window_s=60)
    ledger.add("a", 5.0, now=0.0)
    ledger.add("a", 3.0, now=30.0)
    ledger.add(None, 9.0, now=30.0)
    assert ledger.used("a", now=31.0) == 8.0
    assert ledger.used("a", now=61.0) == 3.0 and ledger.used("b", now=61.0) == 0.0
    assert ledger.used("a", now=200.0) == 0.0


def test_over_share_is_a_part_of_the_share(monkeypatch):
    monkeypatch.setenv(settings.VISITOR_SHARE, "160")
    assert not fair.over_share("a", used=10.0) and fair.over_share("a", used=10.5)
    assert not fair.over_share(None, used=1000.0)
