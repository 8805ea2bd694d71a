"""A kill line counts for the launch only when its victim is a member or it happened during the
launch's life (agent/kills.py); on a busy box, another job's old OOM kill decides nothing."""

from __future__ import annotations

import pytest

from agent import kills
from tests.agent.test_rules import GPU_CLEAN, PS_IDLE, _card, _run

LOG = (
    "INFO 11-30 10:00:01 [api_server.py:1034] vLLM API server version 0.8.3\n"
    "INFO 11-30 10:00:05 [model_runner.py:1041] Starting to load model /models/llama-70b...\n"
    "INFO 11-30 10:01:40 [weight_utils.py:255] Using model weights format ['*.safetensors']\n"
)
OLD_KILL = (
    "[Sun Nov 30 09:10:22 2026] Memory cgroup out of memory: Killed process 88121 (python3) "
    "total-vm:9123456kB, anon-rss:8123456kB, file-rss:0kB, shmem-rss:0kB, UID:1003\n"
)
OUR_KILL = (
    "[Sun Nov 30 10:02:10 2026] Out of memory: Killed process 5120 (python3) "
    "total-vm:91234560kB, anon-rss:81234560kB, file-rss:0kB, shmem-rss:0kB, UID:0\n"
)


@pytest.mark.parametrize(
    ("dmesg", "ours"),
    [
        (OLD_KILL, False),  # 50 minutes before the launch's first line: another job's
        (OUR_KILL, True),  # during the launch, of a python process: counts
        (
            "[Sun Nov 30 10:02:10 2026] Out of memory: Killed process 777 (chrome) total-vm:1kB\n",
            True,  # during the launch: time alone keeps it (a browser may have been the victim)
        ),
    ],
)
def test_kill_lines_belong_by_member_or_time(dmesg: str, ours: bool) -> None:
    obs = [
        {
            "id": "o1",
            "tool": "log_tail",
            "ok": True,
            "args": {"path": "/l"},
            "lines": LOG.splitlines(),
            "data": {},
        },
        {
            "id": "o2",
            "tool": "dmesg",
            "ok": True,
            "args": {},
            "lines": dmesg.splitlines(),
            "data": {},
        },
    ]
    foreign = kills.bystander_kills(obs)  # type: ignore[arg-type]
    assert (dmesg.strip() not in foreign) is ours, foreign


def test_a_victim_the_log_names_is_the_launchs_whatever_the_clock() -> None:
    log = ["[2023-10-30 14:13:02] Worker PID: 2584 Worker exit type: SYSTEM_ERROR"]
    kill = "[Mon Oct 30 06:14:35 2023] Out of memory: Killed process 2584 (ray::RayWorker) total-vm:1kB"
    obs = [
        {
            "id": "o1",
            "tool": "log_tail",
            "ok": True,
            "args": {"path": "/l"},
            "lines": log,
            "data": {},
        },
        {"id": "o2", "tool": "dmesg", "ok": True, "args": {}, "lines": [kill], "data": {}},
    ]
    assert kills.bystander_kills(obs) == {}  # type: ignore[arg-type]


def test_another_jobs_old_kill_does_not_make_a_dead_launch_host_oom(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The launch is gone with no error of its own; the only kill on the box is another user's
    container, 50 minutes before this launch began: not host_oom_killed."""
    card = _card({"/var/log/vllm/server.log": LOG}, PS_IDLE, GPU_CLEAN, dmesg=OLD_KILL)
    r = _run(card, tmp_path)
    assert r.root_cause != "host_oom_killed", r.summary
    assert not any("88121" in e.line for e in r.evidence)


def test_control_the_launchs_own_kill_is_host_oom(tmp_path) -> None:  # type: ignore[no-untyped-def]
    card = _card({"/var/log/vllm/server.log": LOG}, PS_IDLE, GPU_CLEAN, dmesg=OLD_KILL + OUR_KILL)
    r = _run(card, tmp_path)
    assert r.root_cause == "host_oom_killed", r.summary
    assert any("Killed process 5120" in e.line for e in r.evidence)
    assert not any("88121" in e.line for e in r.evidence)


@pytest.mark.parametrize(
    ("line", "kill"),
    [
        ('            "OOMKilled": false,', False),  # docker inspect of a container NOT killed
        ('            "OOMKilled": true,', True),
        ("      Reason:       OOMKilled", True),
    ],
)
def test_oomkilled_false_is_not_a_kill(line: str, kill: bool) -> None:
    from agent import guardrails, proof

    assert bool(guardrails.OOM_KILL.search(line)) is kill
    assert (proof.fatal_kind(line) is not None) is kill


def test_a_cuda_images_own_env_passes_no_gpu_under_runc() -> None:
    """CUDA images set NVIDIA_VISIBLE_DEVICES=all in their Env; without the nvidia runtime or a
    device request the container sees no GPU (the commonest 'forgot --gpus')."""
    from tools.container_inspect import _gpu_devices

    env = {"NVIDIA_VISIBLE_DEVICES": "all"}
    assert _gpu_devices({"Runtime": "runc", "DeviceRequests": None}, env)[0] is False
    assert _gpu_devices({"Runtime": "nvidia"}, env)[0] is True
    req = {"Runtime": "runc", "DeviceRequests": [{"Driver": "nvidia", "Count": -1}]}
    assert _gpu_devices(req, {})[0] is True
