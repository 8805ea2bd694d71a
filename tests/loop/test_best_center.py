"""The config left running is the one the report names: both use the runs' median."""

from __future__ import annotations

from loop.night_judge import _center
from store.ledger.base import ExperimentRow


def _row(name: str, values: list[float]) -> ExperimentRow:
    mean = sum(values) / len(values)
    return ExperimentRow(
        id=name, night_id="n", seq=1, name=name, kind="ranked", status="kept",
        metric_mean=mean, metric_values=values,
    )  # fmt: skip


def test_one_low_outlier_run_does_not_lose_the_winner() -> None:
    # the real night on the H200 (docs/gpu-live/night-h200): one slow run dragged a mean down
    steady = _row("trial-1", [1031.0, 1030.0, 1032.0])
    better = _row("graph-bs-16", [1040.0, 1041.0, 1039.0, 960.0])
    assert better.metric_mean is not None and steady.metric_mean is not None
    assert better.metric_mean < steady.metric_mean  # by the mean, the wrong one would win
    assert max([steady, better], key=_center).name == "graph-bs-16"


def test_without_runs_the_mean_stands() -> None:
    r = ExperimentRow(id="x", night_id="n", seq=1, name="x", kind="ranked", metric_mean=5.0)
    assert _center(r) == 5.0
