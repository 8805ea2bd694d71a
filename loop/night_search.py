"""The night's measuring phases: the ranked changes one by one, the Optuna search over the
plan's parameters, and the final launch of the best configuration.

A mixin of `Night` (loop/night.py); the helpers below are shared with the fleet's workers
(loop/workers.py).
"""

from __future__ import annotations

import time
from typing import Any

from loop import combine
from loop.effect import no_effect
from loop.experiment import run_experiment
from loop.night_judge import _center
from loop.pareto import directions, trial_values
from loop.plan import SearchParam
from loop.stats import summarize
from loop.sweep import trial_constraints
from store.factory import study_storage
from store.ledger.base import MEASURED, NO_EFFECT, TERMINAL, ExperimentRow
from tools.host import Host


class SearchPhase:
    """Running the ranked rows, the search trials and the final launch on the night's hosts."""

    def _ranked_worker(self, host: Host) -> None:
        while not self._stopping.is_set():
            with self._lock:
                todo = [
                    r
                    for r in self.ledger.experiments(self.night.id)
                    if r.status == "pending"
                    and (r.kind == "ranked" or (r.kind == "baseline" and r.name != "baseline"))
                    and (r.seq < combine.SEQ or host is self.hosts[0])  # A/B/A on one slot
                ]
                if not todo:
                    return
                row = todo[0]
                if not self._fits():
                    for r in todo:
                        self.ledger.update(
                            r.id, status="skipped", phase="done", diagnosis="night budget spent"
                        )
                    return
                self.ledger.update(row.id, status="running", host=host.name)
            if row.kind == "baseline":  # a re-check: as many runs as the first measurement
                repeat = max(self.plan.baseline.noise_runs, self.plan.baseline.benchmark.repeat)
                run_experiment(self._ctx(host), row, repeat=repeat)
                continue
            why = no_effect(self.plans[host.name], row.change, self.baselines[host.name], host)
            if why:  # provably the baseline again: said so, not measured, never "discarded"
                self.ledger.update(row.id, status=NO_EFFECT, phase="done", diagnosis=why)
                continue
            done = run_experiment(self._ctx(host), row)
            self._classify(done)
            self._remeasure(host, self.ledger.get(row.id) or done)

    # search
    def _study(self) -> Any:
        import optuna

        from agent.settings import Settings

        assert self.plan.search is not None
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        study = optuna.create_study(
            study_name=self.plan.search.study,
            storage=study_storage(self.state_dir, Settings().database_url),
            **directions(self.plan),  # two objectives: a multi-objective study
            load_if_exists=True,
        )
        # A seeded sampler restarted after a kill would replay its random start-up sequence
        # and ask again the params it already tried; the seed moves on with the trial count.
        seed = self.plan.search.seed
        n = len(study.get_trials(deepcopy=False))
        # constrained TPE reads each trial's constraints (set in _tell): a trial that breaks an
        # SLO the baseline met is infeasible
        study.sampler = optuna.samplers.TPESampler(seed=None if seed is None else seed + n)
        return study

    def _search(self) -> None:
        from optuna.trial import TrialState

        study = self._study()
        rows = {r.trial_number: r for r in self.ledger.experiments(self.night.id)}
        for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            row = rows.get(t.number)
            if row is None or row.kind != "search":
                # asked, then killed before its ledger row existed: never ran; ask it again
                study.tell(t.number, state=TrialState.FAIL)
                _enqueue_once(study, t.params)
            elif row.status in TERMINAL:  # finished, then killed before the study was told
                self._tell(row)
        self._study_obj = study
        self._parallel(self._search_worker)

    def _search_worker(self, host: Host) -> None:
        assert self.plan.search is not None
        study = self._study_obj
        dists = {p.knob: _distribution(p) for p in self.plan.search.params}
        while not self._stopping.is_set():
            with self._lock:
                rows = [
                    r
                    for r in self.ledger.experiments(self.night.id)
                    if r.kind == "search" and not _interrupted(r)
                ]  # an interrupted trial is re-asked with its params; it does not use a slot
                if len(rows) >= self.plan.search.trials or not self._fits():
                    return
                trial = study.ask(dists)
                change = {k: _plain(v) for k, v in trial.params.items()}
                row = self._row(
                    f"trial-{trial.number}",
                    "search",
                    1000 + trial.number,
                    change,
                    trial_number=trial.number,
                    expect="TPE search",
                    host=host.name,
                )
            done = run_experiment(self._ctx(host), row)
            self._classify(done)
            with self._lock:
                self._tell(self.ledger.get(row.id) or done)

    def _tell(self, row: ExperimentRow) -> None:
        from optuna.trial import TrialState

        study = getattr(self, "_study_obj", None) or self._study()
        values = trial_values(self.plan, row) if row.status in MEASURED else None
        if values is not None and row.status == "inconclusive" and len(self.plan.objectives) == 1:
            # inside the noise the study is told the baseline's level, not the trial's own draw:
            # TPE must not steer its next points by differences nobody could separate
            base_values, _ = self._baseline_values()
            if base_values:
                values = summarize(base_values).center
        if values is not None:
            if self.plan.constraints and row.trial_number is not None:
                self._constrain(study, row)
            study.tell(row.trial_number, values, skip_if_finished=True)
        else:
            study.tell(row.trial_number, state=TrialState.FAIL, skip_if_finished=True)

    def _constrain(self, study: Any, row: ExperimentRow) -> None:
        """Give the trial its SLO constraint values before it is told (<= 0 is feasible)."""
        from optuna.trial import Trial, TrialState

        frozen = next(t for t in study.get_trials(deepcopy=False) if t.number == row.trial_number)
        if frozen.state != TrialState.RUNNING:
            return  # told before a kill: its constraints went with it
        _, base_metrics = self._baseline_values()
        values = trial_constraints(self.plan, base_metrics, row.metrics)
        trial = Trial(study, frozen._trial_id)  # the ask/tell API has no lookup by number
        for c, v in zip(self.plan.constraints, values, strict=True):
            trial.set_constraint(c, v)

    def _fail_trial(self, row: ExperimentRow, why: str) -> None:
        study = getattr(self, "_study_obj", None) or self._study()
        from optuna.trial import TrialState

        # Each step is idempotent, and the ledger row is closed last: a kill -9 in between
        # repeats the steps on the next start, and the params are still queued only once.
        study.tell(row.trial_number, state=TrialState.FAIL, skip_if_finished=True)
        _enqueue_once(study, dict(row.change))
        self.ledger.update(row.id, status="failed", phase="done", diagnosis=why, ended=time.time())

    # final slot
    def _final(self) -> None:
        """Relaunch the best config and leave it up (else the baseline); a restart after a
        kill finishes what is missing and writes the night row again, nothing twice."""
        rows = self.ledger.experiments(self.night.id)
        final = next((r for r in rows if r.name == "final"), None)
        fallback = next((r for r in rows if r.name == "final-baseline"), None)
        sign = 1.0 if self.plan.higher_is_better else -1.0
        kept = [r for r in rows if r.status == "kept" and r.metric_mean is not None]
        best = max(kept, key=lambda r: sign * _center(r)) if kept else None
        if final is None:
            final = self._row(
                "final",
                "final",
                10_000,
                best.change if best else {},
                expect=f"relaunch the best config ({best.name if best else 'baseline'}) and leave it up",
            )
        ctx = self._ctx(self.hosts[0], leave_running=True)
        done = final if final.status in TERMINAL else run_experiment(ctx, final)
        if done.status != "ok" and final.change:
            fallback = fallback or self._row(
                "final-baseline", "final", 10_001, {}, expect="best config failed; baseline"
            )
            done = fallback if fallback.status in TERMINAL else run_experiment(ctx, fallback)
        self.ledger.update_night(
            self.night.id,
            best=best.name if best else "baseline",
            final_pid=done.pid if done.status == "ok" else None,
            final_host=self.hosts[0].name,
            left_in_place=self._left_in_place(self.hosts[0]) if done.status == "ok" else [],
        )


#: Diagnosis prefix of a search row that a killed loop left before its result.
INTERRUPTED = "interrupted during"


def _interrupted(row: ExperimentRow) -> bool:
    return row.status == "failed" and (row.diagnosis or "").startswith(INTERRUPTED)


def _enqueue_once(study: Any, params: dict[str, Any]) -> None:
    """Queue `params` for the next ask unless they already wait in the queue.

    Optuna's own `skip_if_exists` compares against every trial, the failed one included,
    so it would never re-queue an interrupted trial.
    """
    from optuna.trial import TrialState

    for t in study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
        if t.system_attrs.get("fixed_params") == params:
            return
    study.enqueue_trial(params)


def _distribution(p: SearchParam) -> Any:
    from optuna.distributions import (
        CategoricalDistribution,
        FloatDistribution,
        IntDistribution,
    )

    if p.type == "categorical":
        return CategoricalDistribution(p.choices or [])
    if p.type == "int":
        return IntDistribution(int(p.low or 0), int(p.high or 0), log=p.log, step=int(p.step or 1))
    return FloatDistribution(float(p.low or 0), float(p.high or 0), log=p.log, step=p.step)


def _plain(v: Any) -> Any:
    return v.item() if hasattr(v, "item") else v
