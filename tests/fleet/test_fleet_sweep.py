"""`pivot sweep --hosts` over a fleet of 20 real sshd hosts on loopback, plus hosts that never
answer (refused, silent, dropping packets), reached by alias through ~/.ssh/config.

The fleet is started once for the module, concurrently (tests/fleet/fleetkit.py). How fast it
is lives in bench/fleet_sweep.py; here we check what it says and what it stores.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.fleet import Health, open_ssh, run_fleet
from agent.settings import Settings
from store.memory.sqlite import Memory
from tests.fleet.fleetkit import Fleet, running_fleet
from tests.sshd import SshdUnavailable
from tools.host import Host
from tools.hosts import close_all

ROOT = Path(__file__).resolve().parents[2]


def _fleet(*args: object, **kwargs: object) -> Iterator[Fleet]:
    try:
        with running_fleet(*args, **kwargs) as fleet:
            yield fleet
    except SshdUnavailable as exc:  # a fleet test that cannot run must fail, never skip
        pytest.fail(f"the fleet needs real OpenSSH sshd hosts: {exc}")


@pytest.fixture(scope="module")
def fleet() -> Iterator[Fleet]:
    # 20 real sshd: 14 healthy (two with a slow nvidia-smi), 6 unhealthy; 3 hosts that never answer
    yield from _fleet(14, 6, slow={0: 1.5, 1: 1.0}, dead=("refused", "silent", "blackhole"))


def _pivot(fleet: Fleet, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**fleet.env(home), "PYTHONPATH": str(ROOT), "COLUMNS": "250"}
    return subprocess.run(
        [sys.executable, "-m", "agent.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )


def test_sweep_of_a_group_reports_every_host_and_stores_each_conclusion(
    fleet: Fleet, tmp_path: Path
) -> None:
    home = fleet.fleet_file.parent
    p = _pivot(fleet, home, "sweep", "--hosts", "gpu", "--log", fleet.log_template(), "--json")
    assert p.returncode == 1, p.stderr  # some hosts are unhealthy
    report = json.loads(p.stdout)
    rows = {r["host"]: r for r in report["hosts"]}
    assert list(rows) == fleet.aliases  # every host, in inventory order
    for alias in fleet.servers:
        row = rows[alias]
        if alias in fleet.unhealthy:
            assert row["health"] == Health.unhealthy, row
            assert row["label"] == fleet.unhealthy[alias]
            log = (fleet.root / "logs" / alias / "server.log").read_text().splitlines()
            assert row["line"] in log  # the cited line is a real line of that host's log
        else:
            assert row["health"] == Health.healthy, row
            assert row["status"] == "insufficient_evidence"
    words = {"refused": "Connection refused", "silent": "handshake", "blackhole": "no answer"}
    for alias, kind in fleet.dead.items():
        row = rows[alias]
        assert row["health"] == Health.no_answer
        assert words[kind] in row["error"] and alias in row["error"]
        assert row["fix"]
    # concurrency: the whole sweep took far less than its hosts one after another
    assert report["seconds"] < sum(r["seconds"] for r in report["hosts"]) / 3

    # memory: one session per host under its alias; each proven failure is a conclusion
    mem = Memory(home / "memory.db")
    try:
        for alias in fleet.aliases:
            sessions = mem.list_sessions(alias)
            assert [s.id for s in sessions] == [rows[alias]["session_id"]]
        assert mem.list_sessions(next(iter(fleet.dead)))[0].status == "no_answer"
        for label in set(fleet.unhealthy.values()):
            found = {c.host for c in mem.search_conclusions(label) if c.root_cause == label}
            assert found == {a for a, lab in fleet.unhealthy.items() if lab == label}
    finally:
        mem.close()


def test_investigate_hosts_prints_one_table(fleet: Fleet, tmp_path: Path) -> None:
    sick = next(iter(fleet.unhealthy))
    well = next(a for a in fleet.servers if a not in fleet.unhealthy and a not in fleet.slow)
    hole = next(a for a, k in fleet.dead.items() if k == "blackhole")
    p = _pivot(
        fleet,
        tmp_path / "pivot",
        "investigate",
        "--hosts",
        f"{sick},{well},{hole}",
        "--log",
        fleet.log_template(),
        "--deadline",
        "20",
        "server died, why?",
    )
    assert p.returncode == 1, p.stderr
    out = p.stdout
    assert "3 hosts in" in out
    cells = [" │ ".join(c.strip() for c in line.split("│")[1:-1]) for line in out.splitlines()]
    assert f"{sick} │ unhealthy │ {fleet.unhealthy[sick]}:" in " ".join(cells)
    assert any(c.startswith(f"{well} │ healthy │ no failure proven") for c in cells)
    assert any(
        c.startswith(f"{hole} │ did not answer │ did not answer: cannot run 'true' on {hole}")
        for c in cells
    )
    assert "1 unhealthy, 1 did not answer, 1 healthy" in out


def test_unknown_host_or_group_is_a_usage_error(fleet: Fleet, tmp_path: Path) -> None:
    p = _pivot(fleet, fleet.fleet_file.parent, "sweep", "--hosts", "gpu,node-99")
    assert p.returncode == 2
    err = " ".join(p.stderr.replace("│", " ").split())
    assert "unknown host or group 'node-99'" in err and "Groups: answering, gpu" in err
    p = _pivot(fleet, fleet.fleet_file.parent, "investigate", "--hosts", "gpu", "--yes")
    assert p.returncode == 2
    assert "--yes is for one host" in " ".join(p.stderr.replace("│", " ").split())


def test_bounded_connections_one_per_host_reused(fleet: Fleet, tmp_path: Path) -> None:
    """At most --max-connections hosts are open at once; each host opens exactly one
    connection, which every read of its investigation reuses."""
    close_all()
    inner = open_ssh(fleet.ssh_config)
    lock = threading.Lock()
    live: set[str] = set()
    peak = 0
    opened: dict[str, Host] = {}

    class Counted:
        def __init__(self, h: Host) -> None:
            self.h, self.name = h, h.name

        def __getattr__(self, attr: str) -> object:
            return getattr(self.h, attr)

        def close(self) -> None:
            with lock:
                live.discard(self.name)
            self.h.close()

    def opener(alias: str, timeout: float) -> Host:
        nonlocal peak
        h = inner(alias, timeout)
        with lock:
            live.add(alias)
            peak = max(peak, len(live))
            opened[alias] = h
        return Counted(h)  # type: ignore[return-value]

    hosts = [a for a in fleet.servers if a not in fleet.slow][:6]
    report = run_fleet(
        hosts,
        "sweep",
        logs=[fleet.log_template()],
        max_connections=2,
        settings=Settings(home=tmp_path / "pivot"),
        open_host=opener,
    )
    assert [r.host for r in report.hosts] == hosts
    assert all(r.health is not Health.no_answer for r in report.hosts), report
    assert peak == 2 and not live, (peak, live)
    connects = {a: opened[a].connects for a in hosts}  # type: ignore[attr-defined]
    assert connects == {a: 1 for a in hosts}, connects
    assert all(r.session_id for r in report.hosts)
    close_all()


def test_a_host_past_its_deadline_is_cut_off_and_does_not_hold_the_rest(tmp_path: Path) -> None:
    """nvidia-smi hangs for 60 s on one host; with a 4 s deadline it is reported as not
    answering, and the healthy host beside it is reported as usual."""
    for fleet in _fleet(2, 0, slow={0: 60}):
        stuck, well = "node-01", "node-02"
        assert fleet.slow == {stuck: 60}
        report = run_fleet(
            [stuck, well],
            "sweep",
            logs=[fleet.log_template()],
            deadline_s=4,
            settings=Settings(home=tmp_path / "pivot"),
            open_host=open_ssh(fleet.ssh_config),
        )
        rows = {r.host: r for r in report.hosts}
        assert rows[well].health is Health.healthy
        assert rows[stuck].health is Health.no_answer
        assert "4s deadline" in (rows[stuck].error or "")
        assert f"pivot investigate --host {stuck}" in (rows[stuck].fix or "")
        assert report.seconds < 60
        close_all()


@pytest.fixture
def pair() -> Iterator[Fleet]:
    yield from _fleet(2, 0)


def test_a_host_that_stops_answering_mid_sweep_is_reported_and_let_go(
    pair: Fleet, tmp_path: Path
) -> None:
    """Right after its first read, one host's sshd freezes (SIGSTOP: nothing answers, nothing
    closes). Its row says it did not answer, the other host's is as usual, and every read of
    the frozen host ends at its deadline, so no worker thread stays behind."""
    fleet = pair
    frozen, well = "node-01", "node-02"
    server = fleet.servers[frozen]
    inner = open_ssh(fleet.ssh_config)

    class FreezesAfterFirstRead:
        def __init__(self, h: Host) -> None:
            self.h, self.name, self.reads = h, h.name, 0

        def __getattr__(self, attr: str) -> object:
            return getattr(self.h, attr)

        def run(self, command: str, **kw: object) -> object:
            out = self.h.run(command, **kw)  # type: ignore[arg-type]
            self.reads += 1
            if self.reads == 1:
                for pid in server.connection_pids():
                    os.kill(pid, signal.SIGSTOP)
            return out

    def opener(alias: str, timeout: float) -> Host:
        h = inner(alias, timeout)
        return FreezesAfterFirstRead(h) if alias == frozen else h  # type: ignore[return-value]

    try:
        report = run_fleet(
            [frozen, well],
            "sweep",
            logs=[fleet.log_template()],
            deadline_s=4,
            settings=Settings(home=tmp_path / "pivot"),
            open_host=opener,
        )
        rows = {r.host: r for r in report.hosts}
        assert rows[well].health is Health.healthy
        assert rows[frozen].health is Health.no_answer, rows[frozen]
        assert "4s deadline" in (rows[frozen].error or "")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and any(
            t.name.startswith("fleet") for t in threading.enumerate()
        ):
            time.sleep(0.1)
        assert not [t.name for t in threading.enumerate() if t.name.startswith("fleet")]
    finally:
        for pid in server.connection_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        close_all()


def test_a_worker_stuck_past_the_deadline_is_abandoned_and_its_host_closed(
    tmp_path: Path,
) -> None:
    """The backstop behind the clipped reads: a Host whose read ignores its timeout (the one
    seam faked here; a real read honours it) is reported after deadline + grace, and its
    connection is closed so the stuck read can end."""
    released = threading.Event()

    class IgnoresTimeouts:
        name = "stuck-1"

        def run(self, command: str, timeout: float = 0, max_bytes: int = 0) -> object:
            released.wait(60)
            raise AssertionError("the abandoned read came back")

        def clock(self) -> float:
            return time.monotonic()

        def close(self) -> None:
            released.set()

    report = run_fleet(
        ["stuck-1"],
        "sweep",
        deadline_s=1,
        settings=Settings(home=tmp_path / "pivot"),
        open_host=lambda alias, t: IgnoresTimeouts(),  # type: ignore[arg-type,return-value]
    )
    row = report.hosts[0]
    assert row.health is Health.no_answer and row.error == "no result within its 1s deadline"
    assert "pivot investigate --host stuck-1" in (row.fix or "")
    assert released.wait(5)
