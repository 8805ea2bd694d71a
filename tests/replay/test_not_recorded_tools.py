"""Every tool tells "not recorded in this card" (unknown) from "the host had nothing".

A card key that is absent is a read nobody made: each tool must come back failed (ok=False,
so the agent's facts never count it), naming what was not recorded. The same key given with an
empty or header-only value is a real answer: an empty kernel log, no listener, nothing running.
"""

from __future__ import annotations

from typing import Any

import pytest

from cards.model import IncidentCard
from cards.replay import ReplayHost
from tools import disk, dmesg, gpu_status, ports, processes

PS_HEADER = "USER PID %CPU %MEM VSZ RSS TTY STAT START TIME COMMAND\n"
DF = (
    "Filesystem Size Used Avail Use% Mounted on\n"
    "/dev/sda1 100G 99G 1G 99% /\n"
    "shm 64M 0 64M 0% /dev/shm\n"
)
FREE = "               total        used        free      shared  buff/cache   available\nMem:          515000      12000      400000          10      103000      500000\n"


def _host(**host: Any) -> ReplayHost:
    return ReplayHost(
        IncidentCard.model_validate(
            {
                "id": "not-recorded",
                "title": "t",
                "source": "test",
                "engine": "sglang",
                "symptom": "s",
                "host": host,
            }
        )
    )


def _unknown(result: Any) -> None:
    assert not result.ok, result
    assert "not recorded in this card" in (result.error or ""), result.error
    assert "not installed" not in (result.error or "")
    assert result.fix


def test_dmesg_not_recorded_is_not_an_empty_kernel_log() -> None:
    r = dmesg.SPEC.call(_host(ps=PS_HEADER))
    _unknown(r)
    assert "printed nothing" not in (r.error or "")
    assert not any("OOM kills" in ln for ln in r.lines())  # no tally to "refute" an OOM with


def test_dmesg_recorded_is_read_and_a_unit_journal_is_not_the_kernel_log() -> None:
    r = dmesg.SPEC.call(_host(dmesg="[1.0] Out of memory: Killed process 7 (python3)\n"))
    assert r.ok and [k.pid for k in r.oom_kills] == [7]
    unit = dmesg.SPEC.call(_host(commands={"journalctl -u vllm --no-pager": "vllm started\n"}))
    _unknown(unit)


def test_disk_not_recorded_is_not_no_full_mount() -> None:
    r = disk.SPEC.call(_host(commands={"free -m": FREE}))  # memory known, disks not
    _unknown(r)
    assert r.full == [] and r.memory is not None and r.memory.total_mib == 515000
    full = disk.SPEC.call(_host(commands={"df -hP": DF}))
    assert full.ok and full.full == ["/"] and full.shm_too_small is True


def test_ports_not_recorded_is_not_no_listener() -> None:
    r = ports.SPEC.call(_host(), ports.Args(port=30000))
    _unknown(r)
    assert r.port_free is None
    empty = ports.SPEC.call(_host(commands={"ss -ltnp": ""}), ports.Args(port=30000))
    assert empty.ok and empty.listeners == [] and empty.port_free is True


def test_ps_not_recorded_is_not_nothing_running() -> None:
    r = processes.SPEC.call(_host())
    _unknown(r)
    assert "# no inference-server process is running" not in r.lines()
    empty = processes.SPEC.call(_host(ps=PS_HEADER))
    assert empty.ok and empty.servers == []
    assert "# no inference-server process is running" in empty.lines()


def test_gpus_not_recorded_are_unknown_not_a_missing_driver() -> None:
    r = gpu_status.SPEC.call(_host())
    _unknown(r)
    assert r.status == "not_read"
    # the agent reads a failed gpu_status's error for driver / hardware words: none may appear
    assert (
        "driver" not in (r.error or "").lower() and "unknown error" not in (r.error or "").lower()
    )


@pytest.mark.parametrize("path", ["/data/logs/server.log"])
def test_log_tools_not_recorded_say_so(path: str) -> None:
    from tools import config_read, log_search, log_tail

    host = _host(files={"/data/logs/other.log": "x\n"})
    for spec, args in (
        (log_tail.SPEC, {"path": path}),
        (log_search.SPEC, {"path": path, "pattern": "Error"}),
        (config_read.SPEC, {"path": path}),
    ):
        r = spec.call(host, args)
        _unknown(r)
        assert "does not exist" not in (r.error or "")
