"""`pivot chat` in a real 256-colour terminal (tmux): the diff in colour, long lines wrapped under
their own indentation, `why` answered without the diff again, a stray `y` asked about instead of
investigated, and `/resume` without an id that only lists."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

from tests.agent.conftest import card_path
from tests.agent.test_chat_tmux import APPROVE, SEED, SYMPTOM, _env, _pivot
from tests.tmux import Terminal, flat

WIDTH = 90
GONE = '-os.environ.setdefault("NCCL_MIN_NCHANNELS", "1")'
ADDED = '+os.environ.setdefault("NCCL_MAX_NCHANNELS", "16")'
SGR = re.compile(r"\x1b\[[0-9;]*m")


def _sessions(home: Path) -> list[tuple[str, str]]:
    if not (home / "memory.db").exists():
        return []
    with sqlite3.connect(home / "memory.db") as db:
        return db.execute("select id, status from sessions order by created").fetchall()


def _codes(escaped: str, text: str) -> set[str]:
    """The SGR codes (31 red, 32 green, 1 bold) on the screen line that shows `text`."""
    line = next(ln for ln in escaped.splitlines() if text in SGR.sub("", ln))
    return {c for seq in SGR.findall(line) for c in seq[2:-1].split(";")}


def test_chat_reads_well_in_a_colour_terminal(tmp_path: Path) -> None:
    term = Terminal(tmp_path, {**_env(tmp_path), "TERM": "xterm-256color"}, width=WIDTH)
    home = tmp_path / "pivot"
    try:
        w = term.start(_pivot("--card", str(card_path(SEED))))
        term.wait_for(w, "Describe what you saw")
        # a stray yes with nothing asked: a question back, no investigation of "y"
        term.type(w, "y")
        screen = term.wait_for(w, "'y' to what? No question is waiting")
        assert "Checking" not in screen and _sessions(home) == []

        term.type(w, SYMPTOM)
        screen = term.wait_for(w, APPROVE)
        # colour: the removed line red, the added line green (rich's standard colours)
        escaped = term.screen(w, escapes=True)
        assert "31" in _codes(escaped, GONE) and "32" in _codes(escaped, ADDED)
        assert "1" in _codes(escaped, "Root cause: kv_cache_no_room")
        # wrapping: nothing soft-wrapped (-J would have joined it past the width), and a long
        # conclusion line continues under its own text, not at column 0
        lines = screen.splitlines()
        assert max(len(ln) for ln in lines if "you>" not in ln) <= WIDTH
        for ln in lines:
            if ln and "you>" not in ln:
                assert ln.startswith((" ", "pivot> ", "Approve this change?")), ln
        nxt = next(i for i, ln in enumerate(lines) if ln.startswith("       Next step:"))
        assert re.match(r" {7}\S", lines[nxt + 1]), lines[nxt : nxt + 2]
        assert screen.count(GONE) == 1

        # why at the prompt: the reason in prose, the question again, the diff not again
        mark = screen.rindex(APPROVE)  # offsets, not lengths: the pane's blank rows come last
        term.type(w, "why")
        term.wait_for(w, "nothing has changed yet", after=mark)
        screen = term.wait_for(w, "(The change above: restore", after=mark)
        screen = term.wait_for(w, APPROVE, after=screen.rindex("(The change above"))
        assert screen.count(GONE) == 1 and screen.count(ADDED) == 1
        assert "I want to restore" not in screen[mark:]

        # later, then a stray y: it names the waiting change and decides nothing
        term.type(w, "later")
        mark = term.wait_for(w, "Left waiting for your approval", after=mark).rindex("Left")
        term.type(w, "y")
        screen = term.wait_for(w, "/approve or /deny decides it.", after=mark)
        assert "'y' to what? A change is waiting (config_apply" in flat(screen[mark:])
        [(sid, status)] = _sessions(home)
        assert status == "awaiting_approval"
        term.type(w, "/quit")
        term.wait_for(w, "is kept; /resume", after=mark)

        # /resume without an id lists the sessions and opens none of them
        w2 = term.start(_pivot("--card", str(card_path(SEED))))
        term.wait_for(w2, "Describe what you saw")
        term.type(w2, "/resume")
        screen = term.wait_for(w2, "/resume ID opens one.")
        assert sid in screen and "awaiting_approval" in screen
        assert "Resumed" not in screen and APPROVE not in screen
        term.type(w2, f"/resume {sid}")
        screen = term.wait_for(w2, APPROVE)
        assert f"Resumed {sid}" in screen and GONE in screen
        term.type(w2, "later")
        term.type(w2, "/quit")
        term.wait_for(w2, "is kept; /resume")
        assert _sessions(home) == [(sid, "awaiting_approval")]
    finally:
        term.close()
