"""The fast loop's sample (tests/fast_loop.py): every test function keeps a case, every registry key is named by a
kept case, and the rest is marked ``exhaustive``."""

from types import SimpleNamespace

from fast_loop import MARK, PER_FUNCTION, mark_exhaustive

from models import choices


class Item:
    def __init__(self, path, name, spec=None):
        self.path, self.cls, self.originalname = path, None, name
        self.name = name + (f"[{spec}]" if spec else "")
        self.nodeid = f"{path}::{self.name}"
        if spec:
            self.callspec = SimpleNamespace(id=spec)
        self.marks = []

    def add_marker(self, mark):
        self.marks.append(mark.name)


def test_every_function_and_every_key_is_kept_and_the_rest_marked():
    attention = choices()["attention"]
    per_key = [Item("t.py", "test_forward", f"{k}-float64") for k in attention]
    shapes = [Item("t.py", "test_shapes", f"L{n}") for n in range(10)]
    plain = [Item("u.py", "test_plain")]
    items = per_key + shapes + plain
    left = mark_exhaustive(items)
    kept = [i for i in items if MARK not in i.marks]
    assert plain[0] in kept and sum(i in kept for i in shapes) == PER_FUNCTION
    assert {k for k in attention if any(f"[{k}-" in i.name for i in kept)} == set(attention)
    assert left == len(items) - len(kept) == len(shapes) - PER_FUNCTION


def test_the_choice_depends_only_on_the_collected_ids():
    a = [Item("t.py", "test_x", f"{k}") for k in choices()["position"]] + [
        Item("t.py", "test_y", f"{n}") for n in range(5)
    ]
    b = [Item("t.py", "test_x", f"{k}") for k in choices()["position"]] + [
        Item("t.py", "test_y", f"{n}") for n in range(5)
    ]
    mark_exhaustive(a), mark_exhaustive(b)
    assert [i.marks for i in a] == [i.marks for i in b]
