"""Approval interrupts survive a process boundary; memory carries from one session to the next.

Every test runs twice: on SQLite files under the home, and on a real PostgreSQL through
`PIVOT_DATABASE_URL` (the `database` fixture), the way a team deploys it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.runner import Runner, investigate
from agent.settings import Settings
from cards.model import load_card
from cards.replay import ReplayHost
from store.factory import open_memory
from store.records import Decision
from tests.agent.conftest import ROOT, card_path
from tools.local_host import LocalHost

PIVOT = [sys.executable, "-m", "agent.cli"]
pytestmark = pytest.mark.usefixtures("database")


def _env(home: Path) -> dict[str, str]:
    env = {**os.environ, "PIVOT_HOME": str(home), "PYTHONPATH": str(ROOT)}
    env.pop("PIVOT_LLM_BASE_URL", None)
    return env


def _local_config_host(tmp_path: Path) -> tuple[LocalHost, Path, Path]:
    """A real directory with a changed config beside its known-good copy and a crashed log."""
    seed = load_card(card_path("seed-sglang-fewchan-kv-oom"))
    root = tmp_path / "srv"
    (root / "logs").mkdir(parents=True)
    cfg = root / "sitecustomize.py"
    good = root / "sitecustomize.py.known-good"
    files = seed.host.files
    cfg.write_text(files["/usr/lib/python3.12/sitecustomize.py"])  # type: ignore[arg-type]
    good.write_text(files["/usr/lib/python3.12/sitecustomize.py.known-good"])  # type: ignore[arg-type]
    log = next(v for k, v in files.items() if k.endswith(".log"))
    (root / "logs" / "server.log").write_text(log)  # type: ignore[arg-type]
    return LocalHost("test-box"), cfg, good


def test_changing_action_pauses_and_resumes_in_a_new_process(tmp_path: Path) -> None:
    """Process 1 stops at the approval interrupt; process 2 resumes it from the stored checkpoint."""
    home = tmp_path / "home"
    card = str(card_path("seed-sglang-fewchan-kv-oom"))
    first = subprocess.run(
        [*PIVOT, "investigate", "--replay", card, "--json"],
        capture_output=True,
        text=True,
        env=_env(home),
        timeout=120,
        cwd=tmp_path,
    )
    assert first.returncode == 0, first.stderr
    paused = json.loads(first.stdout)
    assert paused["status"] == "awaiting_approval", first.stdout
    assert paused["pending_approval"]["tool"] == "config_apply"
    assert paused["pending_approval"]["args"]["path"] == "/usr/lib/python3.12/sitecustomize.py"
    second = subprocess.run(
        [*PIVOT, "investigate", "--resume", paused["session_id"], "--approve", "--json"],
        capture_output=True,
        text=True,
        env=_env(home),
        timeout=120,
        cwd=tmp_path,
    )
    assert second.returncode == 0, second.stderr
    done = json.loads(second.stdout)
    assert done["session_id"] == paused["session_id"]
    assert done["status"] == "concluded" and done["root_cause"] == "kv_cache_no_room"
    assert (
        "Applied with approval: config_apply /usr/lib/python3.12/sitecustomize.py"
        in done["next_step"]
    )
    s = Settings(home=home)
    events = open_memory(s.database_url, s.memory_path).events(done["session_id"])
    kinds = [e.type for e in events]
    assert kinds.count("approval_request") == 1 and "approval" in kinds


def test_approved_revert_restores_the_real_file_byte_for_byte(tmp_path: Path) -> None:
    host, cfg, good = _local_config_host(tmp_path)
    s = Settings(home=tmp_path / "home")
    investigate(
        host,
        "Not enough memory",
        settings=s,
        approve=lambda req: True,
        logs=[str(tmp_path / "srv/logs/server.log")],
        configs=[str(cfg), str(good)],
    )
    assert cfg.read_bytes() == good.read_bytes()


def test_denied_change_leaves_the_config_alone(tmp_path: Path) -> None:
    host, cfg, good = _local_config_host(tmp_path)
    before = cfg.read_bytes()
    s = Settings(home=tmp_path / "home")
    asked = []
    r = investigate(
        host,
        "Not enough memory",
        settings=s,
        approve=lambda req: asked.append(req) or False,
        logs=[str(tmp_path / "srv/logs/server.log")],
        configs=[str(cfg), str(good)],
    )
    assert asked and asked[0].tool == "config_apply"
    assert r.status != "awaiting_approval"
    assert cfg.read_bytes() == before


def test_memory_carries_todos_handoff_and_seen_before(tmp_path: Path) -> None:
    s = Settings(home=tmp_path / "home")
    card = load_card(card_path("h200-stale-process-cuda-oom"))
    runner = Runner(s)
    first = runner.start(ReplayHost(card, name="gpu-box-1"), card.symptom)
    runner.memory.add_todo("gpu-box-1", "ask who owns pid 471")
    runner.memory.add_handoff("gpu-box-1", "stale holder found; waiting on its owner")
    second = runner.start(ReplayHost(card, name="gpu-box-1"), card.symptom)
    runner.close()
    events = open_memory(s.database_url, s.memory_path).events(second.session_id)
    notes = events[0].data["notes"]
    assert any("ask who owns pid 471" in n for n in notes)
    assert any("waiting on its owner" in n for n in notes)
    assert first.root_cause == second.root_cause == "stale_gpu_process"
    assert any("seen before on host gpu-box-1" in x for x in second.seen_before)
    assert open_memory(s.database_url, s.memory_path).search_conclusions("stale_gpu_process")


def test_follow_up_message_runs_the_asked_check(tmp_path: Path) -> None:
    s = Settings(home=tmp_path / "home")
    card = load_card(card_path("seed-sglang-fewchan-kv-oom"))
    runner = Runner(s)
    host = ReplayHost(card)
    r = runner.start(host, card.symptom)
    assert r.status == "awaiting_approval"  # the rulebook offers to restore the known-good config
    r = runner.resume(host, r.session_id, Decision(approve=False, reason="not now"))
    n_before = len(runner.memory.observations(r.session_id))
    r2 = runner.message(host, r.session_id, "why not a zombie? check dmesg too")
    obs = runner.memory.observations(r.session_id)
    msgs = [
        e.data.get("text", "") for e in runner.memory.events(r.session_id) if e.type == "message"
    ]
    runner.close()
    assert len(obs) > n_before and "dmesg" in {o["tool"] for o in obs[n_before:]}
    assert any("stale_gpu_process is refuted" in m for m in msgs)
    assert r2.root_cause == "kv_cache_no_room"


def test_resume_of_unknown_session_is_a_clear_error(tmp_path: Path) -> None:
    p = subprocess.run(
        [*PIVOT, "investigate", "--resume", "nope", "--approve"],
        capture_output=True,
        text=True,
        env=_env(tmp_path / "home"),
        timeout=60,
    )
    assert p.returncode != 0 and "no session nope" in (p.stderr + p.stdout)
