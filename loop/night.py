"""The night: recover, baseline noise, ranked plan, Optuna TPE search, final relaunch, report.

Every decision is read back from the ledger, so the same code path runs a fresh night and a
night resumed after `kill -9`: recovery first finishes or resets whatever was in flight (stop,
revert, verify), then the loop simply continues with the rows that are not done.

This module holds the night's state and its order of phases; the phases are mixins beside it:
recovery (loop/night_recover.py), judging (loop/night_judge.py), the ranked plan, search and
final launch (loop/night_search.py); why an experiment failed is loop/night_diagnosis.py.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loop import combine, configs, launcher
from loop.experiment import Context, Diagnoser, run_experiment, run_marker
from loop.night_judge import JudgePhase
from loop.night_recover import RecoverPhase
from loop.night_search import SearchPhase
from loop.plan import HostSpec, Plan, plan_digest
from loop.stopping import Interrupted, interruptible
from store.factory import open_ledger
from store.ledger.base import MEASURED, TERMINAL, ExperimentRow, NightRow
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


class Night(JudgePhase, RecoverPhase, SearchPhase):
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
