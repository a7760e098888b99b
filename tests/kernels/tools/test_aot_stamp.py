"""``kernels.tools.aot_stamp``: which sources the full compile check depends on, and the stamp."""

from kernels.tools import aot_stamp


def _names():
    return {p.relative_to(aot_stamp.KERNELS.parent).as_posix() for p in aot_stamp.sources()}


def test_sources_are_the_triton_modules_the_spec_list_and_what_they_import():
    names = _names()
    assert {
        "kernels/triton/flash/fwd.py",
        "kernels/triton/pooled.py",
        "kernels/tools/aot_check.py",
        "kernels/tools/aot_stamp.py",
    } <= names
    # imported by the Triton modules (the plan's layout, the pooled result, the backend name)
    assert {"kernels/block_mask.py", "kernels/pooled_dense.py", "kernels/backend.py"} <= names
    # the dispatchers and the PyTorch paths do not change what compiles
    assert not {"kernels/attention.py", "kernels/cpu/attention.py", "kernels/__init__.py"} & names


def test_the_stamp_matches_only_the_digest_it_recorded(tmp_path, monkeypatch):
    monkeypatch.setattr(aot_stamp, "STAMP", tmp_path / "aot_stamp.txt")
    assert "no stamp" in aot_stamp.stale_reason()
    aot_stamp.write(aot_stamp.digest())
    assert aot_stamp.stale_reason() is None
    aot_stamp.write("0" * 64)
    assert "changed since the last full pass" in aot_stamp.stale_reason()


def test_the_digest_covers_the_triton_version(monkeypatch):
    now = aot_stamp.digest()
    monkeypatch.setattr(aot_stamp, "triton_version", lambda: "0.0.0")
    assert aot_stamp.digest() != now


def test_the_digest_ignores_layout_and_comments_but_not_code(tmp_path, monkeypatch):
    src = tmp_path / "kernels" / "k.py"
    src.parent.mkdir()
    monkeypatch.setattr(aot_stamp, "KERNELS", src.parent)
    monkeypatch.setattr(aot_stamp, "sources", lambda: [src])
    src.write_text("def f(x):\n    return x + 1\n")
    first = aot_stamp.digest()
    src.write_text("def f(x):  # a comment\n\n    return (\n        x + 1\n    )\n")
    assert aot_stamp.digest() == first
    src.write_text("def f(x):\n    return x + 2\n")
    assert aot_stamp.digest() != first
