"""An env change that provably changed nothing is flagged, not "discarded" (issue 15, item 4).

The issue's night: NCCL_MAX_NCHANNELS=16 already in the server's environment, the experiment
wrote a `setdefault` of 8 into sitecustomize.py, and the night said "discarded at 1031 vs 1030".
Here a real night on the emulator: the plan's env sets NCCL_MAX_NCHANNELS, the loop's shell
exports NCCL_ALGO (allow-listed), sitecustomize already says NCCL_PROTO=LL, and one flag is
re-set to the value the launch line has. Only the real change is launched.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from loop.effect import same_launch
from loop.knobs import setdefault_only
from loop.night import Night
from tests.loop.conftest import make_plan

EXPERIMENTS = [
    {"name": "ch-8", "env": {"NCCL_MAX_NCHANNELS": 8}},
    {"name": "algo-collnet", "env": {"NCCL_ALGO": "CollnetDirect"}},
    {"name": "proto-ll", "env": {"NCCL_PROTO": "LL"}},
    {"name": "mem-same", "flags": {"--mem-fraction-static": 0.55}},
    {"name": "mem-0.9", "flags": {"--mem-fraction-static": 0.9}},
]


def test_void_changes_are_flagged_and_never_launched(
    state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NCCL_ALGO", "Tree")  # exported in the loop's shell
    plan = make_plan(state, EXPERIMENTS)
    plan.baseline.env["NCCL_MAX_NCHANNELS"] = "16"
    plan.baseline.inherit_env.append("NCCL_ALGO")
    night = Night(plan, state, diagnoser=None)
    result = night.run()
    assert result.status == "done", result.note
    rows = {r.name: r for r in night.ledger.experiments(result.id)}
    for name in ("ch-8", "algo-collnet", "proto-ll", "mem-same"):
        r = rows[name]
        assert r.status == "no_effect", (name, r.status, r.diagnosis)
        assert r.attempts == 0 and r.log_path is None  # no launch spent on it
        assert (r.diagnosis or "").startswith("no effective change: ")
    assert "NCCL_MAX_NCHANNELS='16' is already in the server's environment (the plan's env)" in (
        rows["ch-8"].diagnosis or ""
    )
    assert "(the loop's env (allow-list))" in (rows["algo-collnet"].diagnosis or "")
    assert "NCCL_PROTO is already 'LL'" in (rows["proto-ll"].diagnosis or "")
    assert "--mem-fraction-static is the baseline's" in (rows["mem-same"].diagnosis or "")
    real = rows["mem-0.9"]
    assert real.attempts - real.remeasured == 1  # launched (re-measured if inconclusive)
    assert real.status in ("kept", "discarded", "inconclusive")
    # the evidence behind the proof: the baseline server's own log shows the values it ran with
    base_log = Path(rows["baseline"].log_path or "").read_text()
    assert "NCCL_ALGO=Tree" in base_log and "NCCL_MAX_NCHANNELS=16" in base_log
    report = (state / "reports" / result.id / "report.md").read_text()
    assert "## No effective change" in report
    assert "| ch-8 | NCCL_MAX_NCHANNELS=8 | no_effect |" in report


@pytest.mark.parametrize(
    "a,b,same",
    [
        ("serve M --x 1 --port 8", "serve M --port 8 --x 1", True),
        ("serve M --x 1 --port 8", "serve M --port 8 --x 2", False),
        ("serve --enforce-eager M --port 8", "serve M --port 8 --enforce-eager", True),
        ("serve M --port 8", "serve N --port 8", False),
        ("serve M --port=8", "serve M --port 8", True),
    ],
)
def test_same_launch_compares_meaning_not_text(a: str, b: str, same: bool) -> None:
    assert same_launch(a, b) is same


def test_setdefault_only_knows_an_override_from_a_default() -> None:
    site = 'import os\nos.environ.setdefault("A", "1")\nos.environ["B"] = "2"\n'
    assert setdefault_only(site, "A") and not setdefault_only(site, "B")
    assert not setdefault_only(site, "C")  # not set at all: nothing to shadow
    assert not setdefault_only("export A=1\n", "A")
    assert not setdefault_only(site + 'os.environ["A"] = "3"\n', "A")
