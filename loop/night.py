"""The night: recover, baseline noise, ranked plan, Optuna TPE search, final relaunch, report.

Every decision is read back from the ledger, so the same code path runs a fresh night and a
night resumed after `kill -9`: recovery first finishes or resets whatever was in flight (stop,
revert, verify), then the loop simply continues with the rows that are not done.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shlex
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loop import combine, configs, launcher
from loop.effect import no_effect
from loop.experiment import (
    Context,
    Diagnoser,
    Diagnosis,
    diagnose_row,
    run_experiment,
    run_marker,
)
from loop.pareto import directions, trial_values
from loop.plan import HostSpec, Plan, SearchParam, plan_digest
from loop.slo import violations
from loop.stats import OUTLIER_MIN_RUNS, Launch, Z, compare, interleaved_compare, summarize
from loop.stopping import Interrupted, interruptible
from loop.sweep import point_slos, trial_constraints
from store.factory import open_ledger, study_storage
from store.ledger.base import (
    FAILED,
    MEASURED,
    NO_EFFECT,
    TERMINAL,
    ExperimentRow,
    LeftChange,
    NightRow,
)
from tools.bench_results import unit
from tools.config_store import unified_diff
from tools.host import Host


def make_host(spec: str | HostSpec) -> Host:
    """A plain "local" keeps the name "localhost"; a named slot keeps its own name, so two
    slots on one machine stay apart in the ledger."""
    if isinstance(spec, str):
        spec = HostSpec(name=spec)
    if spec.local:
        from tools.local_host import LocalHost

        return LocalHost("localhost" if spec.name in ("local", "localhost") else spec.name)
    from tools.ssh_host import SSHHost

    host = SSHHost(spec.where)
    if spec.target:
        host.name = spec.name
    return host


def signature_diagnosis(host: Host, row: ExperimentRow) -> Diagnosis | None:
    """The KB's verdict on the experiment's log: first fatal line, else first strong one."""
    if not row.log_path:
        return None
    from agent.signatures import scan

    kb = launcher.signatures()
    if not kb:
        return None
    tail = host.read_tail(row.log_path, max_bytes=200_000)
    import re

    lines = re.split(r"[\r\n]", tail.data.decode("utf-8", errors="replace"))
    hits = scan(lines, kb)
    # A hung server printed nothing fatal by definition; a phase line is no cause for it.
    for strength in ("fatal",) if row.status == "hung" else ("fatal", "strong"):
        for m in hits:
            if m.strength == strength and m.label:
                return Diagnosis(m.label, m.line.strip(), f"signature {m.signature}", "signatures")
    return None


#: reads of the live process and its GPUs: never another experiment's log
LIVE_READS = ("py_stacks", "gpu_status", "processes")


def _in_log(host: Host, row: ExperimentRow, line: str) -> bool:
    """Evidence counts only when it occurs in this experiment's own log."""
    if not row.log_path:
        return False
    data = host.read_tail(row.log_path, max_bytes=400_000).data.decode("utf-8", errors="replace")
    return line.strip()[:200] in data


def agent_diagnoser(home: Path | None = None, brain: str = "rulebook") -> Diagnoser:
    """Run the investigating agent on the host; fall back to the signature KB without it."""

    def diagnose(host: Host, row: ExperimentRow, symptom: str) -> Diagnosis | None:
        try:
            from agent.runner import Runner
            from agent.settings import Settings
        except ImportError:
            return signature_diagnosis(host, row)
        settings = Settings(home=home) if home else Settings()
        # the experiment's own log (and config): the logs dir also holds every other
        # experiment's log, and another one's error is not this one's cause
        logs = [row.log_path] if row.log_path else None
        report = Runner(settings).start(host, symptom=symptom, brain=brain, logs=logs)
        line = report.evidence[0].line if report.evidence else None
        # a live read of the hung server itself (its stacks, its GPUs, its processes) is this
        # experiment's evidence; a log line must be in this experiment's own log
        live = next((e.line for e in report.evidence if e.tool in LIVE_READS), None)
        if row.status == "hung" and report.root_cause and live:
            inlog = next((e.line for e in report.evidence if _in_log(host, row, e.line)), None)
            return Diagnosis(
                report.root_cause, inlog or live, report.summary or report.status, "agent"
            )
        if report.root_cause == "killed_externally" and row.status in ("hung", "timeout"):
            # the loop stopped this server itself (it hung, or ran past its limit): the "kill"
            # the agent found after the fact is the loop's own, not a cause
            return Diagnosis(
                None,
                None,
                "the agent saw only the loop's own stop of the hung server; the hang's cause was "
                "not diagnosed (read its stacks while it hangs: pivot tools py_stacks --pid PID)",
                "agent",
            )
        if report.root_cause and line and _in_log(host, row, line):
            return Diagnosis(report.root_cause, line, report.summary or report.status, "agent")
        fallback = signature_diagnosis(host, row)
        if fallback:
            return fallback
        if report.root_cause:  # cited lines from elsewhere (another experiment's log): not stored
            return Diagnosis(
                None,
                None,
                f"agent said {report.root_cause} citing {line!r}, not in this log",
                "agent",
            )
        return Diagnosis(None, None, report.status, "agent")

    return diagnose


class Night:
    def __init__(
        self,
        plan: Plan,
        state_dir: str | Path,
        hosts: list[Host] | None = None,
        diagnoser: Diagnoser | None = None,
        memory_path: str | Path | None = None,
        on_phase: Callable[[ExperimentRow, str], None] | None = None,
    ) -> None:
        self.plan = plan
        self.state_dir = str(Path(state_dir).resolve())
        Path(self.state_dir).mkdir(parents=True, exist_ok=True)
        from agent.settings import Settings

        self.ledger = open_ledger(Path(self.state_dir) / "ledger.db", Settings().database_url)
        specs = plan.host_specs()
        self.hosts = hosts or [make_host(h) for h in specs]
        #: The plan as each host slot sees it (its port, workdir, config file, env).
        self.plans = {
            h.name: plan.for_host(specs[i] if i < len(specs) else HostSpec(name=h.name))
            for i, h in enumerate(self.hosts)
        }
        self.diagnoser = diagnoser
        self.memory_path = memory_path
        self.on_phase = on_phase
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self.night: NightRow
        self.baselines: dict[str, dict[str, bytes]] = {}

    # helpers
    def _ctx(self, host: Host, leave_running: bool = False) -> Context:
        return Context(
            plan=self.plans[host.name],
            ledger=self.ledger,
            night_id=self.night.id,
            host=host,
            state_dir=self.state_dir,
            baseline_files=self.baselines[host.name],
            diagnoser=self.diagnoser,
            on_phase=self.on_phase,
            leave_running=leave_running,
            store_root=self._store_root(host),
            busy_elsewhere=(lambda: self._busy_elsewhere(host.name))
            if len(self.hosts) > 1
            else None,
            stopping=self._stopping.is_set,
        )

    def _busy_elsewhere(self, host_name: str) -> set[str]:
        """Run markers of the experiments now between pre-flight and done on other slots."""
        return {
            run_marker(self.plan.name, self.night.id, r.seq, r.attempts)
            for r in self.ledger.experiments(self.night.id)
            if r.host != host_name and r.phase not in ("pending", "done") and r.attempts > 0
        }

    def _store_root(self, host: Host) -> str | None:
        """Snapshots of a local host live beside the ledger (one store per slot: slots write
        their stores at the same time); a remote host keeps its default."""
        from tools.local_host import LocalHost

        if not isinstance(host, LocalHost):
            return None
        sub = "snapshots" if len(self.hosts) == 1 else f"snapshots-{host.name}"
        return os.path.join(self.state_dir, sub)

    def _host(self, name: str) -> Host:
        return next((h for h in self.hosts if h.name == name), self.hosts[0])

    def _row(
        self, name: str, kind: str, seq: int, change: dict[str, Any], **kw: Any
    ) -> ExperimentRow:
        return self.ledger.add(
            ExperimentRow(
                id=f"{self.night.id}:{name}",
                night_id=self.night.id,
                seq=seq,
                name=name,
                kind=kind,  # type: ignore[arg-type]
                change=change,
                **kw,
            )
        )

    def deadline(self) -> float:
        return self.night.started + self.plan.budget.night_s

    def _reserve(self) -> float:
        t = self.plan.baseline.timeouts
        return (t.ready_s + 5.0) if self.plan.budget.final_slot else 0.0

    def _fits(self) -> bool:
        t = self.plan.baseline.timeouts
        need = min(t.experiment_s, t.ready_s + t.benchmark_s * self.plan.baseline.benchmark.repeat)
        return time.time() + need + self._reserve() <= self.deadline()

    #: One loop per plan: a second is refused before it touches anything (loop/night_lock.py).
    exclusive = True

    # the night
    def run(self) -> NightRow:
        """Run or resume the night; NightBusy when another loop runs this plan now."""
        from loop import night_lock

        held = (
            night_lock.hold(self.ledger, self.plan.name, self.state_dir, heartbeat_s())
            if self.exclusive
            else None
        )
        try:
            return self._run_held()
        finally:
            if held is not None:
                held.release()

    def _run_held(self) -> NightRow:
        self.night, resumed = self.ledger.open_night(
            self.plan.name, plan_digest(self.plan), self.state_dir
        )
        plan_copy = Path(self.state_dir) / "plans" / f"{self.night.id}.json"
        plan_copy.parent.mkdir(exist_ok=True)
        plan_copy.write_text(self.plan.model_dump_json(indent=1), encoding="utf-8")
        try:
            for host in self.hosts:
                self.baselines[host.name] = configs.capture_baseline(
                    self.ledger, self.night.id, host, self.plans[host.name].baseline.config_files
                )
        except configs.ConfigError as exc:  # a missing config file: blocked, said, not "running"
            self.ledger.update_night(
                self.night.id, status="blocked", ended=time.time(), note=f"config file: {exc}"
            )
            return self.ledger.night(self.night.id) or self.night
        beat = self._heartbeat()
        try:
            with interruptible():
                try:
                    return self._run(resumed)
                except Interrupted as stop:
                    stop.actions = self._stop(stop)
                    raise
        finally:
            beat.set()

    def _heartbeat(self) -> threading.Event:
        """Stamp the night row every HEARTBEAT_S so `loop status` can tell a dead loop."""
        done = threading.Event()
        self.ledger.update_night(
            self.night.id, heartbeat=time.time(), loop_pid=os.getpid(), loop_host=_hostname()
        )

        def beat() -> None:
            while not done.wait(heartbeat_s()):
                # a locked or closing ledger: the next beat tries again
                with contextlib.suppress(Exception):
                    self.ledger.update_night(self.night.id, heartbeat=time.time())

        threading.Thread(target=beat, daemon=True, name="loop-heartbeat").start()
        return done

    def _stop(self, stop: Interrupted) -> list[str]:
        """SIGTERM/SIGINT: stop every server of this night, let the slots' threads see it,
        then recover exactly as a restart would (re-queue, revert), and record what was done."""
        self._stopping.set()
        actions = [f"{stop.name} received: stopping the night"]
        self._kill_ours(actions)
        for t in self._threads:
            t.join(timeout=30)
        actions += self.recover(why=stop.name)
        self.ledger.add_event(self.night.id, "signal", "; ".join(actions))
        self.ledger.update_night(
            self.night.id, note=f"stopped by {stop.name}; `pivot loop run` resumes it"
        )
        return actions

    def _kill_ours(self, actions: list[str]) -> None:
        """KILL every marked process of this night but the morning server left up on purpose,
        naming the experiment each belonged to."""
        rows = self.ledger.experiments(self.night.id)
        marker = {
            r.name: run_marker(self.plan.name, self.night.id, r.seq, r.attempts) for r in rows
        }
        keep = {marker[r.name] for r in rows if r.kind == "final" and r.status == "ok"}
        for host in self.hosts:
            spared = {p for m in keep for p in launcher.marked_pids(host, marker=m)}
            ours = set(launcher.marked_pids(host, prefix=f"{self.plan.name}/{self.night.id}."))
            ours -= spared
            if not ours:
                continue
            said: list[str] = []
            left = set(ours)
            for r in rows:
                if r.attempts and r.phase not in ("pending", "done"):
                    mine = sorted(left & set(launcher.marked_pids(host, marker=marker[r.name])))
                    if mine:
                        said.append(f"stopped {r.name}'s server and children (pids {mine})")
                        left -= set(mine)
            if left:
                said.append(
                    f"killed leftover processes of this night on {host.name}: {sorted(left)}"
                )
            host.run(f"kill -KILL {' '.join(map(str, sorted(ours)))} 2>/dev/null; true", timeout=5)
            actions += said

    def _run(self, resumed: bool) -> NightRow:
        actions = self.recover()
        if resumed:
            self.ledger.add_event(
                self.night.id, "resumed", "; ".join(actions) or "nothing was in flight"
            )
        self._seed_rows()
        base = self.ledger.get(f"{self.night.id}:baseline")
        assert base is not None
        if base.status not in TERMINAL:
            repeat = max(self.plan.baseline.noise_runs, self.plan.baseline.benchmark.repeat)
            base = run_experiment(self._ctx(self.hosts[0]), base, repeat=repeat)
        if base.status != "ok" or base.metric_mean is None:
            why = f": {base.diagnosis[:300]}" if base.diagnosis else ""
            self.ledger.update_night(
                self.night.id, status="blocked", ended=time.time(), note=f"baseline failed{why}"
            )
            return self._close()
        unknown = self._unknown_metrics(base)
        if unknown:  # before any change is judged by a metric that is not there
            self.ledger.update_night(
                self.night.id, status="blocked", ended=time.time(), note=unknown
            )
            return self._close()
        self._judge_baseline()
        for r in self.ledger.experiments(self.night.id):  # measured, then killed before judged
            if r.kind in ("ranked", "search") and r.status == "ok":
                self._classify(r)
        self._parallel(self._ranked_worker)
        if self._rechecks():  # A/B/A: judge every change again against all baseline runs
            self._judge_baseline()
            for r in self.ledger.experiments(self.night.id):
                if r.kind == "ranked" and r.status in MEASURED:
                    self._classify(r, again=True)
        if self._interleaved():
            self._repeat_inconclusive()
        if self.plan.search:
            self._search()
        combine.run(self)  # the compatible kept changes together, between two baselines
        if self.plan.budget.final_slot:
            self._final()
        self.ledger.update_night(self.night.id, status="done", ended=time.time())
        return self._close()

    def _close(self) -> NightRow:
        from loop.report import handoff, write_report

        night = self.ledger.night(self.night.id) or self.night
        write_report(self.ledger, night, self.plan)
        handoff(self.ledger, night, self.plan, self.memory_path)
        return self.ledger.night(self.night.id) or night

    def _seed_rows(self) -> None:
        """The baseline, the ranked experiments, and (one slot, `recheck_every: N`) the
        baseline again after every N of them and at the end: A/B/A, not A then B forever."""
        self._row("baseline", "baseline", 0, {}, expect="known-good config; measures noise")
        every = self.plan.baseline.recheck_every if len(self.hosts) == 1 else 0
        if self._interleaved():
            every = 1
        seq = 0
        for i, exp in enumerate(self.plan.experiments, start=1):
            seq += 1
            self._row(exp.name, "ranked", seq, exp.change(), expect=exp.expect)
            if every and (i % every == 0 or i == len(self.plan.experiments)):
                seq += 1
                self._row(
                    f"baseline-{seq}", "baseline", seq, {}, expect="baseline again: drift, noise"
                )

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

    def recover(self, why: str = "loop killed") -> list[str]:
        """Finish or re-queue whatever a stopped or killed loop left in flight; then clean and
        revert anyway. Returns what it did, in words.

        Crash-safe by construction: each row's fate is decided by whether its result was
        recorded (its status), never by the phase a previous recovery may have written; the
        steps before a row's last write (stop, revert, diagnose, tell) are all idempotent; and
        that last write is one atomic update. A kill -9 at any moment of a recovery leaves the
        row as it was, and the next start recovers it again.
        """
        actions: list[str] = []
        for row in self._own(self.ledger.experiments(self.night.id)):
            # Taken but not started (killed between marking it and its first phase): a ranked
            # row marked running, or any search row, whose trial is asked in the study.
            taken = row.phase == "pending" and (row.status == "running" or row.kind == "search")
            if row.phase == "done" or (row.phase == "pending" and not taken):
                continue
            host = self._host(row.host)
            measured = row.status in TERMINAL
            morning = row.kind == "final" and row.status == "ok"  # the server left up on purpose
            self._recover_step(row, "stop")
            if not morning:
                marker = run_marker(self.plan.name, self.night.id, row.seq, row.attempts)
                found = {p for p in [row.pid] if p and launcher._alive(host, p)}
                found |= set(launcher.marked_pids(host, marker=marker))
                left = launcher.stop(host, row.pid, marker, self.plan.policy.stop_grace_s)
                if found:
                    actions.append(
                        f"stopped {row.name}'s server and children (pids {sorted(found)})"
                    )
                if left:
                    actions.append(f"WARNING: {row.name}'s pids {left} survived kill -9")
            self._recover_step(row, "revert")
            actions += self._revert_all(host)
            self._recover_step(row, "decide")
            if measured:
                stored = self.ledger.get(row.id) or row
                if stored.status in FAILED and not stored.label and self.diagnoser:
                    diagnose_row(self._ctx(host), stored)
                if stored.kind == "search":
                    self._tell(self.ledger.get(row.id) or stored)
                self.ledger.update(row.id, phase="done", ended=time.time())
                actions.append(f"{row.name}: result already recorded ({row.status}); cleanup done")
            elif row.kind == "search":
                self._fail_trial(row, f"{INTERRUPTED} {row.phase} ({why}); params re-queued")
                actions.append(f"{row.name}: interrupted in {row.phase}; its params re-queued")
            else:
                self.ledger.update(row.id, status="pending", phase="pending", pid=None)
                actions.append(f"{row.name}: interrupted in {row.phase}; re-queued")
        # At start-up, always: no marked process of ours survives, every config is baseline.
        self._kill_ours(actions)
        for host in self.hosts:
            actions += self._revert_all(host)
        return actions

    def _spec(self, host: Host) -> HostSpec:
        """The plan's slot of `host` (the final slot's host is the first)."""
        return next(
            (s for s in self.plan.host_specs() if s.name == host.name), self.plan.host_specs()[0]
        )

    def _own(self, rows: list[ExperimentRow]) -> list[ExperimentRow]:
        """The rows this process answers for: all of them (a fleet worker: its slot's)."""
        return rows

    def _recover_step(self, row: ExperimentRow, step: str) -> None:
        """Tell the phase hook where recovery is (the crash tests kill the loop here)."""
        if self.on_phase:
            self.on_phase(row, f"recover:{step}")

    def _revert_all(self, host: Host) -> list[str]:
        changed: list[str] = []
        bad = configs.revert(
            host, self.baselines[host.name], store_root=self._store_root(host), changed=changed
        )
        if bad:
            raise configs.ConfigError(f"cannot restore baseline config on {host.name}: {bad}")
        return [f"reverted {p} on {host.name} to its baseline bytes" for p in changed]

    def _parallel(self, worker: Callable[[Host], None]) -> None:
        if len(self.hosts) == 1:
            worker(self.hosts[0])
            return

        def guarded(host: Host) -> None:
            try:
                worker(host)
            except Interrupted:  # the main thread stops the night; this slot just ends
                return

        threads = [threading.Thread(target=guarded, args=(h,), daemon=True) for h in self.hosts]
        self._threads = threads
        for t in threads:
            t.start()
        for t in threads:
            t.join()

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
        base, mine = summarize(base_values), summarize(row.metric_values)
        if self._interleaved() and row.kind == "ranked":
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

    def _remeasure(self, host: Host, row: ExperimentRow) -> None:
        """An inconclusive change is measured once more (budget allowing) and judged on all
        its runs; still inconclusive, it says so rather than pretending."""
        if row.status != "inconclusive" or "re-measured" in (row.diagnosis or ""):
            return
        if not self.plan.baseline.remeasure or self._interleaved():
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

    def _left_in_place(self, host: Host) -> list[LeftChange]:
        """Every config file the morning server runs with that is not the night's baseline,
        with the snapshot and the exact command that put the baseline back."""
        spec = self._spec(host)
        root = self._store_root(host)
        where = "--local" if spec.local else f"--host {shlex.quote(spec.where)}"
        out = []
        for path, want in self.baselines[host.name].items():
            try:
                have: bytes | None = configs.read_file(host, path)
            except configs.ConfigError:
                have = None  # missing or unreadable now: the baseline still has to go back
            if have == want:
                continue
            snap = configs.baseline_snapshot(
                host, path, want, f"night {self.night.id} baseline", root
            )
            cmd = f"pivot tools config_revert {where} --path {shlex.quote(path)}"
            if root:
                cmd += f" --store-dir {shlex.quote(root)}"
            cmd += f" --to {snap} --yes" if snap else " --yes  # no snapshot store: pick --to"
            out.append(
                LeftChange(
                    host=host.name,
                    path=path,
                    baseline_sha256=hashlib.sha256(want).hexdigest(),
                    snapshot_id=snap,
                    revert=cmd,
                    diff=unified_diff(want, have, f"{path} (baseline)", f"{path} (morning)"),
                )
            )
        return out


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


def default_state_dir() -> Path:
    """PIVOT_LOOP_STATE, else PIVOT_HOME/loop (where the rest of Pivot keeps its state)."""
    if os.environ.get("PIVOT_LOOP_STATE"):
        return Path(os.environ["PIVOT_LOOP_STATE"])
    home = os.environ.get("PIVOT_HOME")
    return (Path(home) if home else Path.home() / ".pivot") / "loop"


#: Seconds between two heartbeats of a running loop; `loop status` calls a loop dead after
#: three missed beats (or at once when its pid is gone on this machine).
def heartbeat_s() -> float:
    return float(os.environ.get("PIVOT_LOOP_HEARTBEAT_S", "5"))


def _hostname() -> str:
    import socket

    return socket.gethostname()


def loop_alive(night: NightRow, now: float | None = None) -> tuple[bool, str]:
    """Whether the loop that runs `night` is alive, and why we think so."""
    if night.status != "running":
        return False, night.status
    now = time.time() if now is None else now
    if night.loop_pid and night.loop_host == _hostname():
        try:
            os.kill(night.loop_pid, 0)
        except ProcessLookupError:
            return False, f"loop pid {night.loop_pid} is gone"
        except PermissionError:
            pass
    age = now - (night.heartbeat or night.started)
    if age > 3 * heartbeat_s():
        return False, f"no heartbeat for {age:.0f}s"
    return True, f"heartbeat {age:.0f}s ago"


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
