"""Rules and knowledge after blind round 33 (scored before any change), each with a control
that must not trigger it: a fix is a general form or fact, never an answer keyed to one card."""

from __future__ import annotations

from typing import Any

from agent.launch import companion_logs
from agent.runner import investigate
from agent.settings import Settings
from agent.signatures import scan
from cards.model import IncidentCard
from cards.replay import ReplayHost
from tests.agent.test_rules import PS_HEADER
from tools import processes
from tools.container_host import ContainerHost

INSPECT = (
    '[{"Id": "2f6c91d04b8e", "Name": "/%s", "State": {"Status": "running", "Running": true, '
    '"OOMKilled": false, "Pid": 7725, "ExitCode": 0, "RestartCount": 0}, '
    '"Image": "example/serving:1", "HostConfig": {"ShmSize": 17179869184}}]'
)
#: a wrapper no engine registry knows (a gRPC backend), and the engine as a multiprocessing
#: spawn child, which the log names as (EngineCore pid=3085)
WRAPPED_PS = PS_HEADER + (
    "root           1  0.0  0.0   4364  3124 ?        Ss   10:50   0:00 /bin/bash /entrypoint.sh\n"
    "root          18  0.4  0.3 2871616 410112 ?      Sl   10:50   0:21 /gateway run --models /m\n"
    "root        2911  1.1 32.6 96011264 41062400 ?   Sl   11:04   4:52 /venv/bin/python "
    "/backends/backend.py --addr 127.0.0.1:40275\n"
    "root        3085  2.3 12.9 61243392 16251904 ?   Sl   11:04   9:37 /venv/bin/python -c "
    "from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=11, pipe_handle=15) "
    "--multiprocessing-fork\n"
)
WRAPPED_LOG = (
    "(EngineCore pid=3085) INFO 07-08 11:04:19 [core.py:102] Initializing a V1 LLM engine "
    "(v0.24.0) with config: model='org/model', tensor_parallel_size=1\n"
    "(EngineCore pid=3085) INFO 07-08 11:05:58 [gpu_model_runner.py:4012] Model loading took "
    "43.17 GiB memory and 97.402188 seconds\n"
)


def _card(ps: str, logs: str, name: str = "serving", files: dict[str, str] | None = None,
          log: str | None = None) -> IncidentCard:  # fmt: skip
    inv: dict[str, Any] = {"container": name}
    if log:
        inv["log"] = log
    return IncidentCard.model_validate(
        {
            "id": "ctr", "title": "t", "source": "test", "engine": "other",
            "symptom": "is it stuck or dead?", "invocation": inv,
            "host": {
                "ps": PS_HEADER, "dmesg": "",
                "containers": {
                    name: {"inspect": INSPECT % name, "logs": logs, "ps": ps,
                           "files": files or {}},
                },
            },
        }
    )  # fmt: skip


def test_a_containers_processes_are_shown_whole_so_a_log_named_engine_is_alive() -> None:
    card = _card(WRAPPED_PS, WRAPPED_LOG)
    inside = processes.run(ContainerHost(ReplayHost(card), "serving"), processes.Args())
    assert {p.pid for p in inside.processes} == {1, 18, 2911, 3085}
    # control: the same table read on a machine is filtered to what the registry knows
    host_card = IncidentCard.model_validate(
        {"id": "h", "title": "t", "source": "test", "engine": "other", "symptom": "s",
         "host": {"ps": WRAPPED_PS}}
    )  # fmt: skip
    outside = processes.run(ReplayHost(host_card), processes.Args())
    assert 3085 not in {p.pid for p in outside.processes}


def test_the_engine_a_containers_log_names_is_not_called_gone(tmp_path: Any) -> None:
    card = _card(WRAPPED_PS, WRAPPED_LOG)
    rep = investigate(
        ContainerHost(ReplayHost(card), "serving"), card.symptom,
        settings=Settings(home=tmp_path / "h"),
    )  # fmt: skip
    assert rep.root_cause not in ("killed_externally", "shm_too_small", "host_oom_killed")
    assert "is gone" not in rep.summary


ATTN = (
    "ValueError: No valid attention backend found for cuda with AttentionSelectorConfig("
    "head_size=576, dtype=torch.bfloat16, kv_cache_dtype=auto, block_size=64, use_mla=True, "
    "has_sink=False, use_sparse=True). Reasons: {%s}."
)


def test_no_attention_backend_for_the_gpus_compute_capability_is_the_arch() -> None:
    line = ATTN % (
        "FLASHMLA_SPARSE: [compute capability not supported], TRITON_MLA: [sparse not supported]"
    )
    assert [m.label for m in scan([line])] == ["unsupported_gpu_arch"]
    # control: every backend rejected for a setting (the KV-cache dtype), not for this GPU
    setting = ATTN % "FLASH_ATTN: [kv_cache_dtype not supported], TRITON_ATTN: [sink not supported]"
    assert "unsupported_gpu_arch" not in [m.label for m in scan([setting])]


RAY_OOM = (
    "[2026-08-27 14:28:47,204 E 142 142] (raylet) node_manager.cc:3093: 1 Workers (tasks / "
    "actors) killed due to memory pressure (OOM), 0 Workers crashed due to other reasons at node "
    "(ID: 3f1b9e0c, IP: 10.99.0.2) over the last time period.\n"
)
RAY_PS = PS_HEADER + (
    "root           1  0.0  0.0   4324  3300 ?        Ss   14:19   0:00 bash /root/start.sh\n"
    "root         142  0.3  0.1 2051820 151220 ?      Sl   14:19   0:07 /usr/local/lib/python3.12/"
    "dist-packages/ray/core/src/ray/raylet/raylet --node_ip_address=10.99.0.2\n"
    "root         310  0.0  1.9 21487300 2377040 ?    Sl   14:20   0:41 /usr/bin/python3 "
    "/usr/local/bin/vllm serve /models/m --tensor-parallel-size 2 "
    "--distributed-executor-backend ray\n"
    "root         412  0.0  1.2 38822012 1486632 ?    Sl   14:20   0:33 VLLM::EngineCore\n"
)
RAYLET = "/tmp/ray/session_latest/logs/raylet.out"


def test_a_ray_launchs_raylet_log_is_read_with_its_own() -> None:
    found = [RAYLET, "/tmp/other/job.log"]
    assert companion_logs([RAY_PS], found) == [RAYLET]
    # control: no raylet on the box, no Ray log taken for the launch's
    assert companion_logs([PS_HEADER + "root 1 0 0 1 1 ? S 1 0:00 python -m vllm\n"], found) == []


def test_rays_memory_monitor_kill_explains_a_loader_that_stopped(tmp_path: Any) -> None:
    log = "/srv/app/head.log"
    stopped = (
        "(EngineCore pid=412) (RayWorkerProc pid=2215) Loading safetensors checkpoint shards:  57% "
        "Completed | 68/120 [07:14<05:41,  6.57s/it]\n"
    )
    card = _card(RAY_PS, "", files={log: stopped, RAYLET: RAY_OOM}, log=log)
    rep = investigate(
        ContainerHost(ReplayHost(card), "serving"), card.symptom, logs=[log],
        settings=Settings(home=tmp_path / "h"),
    )  # fmt: skip
    assert rep.root_cause == "host_oom_killed", rep.summary
    assert any("killed due to memory pressure" in e.line for e in rep.evidence)


OURS = "60e34b0e7b82e091835469a3bab6bf76326e9cc665a02126c84f691ec9a7e3b5"
THEIRS = "7d2a91c04e5b3c1f0a9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a291807f6e5d4"


def _kill(cid: str) -> list[str]:
    return [
        "[Thu Dec  3 14:57:52 2026] python3.11 invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), "
        "order=0, oom_score_adj=0",
        "[Thu Dec  3 14:57:52 2026] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),"
        f"cpuset=libpod-{cid},mems_allowed=0,oom_memcg=/libpod_parent/libpod-{cid},"
        f"task_memcg=/libpod_parent/libpod-{cid},task=python3.11,pid=10053,uid=0",
        "[Thu Dec  3 14:57:52 2026] Memory cgroup out of memory: Killed process 10053 (python3.11) "
        "total-vm:282984kB, anon-rss:261292kB, file-rss:6464kB, shmem-rss:0kB, UID:0",
    ]


def _obs(kill: list[str]) -> list[dict[str, Any]]:
    return [
        {"id": "o1", "tool": "container_inspect", "ok": True, "args": {}, "lines": [],
         "data": {"container": {"id": OURS, "name": "serving"}}},
        {"id": "o2", "tool": "dmesg", "ok": True, "args": {}, "lines": kill, "data": {}},
    ]  # fmt: skip


def test_a_kernel_kill_in_another_containers_cgroup_is_a_bystander() -> None:
    from agent.kills import bystander_kills

    assert set(bystander_kills(_obs(_kill(THEIRS)))) == set(_kill(THEIRS))
    # control: the same kill in the investigated container's own cgroup stays a candidate
    assert not bystander_kills(_obs(_kill(OURS)))
