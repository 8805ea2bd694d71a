"""`pivot loop run PLAN --worker`: one of several processes, on several machines, sharing a night.

Every worker drives one host slot of the plan and reads and writes the one ledger and the one
Optuna study in the team's PostgreSQL (`PIVOT_DATABASE_URL`). The night's steps are the
single-process night's (loop/night.py), with the choice of work moved into the database:

- baseline, then ranked experiments: each is claimed by one row lock (loop/fleet.py); with a
  search to run, a worker out of ranked experiments goes on to trials (taking a ranked one
  handed back first) instead of waiting for the others' last ones;
- search: a trial is asked and its ledger row written under one advisory lock per night, so
  the fleet stops at exactly `trials` finished trials; Optuna's WAITING queue hands a
  re-queued trial's params to whichever worker asks next;
- a worker stamps its liveness every heartbeat; one silent for longer than the lease is lost:
  the first live worker to notice stops its servers and reverts its config (when it can reach
  that host: an SSH target, or a local slot on its own machine), fails its trial in the study
  and re-queues the params once, re-queues a ranked experiment once (a second loss fails it);
- the last worker with nothing left closes the night (final slot, report, handoff); every
  worker writes the whole fleet's report into its own state dir.

A restarted worker (same slot) first recovers its own rows exactly as a restarted night does.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loop import configs, launcher
from loop.experiment import Context, Diagnoser, run_experiment, run_marker
from loop.fleet import FleetBoard, WorkerRow
from loop.night import Night, heartbeat_s, make_host
from loop.night_search import INTERRUPTED, _distribution, _enqueue_once, _interrupted, _plain
from loop.plan import HostSpec, Plan, PlanError, plan_digest
from loop.stopping import Interrupted
from store.ledger.base import TERMINAL, ExperimentRow, NightRow
from tools.host import Host

#: Kinds a worker claims in each step of the night.
BASELINE = ("baseline",)
RANKED = ("ranked",)


def lease_s() -> float:
    """Seconds without a heartbeat after which a worker is lost (default: three beats)."""
    return float(os.environ.get("PIVOT_LOOP_LEASE_S", str(3 * heartbeat_s())))


def poll_s() -> float:
    """How often an idle worker looks for work, or for a lost colleague."""
    return min(1.0, heartbeat_s())


def pick_slot(plan: Plan, slot: str | None) -> HostSpec:
    """The host slot this worker drives: `--slot`, else the plan's host named like this
    machine, else the plan's only host; a plain `local` takes this machine's name, so the
    workers of a fleet of `hosts: [local]` machines stay apart in the ledger."""
    specs = plan.host_specs()
    me = socket.gethostname()
    if slot is not None:
        found = next((s for s in specs if s.name == slot), None)
        if found is None:
            raise PlanError(f"--slot {slot}: the plan's hosts are {[s.name for s in specs]}")
        return found
    found = next((s for s in specs if s.name == me), None)
    if found is not None:
        return found
    if len(specs) > 1:
        raise PlanError(f"the plan has {len(specs)} hosts: say which this worker drives (--slot)")
    spec = specs[0]
    if spec.name in ("local", "localhost"):
        return spec.model_copy(update={"name": me, "target": "local"})
    return spec


class FleetWorker(Night):
    """The night as seen by one worker: the same steps, its own host slot, the fleet's rows.

    What it changes in `Night` is which rows it answers for (`_own`: its slot's), which
    processes it may kill (never another worker's in flight on a shared machine), and who picks
    the next experiment (the database, `_claim_and_run`, `_search_fleet`)."""

    def __init__(
        self,
        plan: Plan,
        state_dir: str | Path,
        slot: str | None = None,
        diagnoser: Diagnoser | None = None,
        memory_path: str | Path | None = None,
        on_phase: Callable[[ExperimentRow, str], None] | None = None,
    ) -> None:
        self.spec = pick_slot(plan, slot)
        host = make_host(self.spec)
        host.name = self.spec.name
        super().__init__(plan, state_dir, [host], diagnoser, memory_path, on_phase)
        self.plans = {host.name: plan.for_host(self.spec)}
        self.name = host.name
        self.board = FleetBoard(self.ledger)
        self.machine = socket.gethostname()
        #: Set when a beat finds this worker declared lost: its work went to others.
        self.lost = False

    # what is mine on this night
    def _spec(self, host: Host) -> HostSpec:
        return self.spec

    def _own(self, rows: list[ExperimentRow]) -> list[ExperimentRow]:
        return [r for r in rows if r.host == self.name]

    def _ctx(self, host: Host, leave_running: bool = False) -> Context:
        ctx = super()._ctx(host, leave_running)
        # Other workers' servers may share this machine's process table: pre-flight spares them.
        ctx.busy_elsewhere = lambda: self._busy_elsewhere(host.name)
        return ctx

    def _kill_ours(self, actions: list[str]) -> None:
        self._kill_marked(self.hosts[0], self.name, actions)

    def _kill_marked(self, host: Host, owner: str, actions: list[str]) -> None:
        """KILL this night's marked processes on `host`, but those of experiments now in
        flight for other workers (same machine) and the morning server left up on purpose.

        Order matters: the scan comes first and the in-flight rows are read after it, so a
        server another worker started before the scan is always in its row's markers."""
        found = set(launcher.marked_pids(host, prefix=f"{self.plan.name}/{self.night.id}."))
        if not found:
            return
        rows = self.ledger.experiments(self.night.id)
        busy = {
            run_marker(self.plan.name, self.night.id, r.seq, r.attempts)
            for r in rows
            if r.host != owner and r.phase not in ("pending", "done") and r.attempts > 0
        }
        busy |= {
            run_marker(self.plan.name, self.night.id, r.seq, r.attempts)
            for r in rows
            if r.kind == "final" and r.status == "ok"
        }
        spared = {p for m in busy for p in launcher.marked_pids(host, marker=m)}
        left = sorted(found - spared)
        if left:
            host.run(f"kill -KILL {' '.join(map(str, left))} 2>/dev/null; true", timeout=5)
            actions.append(f"killed {owner}'s leftover processes on {host.name}: {left}")

    exclusive = False  # the fleet shares one night on purpose

    def _interleaved(self) -> bool:
        return False  # several hosts give no single order of launches

    def _seed_rows(self) -> None:
        """The single night's rows without A/B/A re-checks (several hosts: no one order)."""
        self._row("baseline", "baseline", 0, {}, expect="known-good config; measures noise")
        for seq, exp in enumerate(self.plan.experiments, start=1):
            self._row(exp.name, "ranked", seq, exp.change(), expect=exp.expect)

    # liveness
    def _heartbeat(self) -> threading.Event:
        """Join the night on the board, then stamp it every beat; a worker the fleet already
        declared lost stops (its work went to others) instead of writing over theirs.

        First of all, the worker's plan must be the night's: workers started from two versions
        of a plan would judge one night by two sets of rules."""
        if self.night.plan_digest != plan_digest(self.plan):
            raise PlanError(
                f"night {self.night.id} of plan {self.plan.name} runs another version of the "
                "plan: give every worker the same file (or let the night finish first)"
            )
        with self.board.lock(f"fleet:{self.night.id}"):  # never while someone reaps us
            self.board.register(
                WorkerRow(
                    night_id=self.night.id,
                    name=self.name,
                    machine=self.machine,
                    pid=os.getpid(),
                    spec=self.spec.model_dump_json(),
                    store_root=self._store_root(self.hosts[0]),
                    started=0.0,
                    heartbeat=0.0,
                )
            )
        done = threading.Event()

        def beat() -> None:
            while not done.wait(heartbeat_s()):
                try:
                    alive = self.board.beat(self.night.id, self.name)
                except Exception:  # a database blip: the next beat tries again
                    continue
                if not alive:
                    self.lost = True
                    self._stopping.set()
                    return
                with contextlib.suppress(Exception):  # `loop status`: the fleet is alive
                    self.ledger.update_night(self.night.id, heartbeat=time.time())

        threading.Thread(target=beat, daemon=True, name="worker-heartbeat").start()
        return done

    def _stop(self, stop: Interrupted) -> list[str]:
        actions = super()._stop(stop)
        self.board.set_status(self.night.id, self.name, "stopped", f"stopped by {stop.name}")
        if self.lost:
            actions.insert(
                0,
                f"{self.name} was declared lost by the fleet (no heartbeat for over "
                f"{lease_s():g}s): its experiments went to other workers",
            )
        return actions

    # the night, as one of several workers
    def _run(self, resumed: bool) -> NightRow:
        actions = self.recover()
        if actions:
            self.ledger.add_event(self.night.id, "resumed", f"{self.name}: " + "; ".join(actions))
        self._seed_rows()
        self._drain(BASELINE)
        base = self.ledger.get(f"{self.night.id}:baseline")
        if base is None or base.status != "ok" or base.metric_mean is None:
            return self._close_night("blocked", "baseline failed")
        self._judge_baseline()
        for r in self._own(self.ledger.experiments(self.night.id)):
            if r.kind == "ranked" and r.status == "ok":  # measured, then killed before judged
                self._classify(r)
        # With a search to run, a worker out of ranked experiments goes on to trials rather than
        # wait for the others' last ones; it still takes a ranked one handed back first.
        self._drain(RANKED, wait=self.plan.search is None)
        if self.plan.search:
            self._search_fleet()
        return self._close_night("done", None)

    def _drain(self, kinds: tuple[str, ...], wait: bool = True) -> None:
        """Claim and run experiments of these kinds until none is pending and, with `wait`,
        none is in flight elsewhere either (one may be handed back to us)."""
        while not self._stopping.is_set():
            self._reap()
            if self._claim_and_run(kinds):
                continue
            rows = self.ledger.experiments(self.night.id)
            if not wait or not any(r.kind in kinds and r.status not in TERMINAL for r in rows):
                return
            time.sleep(poll_s())

    def _claim_and_run(self, kinds: tuple[str, ...]) -> bool:
        """Claim one pending experiment of these kinds and run it; False when none is left."""
        host = self.hosts[0]
        if not self._fits():
            self.board.skip_pending(self.night.id, kinds, "night budget spent")
        row = self.board.claim(self.night.id, kinds, self.name)
        if row is None:
            return False
        if row.kind == "baseline":
            repeat = max(self.plan.baseline.noise_runs, self.plan.baseline.benchmark.repeat)
            run_experiment(self._ctx(host), row, repeat=repeat)
            return True
        done = run_experiment(self._ctx(host), row)
        self._classify(done)
        self._remeasure(host, self.ledger.get(row.id) or done)
        return True

    def _search_fleet(self) -> None:
        from optuna.trial import TrialState

        assert self.plan.search is not None
        host = self.hosts[0]
        dists = {p.knob: _distribution(p) for p in self.plan.search.params}
        with self.board.lock(f"fleet:{self.night.id}"):
            self._study_obj = self._study()
        study = self._study_obj
        while not self._stopping.is_set():
            self._reap()
            if self._claim_and_run(RANKED):  # a ranked experiment handed back goes first
                continue
            row = None
            with self.board.lock(f"fleet:{self.night.id}"):
                rows = {
                    r.trial_number: r
                    for r in self.ledger.experiments(self.night.id)
                    if r.kind == "search"
                }
                # Asked and row written under this lock: a RUNNING trial with no row here was
                # asked by a worker killed in between. It never ran; ask it again.
                for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
                    if t.number not in rows:
                        self._fail_orphan_trial(study, t)
                counted = [r for r in rows.values() if not _interrupted(r)]
                if len(counted) < self.plan.search.trials and self._fits():
                    self._reseed(study)
                    trial = study.ask(dists)
                    row = self._row(
                        f"trial-{trial.number}",
                        "search",
                        1000 + trial.number,
                        {k: _plain(v) for k, v in trial.params.items()},
                        trial_number=trial.number,
                        expect="TPE search",
                        host=self.name,
                    )
            if row is not None:
                done = run_experiment(self._ctx(host), row)
                self._classify(done)
                self._tell(self.ledger.get(row.id) or done)
                continue
            in_flight = [
                r
                for r in self.ledger.experiments(self.night.id)
                if r.kind in ("ranked", "search") and r.status not in TERMINAL
            ]
            if not in_flight:
                return
            time.sleep(poll_s())

    def _reseed(self, study: Any) -> None:
        """Seed the sampler by the trial count before each ask, as a restarted night does: the
        workers all start at the same count, and one seed would ask them all the same params."""
        import optuna

        assert self.plan.search is not None
        seed = self.plan.search.seed
        n = len(study.get_trials(deepcopy=False))
        study.sampler = optuna.samplers.TPESampler(seed=None if seed is None else seed + n)

    def _fail_orphan_trial(self, study: Any, trial: Any) -> None:
        from optuna.trial import TrialState

        study.tell(trial.number, state=TrialState.FAIL, skip_if_finished=True)
        _enqueue_once(study, trial.params)

    # lost workers
    def _reap(self) -> None:
        """Clean up after every worker whose lease ran out: its servers, its config, its rows."""
        if not self.board.stale(self.night.id, lease_s()):
            return  # the common case costs one query and no lock
        with self.board.lock(f"fleet:{self.night.id}"):
            for worker, age in self.board.stale(self.night.id, lease_s()):
                why = f"worker {worker.name} lost (no heartbeat for {age:.0f}s)"
                self.board.set_status(self.night.id, worker.name, "lost", why)
                actions = self._take_back(worker, why)
                self.ledger.add_event(
                    self.night.id, "killed", f"{why}; {self.name} took over: " + "; ".join(actions)
                )

    def _reach(self, worker: WorkerRow) -> Host | None:
        """The lost worker's host, when this worker can act on it."""
        spec = HostSpec.model_validate(json.loads(worker.spec))
        if spec.local and worker.machine != self.machine:
            return None  # "local" means its machine, not ours
        host = make_host(spec)
        host.name = worker.name
        return host

    def _take_back(self, worker: WorkerRow, why: str) -> list[str]:
        """Stop, revert, and hand back the lost worker's experiments: each once."""
        actions: list[str] = []
        host = self._reach(worker)
        rows = [
            r
            for r in self.ledger.experiments(self.night.id)
            if r.host == worker.name
            and r.phase != "done"
            and (r.phase != "pending" or r.status == "running" or r.kind == "search")
        ]
        if host is not None:
            for r in rows:
                marker = run_marker(self.plan.name, self.night.id, r.seq, r.attempts)
                left = launcher.stop(host, r.pid, marker, self.plan.policy.stop_grace_s)
                if left:
                    actions.append(f"WARNING: {r.name}'s pids {left} survived kill -9")
            self._kill_marked(host, worker.name, actions)
            baseline = self.ledger.baseline_files(self.night.id, worker.name)
            changed: list[str] = []
            bad = configs.revert(host, baseline, store_root=worker.store_root, changed=changed)
            actions += [f"reverted {p} on {worker.name} to its baseline bytes" for p in changed]
            if bad:
                actions.append(f"WARNING: cannot restore {bad} on {worker.name}")
        else:
            actions.append(
                f"{worker.name} runs on {worker.machine}, out of reach from {self.machine}: "
                "its servers and config are cleaned when its worker starts again"
            )
        requeued = {q.exp_id for q in self.board.requeues(self.night.id)}
        for r in rows:
            if r.status in TERMINAL:  # result recorded before the loss: only cleanup was left
                if r.status == "ok" and r.kind in ("ranked", "search"):
                    self._classify(r)  # measured, lost before it was judged
                    r = self.ledger.get(r.id) or r
                if r.kind == "search":
                    self._tell(r)
                self.ledger.update(r.id, phase="done", ended=time.time())
                actions.append(f"{r.name}: result already recorded ({r.status})")
            elif r.kind == "search":
                self._fail_trial(r, f"{INTERRUPTED} {r.phase} ({why}); params re-queued")
                self.board.add_requeue(self.night.id, r.id, worker.name, f"{why} in {r.phase}")
                actions.append(f"{r.name}: trial FAIL, its params re-queued once")
            elif r.id in requeued:
                self.ledger.update(
                    r.id, status="failed", phase="done", ended=time.time(),
                    diagnosis=f"{why} in {r.phase}, its second loss: not re-queued again",
                )  # fmt: skip
                actions.append(f"{r.name}: lost twice, failed")
            else:
                self.ledger.update(r.id, status="pending", phase="pending", pid=None)
                self.board.add_requeue(self.night.id, r.id, worker.name, f"{why} in {r.phase}")
                actions.append(f"{r.name}: re-queued once")
        return actions

    # the end of the night
    def _close_night(self, status: str, note: str | None) -> NightRow:
        """The first worker with nothing left in flight anywhere closes the night; every worker
        then writes the whole fleet's report into its own state dir."""
        if self._stopping.is_set():  # declared lost (or stopping): not ours to close
            raise Interrupted(0)
        closer = False
        self.board.set_status(self.night.id, self.name, "done")
        while not self._stopping.is_set():
            night = self.ledger.night(self.night.id)
            if night is None or night.status != "running":
                break
            with self.board.try_lock(f"close:{self.night.id}") as got:
                if got and not self._in_flight():
                    night = self.ledger.night(self.night.id)
                    if night is not None and night.status == "running":
                        if status == "done" and self.plan.budget.final_slot:
                            self._final()
                        self.ledger.update_night(
                            self.night.id, status=status, ended=time.time(), note=note
                        )
                        closer = True
                    break
            self._reap()
            time.sleep(poll_s())
        return self._close(handoff_too=closer)

    def _in_flight(self) -> bool:
        """Any experiment not finished (cleanup included), or any worker still at work."""
        rows = self.ledger.experiments(self.night.id)
        if any(r.status not in TERMINAL or r.phase != "done" for r in rows):
            return True
        return any(w.status == "running" for w in self.board.workers(self.night.id))

    def _close(self, handoff_too: bool = True) -> NightRow:
        from loop.report import handoff, write_report

        night = self.ledger.night(self.night.id) or self.night
        mine = night.model_copy(update={"state_dir": self.state_dir})
        write_report(self.ledger, mine, self.plan)
        if handoff_too:
            handoff(self.ledger, night, self.plan, self.memory_path)
        return night
