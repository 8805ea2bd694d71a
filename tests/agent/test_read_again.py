"""A log read again says how it changed since its previous read (agent/observe.since_earlier)."""

from __future__ import annotations

from agent.observe import since_earlier
from agent.state import Observation


def tail(oid: str, path: str, size: int, watched: str = "") -> Observation:
    lines = [f"# {path} on h: {size} bytes; last 1 lines", *([watched] if watched else []), "x"]
    return Observation(
        id=oid, tool="log_tail", args={"path": path}, ok=True, lines=lines,
        data={"path": path, "size": size}, round=1,
    )  # fmt: skip


def test_a_watch_that_saw_nothing_still_says_the_file_grew_since_the_last_read() -> None:
    first = tail("o1", "/l/server.log", 1000)
    again = tail("o5", "/l/server.log", 5000, "# watched it for 30.0 s: it did NOT grow")
    (out,) = since_earlier([again], [first, tail("o2", "/l/other.log", 9)])
    assert (
        out["lines"][1] == "# since the read of it in o1: grew by 4000 bytes (1000 -> 5000 bytes)"
    )
    assert out["lines"][2].endswith("it did NOT grow")


def test_controls_a_first_read_another_file_and_a_shrunk_one() -> None:
    first = tail("o1", "/l/server.log", 1000)
    (alone,) = since_earlier([first], [])
    assert alone["lines"] == first["lines"]
    (other,) = since_earlier([tail("o3", "/l/b.log", 7)], [first])
    assert not any("since the read" in ln for ln in other["lines"])
    (shrunk,) = since_earlier([tail("o4", "/l/server.log", 10)], [first])
    assert "shrank by 990 bytes (rotated or truncated)" in shrunk["lines"][1]
