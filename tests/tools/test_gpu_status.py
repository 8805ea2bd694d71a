"""gpu_status: parsers on real H200 captures and failure forms; the tool on local and replay hosts.

LocalHost runs the real command sequence against `tests/fake_bin/nvidia-smi-h200-fixture-replay`
(it prints the real H200 captures) or, for failure forms, a tmp `nvidia-smi` script that prints a
synthetic fixture with nvidia-smi's exit code.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tests.cardkit import minimal_card as _card
from tools.gpu_status import SPEC, parse_compute_apps, parse_query, parse_table
from tools.local_host import LocalHost

FIX = Path(__file__).resolve().parent.parent / "fixtures"
H200 = FIX / "h200"
DEV = FIX / "h200-device"
SYN = FIX / "synthetic-facts"


def read(p: Path) -> str:
    return p.read_text(encoding="utf-8")


# -- parsers on real captures -------------------------------------------------------------------
def test_card_format_query_with_units() -> None:
    p = parse_query(read(H200 / "query-gpu.busy.csv"))
    g = p.gpus[0]
    assert (g.index, g.name) == (0, "NVIDIA H200")
    assert (g.memory_used_mib, g.memory_free_mib, g.memory_total_mib) == (102927, 40230, 143771)
    assert g.utilization_pct == 0 and g.driver is None and p.status == "ok"
    assert p.raw_lines == ["0, NVIDIA H200, 102927 MiB, 40230 MiB, 143771 MiB, 0 %"]


def test_wide_nounits_query_from_device() -> None:
    p = parse_query(read(DEV / "query-gpu.wide-nounits.busy.csv"))
    g = p.gpus[0]
    assert g.memory_used_mib == 41579 and g.memory_total_mib == 143771
    assert (g.driver, g.compute_cap, g.bus_id) == ("580.159.04", "9.0", "00000000:00:06.0")
    assert p.driver_version == "580.159.04"


def test_compute_apps_by_header() -> None:
    procs = parse_compute_apps(read(H200 / "query-compute-apps.busy.csv"))
    assert [(p.pid, p.name, p.used_mib) for p in procs] == [(471, "python3", 102918)]
    assert parse_compute_apps(read(H200 / "query-compute-apps.idle.csv")) == []
    dev = parse_compute_apps(read(DEV / "query-compute-apps.busy.csv"))
    assert [(p.pid, p.used_mib) for p in dev] == [(702, 41570)]


def test_table_busy_and_idle() -> None:
    busy = parse_table(read(H200 / "nvidia-smi.busy.txt"))
    assert (busy.driver_version, busy.cuda_version) == ("580.159.04", "13.0")
    assert busy.gpus[0].memory_used_mib == 102927 and busy.gpus[0].memory_total_mib == 143771
    assert [(p.pid, p.gpu_index, p.used_mib) for p in busy.processes] == [(471, 0, None)]
    idle = parse_table(read(H200 / "nvidia-smi.idle.txt"))
    assert idle.processes == [] and idle.gpus[0].memory_used_mib == 0
    assert any("No running processes found" in ln for ln in idle.raw_lines)
    dev = parse_table(read(DEV / "nvidia-smi.busy.txt"))
    assert [(p.pid, p.used_mib) for p in dev.processes] == [(702, 41570)]


def test_bogus_field_yields_no_gpu() -> None:
    p = parse_query(read(H200 / "query-gpu.bogus-field.txt"))
    assert p.gpus == [] and p.status == "ok"


# -- failure forms ------------------------------------------------------------------------------
def test_no_driver_and_nvml_mismatch() -> None:
    assert parse_table(read(SYN / "nvidia-smi.no-driver.txt")).status == "no_driver"
    assert parse_query(read(SYN / "nvidia-smi.nvml-mismatch.txt")).status == "no_driver"


def test_unknown_error_row_and_message() -> None:
    p = parse_query(read(SYN / "query-gpu.unknown-error-row.csv"))
    assert [g.error for g in p.gpus] == [None, "Unknown Error"]
    assert p.gpus[1].memory_used_mib is None and p.status == "unknown_error"
    assert parse_table(read(SYN / "nvidia-smi.unknown-error.txt")).status == "unknown_error"


def test_err_table_row() -> None:
    p = parse_table(read(SYN / "nvidia-smi.err.txt"))
    assert [g.index for g in p.gpus] == [0, 1]
    assert p.gpus[0].memory_used_mib == 4 and p.gpus[1].error == "ERR!"
    assert p.status == "unknown_error"


def test_mig_and_na() -> None:
    q = parse_query(read(SYN / "query-gpu.mig-na.csv"))
    assert q.gpus[0].utilization_pct is None and q.gpus[0].memory_used_mib == 6434
    assert q.gpus[1].memory_total_mib is None and q.gpus[1].error is None
    t = parse_table(read(SYN / "nvidia-smi.mig.txt"))
    assert t.gpus[0].mig and t.gpus[0].utilization_pct is None
    assert [(p.pid, p.used_mib) for p in t.processes] == [(12345, 6400)]


# -- the tool over LocalHost --------------------------------------------------------------------
def test_local_busy_via_fake_h200(
    fake_gpu_path: Path, monkeypatch: pytest.MonkeyPatch, local_host: LocalHost
) -> None:
    monkeypatch.setenv("PIVOT_FAKE_GPU_STATE", "busy")
    r = SPEC.call(local_host)
    assert r.ok and r.status == "ok" and r.source == "query"
    g = r.gpus[0]
    assert (g.memory_used_mib, g.compute_cap, g.driver) == (102927, "9.0", "580.159.04")
    assert [(p.pid, p.used_mib, p.gpu_index) for p in r.processes] == [(471, 102918, 0)]
    text = "\n".join(r.lines())
    assert "471, python3, 102918 MiB" in text and "# pid 471 (python3) holds 102918 MiB" in text


def _fake_smi(tmp: Path, fixture: Path | None, rc: int) -> None:
    """A tmp `nvidia-smi` that prints one synthetic fixture for every invocation."""
    script = tmp / "nvidia-smi"
    body = f"cat '{fixture}'\n" if fixture else ""
    script.write_text(f"#!/bin/sh\n# replays the synthetic fixture {fixture}\n{body}exit {rc}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)


@pytest.mark.parametrize(
    ("fixture", "rc", "status"),
    [
        ("nvidia-smi.no-driver.txt", 9, "no_driver"),
        ("nvidia-smi.nvml-mismatch.txt", 18, "no_driver"),
        ("nvidia-smi.unknown-error.txt", 255, "unknown_error"),
    ],
)
def test_local_failure_forms(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fixture: str, rc: int, status: str
) -> None:
    _fake_smi(tmp_path, SYN / fixture, rc)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    r = SPEC.call(LocalHost("gpu-box"))
    assert not r.ok and r.status == status
    assert "gpu-box" in (r.error or "") and r.fix
    assert any(ln.startswith("# fix:") for ln in r.lines())


def test_local_no_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on PATH: the shell answers rc 127
    r = SPEC.call(LocalHost("bare"))
    assert r.status == "no_nvidia_smi" and not r.ok
    assert "not installed on bare" in (r.error or "")


# -- the tool over ReplayHost -------------------------------------------------------------------


def test_replay_card_format(replay_host_factory) -> None:  # type: ignore[no-untyped-def]
    h = replay_host_factory(
        _card(
            {
                "nvidia_smi": read(H200 / "query-gpu.busy.csv"),
                "nvidia_smi_full": read(H200 / "nvidia-smi.busy.txt"),
                "commands": {
                    "nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv": read(
                        H200 / "query-compute-apps.busy.csv"
                    )
                },
            }
        )
    )
    r = SPEC.call(h)
    assert r.ok and r.gpus[0].memory_used_mib == 102927
    assert [(p.pid, p.used_mib) for p in r.processes] == [(471, 102918)]
    assert "0, NVIDIA H200, 102927 MiB, 40230 MiB, 143771 MiB, 0 %" in r.lines()


def test_replay_table_only_and_snapshots(replay_host_factory) -> None:  # type: ignore[no-untyped-def]
    h = replay_host_factory(_card({"nvidia_smi_full": read(H200 / "nvidia-smi.busy.txt")}))
    r = SPEC.call(h)
    assert r.source == "table" and r.cuda_version == "13.0" and r.processes[0].pid == 471
    h2 = replay_host_factory(
        _card(
            {
                "nvidia_smi": [
                    "0, G, 10 MiB, 90 MiB, 100 MiB, 0 %",
                    "0, G, 50 MiB, 50 MiB, 100 MiB, 0 %",
                ]
            }
        )
    )
    first, second = SPEC.call(h2), SPEC.call(h2)
    assert first.gpus[0].memory_used_mib == 10 and second.gpus[0].memory_used_mib == 50
    assert not first.processes_known


def test_replay_no_gpu_at_all(replay_host_factory) -> None:  # type: ignore[no-untyped-def]
    # a card without nvidia-smi output did not record it: unknown, never "no nvidia-smi here"
    r = SPEC.call(replay_host_factory(_card({})))
    assert r.status == "not_read" and not r.ok


# A consumer card's table opens each GPU's second row with its fan speed, also a percentage.
FAN_TABLE = """\
+---------------------------------------------------------------------------------------+
| NVIDIA-SMI 545.29.02              Driver Version: 545.29.02    CUDA Version: 12.3     |
|-----------------------------------------+----------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id        Disp.A | Volatile Uncorr. ECC |
| Fan  Temp   Perf          Pwr:Usage/Cap |         Memory-Usage | GPU-Util  Compute M. |
|=========================================+======================+======================|
|   0  NVIDIA GeForce RTX 3090        Off | 00000000:01:00.0  On |                  N/A |
| 30%   45C    P2             117W / 350W |   1211MiB / 24576MiB |    100%      Default |
+-----------------------------------------+----------------------+----------------------+
|   1  NVIDIA GeForce RTX 3090        Off | 00000000:4C:00.0 Off |                  N/A |
| 65%   41C    P8              12W / 350W |    876MiB / 24576MiB |      0%      Default |
+-----------------------------------------+----------------------+----------------------+
"""


def test_gpu_util_is_the_util_cell_not_the_fan_speed() -> None:
    gpus = parse_table(FAN_TABLE).gpus
    assert [(g.index, g.memory_used_mib, g.utilization_pct) for g in gpus] == [
        (0, 1211, 100),
        (1, 876, 0),
    ]


def test_a_watched_read_sees_gpu_memory_move_on_the_hosts_clock(replay_host_factory) -> None:  # type: ignore[no-untyped-def]
    from tools.gpu_status import Args, run

    row = "0, NVIDIA H200, {used} MiB, {free} MiB, 143771 MiB, 100 %\n"
    snaps = [
        {"at": 0, "text": row.format(used=61522, free=82249)},
        {"at": 20, "text": row.format(used=64210, free=79561)},
    ]
    moving = run(replay_host_factory(_card({"nvidia_smi": snaps})), Args(watch_s=60))
    assert moving.watched and moving.memory_moved_mib == 64210 - 61522
    assert moving.moved_line.startswith("0, NVIDIA H200, 64210 MiB") and 20 <= moving.waited_s < 60
    steady = run(
        replay_host_factory(_card({"nvidia_smi": [snaps[0], {**snaps[0], "at": 20}]})),
        Args(watch_s=30),
    )
    assert steady.watched and steady.memory_moved_mib == 0 and steady.waited_s >= 30


def test_one_wave_reads_nvidia_smi_once_for_gpu_status_and_processes(
    fake_gpu_path: Path, monkeypatch: pytest.MonkeyPatch, local_host: LocalHost
) -> None:
    """The first sweep's gpu_status and processes (which links pids to GPU memory) share one
    snapshot (tools/shared_reads.py); outside a wave each reads on its own."""
    from agent.observe import run_many

    monkeypatch.setenv("PIVOT_FAKE_GPU_STATE", "busy")
    asked: list[str] = []
    real = local_host.run

    def run(command: str, *a, **k):  # type: ignore[no-untyped-def]
        asked.append(command)
        return real(command, *a, **k)

    monkeypatch.setattr(local_host, "run", run)
    gpu, procs = run_many(local_host, [("gpu_status", {}), ("processes", {})], 1, 0)
    once = [c for c in asked if c.startswith("nvidia-smi")]
    assert len(once) == len(set(once)) and once, asked
    assert gpu["ok"] and gpu["data"]["processes"][0]["pid"] == 471
    assert procs["data"]["gpu_pids_missing"] == [471]  # linked through the shared read
    asked.clear()
    SPEC.call(local_host)
    from tools.processes import SPEC as PROCESSES

    PROCESSES.call(local_host)
    twice = [c for c in asked if c.startswith("nvidia-smi")]
    assert len(twice) == 2 * len(once), asked
