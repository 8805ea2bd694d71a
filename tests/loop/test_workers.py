"""Three `pivot loop run --worker` processes on one night in a real PostgreSQL; one SIGKILLed.

Each worker drives its own emulator (own port, own config file with its own bytes), as three
machines would; they share the ledger and the Optuna study through PIVOT_DATABASE_URL. Worker
slot-c dies in the benchmark of its first TPE trial: its lease runs out, a live worker stops its
server, reverts its config, FAILs its trial and re-queues the params, which run once elsewhere.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import optuna
import pytest
import yaml

from loop import launcher
from loop.fleet import FleetBoard, WorkerRow
from loop.plan import Plan, PlanError, plan_digest
from loop.preflight import port_listeners
from loop.workers import FleetWorker, pick_slot
from store.factory import study_storage
from store.ledger.base import MEASURED, TERMINAL
from store.ledger.postgres import PgLedger
from tests.loop.conftest import PY, REPO
from tests.loop.test_hosts import _slot
from tests.postgres import Postgres
from tools.local_host import LocalHost

TRIALS = 4
RANKED = ["proto-simple", "graph-bs-16", "channels-8"]


def _plan(
    state: Path, final_slot: bool = False, load_s: float = 0.3
) -> tuple[Plan, dict[str, Path]]:
    slots = {}
    specs = []
    for i, name in enumerate(("slot-a", "slot-b", "slot-c")):
        spec, cfg = _slot(state, name, f"# {name}\n" * i)
        specs.append(spec)
        slots[name] = cfg
    emu = f"{PY} -m loop.emulator --port {{port}} --mem-fraction-static 0.55"
    plan = Plan.model_validate(
        {
            "name": f"fleet-{os.getpid()}-{int(time.time())}",
            "hosts": specs,
            "baseline": {
                "launch": f"{emu} --load-seconds {load_s} --spawn-orphan",
                "workdir": str(REPO),
                "env": {"PYTHONPATH": f"{slots['slot-a'].parent}:{REPO}", "EMULATOR_GPU_ARCH": "sm120"},
                "config_file": str(slots["slot-a"]),
                "port": specs[0]["port"],
                "ready_url": "http://127.0.0.1:{port}/health",
                "benchmark": {
                    "command": f"{emu} --bench-client --requests 2 --tokens 60",
                    "metric_json_key": "output_throughput",
                    "repeat": 2,
                },
                "noise_runs": 3,
                "timeouts": {"ready_s": 30, "stall_s": 3, "benchmark_s": 30, "experiment_s": 60},
                "remeasure": False,  # one run per experiment: "ran once" is then exact
            },
            "experiments": [
                {"name": "proto-simple", "env": {"NCCL_PROTO": "Simple"}},
                {"name": "graph-bs-16", "flags": {"--cuda-graph-max-bs": 16}},
                {"name": "channels-8", "env": {"NCCL_MAX_NCHANNELS": "8"}},
            ],
            "search": {
                "study": "fleet",
                "trials": TRIALS,
                "seed": 5,
                "params": [
                    # channel counts all differ from the baseline's 16: every trial edits the file
                    {"knob": "env:NCCL_MAX_NCHANNELS", "type": "categorical", "choices": ["4", "8"]},
                    {"knob": "flag:--cuda-graph-max-bs", "type": "int", "low": 8, "high": 64},
                ],
            },
            "policy": {"kill_leftovers": True, "stop_grace_s": 1},
            "budget": {"night_s": 600, "final_slot": final_slot},
        }
    )  # fmt: skip
    return plan, slots


def _worker(plan_file: Path, state: Path, slot: str) -> list[str]:
    return [
        sys.executable, "-m", "agent.cli", "loop", "run", str(plan_file), "--state", str(state),
        "--quiet", "--no-diagnose", "--worker", "--slot", slot,
    ]  # fmt: skip


@dataclass
class Fleet:
    url: str
    plan: Plan
    cfgs: dict[str, Path]
    before: dict[str, bytes]
    states: dict[str, Path]
    out: dict[str, tuple[int, str, str]]


def _run_fleet(
    tmp_path: Path,
    postgres: Postgres,
    kill_in: str,
    term: bool = False,
    final_slot: bool = False,
    restart: bool = False,
) -> Fleet:
    """Workers slot-a and slot-b through the real CLI; slot-c through the driver that
    SIGKILLs (or SIGTERMs) itself in the benchmark of its first experiment of kind `kill_in`,
    and with `restart`, started again through the CLI as soon as it is dead (a long lease:
    the others never see it lost)."""
    url = postgres.new_database()
    env = {
        **os.environ,
        "PIVOT_DATABASE_URL": url,
        "PIVOT_HOME": str(tmp_path / "home"),
        "PIVOT_LOOP_HEARTBEAT_S": "0.5",
        "PIVOT_LOOP_LEASE_S": "60" if restart else "3",
    }
    shared = tmp_path / "shared"
    shared.mkdir()
    plan, cfgs = _plan(shared, final_slot)
    before = {name: cfg.read_bytes() for name, cfg in cfgs.items()}
    assert len(set(before.values())) == 3  # three hosts, three different baselines
    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text(yaml.safe_dump(plan.model_dump(mode="json")))
    states = {name: tmp_path / f"state-{name}" for name in cfgs}
    cmds = {
        "slot-a": _worker(plan_file, states["slot-a"], "slot-a"),
        "slot-b": _worker(plan_file, states["slot-b"], "slot-b"),
        "slot-c": [
            sys.executable, "-m", "tests.loop._worker_driver", str(plan_file),
            str(states["slot-c"]), "slot-c", kill_in, *(["TERM"] if term else []),
        ],
    }  # fmt: skip
    procs = {
        name: subprocess.Popen(
            cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for name, cmd in cmds.items()
    }
    out: dict[str, tuple[int, str, str]] = {}
    try:
        for name in ("slot-c", "slot-a", "slot-b"):
            so, se = procs[name].communicate(timeout=400)
            out[name] = (procs[name].returncode, so, se)
            if name == "slot-c" and restart:
                procs["slot-c again"] = subprocess.Popen(
                    _worker(plan_file, states["slot-c"], "slot-c"), cwd=REPO, env=env,
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                )  # fmt: skip
        if restart:
            so, se = procs["slot-c again"].communicate(timeout=400)
            out["slot-c again"] = (procs["slot-c again"].returncode, so, se)
            assert out["slot-c again"][0] == 0, out["slot-c again"][2][-3000:]
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait(5)
    assert out["slot-c"][0] == (143 if term else -9), out["slot-c"]
    assert f"killing in {'trial-' if kill_in == 'search' else ''}" in out["slot-c"][1]
    for name in ("slot-a", "slot-b"):
        assert out[name][0] == 0, (name, out[name][2][-3000:])
    return Fleet(url, plan, cfgs, before, states, out)


def _clean_and_reported(fleet: Fleet, ledger: PgLedger, night_id: str) -> None:
    """Every host at its own baseline bytes, nothing of the night running, and the whole
    fleet's report (the same) in each surviving worker's state dir."""
    for name, cfg in fleet.cfgs.items():
        assert cfg.read_bytes() == fleet.before[name], name
    local = LocalHost()
    assert launcher.marked_pids(local, prefix=f"{fleet.plan.name}/") == []
    for spec in fleet.plan.host_specs():
        assert not port_listeners(local, spec.port or 0), spec.name
    texts = []
    for name in ("slot-a", "slot-b"):
        report = Path((fleet.states[name] / "latest-report.txt").read_text().strip())
        assert report.is_relative_to(fleet.states[name])
        text = report.read_text()
        assert "## Fleet" in text and "taken back from slot-c" in text
        assert "| slot-a | " in text and "| slot-c | " in text and "| lost: worker slot-c" in text
        for r in ledger.experiments(night_id):
            assert f"| {r.name}" in text, r.name
        texts.append(text.split("## Fleet")[1])
    assert texts[0] == texts[1]


def test_three_workers_share_a_night_and_survive_a_sigkill_in_a_trial(
    tmp_path: Path, postgres: Postgres
) -> None:
    fleet = _run_fleet(tmp_path, postgres, kill_in="search")
    url = fleet.url
    ledger = PgLedger(url)
    night = ledger.night()
    assert night is not None and night.status == "done", night
    rows = {r.name: r for r in ledger.experiments(night.id)}
    assert all(r.status in TERMINAL and r.phase == "done" for r in rows.values()), rows
    # every ranked experiment ran exactly once, the baseline too; all three workers worked
    for name in ["baseline", *RANKED]:
        assert rows[name].attempts == 1, (name, rows[name].attempts)
        assert rows[name].status in MEASURED, (name, rows[name].status, rows[name].diagnosis)
    assert {r.host for r in rows.values()} == {"slot-a", "slot-b", "slot-c"}

    # the search: C's trial FAIL, its params asked again once and finished by another worker
    trials = optuna.load_study(study_name="fleet", storage=study_storage(tmp_path, url)).trials
    failed = [t for t in trials if t.state == optuna.trial.TrialState.FAIL]
    assert len(failed) == 1
    # asked again = popped from Optuna's queue with the failed trial's params
    again = [t for t in trials if t.system_attrs.get("fixed_params") == failed[0].params]
    assert len(again) == 1 and again[0].state == optuna.trial.TrialState.COMPLETE
    assert sum(t.state == optuna.trial.TrialState.COMPLETE for t in trials) == TRIALS
    assert len(trials) == TRIALS + 1
    lost = rows[f"trial-{failed[0].number}"]
    assert lost.host == "slot-c" and lost.status == "failed"
    assert "worker slot-c lost" in (lost.diagnosis or "")
    rerun = rows[f"trial-{again[0].number}"]
    assert rerun.host != "slot-c" and rerun.change == lost.change and rerun.metric_mean
    search_rows = [r for r in rows.values() if r.kind == "search"]
    assert len(search_rows) == TRIALS + 1
    assert sorted(r.trial_number for r in search_rows) == sorted(t.number for t in trials)

    board = FleetBoard(ledger)
    status = {w.name: w.status for w in board.workers(night.id)}
    assert status == {"slot-a": "done", "slot-b": "done", "slot-c": "lost"}
    assert [q.exp_id for q in board.requeues(night.id)] == [lost.id]

    _clean_and_reported(fleet, ledger, night.id)
    ledger.close()

    status_out = subprocess.run(
        [sys.executable, "-m", "agent.cli", "loop", "status", "--state", str(fleet.states["slot-a"])],
        cwd=REPO, env={**os.environ, "PIVOT_DATABASE_URL": url}, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert status_out.returncode == 0, status_out.stderr[-2000:]
    assert "worker slot-c on" in status_out.stdout and ": lost, heartbeat" in status_out.stdout
    assert "worker slot-a on" in status_out.stdout and ": done, heartbeat" in status_out.stdout
    # another team's night, started later in the same database, is not this state dir's
    other = PgLedger(url)
    other.open_night("someone-elses-plan", "digest", "/elsewhere")
    other.close()
    latest = fleet.states["slot-b"] / "latest-report.txt"
    shutil.rmtree(Path(latest.read_text().strip()).parent)
    latest.unlink()
    again = subprocess.run(
        [sys.executable, "-m", "agent.cli", "loop", "report", "--state", str(fleet.states["slot-b"])],
        cwd=REPO, env={**os.environ, "PIVOT_DATABASE_URL": url}, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr[-2000:]
    path = Path(latest.read_text().strip())  # written again by `loop report`, here
    assert path.is_relative_to(fleet.states["slot-b"]) and "## Fleet" in path.read_text()
    assert night.id in path.parts


def test_a_ranked_experiment_of_a_lost_worker_is_requeued_once(
    tmp_path: Path, postgres: Postgres
) -> None:
    fleet = _run_fleet(tmp_path, postgres, kill_in="ranked")
    ledger = PgLedger(fleet.url)
    night = ledger.night()
    assert night is not None and night.status == "done", night
    rows = {r.name: r for r in ledger.experiments(night.id)}
    assert all(r.status in TERMINAL and r.phase == "done" for r in rows.values()), rows
    board = FleetBoard(ledger)
    [requeue] = board.requeues(night.id)
    lost = ledger.get(requeue.exp_id)
    assert lost is not None and lost.kind == "ranked" and requeue.worker == "slot-c"
    # its second attempt, on a live worker, is its result; every other row ran once
    assert lost.attempts == 2 and lost.host != "slot-c" and lost.status in MEASURED
    for r in rows.values():
        if r.name != lost.name:
            assert r.attempts == 1, (r.name, r.attempts)
    trials = optuna.load_study(
        study_name="fleet", storage=study_storage(tmp_path, fleet.url)
    ).trials
    assert [t.state for t in trials] == [optuna.trial.TrialState.COMPLETE] * TRIALS
    status = {w.name: w.status for w in board.workers(night.id)}
    assert status == {"slot-a": "done", "slot-b": "done", "slot-c": "lost"}
    _clean_and_reported(fleet, ledger, night.id)
    ledger.close()


def test_a_worker_stopped_by_sigterm_hands_its_experiment_back(
    tmp_path: Path, postgres: Postgres
) -> None:
    fleet = _run_fleet(tmp_path, postgres, kill_in="ranked", term=True, final_slot=True)
    ledger = PgLedger(fleet.url)
    night = ledger.night()
    assert night is not None and night.status == "done", night
    # the closing worker relaunched the winner on its own host and left it up, on purpose
    local = LocalHost()
    assert night.final_pid and night.final_host in ("slot-a", "slot-b"), night
    assert launcher.marked_pids(local, prefix=f"{fleet.plan.name}/{night.id}.10000.")
    for c in night.left_in_place:
        assert c.host == night.final_host and str(fleet.cfgs[c.host]) == c.path
    launcher.stop(local, night.final_pid, None, grace_s=1)
    for pid in launcher.marked_pids(local, prefix=f"{fleet.plan.name}/"):
        local.run(f"kill -KILL {pid}")
    rows = [r for r in ledger.experiments(night.id) if r.kind != "final"]
    assert all(r.status in TERMINAL and r.phase == "done" for r in rows)
    # the stopped worker re-queued its own experiment; a live worker ran it to a result
    [again] = [r for r in rows if r.attempts == 2]
    assert again.kind == "ranked" and again.host != "slot-c" and again.status in MEASURED
    assert all(r.attempts == 1 for r in rows if r is not again)
    board = FleetBoard(ledger)
    status = {w.name: w.status for w in board.workers(night.id)}
    assert status == {"slot-a": "done", "slot-b": "done", "slot-c": "stopped"}
    assert board.requeues(night.id) == []  # nobody had to take anything back
    for name, cfg in fleet.cfgs.items():
        if name != night.final_host or not night.left_in_place:
            assert cfg.read_bytes() == fleet.before[name], name
    assert launcher.marked_pids(local, prefix=f"{fleet.plan.name}/") == []
    ledger.close()


def test_a_worker_with_another_version_of_the_plan_is_refused(
    tmp_path: Path, postgres: Postgres, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = postgres.new_database()
    monkeypatch.setenv("PIVOT_DATABASE_URL", url)
    plan, _ = _plan(tmp_path)
    ledger = PgLedger(url)
    night, _ = ledger.open_night(plan.name, "digest of yesterday's file", str(tmp_path))
    worker = FleetWorker(plan, tmp_path / "state", slot="slot-a")
    with pytest.raises(PlanError, match="another version of the plan"):
        worker.run()
    assert FleetBoard(ledger).workers(night.id) == []  # it never joined
    worker.ledger.close()
    ledger.close()


def test_a_killed_worker_restarted_at_once_recovers_its_own_experiment(
    tmp_path: Path, postgres: Postgres
) -> None:
    fleet = _run_fleet(tmp_path, postgres, kill_in="ranked", restart=True)
    ledger = PgLedger(fleet.url)
    night = ledger.night()
    assert night is not None and night.status == "done", night
    rows = ledger.experiments(night.id)
    assert all(r.status in TERMINAL and r.phase == "done" for r in rows)
    [again] = [r for r in rows if r.attempts == 2]  # killed in its benchmark, run once more
    assert again.kind == "ranked" and again.status in MEASURED
    assert all(r.attempts == 1 for r in rows if r is not again)
    board = FleetBoard(ledger)
    assert board.requeues(night.id) == []  # nobody took it back: its own worker did
    status = {w.name: w.status for w in board.workers(night.id)}
    assert status == {"slot-a": "done", "slot-b": "done", "slot-c": "done"}
    resumed = [e.detail for e in ledger.events(night.id) if e.kind == "resumed"]
    assert any(d.startswith("slot-c: ") and "re-queued" in d for d in resumed), resumed
    for name, cfg in fleet.cfgs.items():
        assert cfg.read_bytes() == fleet.before[name], name
    assert launcher.marked_pids(LocalHost(), prefix=f"{fleet.plan.name}/") == []
    ledger.close()


def test_worker_without_a_team_database_says_so(tmp_path: Path) -> None:
    plan, _ = _plan(tmp_path)
    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text(yaml.safe_dump(plan.model_dump(mode="json")))
    env = {k: v for k, v in os.environ.items() if k != "PIVOT_DATABASE_URL"}
    r = subprocess.run(
        _worker(plan_file, tmp_path / "s", "slot-a"),
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 2
    assert "PIVOT_DATABASE_URL" in r.stderr


def test_which_slot_a_worker_drives(tmp_path: Path) -> None:
    import socket

    plan, _ = _plan(tmp_path)
    assert pick_slot(plan, "slot-b").name == "slot-b"
    with pytest.raises(PlanError, match="--slot slot-z"):
        pick_slot(plan, "slot-z")
    with pytest.raises(PlanError, match="say which this worker drives"):
        pick_slot(plan, None)  # three hosts, none named like this machine
    one = plan.model_copy(update={"hosts": ["local"]})
    mine = pick_slot(one, None)  # a fleet of `hosts: [local]` machines: each its own name
    assert mine.name == socket.gethostname() and mine.local


def test_a_lost_worker_on_another_machine_is_handed_on_but_not_touched(
    tmp_path: Path, postgres: Postgres, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `local` slot of another machine cannot be reached from here: its experiments are
    handed on at once (a second loss fails one), its host is left for its own restart."""
    url = postgres.new_database()
    monkeypatch.setenv("PIVOT_DATABASE_URL", url)
    plan, cfgs = _plan(tmp_path)
    cfg_c = cfgs["slot-c"]
    worker = FleetWorker(plan, tmp_path / "state", slot="slot-a")
    worker.night, _ = worker.ledger.open_night(plan.name, plan_digest(plan), str(tmp_path))
    nid = worker.night.id
    spec_c = next(s for s in plan.host_specs() if s.name == "slot-c")
    worker.board.register(
        WorkerRow(night_id=nid, name="slot-c", machine="gpu-box-elsewhere", pid=1,
                  spec=spec_c.model_dump_json(), started=0.0, heartbeat=0.0)
    )  # fmt: skip
    worker._seed_rows()
    row = worker.board.claim(nid, ("ranked",), "slot-c")
    assert row is not None
    worker.ledger.update(row.id, phase="benchmark", attempts=1, pid=999_999)
    # another of its experiments was measured, then lost in its cleanup, before it was judged
    worker.ledger.update(f"{nid}:baseline", status="ok", phase="done",
                         metric_values=[900.0, 905.0, 910.0], metric_mean=905.0)  # fmt: skip
    measured = worker.board.claim(nid, ("ranked",), "slot-c")
    assert measured is not None
    worker.ledger.update(measured.id, phase="stop", attempts=1, status="ok",
                         metric_values=[1000.0, 1010.0], metric_mean=1005.0)  # fmt: skip
    cfg_c.write_text("changed by slot-c's experiment, on its own machine\n")
    with worker.board.pool.connection() as conn:  # its last stamp, long ago
        conn.execute("update fleet_workers set heartbeat = heartbeat - 3600 where name = 'slot-c'")

    worker._reap()
    back = worker.ledger.get(row.id)
    assert back is not None and (back.status, back.phase) == ("pending", "pending")
    assert [q.exp_id for q in worker.board.requeues(nid)] == [row.id]
    assert {w.name: w.status for w in worker.board.workers(nid)} == {"slot-c": "lost"}
    [event] = worker.ledger.events(nid)
    assert (
        event.kind == "killed"
        and "out of reach" in event.detail
        and "re-queued once" in event.detail
    )
    assert cfg_c.read_text().startswith("changed")  # "local" there is not here: untouched
    judged = worker.ledger.get(measured.id)
    assert judged is not None and (judged.status, judged.phase) == ("kept", "done")

    # the same experiment lost a second time (slot-c came back, took it, vanished again)
    worker.board.register(
        WorkerRow(night_id=nid, name="slot-c", machine="gpu-box-elsewhere", pid=2,
                  spec=spec_c.model_dump_json(), started=0.0, heartbeat=0.0)
    )  # fmt: skip
    assert worker.board.claim(nid, ("ranked",), "slot-c") == worker.ledger.get(row.id)
    worker.ledger.update(row.id, phase="ready", attempts=2)
    with worker.board.pool.connection() as conn:
        conn.execute("update fleet_workers set heartbeat = heartbeat - 3600 where name = 'slot-c'")
    worker._reap()
    twice = worker.ledger.get(row.id)
    assert twice is not None and (twice.status, twice.phase) == ("failed", "done")
    assert "second loss" in (twice.diagnosis or "")
    assert len(worker.board.requeues(nid)) == 1
    worker.ledger.close()


def test_a_frozen_worker_is_declared_lost_and_stands_down_when_it_wakes(
    tmp_path: Path, postgres: Postgres
) -> None:
    """SIGSTOP in a benchmark (a machine cut off, a hung process) for longer than the lease,
    then SIGCONT: the others took its work back meanwhile; waking, it learns it was lost at its
    next beat, records nothing, cleans its own host and exits 1; the night ends whole."""
    import psycopg

    url = postgres.new_database()
    env = {
        **os.environ,
        "PIVOT_DATABASE_URL": url,
        "PIVOT_HOME": str(tmp_path / "home"),
        "PIVOT_LOOP_HEARTBEAT_S": "0.5",
        "PIVOT_LOOP_LEASE_S": "3",
    }
    plan, cfgs = _plan(tmp_path / "shared")
    # a benchmark waits while a hold file exists, so the stop lands inside slot-c's however
    # loaded the box (between a 20 ms poll seeing the phase and the signal, a sub-second
    # benchmark could end); the file is made while slot-c's experiment is before its benchmark
    hold = tmp_path / "hold"
    plan.baseline.benchmark.command = (
        f"while [ -e {hold} ]; do sleep 0.05; done; " + plan.baseline.benchmark.command
    )
    before = {name: cfg.read_bytes() for name, cfg in cfgs.items()}
    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text(yaml.safe_dump(plan.model_dump(mode="json")))
    procs = {
        name: subprocess.Popen(
            _worker(plan_file, tmp_path / f"state-{name}", name), cwd=REPO, env=env,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for name in cfgs
    }  # fmt: skip
    try:
        frozen = None
        deadline = time.monotonic() + 120
        with psycopg.connect(url, autocommit=True) as conn:
            while frozen is None and time.monotonic() < deadline:
                with contextlib.suppress(psycopg.errors.UndefinedTable):  # not migrated yet
                    phases = {
                        r[0]
                        for r in conn.execute(
                            "select phase from experiments where host = 'slot-c'"
                        ).fetchall()
                    }
                    if phases & {"preflight", "apply", "launch", "ready"} and not hold.exists():
                        hold.touch()
                    if "benchmark" in phases and hold.exists():
                        frozen = True
                time.sleep(0.02)
        assert frozen, "slot-c never reached a held benchmark"
        procs["slot-c"].send_signal(signal.SIGSTOP)
        hold.unlink()  # the others go on; slot-c's benchmark ends while it is stopped
        time.sleep(6)  # twice the lease
        procs["slot-c"].send_signal(signal.SIGCONT)
        out = {name: p.communicate(timeout=400) for name, p in procs.items()}
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.kill()
                p.wait(5)
    assert procs["slot-c"].returncode == 1, out["slot-c"]
    assert "slot-c was declared lost by the fleet" in out["slot-c"][1]
    for name in ("slot-a", "slot-b"):
        assert procs[name].returncode == 0, out[name][1][-3000:]

    ledger = PgLedger(url)
    night = ledger.night()
    assert night is not None and night.status == "done", night
    rows = ledger.experiments(night.id)
    assert all(r.status in TERMINAL and r.phase == "done" for r in rows), rows
    board = FleetBoard(ledger)
    requeued = {q.exp_id for q in board.requeues(night.id)}
    assert requeued and all(q.worker == "slot-c" for q in board.requeues(night.id))
    for r in rows:  # ran once, or handed back once and ran again (a trial: a new trial)
        assert r.attempts - r.remeasured == (2 if r.id in requeued and r.kind != "search" else 1)
    assert {w.name: w.status for w in board.workers(night.id)}["slot-c"] == "lost"
    for name, cfg in cfgs.items():
        assert cfg.read_bytes() == before[name], name
    assert launcher.marked_pids(LocalHost(), prefix=f"{plan.name}/") == []
    ledger.close()
