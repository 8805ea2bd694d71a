"""An honest report (issue 23, item 6): one baseline reference everywhere (the pooled
baseline, with each row's "vs baseline" taken from its verdict's own gain), axes from 0 for
metrics that cannot go negative, and a Pareto front that does not rank noise."""

from __future__ import annotations

import re
from pathlib import Path

from loop.pareto import Point, front
from loop.report import pooled_baseline, svg_chart, vs_baseline
from loop.stats import axis_range
from store.ledger.base import ExperimentRow
from tests.loop.conftest import make_plan


def _row(name: str, kind: str, values: list[float], **kw: object) -> ExperimentRow:
    return ExperimentRow(
        id=f"n:{name}", night_id="n", seq=0, name=name, kind=kind,  # type: ignore[arg-type]
        status=kw.pop("status", "ok"), metric_values=values, **kw,  # type: ignore[arg-type]
    )  # fmt: skip


def test_vs_baseline_is_the_pooled_baseline_and_the_verdicts_sign() -> None:
    rows = [
        _row("baseline", "baseline", [100.0, 101.0, 99.0]),
        _row("baseline-2", "baseline", [90.0, 91.0, 89.0]),  # the night drifted
        # its runs sit above the first baseline, but its verdict (vs neighbours) lost 1.5%
        _row("x", "ranked", [100.3, 100.2, 100.4], status="discarded", gain=-1.425),
    ]
    pooled = pooled_baseline(rows)
    assert pooled is not None and pooled.n == 6 and 90 < pooled.center < 100
    cell = vs_baseline(rows[2], pooled.center, higher_is_better=True)
    assert cell.startswith("-"), cell  # never "+0.3%" beside "discarded"
    assert vs_baseline(rows[0], pooled.center, True) == "-"
    # a latency objective: a gain of +5 ms (better) is 5 ms less
    lat = _row("y", "ranked", [95.0], status="kept", gain=5.0)
    assert vs_baseline(lat, 100.0, higher_is_better=False) == "-5.0%"


def test_axes_start_at_zero_for_non_negative_metrics() -> None:
    assert axis_range(950.0, 1050.0)[0] == 0.0
    assert axis_range(0.0, 0.0) == (0.0, 1.0)  # an all-zero error count: no ±1e-12 axis
    lo, hi = axis_range(-2.0, 3.0)
    assert lo < -2.0 and hi > 3.0
    rows = [_row("baseline", "baseline", [0.0, 0.0, 0.0]), _row("x", "ranked", [0.0, 0.0])]
    svg = svg_chart(rows, 1e-12, metric="errors")
    ticks = re.findall(r'text-anchor="end">([^<]+)</text>', svg)
    assert ticks[0] == "0" and float(ticks[-1]) == 1.0, ticks


def test_a_front_is_not_drawn_on_noise(tmp_path: Path) -> None:
    plan = make_plan(tmp_path, [], maximize="output_throughput", minimize="p99_ttft_ms")

    def pt(name: str, x: float, y: float, dx: float, dy: float) -> Point:
        return Point(
            name=name, x=x, y=y, feasible=True,
            x_low=x - dx, x_high=x + dx, y_low=y - dy, y_high=y + dy,
        )  # fmt: skip

    # b is 0.1 ms "better" than a on latency and equal on throughput: within both intervals
    a, b = pt("a", 1000, 100.1, 20, 2), pt("b", 1000, 100.0, 20, 2)
    assert {p.name for p in front([a, b], plan)} == {"a", "b"}
    # c beats a beyond the intervals on throughput and ties it on latency: a is dominated
    c = pt("c", 1100, 100.1, 20, 2)
    assert {p.name for p in front([a, c], plan)} == {"c"}
    # d is faster beyond the noise but worse beyond it on latency: both stay
    d = pt("d", 1100, 150.0, 20, 2)
    assert {p.name for p in front([a, d], plan)} == {"a", "d"}
