"""A writer process for the memory-DB crash test: writes like the API or like the loop, and
prints one line per write only *after* its commit returned, so the parent knows which rows
must survive a `kill -9`.

    python -m tests.reliability._db_worker api|loop MEMORY_DB LEDGER_DB TAG
"""

from __future__ import annotations

import sys
import time
import uuid

from store.ledger.base import ExperimentRow
from store.ledger.sqlite import Ledger
from store.memory.sqlite import Memory
from store.records import Event

PHASES = ["preflight", "apply", "launch", "ready", "benchmark", "stop", "revert", "done"]


def say(*parts: object) -> None:
    sys.stdout.write(" ".join(str(p) for p in parts) + "\n")
    sys.stdout.flush()


def api_like(mem: Memory, tag: str) -> None:
    """What the service does: sessions with streams of events, todos, handoffs."""
    sid = mem.create_session(f"host-{tag}", "why did it die?", "rulebook", f"s-{tag}")
    say("session", sid)
    i = 0
    while True:
        i += 1
        ev = mem.append_event(Event(session_id=sid, type="observation", data={"i": i}))
        say("event", sid, ev.seq)
        t = mem.add_todo(f"host-{tag}", f"todo {tag} {i} " + "x" * (i % 200))
        say("todo", t.id)
        if i % 3 == 0:
            h = mem.add_handoff(f"host-{tag}", f"handoff {tag} {i}")
            say("handoff", h.id)


def loop_like(mem: Memory, led: Ledger, tag: str) -> None:
    """What the night does: ledger rows through every phase, handoffs and todos into memory."""
    night, _ = led.open_night(f"plan-{tag}", "digest", "/tmp")
    seq = 0
    while True:
        seq += 1
        row = led.add(
            ExperimentRow(
                id=uuid.uuid4().hex, night_id=night.id, seq=seq, name=f"e{seq}", kind="ranked"
            )
        )
        say("ledger", row.id, "pending")
        for phase in PHASES:
            led.update(row.id, phase=phase, status="running", started=time.time())
            say("ledger", row.id, phase)
        h = mem.add_handoff(f"host-{tag}", f"night {night.id}: e{seq} done")
        say("handoff", h.id)
        t = mem.add_todo(f"host-{tag}", f"look at e{seq}")
        say("todo", t.id)


def main() -> None:
    kind, mem_path, ledger_path, tag = sys.argv[1:5]
    mem = Memory(mem_path)
    say("ready")
    if kind == "api":
        api_like(mem, tag)
    else:
        loop_like(mem, Ledger(ledger_path), tag)


if __name__ == "__main__":
    main()
