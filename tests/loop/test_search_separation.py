"""Search trials near the noise (docs/gpu-live/night-h200-2: two flipped between kept and
inconclusive on a re-run): a trial is judged on launch-to-launch noise like a ranked change,
and TPE is told the baseline's level for a trial whose difference is inside that noise, so its
next points are not steered by a coin toss."""

from __future__ import annotations

from pathlib import Path

from loop.night import Night
from loop.plan import plan_digest
from loop.stats import summarize
from tests.loop.conftest import make_plan

#: Baseline launches that differ by ~3% from launch to launch, each with tight runs.
CHAIN = [(1000.0, 1000.0), (1030.0, 1031.0), (995.0, 996.0), (1025.0, 1024.0)]


def test_a_trial_inside_launch_noise_is_inconclusive_and_told_the_baseline(state: Path) -> None:
    plan = make_plan(
        state,
        [],
        maximize="output_throughput",
        search={
            "study": "sep",
            "trials": 1,
            "params": [{"knob": "flag:--cuda-graph-max-bs", "type": "int", "low": 8, "high": 32}],
        },
    )
    plan.baseline.interleave = True
    night = Night(plan, state, diagnoser=None)
    night.night, _ = night.ledger.open_night(plan.name, plan_digest(plan), str(state))
    for i, runs in enumerate(CHAIN):
        row = night._row("baseline" if i == 0 else f"baseline-{i}", "baseline", i, {})
        night.ledger.update(
            row.id, status="ok", phase="done", metric_values=list(runs),
            run_launch=[float(i)] * 2, metric_mean=sum(runs) / 2,
        )  # fmt: skip
    study = night._study()
    night._study_obj = study
    trial = study.ask({"flag:--cuda-graph-max-bs": _dist()})
    row = night._row("trial-0", "search", 1000, dict(trial.params), trial_number=trial.number)
    runs = [1055.0, 1056.0, 1054.0]  # +4%: beyond its own runs' spread, inside the launches'
    night.ledger.update(
        row.id, status="ok", phase="done", metric_values=runs, run_launch=[3.5] * 3,
        metric_mean=sum(runs) / 3,
    )  # fmt: skip
    night._classify(night.ledger.get(row.id) or row)
    judged = night.ledger.get(row.id)
    assert judged is not None and judged.status == "inconclusive", judged.stats
    night._tell(judged)
    told = study.trials[trial.number].value
    base = summarize([v for runs in CHAIN for v in runs]).center
    assert told == base and told < 1054


def _dist():  # type: ignore[no-untyped-def]
    from optuna.distributions import IntDistribution

    return IntDistribution(8, 32)
