"""LLM-path regressions offline: record a real run against an endpoint, replay it without one.

The endpoint is a scripted OpenAI-compatible app (fake_llm.py) served by uvicorn over real
HTTP; `pivot eval` runs as a real process, the way CI runs it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from fake_llm import FakeLLMServer

ROOT = Path(__file__).resolve().parents[2]
CARDS = Path(__file__).resolve().parent / "cards"
FIELDS = (
    "id",
    "expected",
    "got",
    "status",
    "passed",
    "evidence_ok",
    "ruled_out_ok",
    "wrong",
    "rounds",
    "tool_calls",
    "evidence",
    "ruled_out",
)


def pivot(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    # `python -m agent.cli` from the repo root: the same app as the `pivot` script.
    return subprocess.run(
        [sys.executable, "-m", "agent.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def results(path: Path) -> list[dict[str, Any]]:
    data = json.loads(path.read_text())
    return [{k: r[k] for k in FIELDS} for r in data["results"]]


def test_record_then_replay_offline_gives_identical_results(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIVOT_")}
    env["PIVOT_HOME"] = str(tmp_path / "home")
    rec, rec_json, rep_json = tmp_path / "turns", tmp_path / "rec.json", tmp_path / "rep.json"

    server = FakeLLMServer().start()
    try:
        r = pivot(
            "eval",
            str(CARDS),
            "--brain",
            "llm",
            "--record",
            str(rec),
            "--json",
            str(rec_json),
            "-q",
            env={**env, "PIVOT_LLM_BASE_URL": server.base_url},
        )
        served = server.requests
    finally:
        server.stop()
    assert r.returncode == 0, r.stderr
    turns = sorted(rec.glob("*.json"))
    assert served >= 2 and len(turns) >= 2  # at least one model turn per card, each kept
    recorded = results(rec_json)
    assert len(recorded) == 2 and all(x["status"] != "error" for x in recorded)
    assert any(x["status"] == "concluded" for x in recorded)  # the scripted model did conclude

    # the endpoint is gone and no URL is configured: only the recording can answer
    r = pivot(
        "eval",
        str(CARDS),
        "--brain",
        "llm",
        "--replay-model",
        str(rec),
        "--json",
        str(rep_json),
        "-q",
        "--jobs",
        "2",
        env=env,
    )
    assert r.returncode == 0, r.stderr
    assert results(rep_json) == recorded

    # a recording that lacks the turns is an honest "insufficient", never a crash or a guess
    empty = tmp_path / "empty"
    empty.mkdir()
    r = pivot(
        "eval",
        str(CARDS),
        "--brain",
        "llm",
        "--replay-model",
        str(empty),
        "--json",
        str(tmp_path / "none.json"),
        "-q",
        env=env,
    )
    assert r.returncode == 0, r.stderr
    missing = json.loads((tmp_path / "none.json").read_text())
    assert missing["summary"]["insufficient"] == 2
    assert all("no recorded model turn" in x["summary"] for x in missing["results"])
