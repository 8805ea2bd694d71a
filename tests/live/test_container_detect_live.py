"""Without `--container`: a real Podman container whose vLLM launch (the stand-in under vLLM's
command line) lost its engine to a 64 MB /dev/shm while its API server stays up, investigated
from the host by the real CLI. The first sweep's `container_detect` finds it from
/proc/PID/cgroup, the run reads inside it, and the report says so. Control: a vLLM process on
the host is not claimed as containerised, and a host launch beside a container one is left to
`--container`, never guessed. These FAIL in CI when Podman cannot run, never skip.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import containers
from tests.live import container_cards as cards
from tools.local_host import LocalHost
from tools.registry import TOOLS
from tools.ssh_host import SSHHost

PIVOT = str(Path(sys.executable).parent / "pivot")


def investigate(tmp_path: Path, *args: str) -> dict[str, Any]:
    env = {**os.environ, "PIVOT_HOME": str(tmp_path / "pivot-home")}
    env.pop("PIVOT_DATABASE_URL", None)
    out = subprocess.run(
        [PIVOT, "investigate", "--local", "--brain", "rulebook", "--json", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def shm_stay() -> Iterator[str]:
    with containers.container(
        "--shm-size", "64m", mode="shm-stay", wait_for="running", as_vllm=True
    ) as name:
        deadline = time.monotonic() + 30
        while "Engine core died" not in _logs(name) and time.monotonic() < deadline:
            time.sleep(0.3)
        yield name


def _logs(name: str) -> str:
    res = subprocess.run(["podman", "logs", name], capture_output=True, text=True)
    return res.stdout + res.stderr


@pytest.fixture
def host_vllm() -> Iterator[int]:
    """A vLLM launch on the host itself (the same shim, outside any container)."""
    shim = containers.shim_tree(Path(tempfile.mkdtemp(prefix="pivot-host-shim-")))
    proc = subprocess.Popen(
        [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "serve"],
        env={**os.environ, "PYTHONPATH": str(shim)},
        stdout=subprocess.DEVNULL,
    )
    time.sleep(0.5)
    try:
        yield proc.pid
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def test_control_a_host_launch_is_not_claimed_as_containerised(
    tmp_path: Path, host_vllm: int
) -> None:
    """First in the module: no container of ours runs yet."""
    containers.need_podman()
    res = TOOLS["container_detect"].call(LocalHost(), {})
    assert res.ok and host_vllm in res.engine_pids, res
    mine = next(p for p in res.processes if p.pid == host_vllm)
    assert mine.runtime is None and mine.container_id is None and not mine.other_pid_ns
    assert res.container is None
    r = investigate(tmp_path)
    assert "container" not in r["where"], r["where"]
    assert not any(o.startswith("# superseded") for o in r.get("unknowns", []))


@pytest.fixture(scope="module")
def detected_live(tmp_path_factory: pytest.TempPathFactory, shm_stay: str) -> cards.Staged:
    """The live run without --container, and `pivot capture` without it right after."""
    tmp = tmp_path_factory.mktemp("detected")
    return cards.live_and_capture(tmp, cards.env_for(tmp), ["--local"], None)


def test_a_launch_in_a_container_is_detected_and_investigated_inside(
    shm_stay: str, detected_live: cards.Staged
) -> None:
    r = detected_live.report
    assert r["where"].startswith(
        f"The server runs in podman container {shm_stay} (detected from /proc/"
    ), r["where"]
    assert r["where"].endswith("/cgroup); investigated inside it."), r["where"]
    assert r["root_cause"] == "shm_too_small", r
    lines = [e["line"] for e in r["evidence"]]
    # the container's own /dev/shm (64M, full), read inside: the host's is neither
    assert any("/dev/shm" in ln and "64M" in ln and "100%" in ln for ln in lines), lines
    assert "--shm-size 16g" in r["next_step"] and "podman run" in r["next_step"]


def test_the_captured_card_detects_it_again_and_replays_to_the_live_answer(
    shm_stay: str, detected_live: cards.Staged
) -> None:
    """The card has no invocation.container (the operator passed none): it holds the detection
    read itself, and replay's container_detect finds the container in it, reads inside it from
    host.containers, and concludes the live label citing the live lines."""
    assert detected_live.report["where"].startswith(
        f"The server runs in podman container {shm_stay}"
    )
    env = cards.env_for(detected_live.card.parent)
    cards.assert_replays_as_live(detected_live, env, None)
    rep = json.loads(
        cards.pivot(
            env, "investigate", "--replay", str(detected_live.card), "--brain", "rulebook", "--json"
        )
    )
    assert rep["where"].startswith(f"The server runs in podman container {shm_stay} (detected"), rep


def test_over_ssh_the_same_container_is_detected(shm_stay: str) -> None:
    from tests.live.conftest import _sshd

    server = _sshd("root")
    host = SSHHost(
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
        res = TOOLS["container_detect"].call(host, {})
    finally:
        host.close()
    assert res.ok and res.container is not None, res
    assert (res.container.name, res.container.cli) == (shm_stay, "podman")
    assert res.container.cgroup_line.endswith(f"libpod-{res.container.container_id}")


def test_control_a_host_launch_beside_a_container_is_left_to_the_operator(
    shm_stay: str, host_vllm: int
) -> None:
    res = TOOLS["container_detect"].call(LocalHost(), {})
    assert res.container is None, res
    assert res.undecided is not None and shm_stay in res.undecided
    assert f"on the host ([{host_vllm}])" in res.undecided
