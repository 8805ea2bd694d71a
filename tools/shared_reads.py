"""Reads that the tools of one wave share: one snapshot of a host, taken once.

The first sweep runs its tools at once; two of them ask the host the same question at the same
moment (`gpu_status`, and `processes` linking pids to GPU memory, each ran nvidia-smi's three
queries). Inside `one_wave()` (agent.observe.run_many opens it), a read named here is taken by the
first tool that asks and handed to the others, who wait for it if it is still under way: one
snapshot per wave, as a person sweeping the box would read it once. Outside a wave every call
reads afresh, and a tool's later reads in the same wave (a watch) never go through here.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")


class _Wave:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reads: dict[tuple[int, str], tuple[object, Future[Any]]] = {}


_WAVE: contextvars.ContextVar[_Wave | None] = contextvars.ContextVar("pivot_wave", default=None)


@contextlib.contextmanager
def one_wave() -> Iterator[None]:
    """Share the named reads among the calls made in this context (copy it into each thread)."""
    token = _WAVE.set(_Wave())
    try:
        yield
    finally:
        _WAVE.reset(token)


def shared(host: object, name: str, read: Callable[[], T]) -> T:
    """`read()`, once per host and name within a wave; every other caller gets its result."""
    wave = _WAVE.get()
    if wave is None:
        return read()
    key = (id(host), name)
    with wave.lock:
        held = wave.reads.get(key)
        first = held is None
        if first:
            # the host is kept with its read so its id cannot be reused within the wave
            held = (host, Future())
            wave.reads[key] = held
    assert held is not None
    fut: Future[T] = held[1]
    if first:
        try:
            fut.set_result(read())
        except BaseException as exc:
            fut.set_exception(exc)
            raise
    return fut.result()
