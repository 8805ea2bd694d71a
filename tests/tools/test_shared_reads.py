"""tools/shared_reads.py: a wave's shared reads and the threads reads run on."""

from __future__ import annotations

import threading
import time

import pytest

from tools.shared_reads import at_once, one_wave, shared


def test_at_once_keeps_order_bounds_concurrency_and_reuses_threads() -> None:
    running, peak, names = 0, 0, set()
    lock = threading.Lock()

    def read(x: int) -> int:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
            names.add(threading.current_thread().name)
        time.sleep(0.01 * (5 - x % 5))
        with lock:
            running -= 1
        return x * x

    assert at_once(read, list(range(10)), 3, "test-pool") == [x * x for x in range(10)]
    assert peak <= 3
    first = set(names)
    at_once(read, list(range(10)), 3, "test-pool")
    assert names == first  # the same threads, not new ones each call


def test_at_once_raises_the_first_error_in_order_after_the_rest_ran() -> None:
    ran: list[int] = []

    def read(x: int) -> int:
        ran.append(x)
        if x in (1, 3):
            raise ValueError(x)
        return x

    with pytest.raises(ValueError, match="1"):
        at_once(read, [0, 1, 2, 3, 4], 2, "test-pool")
    assert sorted(ran) == [0, 1, 2, 3, 4]


def test_a_wave_reaches_its_reads_on_the_pools_threads() -> None:
    taken: list[int] = []

    def read() -> int:
        taken.append(1)
        time.sleep(0.02)
        return 7

    host = object()
    with one_wave():
        got = at_once(lambda _: shared(host, "gpu", read), [0, 1, 2, 3], 4, "test-pool")
    assert got == [7, 7, 7, 7] and len(taken) == 1
    assert shared(host, "gpu", read) == 7 and len(taken) == 2  # outside a wave: read afresh


def test_at_once_starts_the_long_poles_first_and_keeps_the_order() -> None:
    started: list[int] = []
    lock = threading.Lock()

    def read(x: int) -> int:
        with lock:
            started.append(x)
        return x + 100

    got = at_once(read, [0, 1, 2, 3, 4], 1, "test-pool", first=lambda x: x in (3, 4))
    assert got == [100, 101, 102, 103, 104]
    assert started == [3, 4, 0, 1, 2]
    started.clear()
    assert at_once(read, [0, 1, 2], 1, "test-pool") == [100, 101, 102]
    assert started == [0, 1, 2]  # without `first`, in order
