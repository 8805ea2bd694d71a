"""Two writers of one session (the run and an answer to a question asked mid-run) store events in
seq order but can hand them to the stream out of it: the stream must send every seq once, in
order, never skip the one that arrived late. The store is the real SQLite memory; the hub's part
is only the order in which it delivers, which is what this test sets."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from server.routers.events import _stream
from server.runs import END
from store.memory.sqlite import Memory
from store.records import Event


class _Delivery:
    """The hub as the stream sees it: one queue, live while the run goes on."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[Any] = asyncio.Queue()

    def subscribe(self, session_id: str) -> asyncio.Queue[Any]:
        return self.queue

    def unsubscribe(self, session_id: str, q: asyncio.Queue[Any]) -> None:
        pass

    def active(self, session_id: str) -> bool:
        return True

    def waiting(self, session_id: str) -> bool:
        return False

    def followable(self, session_id: str) -> bool:
        return False


def _sent(mem: Memory, sid: str, new: int, deliver: list[int], after: int) -> list[int]:
    """Stream from `after`; once the stored events are replayed, `new` more are stored and
    handed over in the order `deliver` gives (seqs), then the run ends."""

    async def go() -> list[int]:
        hub = _Delivery()
        out: list[int] = []

        async def read() -> None:
            async for s in _stream(hub, mem, sid, after):  # type: ignore[arg-type]
                out.append(int(s.id))

        task = asyncio.create_task(read())
        await asyncio.sleep(0.05)  # replayed; now waiting on the live feed
        for i in range(new):
            mem.append_event(Event(session_id=sid, type="message", data={"i": i}))
        stored = {e.seq: e for e in mem.events(sid)}
        for seq in deliver:
            hub.queue.put_nowait(stored[seq])
        hub.queue.put_nowait(END)
        await asyncio.wait_for(task, 10)
        return out

    return asyncio.run(go())


def _session(tmp_path: Path, events: int) -> tuple[Memory, str]:
    mem = Memory(tmp_path / "m.db")
    sid = mem.create_session("h", "why?", "rulebook")
    for i in range(events):
        mem.append_event(Event(session_id=sid, type="message", data={"i": i}))
    return mem, sid


def test_a_seq_handed_over_after_a_later_one_is_sent_not_skipped(tmp_path: Path) -> None:
    mem, sid = _session(tmp_path, 2)
    # the client has 1 and 2; 4 reaches the stream before 3 (two threads, one loop)
    assert _sent(mem, sid, new=3, deliver=[4, 3, 5], after=2) == [3, 4, 5]


def test_in_order_or_already_sent_nothing_is_sent_twice(tmp_path: Path) -> None:
    mem, sid = _session(tmp_path, 3)
    assert _sent(mem, sid, new=2, deliver=[4, 5], after=1) == [2, 3, 4, 5]
    # the control: seqs the client already has are not sent again, whatever the order
    assert _sent(mem, sid, new=1, deliver=[2, 6, 1, 4], after=0) == [1, 2, 3, 4, 5, 6]
