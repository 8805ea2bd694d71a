"""Interleaved baselines, the default (issue 23, item 1): a real night on the emulator with
launch-to-launch noise and drift; the baseline is launched between experiments, a change is
judged by its neighbouring baseline launches, and an undecided one is launched again (each
time followed by a baseline) up to `max_launches`.
"""

from __future__ import annotations

import re
from pathlib import Path

from loop.night import Night
from loop.night_judge import launches
from tests.loop.conftest import PY, make_plan


def test_baseline_between_experiments_and_repeats_until_decided(state: Path) -> None:
    plan = make_plan(
        state,
        [
            {"name": "plus30", "env": {"EMULATOR_SPEEDUP": "1.3"}},
            {"name": "noop", "env": {"NOT_READ_BY_THE_ENGINE": "1"}},
            {"name": "minus30", "env": {"EMULATOR_SPEEDUP": "0.7"}},
        ],
    )
    b = plan.baseline
    port = b.port
    b.benchmark.command = (
        f"{PY} -m loop.emulator --bench-client --port {port} --requests 3 --tokens 20 --clock model"
    )
    b.max_launches = 2
    b.env |= {
        "EMULATOR_LAUNCH_NOISE": "0.01",
        "EMULATOR_DRIFT": "0.01",  # +1% a launch: the night's first baseline is no reference
        "EMULATOR_DRIFT_FILE": str(state / "drift"),
        # each launch's draws seeded by its number: the night is the same on every run (its
        # per-request noise made the +30% read anywhere in 25-35.3 unseeded, on a busy CI box)
        "EMULATOR_SEED": "1",
    }
    assert type(b).model_fields["interleave"].default is True  # the product's default
    b.interleave = True  # (the other tests' plans pin the pooled judge)
    night = Night(plan, state, diagnoser=None)
    result = night.run()
    assert result.status == "done", result.note
    rows = night.ledger.experiments(result.id)
    assert [r.name for r in rows][:7] == [
        "baseline", "plus30", "baseline-2", "noop", "baseline-4", "minus30", "baseline-6",
    ]  # fmt: skip
    by = {r.name: r for r in rows}
    assert by["plus30"].status == "kept", by["plus30"].stats
    assert by["minus30"].status == "discarded", by["minus30"].stats
    # +30% against its neighbours, though the night drifted ~1% a launch around it
    assert 25 < _relative(by["plus30"].stats or "") < 35, by["plus30"].stats
    noop = by["noop"]
    if noop.status == "inconclusive":  # repeated up to max_launches, then said so
        assert len(launches(noop)) == 2 and noop.remeasured == 1, noop
        assert "measured in 2 launches" in (noop.diagnosis or "")
    # every launch of a change has a baseline launch right after it
    order = sorted(
        (x.at, r.kind) for r in rows if r.kind in ("baseline", "ranked") for x in launches(r)
    )
    for (_, kind), (_, after) in zip(order, order[1:], strict=False):
        if kind == "ranked":
            assert after == "baseline", order
    assert order[-1][1] == "baseline"


def _relative(stats: str) -> float:
    """The "vs baseline" comparison's relative gain, in percent."""
    found = re.search(r"vs baseline [^:]*: \w+: [^(]*\(([+-][\d.]+)%\)", stats)
    assert found, stats
    return float(found.group(1))
