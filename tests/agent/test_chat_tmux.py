"""`pivot chat` driven in a real terminal (tmux send-keys / capture-pane) through real incidents:
a replayed card, and the real sshd host with a crashed log and a changed config on its disk.

The chat's sessions are the service's: after the terminal is done, the real app over real HTTP
lists the session and streams the same prose answers."""

from __future__ import annotations

import os
import shlex
import sqlite3
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.agent.conftest import ROOT, card_path
from tests.sshd import Sshd
from tests.tmux import Terminal, flat

SEED = "seed-sglang-fewchan-kv-oom"
SYMPTOM = 'It died during start-up with "Not enough memory". Is something holding the GPUs?'
KV_LINE = "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static"
GPU_FREE = "0, NVIDIA RTX PRO 6000 Blackwell Server Edition, 0 MiB, 97253 MiB, 97887 MiB, 0 %"
APPROVE = "Approve this change? [y/N/later/why]"


def _env(tmp_path: Path, home: Path | None = None) -> dict[str, str]:
    env = {
        **os.environ,
        "PIVOT_HOME": str(tmp_path / "pivot"),
        "PYTHONPATH": str(ROOT),
        "TERM": "xterm",
    }
    if home is not None:
        env["HOME"] = str(home)
    for k in ("PIVOT_LLM_BASE_URL", "PIVOT_BRAIN", "SSH_AUTH_SOCK", "TMUX"):
        env.pop(k, None)
    return env


def _pivot(*args: str) -> str:
    return " ".join(shlex.quote(a) for a in [sys.executable, "-m", "agent.cli", "chat", *args])


@pytest.fixture
def term(tmp_path: Path) -> Iterator[Terminal]:
    t = Terminal(tmp_path, _env(tmp_path))
    yield t
    t.close()


def _session_ids(home: Path) -> list[tuple[str, str, str]]:
    with sqlite3.connect(home / "memory.db") as db:
        return db.execute("select id, host, status from sessions order by created").fetchall()


def test_chat_replays_a_card_answers_why_and_resumes_the_approval(
    tmp_path: Path, term: Terminal
) -> None:
    card = str(card_path(SEED))
    w = term.start(_pivot("--card", card))
    term.wait_for(w, "Describe what you saw")
    term.type(w, SYMPTOM)
    screen = term.wait_for(w, APPROVE)
    # the steps stream as plain sentences, one per step; no trace dumps
    assert "Checking the GPUs and what holds their memory." in screen
    assert "Searching the whole log for a CUDA out-of-memory line." in screen
    assert "Ruling out stale_gpu_process: nvidia-smi shows the GPUs free" in screen
    assert "Next check:" not in screen and "{'path'" not in screen
    # the conclusion is the agent's reply, citing the real line; the change shows as a diff
    assert "Root cause: kv_cache_no_room (93% confidence)." in screen and KV_LINE in flat(screen)
    assert '-os.environ.setdefault("NCCL_MIN_NCHANNELS", "1")' in screen
    assert '+os.environ.setdefault("NCCL_MAX_NCHANNELS", "16")' in screen
    term.type(w, "later")
    mark = len(term.wait_for(w, "Left waiting for your approval"))

    term.type(w, "why did you want to restore sitecustomize.py?")
    screen = term.wait_for(w, "nothing has changed yet", after=mark)
    reply = screen[mark:]
    assert "I am asking to restore /usr/lib/python3.12/sitecustomize.py from" in flat(reply)
    assert KV_LINE in flat(reply) and "Root cause:" not in reply  # prose, not the conclusion again
    assert "Checking" not in reply  # no tool ran to answer it

    mark = len(screen)
    term.type(w, "/todo relaunch with --mem-fraction-static 0.85")
    term.wait_for(w, "Todo #1 added", after=mark)
    term.type(w, "/quit")
    term.wait_for(w, "is kept; /resume")
    [(sid, host, status)] = _session_ids(tmp_path / "pivot")
    assert host == f"replay:{SEED}" and status == "awaiting_approval"

    # a second terminal: the todo is carried, /resume finds the waiting change, y applies it
    w2 = term.start(_pivot("--card", card))
    # the greeting is drawn first and the host's open todos after it: wait for the todo itself
    # (waiting for the greeting alone could read the screen between the two lines)
    screen = term.wait_for(w2, "open todo #1: relaunch with --mem-fraction-static 0.85")
    assert flat(screen).index("Describe what you saw") < flat(screen).index("open todo #1")
    term.type(w2, f"/resume {sid}")
    screen = term.wait_for(w2, APPROVE)
    assert f"Resumed {sid}" in screen and "NCCL_MIN_NCHANNELS" in screen
    mark = len(screen)
    term.type(w2, "y")
    screen = term.wait_for(w2, "Applied with approval: config_apply", after=mark)
    assert "Still kv_cache_no_room" in screen[mark:]
    mark = len(screen)
    term.type(w2, "why not a zombie?")
    screen = term.wait_for(w2, GPU_FREE, after=mark)
    assert "stale_gpu_process" in screen[mark:] and "ruled out" in flat(screen[mark:])
    term.type(w2, "/quit")
    term.wait_for(w2, "is kept; /resume", after=mark)
    assert _session_ids(tmp_path / "pivot") == [(sid, host, "concluded")]

    # the page's view of it: the real service over real HTTP lists it and holds the answers
    from tests.server.conftest import start_live

    live = start_live(tmp_path / "pivot")
    try:
        with live.client() as c:
            listed = {s["session_id"]: s for s in c.get("/api/sessions").json()}
            assert listed[sid]["status"] == "concluded" and listed[sid]["host"] == host
            events = c.get(f"/api/sessions/{sid}").json()["events"]
            answers = [e["data"]["text"] for e in events if e["data"].get("kind") == "answer"]
            assert len(answers) == 2 and GPU_FREE in answers[1]
            r = c.post(f"/api/sessions/{sid}/messages", json={"text": "how sure are you?"})
            assert r.status_code == 202
    finally:
        live.stop()


def _ssh_home(tmp_path: Path, sshd: Sshd) -> Path:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text(
        f"Host gpu-chat\n  HostName {sshd.host}\n  Port {sshd.port}\n  User {sshd.user}\n"
        f"  IdentityFile {sshd.client_key}\n  IdentitiesOnly yes\n"
    )
    (home / ".ssh" / "known_hosts").write_text(sshd.known_hosts.read_text())
    return home


def test_chat_over_real_ssh_cites_the_real_line_and_applies_an_approved_change(
    tmp_path: Path, sshd: Sshd
) -> None:
    from tools.cards import load_card

    files = load_card(card_path(SEED)).host.files
    srv = sshd.scratch / f"chat-{tmp_path.name}"
    srv.mkdir()
    srv.chmod(0o777)  # the ssh user writes the restored config here (no sticky bit)
    log, cfg, good = (
        srv / "server.log",
        srv / "sitecustomize.py",
        srv / "sitecustomize.py.known-good",
    )
    log.write_text(next(v for k, v in files.items() if k.endswith(".log")))  # type: ignore[arg-type]
    cfg.write_text(files["/usr/lib/python3.12/sitecustomize.py"])  # type: ignore[arg-type]
    good.write_text(files["/usr/lib/python3.12/sitecustomize.py.known-good"])  # type: ignore[arg-type]
    for p in (log, cfg, good):
        p.chmod(0o666)
    term = Terminal(tmp_path, _env(tmp_path, _ssh_home(tmp_path, sshd)))
    try:
        args = [
            "--host",
            "gpu-chat",
            "--log",
            str(log),
            "--config",
            str(cfg),
            "--config",
            str(good),
        ]
        w = term.start(_pivot(*args))
        term.wait_for(w, "Describe what you saw")
        term.type(w, "the server died at start-up, why?")
        screen = term.wait_for(w, APPROVE)
        assert f"Reading the end of {log}." in flat(screen)
        assert "Root cause: kv_cache_no_room" in screen and KV_LINE in flat(screen)
        assert f"I want to restore {cfg} from {good}" in flat(screen)
        mark = len(screen)
        term.type(w, "why")  # at the prompt: why this change, then the same question again
        screen = term.wait_for(w, "nothing has changed yet", after=mark)
        assert KV_LINE in flat(screen[mark:])
        assert cfg.read_bytes() != good.read_bytes()
        mark = screen.rindex("yet.")
        mark = len(term.wait_for(w, APPROVE, after=mark))
        term.type(w, "y")
        term.wait_for(w, "Applied with approval: config_apply", after=mark)
        assert cfg.read_bytes() == good.read_bytes()  # changed on the real host, byte for byte
        mark = len(term.screen(w))
        term.type(w, "/handoff restored the known-good sitecustomize; relaunch at 0.85")
        term.wait_for(w, "Handoff #1 saved", after=mark)
        term.type(w, "/quit")
        term.wait_for(w, "is kept; /resume", after=mark)
    finally:
        term.close()
    [(_, host, status)] = _session_ids(tmp_path / "pivot")
    assert host == "gpu-chat" and status == "concluded"
