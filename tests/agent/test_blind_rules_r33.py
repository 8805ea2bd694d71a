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
    assert any("the container's whole table is shown" in ln for ln in inside.lines())
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
    # a busy box's newest-first listing that did not reach it: Ray's default place
    assert companion_logs([RAY_PS], ["/tmp/other/job.log"]) == [
        "/tmp/ray/session_latest/logs/raylet.out"
    ]
    # control: another user's Ray cluster beside an mp launch says nothing of it
    mp = RAY_PS.replace("--distributed-executor-backend ray", "--distributed-executor-backend mp")
    assert companion_logs([mp], found) == []
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


def test_a_watch_capped_below_what_was_asked_says_so(monkeypatch: Any) -> None:
    from tools.log_window import cap_note

    monkeypatch.setenv("PIVOT_LIVENESS_MAX_S", "30")
    assert "caps a watch at 30 s" in cap_note(120, 30)
    assert "asked 120 s" in cap_note(120, 30)
    # control: a watch given what it asked (or more, for a slow bar) says nothing more
    assert cap_note(20, 20) == "" and cap_note(None, 30) == "" and cap_note(120, 180) == ""


#: a CRI runtime's `inspect` (crictl): no docker-style State, so it says nothing of running
CRI_INSPECT = '{"status": {"id": "9f1c", "metadata": {"name": "vllm"}}, "info": {"pid": 4242}}'
TP2_PS = PS_HEADER + (
    "root           1  0.3  0.6 11824400 1601324 ?    Ssl  12:54   0:07 python3 -m "
    "vllm.entrypoints.openai.api_server --model /models/m --tensor-parallel-size 2\n"
    "root         512  0.0  0.5 13990212 1390016 ?    Sl   12:54   0:04 VLLM::EngineCore\n"
    "root         820  0.0  0.9 30218704 2411880 ?    Sl   12:55   0:09 VLLM::Worker_TP0\n"
    "root         958  0.0  0.9 30220112 2409332 ?    Sl   12:55   0:09 VLLM::Worker_TP1\n"
)
NCCL_THEN_WAITING = (
    "(EngineCore pid=512) INFO 08-09 20:54:55 [core.py:98] Initializing a V1 LLM engine "
    "(v0.25.0) with config: model='/models/m', tensor_parallel_size=2\n"
    "(Worker pid=820) INFO 08-09 20:55:03 [parallel_state.py:1607] world_size=2 rank=0 "
    "local_rank=0 distributed_init_method=tcp://127.0.0.1:51789 backend=nccl\n"
    "pod-1:820:1027 [0] NCCL INFO comm 0x5d41e2c0 rank 0 nRanks 2 nNodes 1 localRanks 2\n"
    "pod-1:820:1027 [0] NCCL INFO Channel 01/02 : 0 1\n"
    "(APIServer pid=1) DEBUG 08-09 20:55:10 [v1/engine/utils.py:1262] Waiting for 1 local, "
    "0 remote core engine proc(s) to start.\n"
    "(APIServer pid=1) DEBUG 08-09 21:25:20 [v1/engine/utils.py:1262] Waiting for 1 local, "
    "0 remote core engine proc(s) to start.\n"
)
LOADING_THEN_WAITING = NCCL_THEN_WAITING.replace(
    "pod-1:820:1027 [0] NCCL INFO Channel 01/02 : 0 1\n",
    "pod-1:820:1027 [0] NCCL INFO Channel 01/02 : 0 1\n(Worker pid=820) Loading safetensors "
    "checkpoint shards:  40% Completed | 4/10 [06:10<09:15, 92.5s/it]\n",
)
#: the launch's two GPUs idle at NCCL's buffers; a co-tenant's GPU at work beside them
SMI = (
    "0, NVIDIA L20, 561 MiB, 45507 MiB, 46068 MiB, 0 %\n"
    "1, NVIDIA L20, 561 MiB, 45507 MiB, 46068 MiB, 0 %\n"
    "2, NVIDIA L20, 31240 MiB, 14828 MiB, 46068 MiB, 57 %\n"
)


def _stalled_pod(log: str) -> IncidentCard:
    timed = [{"at": 0, "text": log}, {"at": 600, "text": log}]
    return IncidentCard.model_validate(
        {
            "id": "pod", "title": "t", "source": "test", "engine": "vllm",
            "symptom": "our TP=2 vLLM pod never becomes ready", "invocation": {"container": "vllm"},
            "host": {
                "nvidia_smi": [{"at": 0, "text": SMI}, {"at": 600, "text": SMI}],
                "containers": {
                    "vllm": {"inspect": CRI_INSPECT, "logs": timed,
                             "ps": [{"at": 0, "text": TP2_PS}, {"at": 600, "text": TP2_PS}]},
                },
            },
        }
    )  # fmt: skip


def test_vllms_engine_startup_wait_notice_is_a_wait_not_the_phase() -> None:
    from agent.rules import proof

    assert proof.wait_message(
        "(APIServer pid=1) DEBUG 08-09 21:25:20 [v1/engine/utils.py:1262] Waiting for 1 local, "
        "0 remote core engine proc(s) to start."
    )
    assert not proof.wait_message("pod-1:820:1027 [0] NCCL INFO Channel 01/02 : 0 1")  # control


def test_a_pod_silent_after_nccl_init_behind_wait_notices_is_an_inferred_stall(
    tmp_path: Any,
) -> None:
    """A CRI record that names no state, a co-tenant's GPU at 57 %, the engine's front end
    printing its wait notice: the container's log is still watched, the GPUs too, and the
    stall after NCCL's set-up is inferred (capped), never a kill from a probe."""
    card = _stalled_pod(NCCL_THEN_WAITING)
    rep = investigate(
        ContainerHost(ReplayHost(card), "vllm"),
        card.symptom,
        settings=Settings(home=tmp_path / "h"),
    )
    assert rep.root_cause == "nccl_failure", rep.summary
    assert rep.confidence <= 0.6


def test_a_pod_silent_after_a_shard_line_is_not_called_an_nccl_stall(tmp_path: Any) -> None:
    card = _stalled_pod(LOADING_THEN_WAITING)  # control: the last phase is a slow load
    rep = investigate(
        ContainerHost(ReplayHost(card), "vllm"),
        card.symptom,
        settings=Settings(home=tmp_path / "h"),
    )
    assert rep.root_cause != "nccl_failure", rep.summary


def test_a_scripts_log_under_tilde_is_in_its_owners_home() -> None:
    from agent.launch import script_log_targets

    got = script_log_targets("python serve.py > ~/ft/logs/serve.log 2>&1\n", "/home/kng/ft/run.sh")
    assert got == [("serve.log", ["/home/kng/ft/logs"])]
    # control: a relative target is still resolved against the script's directory and above
    rel = script_log_targets("python serve.py > logs/serve.log 2>&1\n", "/home/kng/ft/run.sh")
    assert rel[0][1][0] == "/home/kng/ft/logs"


def test_nvidia_smis_own_failure_is_reported_not_an_unrecorded_fallback() -> None:
    from tools import gpu_status

    def host(extra: dict[str, Any]) -> ReplayHost:
        return ReplayHost(
            IncidentCard.model_validate(
                {"id": "g", "title": "t", "source": "test", "engine": "other", "symptom": "s",
                 "host": {"ps": PS_HEADER, **extra}}
            )
        )  # fmt: skip

    mismatch = "Failed to initialize NVML: Driver/library version mismatch\n"
    res = gpu_status.run(host({"nvidia_smi": mismatch}), gpu_status.Args())
    assert res.status == "no_driver" and "Driver/library version mismatch" in (res.error or "")
    # control: nothing recorded at all is not read, never a driver fault
    assert gpu_status.run(host({}), gpu_status.Args()).status == "not_read"


def test_a_sidecars_term_signal_line_is_a_stop_from_outside() -> None:
    from agent.rules import proof

    assert proof.external_end(
        '{"logger":"queueproxy","message":"Received TERM signal, attempting to gracefully '
        'shutdown servers."}'
    )
    assert not proof.external_end("Received a request signal from the client")  # control


PEER_GONE = [
    "(Worker_TP0 pid=212) INFO 05-19 14:21:40 [parallel_state.py:1411] world_size=2 rank=0 "
    "local_rank=0 distributed_init_method=tcp://10.0.0.1:29501 backend=nccl",
    "(Worker_TP0 pid=212) ERROR 05-19 14:24:58 [multiproc_executor.py:990] Traceback (most "
    "recent call last):",
    "(Worker_TP0 pid=212) ERROR 05-19 14:24:58 [multiproc_executor.py:990]     "
    "torch.distributed.barrier(group=self.cpu_group)",
    "(Worker_TP0 pid=212) ERROR 05-19 14:24:58 [multiproc_executor.py:990] RuntimeError: "
    "[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer "
    "[10.0.0.2]:29562",
    "(EngineCore pid=145) ERROR 05-19 14:24:59 [core.py:1098] EngineCore failed to start.",
]


def _gate(label: str, cited: list[int], lines: list[str]) -> list[str]:
    from agent.rules.guardrails import check_conclusion
    from agent.state import Action, Observation
    from tests.agent.test_proof import _facts

    obs = [Observation(id="o1", tool="log_tail", args={"path": "/srv/head.log"}, ok=True,
                       lines=lines, data={}, round=0)]  # fmt: skip
    action = Action(
        kind="conclude", label=label, confidence=0.8,
        evidence=[{"observation": "o1", "line": lines[i]} for i in cited],
    )  # fmt: skip
    return check_conclusion(action, obs, _facts(alive=False))


def test_a_survivors_connection_closed_by_peer_is_no_proof_of_the_link() -> None:
    problems = _gate("nccl_failure", [3, 4, 2], PEER_GONE)
    assert problems and "survivor" in problems[0], problems
    # control: the rank's own NCCL error (not a peer gone) still proves it
    own = [*PEER_GONE[:3], PEER_GONE[3].replace(
        "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection "
        "closed by peer [10.0.0.2]:29562",
        "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, "
        "unhandled system error, NCCL version 2.28.9",
    ), PEER_GONE[4]]  # fmt: skip
    assert not [p for p in _gate("nccl_failure", [3, 4], own) if "survivor" in p]


def test_an_earlier_attempts_engine_gone_is_gone_though_a_retry_runs() -> None:
    from agent.facts import Facts
    from agent.rules.guardrails import check_conclusion
    from agent.state import Action, Observation

    lines = [
        "(EngineCore pid=412) INFO 07-08 10:57:09 flashinfer.jit: Loading JIT ops: fused_moe_120",
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core "
        "proc(s): {}",
        '11:01AM ERR Server error error="could not load model" latency=10m0.4s status=500',
        "(EngineCore pid=3085) INFO 07-08 11:05:58 [gpu_model_runner.py:4012] Model loading "
        "took 43.17 GiB memory and 97.402188 seconds",
    ]
    obs = [Observation(id="o1", tool="container_logs", args={}, ok=True, lines=lines, data={},
                       round=0)]  # fmt: skip
    f = Facts(ps_available=True, server_pids=[3085], server_main_pids=[3085])
    f._ps_recs = {3085: {"pid": 3085, "command": "python -c spawn_main"}}

    def gate(cited: list[int]) -> list[str]:
        action = Action(
            kind="conclude", label="killed_externally", confidence=0.7,
            evidence=[{"observation": "o1", "line": lines[i]} for i in cited],
        )  # fmt: skip
        return [p for p in check_conclusion(action, obs, f) if "needs the server process" in p]

    assert not gate([0, 2])  # the first attempt's engine core (412) is gone
    assert gate([3])  # control: the retry's live engine (3085) is no process gone
    # control: a log none of whose pids the table has (another pid namespace: a host's table
    # beside a container's log) proves nothing gone
    obs[0] = Observation(id="o1", tool="container_logs", args={}, ok=True, lines=lines[:3],
                         data={}, round=0)  # fmt: skip
    assert gate([0, 2])


def test_a_hub_cache_never_listed_is_unknown_not_absent(tmp_path: Any) -> None:
    from tools import download_progress
    from tools.local_host import LocalHost

    card = IncidentCard.model_validate(
        {"id": "d", "title": "t", "source": "test", "engine": "vllm", "symptom": "s",
         "host": {"ps": PS_HEADER}}
    )  # fmt: skip
    args = download_progress.Args(model="org/model", caches=["/data/hf/hub"])
    res = download_progress.run(ReplayHost(card), args)
    assert not res.ok and "could not be listed" in (res.error or ""), res.error
    # control: a cache directory that really is not there is "no hub cache"
    live = download_progress.run(
        LocalHost(), download_progress.Args(model="org/model", caches=[str(tmp_path / "none")])
    )
    assert not live.ok and "no hub cache" in (live.error or ""), live.error


def test_a_record_not_in_dockers_shape_says_its_state_is_unknown() -> None:
    from tools import container_inspect

    cri = container_inspect.Result(
        host="h", cli="docker", container=container_inspect.ContainerState()
    )
    assert any("not in docker's inspect shape" in ln for ln in cri.lines())
    # control: a docker record with a state prints it
    ran = container_inspect.Result(
        host="h",
        cli="docker",
        container=container_inspect.ContainerState(name="v", status="running", running=True),
    )
    assert any("# container v (docker): running" in ln for ln in ran.lines())


FREE_LESS = [
    "(EngineCore_DP0 pid=167) INFO 09-09 10:11:27 [core.py:69] Initializing a V1 LLM engine",
    "(EngineCore_DP0 pid=167) ERROR 09-09 10:11:48 [core.py:586] ValueError: Free memory on "
    "device (67.24/79.25 GiB) on startup is less than desired GPU memory utilization (0.9, "
    "71.33 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.",
]


def test_a_fraction_set_for_a_shared_gpu_may_be_cited_on_vllms_free_memory_line() -> None:
    assert not [p for p in _gate("bad_launch_argument", [1], FREE_LESS) if "known signs" in p]
    # control: the same line proves no broken dependency
    assert [p for p in _gate("dependency_error", [1], FREE_LESS) if "known signs" in p]
