"""Reads that the tools of one wave share (one snapshot of a host, taken once), and the threads
reads run on.

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
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any, TypeVar

T = TypeVar("T")
A = TypeVar("A")


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


# -- the threads reads run on -------------------------------------------------------------------
#: far above what one process asks at once (a fleet's 16 connections x a wave of 8 reads); idle
#: threads are reused, so one investigation keeps about a wave's worth
_MAX_THREADS = 256
_pools: dict[str, ThreadPoolExecutor] = {}
_pools_lock = threading.Lock()


def _pool(name: str) -> ThreadPoolExecutor:
    with _pools_lock:
        pool = _pools.get(name)
        if pool is None:
            pool = _pools[name] = ThreadPoolExecutor(_MAX_THREADS, thread_name_prefix=name)
        return pool


def _forget_pools() -> None:
    """A forked child has none of its parent's threads: it starts its own pools."""
    global _pools_lock
    _pools.clear()
    _pools_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_pools)


def at_once(
    fn: Callable[[A], T],
    items: list[A],
    limit: int,
    pool: str,
    first: Callable[[A], bool] | None = None,
) -> list[T]:
    """`[fn(x) for x in items]`, at most `limit` at a time, each in a copy of the caller's
    context (so a wave reaches its reads), on threads the process keeps between calls: a wave
    that started its own eight threads spent ~5% of an eval's CPU starting and joining them.
    `pool` names the threads: a read that waits on reads of its own (host_facts inside a wave)
    uses another pool than its caller's, so waiting never holds up what it waits for.
    `first` picks the items started before the rest (a wave's long pole: the cheap reads then
    run in its shadow instead of delaying its start); the results keep the items' order."""
    if len(items) <= 1:
        return [fn(x) for x in items]
    executor = _pool(pool)
    out: list[Any] = [None] * len(items)
    errors: list[tuple[int, BaseException]] = []
    order = list(enumerate(items))
    if first is not None:
        order.sort(key=lambda ix: not first(ix[1]))  # stable: the rest keep their order
    queue = iter(order)
    running: dict[Future[T], int] = {}

    def start() -> None:
        nxt = next(queue, None)
        if nxt is not None:
            running[executor.submit(contextvars.copy_context().run, fn, nxt[1])] = nxt[0]

    for _ in range(max(1, limit)):
        start()
    while running:
        done, _ = wait(running, return_when=FIRST_COMPLETED)
        for fut in done:
            i = running.pop(fut)
            try:
                out[i] = fut.result()
            except BaseException as exc:  # raised in order, after the others ended, like map
                errors.append((i, exc))
            start()
    if errors:
        raise min(errors, key=lambda e: e[0])[1]
    return out
