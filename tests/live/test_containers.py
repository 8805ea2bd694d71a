"""Real Podman containers that fail the way servers in containers fail, investigated through the
real CLI (`pivot investigate --container NAME`): locally and over the test sshd. Each live answer
is captured right after (`pivot capture --container NAME`) and its card must replay to the same
label and cited lines (tests/live/container_cards.py).

Each container runs the stand-in engine of tests/containers.py: one fills a 64 MB /dev/shm
(`--shm-size 64m`), one is killed by its `-m 256m` limit, one restarts in a loop. These FAIL in
CI when Podman cannot run (tests/strict_skips.py), never skip.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests import containers
from tests.live import container_cards as cards
from tools.container_host import ContainerHost
from tools.local_host import LocalHost
from tools.registry import TOOLS

PIVOT = str(Path(sys.executable).parent / "pivot")


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


@pytest.fixture(scope="module")
def loop_container() -> Any:
    with containers.container("--restart", "on-failure", mode="crash", wait_for="restarted") as n:
        yield n


def staged(tmp: Path, name: str) -> cards.Staged:
    """The live answer with --container and the card captured right after it."""
    return cards.live_and_capture(tmp, cards.env_for(tmp), ["--local"], name)


@pytest.fixture(scope="module")
def shm_live(tmp_path_factory: pytest.TempPathFactory, shm_container: str) -> cards.Staged:
    return staged(tmp_path_factory.mktemp("shm"), shm_container)


@pytest.fixture(scope="module")
def oom_live(tmp_path_factory: pytest.TempPathFactory, oom_container: str) -> cards.Staged:
    return staged(tmp_path_factory.mktemp("oom"), oom_container)


@pytest.fixture(scope="module")
def loop_live(tmp_path_factory: pytest.TempPathFactory, loop_container: str) -> cards.Staged:
    return staged(tmp_path_factory.mktemp("loop"), loop_container)


def test_shm_64m_is_shm_too_small_in_run_command_terms(shm_live: cards.Staged) -> None:
    r = shm_live.report
    assert r["root_cause"] == "shm_too_small", r
    lines = cited(r)
    assert any("Error while creating shared memory segment" in ln for ln in lines), lines
    assert "--shm-size 16g" in r["next_step"] and "--ipc=host" in r["next_step"]


def test_memory_limit_kill_is_host_oom_killed(oom_live: cards.Staged) -> None:
    r = oom_live.report
    assert r["root_cause"] == "host_oom_killed", r
    lines = cited(r)
    assert any('"ExitCode": 137' in ln or '"OOMKilled": true' in ln for ln in lines), lines
    assert "-m 64g" in r["next_step"] and "256 MiB" in r["next_step"]
    assert "add RAM" not in r["next_step"] and "swap/RAM" not in r["next_step"]


def test_restart_loop_keeps_the_earlier_instances_log(
    loop_container: str, loop_live: cards.Staged
) -> None:
    res = TOOLS["container_logs"].call(
        ContainerHost(LocalHost(), loop_container), {"previous": True}
    )
    assert res.ok and res.restart_count >= 2, res
    assert any("max_model_len (999999)" in e.text for e in res.entries)
    assert all(e.previous for e in res.entries)
    r = loop_live.report
    assert r["root_cause"] == "bad_launch_argument", r
    assert any("User-specified max_model_len (999999)" in ln for ln in cited(r))
    assert "restarted" in r["next_step"] and "previous instance's log" in r["next_step"]


@pytest.mark.parametrize("failure", ["shm", "oom", "loop"])
def test_the_captured_card_replays_to_the_live_answer(
    failure: str, request: pytest.FixtureRequest
) -> None:
    """`pivot capture --container NAME` right after the live run; `pivot eval` of that card
    concludes the live label citing the live lines (a restart loop's cause is in an earlier
    instance's log, so the card keeps the whole log with timestamps)."""
    live: cards.Staged = request.getfixturevalue(f"{failure}_live")
    name = request.getfixturevalue(
        f"{failure}_container" if failure != "loop" else "loop_container"
    )
    cards.assert_replays_as_live(live, cards.env_for(live.card.parent), name)


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


def test_over_ssh_the_captured_card_replays_to_the_live_answer(
    tmp_path: Path, oom_container: str, oom_live: cards.Staged
) -> None:
    """The same over the test sshd as root: `pivot investigate --host` and `pivot capture
    --host` with --container, then `pivot eval`; the same answer as live over SSH, and as local."""
    from tests.live.conftest import _sshd
    from tests.live.staging import pivot_env

    env = pivot_env(tmp_path, _sshd("root"), "gpu-ctr")
    env.pop("PIVOT_DATABASE_URL", None)
    over = cards.live_and_capture(tmp_path, env, ["--host", "gpu-ctr"], oom_container)
    assert over.report["root_cause"] == oom_live.report["root_cause"] == "host_oom_killed"
    assert "podman run -m 64g" in over.report["next_step"], over.report["next_step"]
    cards.assert_replays_as_live(over, env, oom_container)


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


@pytest.mark.parametrize(("mode", "grows"), [("slow-load", True), ("serve", False)])
def test_watching_a_running_containers_log_tells_loading_from_quiet(mode: str, grows: bool) -> None:
    """container_logs watch_s through real podman: a loader printing a shard every 2 s is seen
    to grow within the window; a server quiet after its ready line is not (control)."""
    with containers.container(mode=mode, wait_for="running", as_vllm=True) as name:
        time.sleep(1.0)  # past the start lines
        res = TOOLS["container_logs"].call(ContainerHost(LocalHost(), name), {"watch_s": 5})
        assert res.ok and res.watched, res.lines()
        assert res.grew is grows, res.lines()
        assert (res.waited_s < 5) if grows else (res.waited_s >= 5), res.waited_s


def test_a_running_container_without_ps_is_read_through_the_machines_table() -> None:
    """A slim image has no ps (here /usr/bin/ps is masked): the machine's process table shows the
    container's server under the pids nvidia-smi names, said so, through real podman."""
    with containers.container(
        "-v", "/dev/null:/usr/bin/ps:ro", mode="serve", wait_for="running", as_vllm=True
    ) as name:
        time.sleep(1.0)
        host = ContainerHost(LocalHost(), name)
        assert not host.run("ps -e").ok  # the image really cannot list its processes
        res = TOOLS["processes"].call(host, {})
        assert res.ok and res.read_outside, res.lines()
        pid = containers.inspect(name)["State"]["Pid"]
        assert any(p.pid == pid or p.server for p in res.processes), res.lines()
        assert any("vllm.entrypoints.openai.api_server" in p.command for p in res.processes)


def test_a_stopped_containers_log_tee_d_on_the_machine_is_read_there(tmp_path: Path) -> None:
    """`docker run ... | tee /path/node0.log`: the container has stopped and never had the file;
    the same path on the machine is the log the operator named."""
    log = tmp_path / "node0.log"
    log.write_text("NCCL WARN socketStartConnect: Connect to 192.168.0.104<46551> failed\n")
    with containers.container(mode="crash", wait_for="exited") as name:
        tail = ContainerHost(LocalHost(), name).read_tail(str(log))
        assert tail.error is None and b"socketStartConnect" in tail.data, tail


def test_a_stopped_containers_machine_reads_answer_from_the_machine() -> None:
    """The container has exited: its ports, disk and memory reads cannot run inside it, and the
    machine's own answer (the ports it published, its disks) is what there is, named by host.
    Control: its process table is not the machine's; that read still says it is not running."""
    with containers.container(mode="crash", wait_for="exited") as name:
        box = ContainerHost(LocalHost(), name)
        for tool in ("ports", "disk"):
            res = TOOLS[tool].call(box, {})
            assert res.error is None and res.host == LocalHost().name, (tool, res.lines())
        from tools.container_host import machine_shared

        assert machine_shared("cat /proc/driver/nvidia/version") and machine_shared("uname -r")
        assert not machine_shared("cat /etc/os-release") and not machine_shared("env")
        kernel = box.run("uname -r")
        assert kernel.ok and kernel.stdout.strip() == os.uname().release, kernel
        ps = TOOLS["processes"].call(box, {})
        assert ps.error and "not running" in ps.error, ps.lines()


def test_an_engine_under_a_name_no_registry_knows_is_alive_in_its_container(
    tmp_path: Path,
) -> None:
    """A wrapper runs the engine as a `python -c` child whose log lines name its pid
    (`(EngineCore pid=N)`) and which goes quiet after three shards: through real podman, the container's table is
    read whole and the engine is alive, never "gone" (the rulebook had said the server was gone
    and guessed a cause from that absence)."""
    with containers.container(mode="wrapped", wait_for="running") as name:
        time.sleep(3.0)  # past the first shard lines
        res = TOOLS["processes"].call(ContainerHost(LocalHost(), name), {})
        assert any(
            p.command.startswith(containers.python_in_image() + " -c") for p in res.processes
        )
        live = staged(tmp_path, name)
        r = live.report
        assert r["root_cause"] not in ("killed_externally", "host_oom_killed", "shm_too_small"), r
        assert "is gone" not in r["summary"], r["summary"]


def test_a_gpu_containers_own_nvidia_smi_answers_when_the_machine_has_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The machine has no nvidia-smi on its PATH (a cluster's bastion, a node whose driver tools
    are not on PATH); the container carries one, as the NVIDIA runtime mounts it in: the GPU read
    runs inside instead of failing. Control: a container without one still fails, said so."""
    import shutil

    root = Path(__file__).resolve().parents[2]
    smi = tmp_path / "nvidia-smi"
    smi.write_text(
        f'#!/usr/bin/sh\nexec {containers.python_in_image()} -S /fake/nvidia-smi "$@"\n',
        encoding="utf-8",
    )
    smi.chmod(0o755)
    podman = containers.need_podman()
    path = ":".join(
        dict.fromkeys([os.path.dirname(podman), "/usr/sbin", "/usr/bin", "/sbin", "/bin"])
    )
    monkeypatch.setenv("PATH", path)
    outer_has_one = shutil.which("nvidia-smi", path=path) is not None
    query = "nvidia-smi --query-gpu=index,name,memory.used,memory.total --format=csv,noheader"
    mounts = (
        "-v", f"{smi}:/usr/local/bin/nvidia-smi:ro",
        "-v", f"{root / 'tests' / 'fake_bin' / 'nvidia-smi'}:/fake/nvidia-smi:ro",
        "-v", f"{root / 'tests' / 'fixtures' / 'h200'}:/fixtures:ro",
        "-e", "PIVOT_FAKE_GPU_FIXTURES=/fixtures",
    )  # fmt: skip
    with containers.container(*mounts, mode="serve", wait_for="running") as name:
        res = ContainerHost(LocalHost(), name).run(query)
        assert res.ok and "H200" in res.stdout, (res.error, res.stderr, res.stdout[:300])
        gpu = TOOLS["gpu_status"].call(ContainerHost(LocalHost(), name), {})
        assert gpu.ok and gpu.gpus, gpu.lines()
    with containers.container(mode="serve", wait_for="running") as bare:
        res = ContainerHost(LocalHost(), bare).run(query)
        assert res.ok is outer_has_one, (res.error, res.stdout[:200])
