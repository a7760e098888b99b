"""The server's memory pool: reservations add up to at most its size, a reservation that does not fit
waits for others to end or is refused as busy (never a failure halfway), a request larger than the whole
pool is refused naming the setting, and what this process may allocate is the least of its limits."""

import subprocess
import sys
import threading
import time

import pytest

from explorer.runtime.pool import Busy, MemoryPool, available_bytes, is_out_of_memory
from models import ConfigError


def test_reservations_add_up_to_at_most_the_pool_and_free_on_exit():
    p = MemoryPool(total=100)
    with p.reserve(60):
        assert p.held() == 60
        with pytest.raises(Busy) as exc:
            with p.reserve(50, "this test", wait_s=0):
                pass
        assert "busy" in str(exc.value) and "this test" in str(exc.value)
        with p.reserve(40):
            assert p.held() == 100
    assert p.held() == 0


def test_a_reservation_waits_for_another_to_end():
    p = MemoryPool(total=100)
    release = threading.Event()

    def holder():
        with p.reserve(80):
            release.wait(5)

    t = threading.Thread(target=holder)
    t.start()
    while p.held() < 80:
        time.sleep(0.01)
    threading.Timer(0.3, release.set).start()
    t0 = time.perf_counter()
    with p.reserve(50, wait_s=5):
        waited = time.perf_counter() - t0
    t.join()
    assert 0.2 < waited < 3 and p.held() == 0


def test_an_exception_inside_frees_the_reservation():
    p = MemoryPool(total=100)
    with pytest.raises(RuntimeError):
        with p.reserve(70):
            raise RuntimeError("boom")
    assert p.held() == 0


def test_more_than_the_whole_pool_is_refused_naming_the_setting():
    p = MemoryPool(total=100)
    with pytest.raises(ConfigError) as exc:
        with p.reserve(101):
            pass
    assert not isinstance(exc.value, Busy) and "EXPLORER_SERVER_MEMORY" in str(exc.value)


def test_the_setting_sizes_the_pool(monkeypatch):
    monkeypatch.setenv("EXPLORER_SERVER_MEMORY", "3G")
    assert MemoryPool().total == 3 << 30
    monkeypatch.setenv("EXPLORER_SERVER_MEMORY", "0.5")
    assert MemoryPool().total == pytest.approx(available_bytes() * 0.5, rel=0.05)


def test_available_memory_follows_an_address_space_limit():
    """Under ``prlimit --as`` the headroom is the limit minus what is mapped, below MemAvailable."""
    code = (
        "import resource; from explorer.runtime.pool import available_bytes, _meminfo;"
        "resource.setrlimit(resource.RLIMIT_AS, (6 << 30, resource.RLIM_INFINITY));"
        "print(available_bytes(), _meminfo())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    avail, meminfo = int(out[0]), int(out[1])
    assert 0 < avail < 6 << 30 and avail <= meminfo


@pytest.mark.parametrize(
    "exc, oom",
    [
        (MemoryError(), True),
        (
            RuntimeError("[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate memory: you tried"),
            True,
        ),
        (RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"), True),
        (RuntimeError("shape mismatch"), False),
        (ValueError("out of memory"), False),
    ],
)
def test_out_of_memory_is_recognised_from_python_and_torch(exc, oom):
    assert is_out_of_memory(exc) is oom
