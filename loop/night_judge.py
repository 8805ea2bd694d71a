"""The night's judging phase: each result against the baseline runs around it, re-measuring
an inconclusive one, and the statistics of one experiment's launches.

A mixin of `Night` (loop/night.py), which holds the state it reads (plan, ledger, night, hosts).
"""

from __future__ import annotations

from typing import Any

from loop import combine
from loop.experiment import run_experiment
from loop.slo import violations
from loop.stats import OUTLIER_MIN_RUNS, Launch, Z, compare, interleaved_compare, summarize
from loop.sweep import point_slos
from store.ledger.base import MEASURED, ExperimentRow
from tools.bench_results import unit
from tools.host import Host


class JudgePhase:
    """Judging a measured row: kept, discarded or inconclusive, and the baseline's noise."""

    def _unknown_metrics(self, base: ExperimentRow) -> str | None:
        """Every objective and SLO metric must be in the baseline's result: a misspelled SLO
        would otherwise be "met" by every change. None when all are there."""
        from loop.slo import unknown_metrics

        names = [n for n in (self.plan.maximize, self.plan.minimize) if n]
        names += [c.metric for c in self.plan.slos()]
        missing = unknown_metrics(names, base.metrics)
        if not missing:
            return None
        have = ", ".join(sorted(k for k in base.metrics if "@" not in k)) or "nothing"
        return f"plan refused: {', '.join(missing)} not in the baseline's result; it has: {have}"

    def _interleaved(self) -> bool:
        """Baseline launches between experiments, each change judged by its neighbours: needs
        one order of launches, so one host slot."""
        return self.plan.baseline.interleave and len(self.hosts) == 1

    def _baseline_chain(self) -> list[Launch]:
        return [
            x
            for r in self.ledger.experiments(self.night.id)
            if r.kind == "baseline" and r.status == "ok"
            for x in launches(r)
        ]

    def _repeat_inconclusive(self) -> None:
        """Repeats until the interval decides: an inconclusive change is launched again, then
        the baseline after it, and judged on all its launches, up to `max_launches` each and
        while the night's budget allows; what is left says why it stayed inconclusive."""
        if self.plan.ranks_by_capacity:
            # another launch only widens a bracket (the envelope): a finer resolution or more
            # probes decide, not repeats
            return
        host = self.hosts[0]
        most = self.plan.baseline.max_launches
        while not self._stopping.is_set():
            rows = self.ledger.experiments(self.night.id)
            todo = [
                r
                for r in rows
                if r.kind == "ranked"
                and r.status == "inconclusive"
                and r.seq < combine.SEQ
                and len(launches(r)) < most
            ]
            if not todo:
                return
            for row in todo:
                if self._stopping.is_set():
                    return
                if not self._fits():
                    n = len(launches(row))
                    self.ledger.update(
                        row.id,
                        diagnosis=f"inconclusive after {n} launch(es); no budget left to repeat",
                    )
                    continue
                if not self._one_more_launch(host, row):
                    continue
                seq = max(
                    r.seq for r in self.ledger.experiments(self.night.id) if r.seq < combine.SEQ
                )
                again = self._row(
                    f"baseline-{seq + 1}",
                    "baseline",
                    seq + 1,
                    {},
                    expect=f"baseline again: the neighbour of {row.name}'s repeat",
                )
                repeat = max(self.plan.baseline.noise_runs, self.plan.baseline.benchmark.repeat)
                self.ledger.update(again.id, status="running", host=host.name)
                run_experiment(self._ctx(host), again, repeat=repeat)
                self._judge_baseline()
                self._classify(self.ledger.get(row.id) or row, again=True)
            if not self._fits():
                return

    def _rechecks(self) -> list[ExperimentRow]:
        return [
            r
            for r in self.ledger.experiments(self.night.id)
            if r.kind == "baseline" and r.name != "baseline"
        ]

    def _baseline_values(self) -> tuple[list[float], dict[str, list[float]]]:
        """Every baseline run of the night so far (first measurement and re-checks), pooled."""
        values: list[float] = []
        metrics: dict[str, list[float]] = {}
        for r in self.ledger.experiments(self.night.id):
            if r.kind == "baseline" and r.status == "ok":
                values += r.metric_values
                for k, v in r.metrics.items():
                    metrics.setdefault(k, []).extend(v)
        return values, metrics

    def _judge_baseline(self) -> None:
        """The baseline's robust noise (2 MAD sigmas) on the night; its interval on its row."""
        values, _ = self._baseline_values()
        s = summarize(values)
        self.ledger.update_night(self.night.id, noise=Z * s.sigma)
        unit_ = unit(self.plan.objective)
        for r in self.ledger.experiments(self.night.id):
            if r.kind == "baseline" and r.status == "ok" and r.metric_values:
                own = summarize(r.metric_values)
                self.ledger.update(
                    r.id, ci_low=own.low, ci_high=own.high, stats=own.describe(unit_)
                )

    def _classify(self, row: ExperimentRow, again: bool = False) -> None:
        """kept / discarded / inconclusive, by a robust comparison with every baseline run so
        far; a change that breaks an SLO the baseline met is discarded whatever its gain."""
        if row.metric_mean is None or not row.metric_values:
            return
        if row.status != "ok" and not (again and row.status in MEASURED):
            return
        base_values, base_metrics = self._baseline_values()
        if not base_values:
            return
        if self.plan.ranks_by_capacity:
            self._classify_capacity(row, base_metrics)
            return
        base, mine = summarize(base_values), summarize(row.metric_values)
        if self._interleaved() and row.kind in ("ranked", "search"):
            # a search trial too: judged on launch-to-launch noise, not on its own runs' (two
            # trials near the noise flipped between kept and inconclusive on a re-run)
            ranked = [
                r
                for r in self.ledger.experiments(self.night.id)
                if r.kind == "ranked" and r.status in MEASURED and r.id != row.id
            ]
            cmp = interleaved_compare(
                self._baseline_chain(),
                launches(row),
                self.plan.higher_is_better,
                looks=self.plan.baseline.max_launches,
                others=[launches(row), *(launches(r) for r in ranked)],
            )
        else:
            cmp = compare(base, mine, self.plan.higher_is_better)
        status = {"better": "kept", "worse": "discarded"}.get(cmp.verdict, "inconclusive")
        unit_ = unit(self.plan.objective)
        fields: dict[str, Any] = {
            "status": status,
            "gain": cmp.gain,
            "ci_low": mine.low,
            "ci_high": mine.high,
            "stats": f"{mine.describe(unit_)}; vs baseline {base.center:.4g}: "
            f"{cmp.describe(unit_)}",
        }
        slos = point_slos(self.plan)  # at every load point when the plan sweeps
        if slos:
            broken = violations(slos, base_metrics, row.metrics)
            fields["slo"] = "; ".join(broken) if broken else "met"
            if broken:
                fields["status"] = "discarded"  # a faster server that breaks an SLO is no win
        self.ledger.update(row.id, **fields)

    def _classify_capacity(self, row: ExperimentRow, base_metrics: dict[str, list[float]]) -> None:
        """Kept or discarded only when the change's bracket is apart from the baseline's (the
        envelope of every baseline launch); else inconclusive. The SLOs are inside the
        capacity: the column says which one broke at the missed end."""
        from loop.capacity import AXES, binding, bracket, separate

        assert self.plan.capacity is not None
        unit_ = AXES[self.plan.capacity.axis][3]
        if self.plan.objective == "goodput_per_gpu":
            unit_ = "req/s per GPU"
        mine = bracket(row.metrics, self.plan.objective)
        base = bracket(base_metrics, self.plan.objective)
        if mine is None or base is None:
            return
        verdict = separate(mine, base)
        said = {"better": "apart, above", "worse": "apart, below"}.get(
            verdict, "the brackets overlap or touch: inconclusive"
        )
        self.ledger.update(
            row.id,
            status={"better": "kept", "worse": "discarded"}.get(verdict, "inconclusive"),
            gain=mine.low - base.low,
            ci_low=mine.low,
            ci_high=mine.high if mine.high != float("inf") else mine.low,
            stats=f"{self.plan.objective} {mine.describe(unit_)} vs baseline "
            f"{base.describe(unit_)} over {base.launches} launch(es): {said}",
            slo=f"limited by {binding(row.metrics, self.plan)}",
        )

    def _remeasure(self, host: Host, row: ExperimentRow) -> None:
        """An inconclusive change is measured once more (budget allowing) and judged on all
        its runs; still inconclusive, it says so rather than pretending."""
        if row.status != "inconclusive" or "re-measured" in (row.diagnosis or ""):
            return
        if not self.plan.baseline.remeasure or self._interleaved() or self.plan.ranks_by_capacity:
            return  # interleaved: repeats come with their own baseline launches, later
        if not self._fits():
            self.ledger.update(row.id, diagnosis="inconclusive; no budget left to re-measure")
            return
        again = self._one_more_launch(host, row)
        if again is not None:
            self._classify(again)

    def _one_more_launch(self, host: Host, row: ExperimentRow) -> ExperimentRow | None:
        """Launch and measure `row` once more and keep all its runs (None if this one failed:
        its failure is the row's story now)."""
        first_values, first_metrics, first_at = row.metric_values, row.metrics, row.run_launch
        if len(first_at) != len(first_values):  # a row from before launches were recorded
            first_at = [row.started or 0.0] * len(first_values)
        self.ledger.update(row.id, status="running", phase="pending", remeasured=row.remeasured + 1)
        again = run_experiment(self._ctx(host), self.ledger.get(row.id) or row)
        if again.status != "ok":
            return None
        metrics = {
            k: first_metrics.get(k, []) + again.metrics.get(k, [])
            for k in set(first_metrics) | set(again.metrics)
        }
        values = first_values + again.metric_values
        n = len(launches(row)) + 1
        self.ledger.update(
            row.id,
            metric_values=values,
            metrics=metrics,
            run_launch=first_at + again.run_launch,
            metric_mean=sum(values) / len(values),
            diagnosis=f"measured in {n} launches: {len(values)} runs",
        )
        return self.ledger.get(row.id) or again


def launches(r: ExperimentRow) -> list[Launch]:
    """The row's runs grouped by the launch that made them: the mean of each (under
    OUTLIER_MIN_RUNS runs nothing is set aside, and a mean wastes less than a median of 3),
    else its robust center; a row from before launches were recorded is one launch."""
    from statistics import fmean

    if not r.metric_values:
        return []
    if len(r.run_launch) != len(r.metric_values):
        return [Launch(at=r.started or 0.0, center=summarize(list(r.metric_values)).center)]
    groups: dict[float, list[float]] = {}
    for at, v in zip(r.run_launch, r.metric_values, strict=True):
        groups.setdefault(at, []).append(v)
    return [
        Launch(
            at=at,
            center=summarize(vs).center if len(vs) >= OUTLIER_MIN_RUNS else fmean(vs),
            run_var=_run_var(vs),
        )
        for at, vs in sorted(groups.items())
    ]


def _run_var(values: list[float]) -> float:
    """The variance of a launch's mean from its runs, on logs when all are positive."""
    import math
    from statistics import variance

    if len(values) < 2:
        return 0.0
    vals = [math.log(v) for v in values] if all(v > 0 for v in values) else values
    return variance(vals) / len(vals)


def _center(r: ExperimentRow) -> float:
    """The robust center the report states (median of the runs), so the config left running is
    the one the report calls the winner; the mean only where no runs were kept."""
    from loop.stats import summarize

    if r.metric_values:
        return summarize(list(r.metric_values)).center
    return r.metric_mean or 0.0
