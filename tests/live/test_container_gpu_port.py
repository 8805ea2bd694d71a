"""Two staged container failures, live, locally (the real CLI) and over the test sshd as root:

- no GPU passed: a vLLM launch in a container run without `--gpus`; the `nvidia-smi` stand-in
  (tests/fake_bin, real H200 captures) answers on the host, and inside the container there is no
  nvidia-smi and no /dev/nvidia*, so the engine prints CUDA's "Found no NVIDIA driver" and exits;
- port not published: a server ready inside on :8000 in a container run without `-p`, so nothing
  answers on the host.

Each must conclude `bad_launch_argument` with the next step in run-command terms (`--gpus all`,
`-p 8000:8000`), and the card `pivot capture` writes right after must replay to the same label
and cited lines (tests/live/container_cards.py), locally and, for the port, over SSH. These FAIL
in CI when Podman cannot run (tests/strict_skips.py), never skip.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.runner import Runner
from agent.settings import Settings
from tests import containers
from tests.conftest import FAKE_BIN
from tests.live import container_cards as cards
from tools.container_host import ContainerHost
from tools.ssh_host import SSHHost

PIVOT = str(Path(sys.executable).parent / "pivot")


@pytest.fixture(scope="module")
def no_gpu() -> Iterator[str]:
    with containers.container(mode="nogpu", wait_for="exited", as_vllm=True) as name:
        yield name


@pytest.fixture(scope="module")
def unpublished() -> Iterator[str]:
    with containers.container(mode="serve", wait_for="running", as_vllm=True) as name:
        deadline = time.monotonic() + 30
        while "Uvicorn running" not in _logs(name) and time.monotonic() < deadline:
            time.sleep(0.3)
        yield name


def _logs(name: str) -> str:
    res = subprocess.run(["podman", "logs", name], capture_output=True, text=True)
    return res.stdout + res.stderr


def investigate(tmp_path: Path, name: str, symptom: str) -> dict[str, Any]:
    env = {**os.environ, "PIVOT_HOME": str(tmp_path / "pivot-home")}
    env["PATH"] = f"{FAKE_BIN}{os.pathsep}{env.get('PATH', '')}"  # the host's GPUs: the H200
    env.pop("PIVOT_DATABASE_URL", None)
    out = subprocess.run(
        [PIVOT, "investigate", symptom, "--local", "--container", name]
        + ["--brain", "rulebook", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def over_ssh(tmp_path: Path, name: str, symptom: str) -> Any:
    from tests.live.conftest import _sshd

    server = _sshd("root")  # its PATH has the fake nvidia-smi first (tests/sshd.py)
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
    runner = Runner(Settings(home=tmp_path / "ssh-home"))
    try:
        return runner.start(ContainerHost(outer, name), symptom, brain="rulebook")
    finally:
        runner.close()
        outer.close()


@pytest.fixture(scope="module")
def no_gpu_live(tmp_path_factory: pytest.TempPathFactory, no_gpu: str) -> cards.Staged:
    """The live answer (the host's GPUs: the H200 stand-in) and the card captured right after."""
    tmp = tmp_path_factory.mktemp("nogpu")
    env = cards.env_for(tmp, FAKE_BIN)
    return cards.live_and_capture(tmp, env, ["--local"], no_gpu, "the server exits at startup")


@pytest.fixture(scope="module")
def unpublished_live(tmp_path_factory: pytest.TempPathFactory, unpublished: str) -> cards.Staged:
    tmp = tmp_path_factory.mktemp("port")
    env = cards.env_for(tmp, FAKE_BIN)
    return cards.live_and_capture(
        tmp, env, ["--local"], unpublished, "nothing answers on localhost:8000"
    )


def test_no_gpu_passed_is_the_run_commands_missing_gpus(
    no_gpu: str, no_gpu_live: cards.Staged
) -> None:
    smi = subprocess.run([str(FAKE_BIN / "nvidia-smi"), "-L"], capture_output=True, text=True)
    assert "H200" in smi.stdout  # the host sees its GPUs
    inside = subprocess.run(
        ["podman", "logs", no_gpu], capture_output=True, text=True
    ).stdout  # and the engine inside saw none
    assert "Found no NVIDIA driver" in inside
    r = no_gpu_live.report
    assert r["root_cause"] == "bad_launch_argument", r
    assert any("Found no NVIDIA driver" in e["line"] for e in r["evidence"])
    assert "--gpus all" in r["next_step"]
    assert "cuda_driver_mismatch" in r["ruled_out"] or "dependency_error" in r["ruled_out"]


def test_no_gpu_passed_over_ssh(tmp_path: Path, no_gpu: str) -> None:
    rep = over_ssh(tmp_path, no_gpu, "the server exits at startup")
    assert rep.root_cause == "bad_launch_argument" and "--gpus all" in rep.next_step, rep


def test_port_not_published_is_the_run_commands_missing_p(
    unpublished: str, unpublished_live: cards.Staged
) -> None:
    with pytest.raises(OSError):  # nothing answers on the host
        socket.create_connection(("127.0.0.1", 8000), timeout=2).close()
    r = unpublished_live.report
    assert r["status"] == "concluded" and r["root_cause"] == "bad_launch_argument", r
    assert any("Uvicorn running on http://0.0.0.0:8000" in e["line"] for e in r["evidence"])
    assert r["next_step"].startswith(f"Container {unpublished} publishes no host port for 8000")
    assert "-p 8000:8000" in r["next_step"]


@pytest.mark.parametrize("failure", ["no_gpu", "unpublished"])
def test_the_captured_card_replays_to_the_live_answer(
    failure: str, request: pytest.FixtureRequest
) -> None:
    """`pivot capture --container NAME` right after the live run (the host's nvidia-smi, the
    record's ports and devices, the log, the reads inside the running one); `pivot eval` of the
    card concludes the live label citing the live lines."""
    live: cards.Staged = request.getfixturevalue(f"{failure}_live")
    cards.assert_replays_as_live(
        live, cards.env_for(live.card.parent), request.getfixturevalue(failure)
    )


def test_port_not_published_card_over_ssh_replays_to_the_live_answer(
    tmp_path: Path, unpublished: str
) -> None:
    """Over the test sshd as root (its PATH has the H200 stand-in): `pivot investigate --host`
    and `pivot capture --host` with --container read inside the running container through SSH."""
    from tests.live.conftest import _sshd
    from tests.live.staging import pivot_env

    env = pivot_env(tmp_path, _sshd("root"), "gpu-ctr")
    env.pop("PIVOT_DATABASE_URL", None)
    over = cards.live_and_capture(
        tmp_path, env, ["--host", "gpu-ctr"], unpublished, "nothing answers on port 8000"
    )
    assert over.report["root_cause"] == "bad_launch_argument", over.report
    assert "-p 8000:8000" in over.report["next_step"]
    cards.assert_replays_as_live(over, env, unpublished)


def test_control_a_published_port_is_not_this_failure(tmp_path: Path) -> None:
    with containers.container(
        "-p", "18123:8000", mode="serve", wait_for="running", as_vllm=True
    ) as n:
        deadline = time.monotonic() + 30
        while "Uvicorn running" not in _logs(n) and time.monotonic() < deadline:
            time.sleep(0.3)
        r = investigate(tmp_path, n, "is it up?")
    assert r["root_cause"] != "bad_launch_argument", r
    assert "-p 8000:8000" not in r["next_step"]
