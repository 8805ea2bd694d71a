"""`pivot eval` as CI calls it: JSON contract, HTML report, exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from agent.cli import full_app

app = full_app()

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CARDS, BAD = HERE / "cards", HERE / "bad_cards"
SUMMARY_KEYS = {
    "cards",
    "passed",
    "accuracy",
    "wrong",
    "insufficient",
    "errors",
    "median_rounds",
    "median_tool_calls",
    "cards_per_second",
}
RESULT_KEYS = {
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
    "transcript_steps",
}


def test_json_and_html_and_the_accuracy_bar(tmp_path: Path) -> None:
    runner = CliRunner()
    out, html = tmp_path / "out" / "run.json", tmp_path / "out" / "run.html"
    r = runner.invoke(
        app, ["eval", str(CARDS), str(BAD), "--json", str(out), "--report", str(html), "-q"]
    )
    assert r.exit_code == 0, r.output
    data = json.loads(out.read_text())
    assert set(data["summary"]) >= SUMMARY_KEYS
    assert all(set(x) >= RESULT_KEYS for x in data["results"])
    s = data["summary"]
    assert s["cards"] == 3 and s["errors"] == 1
    assert s["accuracy"] == round(s["passed"] / 3, 4)
    page = html.read_text()
    assert page.startswith("<!doctype html>") and "fixture-bad-label" in page
    assert f"{s['passed']}/{s['cards']} passed" in " ".join(r.output.split())

    # the bad card caps accuracy at 2/3: a bar above it fails with 1, one below passes with 0
    assert (
        runner.invoke(app, ["eval", str(CARDS), str(BAD), "-q", "--min-accuracy", "0.9"]).exit_code
        == 1
    )
    low = runner.invoke(app, ["eval", str(CARDS), str(BAD), "-q", "--min-accuracy", "0.0"])
    assert low.exit_code == 0


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    runner = CliRunner()
    assert runner.invoke(app, ["eval", str(tmp_path / "missing")]).exit_code == 2
    assert runner.invoke(app, ["eval", str(CARDS), "--brain", "oracle"]).exit_code == 2
    assert runner.invoke(app, ["eval", str(CARDS), "--record", str(tmp_path)]).exit_code == 2
    r = runner.invoke(
        app, ["eval", str(CARDS), "--brain", "llm", "--replay-model", str(tmp_path / "x")]
    )
    assert r.exit_code == 2


def test_a_real_process_shows_progress_with_a_live_tally(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIVOT_")}
    env.update(PIVOT_HOME=str(tmp_path), COLUMNS="160")
    r = subprocess.run(
        [sys.executable, "-m", "agent.cli", "eval", str(CARDS), "--jobs", "2"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert "2/2" in r.stderr and "passed" in r.stderr and "insufficient" in r.stderr
    assert "cards/s" in r.stdout
    assert not any(tmp_path.iterdir())  # eval never writes into the operator's Pivot home
