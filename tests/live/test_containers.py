"""Real Podman containers that fail the way servers in containers fail, investigated through the
real CLI (`pivot investigate --container NAME`): locally and over the test sshd.

Each container runs the stand-in engine of tests/containers.py: one fills a 64 MB /dev/shm
(`--shm-size 64m`), one is killed by its `-m 256m` limit, one restarts in a loop. These FAIL in
CI when Podman cannot run (tests/strict_skips.py), never skip.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests import containers
from tools.container_host import ContainerHost
from tools.local_host import LocalHost
from tools.registry import TOOLS

PIVOT = str(Path(sys.executable).parent / "pivot")


def investigate(tmp_path: Path, name: str, *where: str) -> dict[str, Any]:
    env = {**os.environ, "PIVOT_HOME": str(tmp_path / "pivot-home")}
    env.pop("PIVOT_DATABASE_URL", None)
    out = subprocess.run(
        [PIVOT, "investigate", *(where or ("--local",)), "--container", name]
        + ["--brain", "rulebook", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def cited(report: dict[str, Any]) -> list[str]:
    return [e.get("line", "") for e in report.get("evidence", [])]


@pytest.fixture(scope="module")
def shm_container() -> Any:
    with containers.container("--shm-size", "64m", mode="shm", wait_for="exited") as name:
        yield name


@pytest.fixture(scope="module")
def oom_container() -> Any:
    with containers.container(
        "-m", "256m", "--memory-swap", "256m", mode="oom", wait_for="exited"
    ) as name:
        yield name


def test_shm_64m_is_shm_too_small_in_run_command_terms(tmp_path: Path, shm_container: str) -> None:
    r = investigate(tmp_path, shm_container)
    assert r["root_cause"] == "shm_too_small", r
    lines = cited(r)
    assert any("Error while creating shared memory segment" in ln for ln in lines), lines
    assert "--shm-size 16g" in r["next_step"] and "--ipc=host" in r["next_step"]


def test_memory_limit_kill_is_host_oom_killed(tmp_path: Path, oom_container: str) -> None:
    r = investigate(tmp_path, oom_container)
    assert r["root_cause"] == "host_oom_killed", r
    lines = cited(r)
    assert any('"ExitCode": 137' in ln or '"OOMKilled": true' in ln for ln in lines), lines
    assert "-m 64g" in r["next_step"] and "256 MiB" in r["next_step"]
    assert "add RAM" not in r["next_step"] and "swap/RAM" not in r["next_step"]


def test_restart_loop_keeps_the_earlier_instances_log(tmp_path: Path) -> None:
    with containers.container("--restart", "on-failure", mode="crash", wait_for="restarted") as n:
        res = TOOLS["container_logs"].call(ContainerHost(LocalHost(), n), {"previous": True})
        assert res.ok and res.restart_count >= 2, res
        assert any("max_model_len (999999)" in e.text for e in res.entries)
        assert all(e.previous for e in res.entries)
        r = investigate(tmp_path, n)
    assert r["root_cause"] == "bad_launch_argument", r
    assert any("User-specified max_model_len (999999)" in ln for ln in cited(r))
    assert "restarted" in r["next_step"] and "previous instance's log" in r["next_step"]


def test_inspect_reads_limits_ports_mounts_and_redacts_secrets(tmp_path: Path) -> None:
    cache = tmp_path / "hf"
    cache.mkdir()
    with containers.container(
        "--shm-size", "1g", "-p", "18000:8000", "-v", f"{cache}:/root/.cache/huggingface:ro",
        "-e", "HF_TOKEN=hf_secret_value", "-e", "VLLM_LOGGING_LEVEL=DEBUG",
        mode="serve", wait_for="running",
    ) as name:  # fmt: skip
        host = ContainerHost(LocalHost(), name)
        res = TOOLS["container_inspect"].call(host, {})
        ps = host.run("ps aux")
    c = res.container
    assert res.ok and c is not None and c.running and c.shm_size == 1 << 30
    assert [(p.container_port, p.host_port) for p in c.ports] == [("8000/tcp", "18000")]
    assert [(m.destination, m.read_only) for m in c.mounts] == [("/root/.cache/huggingface", True)]
    assert c.env["HF_TOKEN"] == "<redacted>" and c.env["VLLM_LOGGING_LEVEL"] == "DEBUG"
    assert "hf_secret_value" not in "\n".join(res.lines())
    assert not c.gpus_requested
    assert ps.ok and "/engine.py serve" in ps.stdout and ps.host == f"localhost/{name}"


def test_unknown_container_is_a_clear_error(tmp_path: Path) -> None:
    containers.need_podman()
    env = {**os.environ, "PIVOT_HOME": str(tmp_path)}
    out = subprocess.run(
        [PIVOT, "investigate", "--local", "--container", "no-such-ctr", "--brain", "rulebook"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 2
    assert "no container 'no-such-ctr'" in out.stderr and "ps -a" in out.stderr


def test_over_ssh_the_container_reads_run_through_the_outer_host(shm_container: str) -> None:
    """The same container read through a real sshd (as root, who owns the containers): exec,
    inspect and logs all go over the one SSH connection."""
    from tests.live.conftest import _sshd
    from tools.ssh_host import SSHHost

    server = _sshd("root")
    outer = SSHHost(
        "live-root",
        hostname=server.host,
        port=server.port,
        user=server.user,
        key_filename=str(server.client_key),
        known_hosts=str(server.known_hosts),
        ssh_config_path="/dev/null",
        allow_agent=False,
        connect_timeout=5.0,
    )
    try:
        host = ContainerHost(outer, shm_container)
        res = TOOLS["container_inspect"].call(host, {})
        logs = TOOLS["container_logs"].call(host, {})
    finally:
        outer.close()
    assert res.ok and res.container is not None and res.container.shm_default, res
    assert res.host == "live-root"
    assert any("Error while creating shared memory segment" in e.text for e in logs.entries)


def test_the_image_is_built_once_per_recipe() -> None:
    containers.need_podman()
    assert containers.image() == containers.image()
    assert subprocess.run(["podman", "image", "exists", containers.image()]).returncode == 0
