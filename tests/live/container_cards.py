"""A staged container failure, answered live and then frozen into a card that must replay to the
same answer: `pivot investigate` (the real CLI, locally or over the test sshd), right after it
`pivot capture` on the same host with the same `--container` (or none, where the run detected
the container itself), the live label and cited lines written in as `expected` (as an operator
fills a draft), and `pivot eval` on the card. Label and cited lines must be the live run's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

PIVOT = str(Path(sys.executable).parent / "pivot")


@dataclass
class Staged:
    """The live report and the card captured right after it."""

    report: dict[str, Any]
    card: Path


def env_for(home: Path, path_first: Path | None = None) -> dict[str, str]:
    env = {**os.environ, "PIVOT_HOME": str(home / "pivot-home")}
    if path_first is not None:
        env["PATH"] = f"{path_first}{os.pathsep}{env.get('PATH', '')}"
    env.pop("PIVOT_DATABASE_URL", None)
    return env


def pivot(env: dict[str, str], *args: str) -> str:
    out = subprocess.run([PIVOT, *args], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, f"pivot {' '.join(args)}: {out.stderr[-3000:]}"
    return out.stdout


def live_and_capture(
    tmp: Path, env: dict[str, str], where: list[str], container: str | None, symptom: str = ""
) -> Staged:
    """Investigate live, then capture the same host the same way (no --container: detected)."""
    named = ["--container", container] if container else []
    said = [symptom] if symptom else []
    report = json.loads(
        pivot(env, "investigate", *said, *where, *named, "--brain", "rulebook", "--json")
    )
    card = tmp / "staged-container.yaml"
    pivot(env, "capture", *where, *named, "--symptom", report["symptom"], "-o", str(card))
    return Staged(report=report, card=card)


def replayed(staged: Staged, env: dict[str, str], container: str | None) -> dict[str, Any]:
    """`pivot eval` of the card, `expected` filled from the live answer; its one result."""
    card = yaml.safe_load(staged.card.read_text(encoding="utf-8"))
    # exactly what the operator passed: a card never names the container for a detected run
    assert card.get("invocation", {}).get("container") == container, card.get("invocation")
    if container is None:  # capture detected it too (another launch on the box between the
        # live run and the capture leaves detection to --container, and this fails here)
        found = list(card["host"].get("containers", {}))
        assert len(found) == 1, f"capture detected {found}: the box changed after the live run"
    lines = [e["line"] for e in staged.report["evidence"]]
    expected = {"expected": {"root_cause": staged.report["root_cause"], "evidence": lines}}
    with staged.card.open("a", encoding="utf-8") as fh:  # the captured text stays byte for byte
        fh.write(yaml.safe_dump(expected, sort_keys=False, width=100_000))
    out = staged.card.with_suffix(".json")
    pivot(env, "eval", str(staged.card), "--json", str(out), "-q")
    return json.loads(out.read_text())["results"][0]  # type: ignore[no-any-return]


def assert_replays_as_live(staged: Staged, env: dict[str, str], container: str | None) -> None:
    res = replayed(staged, env, container)
    live = staged.report
    assert res["got"] == live["root_cause"], (res["summary"], live["summary"])
    assert [e["line"] for e in res["evidence"]] == [e["line"] for e in live["evidence"]]
    assert res["passed"], res
