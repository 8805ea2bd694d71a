"""Cause over symptom and the new hang/start-up proofs, each on a small host made up here (not a
shipped card), each with the control that must NOT trigger it."""

from __future__ import annotations

from typing import Any

from agent.runner import investigate
from agent.settings import Settings
from cards.model import IncidentCard
from cards.replay import ReplayHost

PS_HEADER = "USER         PID %CPU %MEM    VSZ   RSS TTY      STAT START   TIME COMMAND\n"
PS_IDLE = PS_HEADER + "root        412  0.0  0.0   7232  3968 pts/0    Ss   09:01   0:00 -bash\n"
GPU_CLEAN = "0, NVIDIA H100 80GB HBM3, 0 MiB, 81008 MiB, 81559 MiB, 0 %\n"
SG_START = (
    "[2026-03-02 10:00:01] server_args=ServerArgs(model_path='/models/qwen', host='0.0.0.0', "
    "port=30000, tp_size=1)\n"
    "[2026-03-02 10:00:40] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)\n"
)
PROXIED = (
    '[2026-03-02 10:00:41] http://10.9.8.7:3128 "GET http://0.0.0.0:30000/get_model_info HTTP/1.1" '
    "403 3582\n"
)
WARMUP_FAIL = (
    "[2026-03-02 10:02:41] Initialization failed. warmup error: Traceback (most recent call last):\n"
    '  File "/x/sglang/srt/entrypoints/http_server.py", line 1234, in _wait_and_warmup\n'
    "AssertionError: res=<Response [403]>, res.text='Access Denied'\n"
)


def _card(engine: str, symptom: str, **host: Any) -> IncidentCard:
    return IncidentCard.model_validate(
        {
            "id": "made-up",
            "title": "t",
            "source": "test",
            "engine": engine,
            "symptom": symptom,
            "host": host,
        }
    )


def _run(card: IncidentCard, tmp_path) -> Any:  # type: ignore[no-untyped-def]
    return investigate(ReplayHost(card), card.symptom, settings=Settings(home=tmp_path / "h"))


def _cited(r: Any) -> list[str]:
    return [e.line for e in r.evidence]


def test_a_proxy_that_catches_the_servers_own_warmup_is_the_launch_setting(tmp_path) -> None:  # type: ignore[no-untyped-def]
    env = "http_proxy=http://10.9.8.7:3128\nno_proxy=localhost,127.0.0.1\n"
    log = {"/srv/sglang.log": SG_START + PROXIED + WARMUP_FAIL}
    r = _run(
        _card(
            "sglang",
            "it dies two minutes after start",
            ps=PS_IDLE,
            nvidia_smi=GPU_CLEAN,
            env=env,
            files=log,
        ),
        tmp_path / "a",
    )
    assert r.root_cause == "bad_launch_argument", r.summary
    assert "http_proxy=http://10.9.8.7:3128" in _cited(r)
    assert "no_proxy=localhost,127.0.0.1,0.0.0.0" in r.next_step
    # control: 0.0.0.0 is in no_proxy, so the 403 is not the proxy's doing: no proxy cause
    env_ok = "http_proxy=http://10.9.8.7:3128\nno_proxy=localhost,127.0.0.1,0.0.0.0\n"
    r2 = _run(
        _card(
            "sglang",
            "it dies two minutes after start",
            ps=PS_IDLE,
            nvidia_smi=GPU_CLEAN,
            env=env_ok,
            files=log,
        ),
        tmp_path / "b",
    )
    assert "http_proxy=http://10.9.8.7:3128" not in _cited(r2)
    assert "no_proxy=" not in r2.next_step


def test_iommu_dma_faults_name_the_broken_p2p_path_of_a_spinning_collective(tmp_path) -> None:  # type: ignore[no-untyped-def]
    gpus = "".join(
        f"{i}, GeForce GTX 1080 Ti, 364 MiB, 10815 MiB, 11178 MiB, 100 %\n" for i in range(2)
    )
    ps = (
        PS_HEADER
        + "bob      14871  199  0.3 35419116 412408 pts/0 Rl+  11:05  39:42 ./build/all_reduce_perf -b 8 -e 128M -g 2\n"
    )
    log = {
        "/home/bob/ar.log": "# nThread 1 nGpus 2\nbox:14871:14871 [0] NCCL INFO Ring 00 : 0[0] -> 1[1] via P2P/IPC\nbox:14871:14871 [0] NCCL INFO Launch mode Group/CGMD\n"
    }
    dmar = "[Wed Oct  2 11:05:31 2019] DMAR: [DMA Write] Request device [03:00.0] fault addr f8000000 [fault reason 05] PTE Write access is not set\n"
    r = _run(
        _card(
            "other",
            "all_reduce_perf prints the header then nothing",
            ps=ps,
            nvidia_smi=gpus,
            files=log,
            dmesg=dmar,
        ),
        tmp_path / "a",
    )
    assert r.root_cause == "nccl_failure", r.summary
    assert dmar.strip() in _cited(r)
    assert "iommu" in r.next_step.lower()


def test_a_growing_download_is_still_starting_and_a_stalled_one_is_not_proof(tmp_path) -> None:  # type: ignore[no-untyped-def]
    blobs = "/root/.cache/huggingface/hub/models--org--big/blobs/"
    ls0 = "total 8\n-rw-r--r-- 1 root root 4625017896 Nov 14 10:07 aaaa\n-rw-r--r-- 1 root root 1372585984 Nov 14 10:24 bbbb.incomplete\n"
    ls1 = ls0.replace("1372585984 Nov 14 10:24", "1572585984 Nov 14 10:25")
    ps = PS_HEADER + (
        "root         1  0.3  0.4 12398612 2213340 ?    Ssl  10:02   0:41 /usr/bin/python3 /usr/local/bin/vllm serve org/big --port 8000\n"
        "root       188  4.1  0.6 18772004 3410952 ?    Sl   10:03   0:58 VLLM::EngineCore\n"
    )
    log = {
        "/var/log/vllm/server.log": "(EngineCore_DP0 pid=188) INFO 11-14 10:03:20 [gpu_model_runner.py:2338] Starting to load model org/big...\n(EngineCore_DP0 pid=188) INFO 11-14 10:03:21 [weight_utils.py:348] Using model weights format ['*.safetensors']\n"
    }
    gpu = "0, NVIDIA A100-SXM4-40GB, 517 MiB, 40019 MiB, 40960 MiB, 0 %\n"
    grow = {f"ls -l {blobs}": [{"at": 0, "text": ls0}, {"at": 100, "text": ls1}]}
    r = _run(
        _card(
            "vllm",
            "silent for twenty minutes, hung?",
            ps=ps,
            nvidia_smi=gpu,
            files=log,
            commands=grow,
        ),
        tmp_path / "a",
    )
    assert r.root_cause == "still_starting", r.summary
    assert any(line.endswith("bbbb.incomplete") for line in _cited(r))
    stall = {f"ls -l {blobs}": ls0}
    r2 = _run(
        _card(
            "vllm",
            "silent for twenty minutes, hung?",
            ps=ps,
            nvidia_smi=gpu,
            files=log,
            commands=stall,
        ),
        tmp_path / "b",
    )
    assert r2.root_cause != "still_starting"


def test_pinned_gpus_under_a_ready_multi_rank_server_get_the_liveness_check(tmp_path) -> None:  # type: ignore[no-untyped-def]
    ps = PS_HEADER + (
        "llm      61202  1.2  0.9 19824412 2415760 pts/2 Sl+ 16:19   0:21 python -m sglang.launch_server --model-path /models/q --tp 2 --port 30000\n"
        "llm      61311  101  2.1 62770128 5560316 pts/2 Rl+ 16:20   5:02 sglang::scheduler_TP0\n"
        "llm      61312  101  2.1 62770120 5558872 pts/2 Rl+ 16:20   5:01 sglang::scheduler_TP1\n"
    )
    log = "[2025-03-10 16:21:25] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)\n[2025-03-10 16:21:32 TP0] Prefill batch. #new-seq: 1, #new-token: 7, #cached-token: 0,\n"
    pinned = "".join(f"{i}, NVIDIA L20, 40617 MiB, 5399 MiB, 46068 MiB, 100 %\n" for i in range(2))
    idle = pinned.replace("100 %", "0 %")
    r = _run(
        _card(
            "sglang",
            "one prefill line then nothing",
            ps=ps,
            nvidia_smi=pinned,
            files={"/home/llm/s.log": log},
        ),
        tmp_path / "a",
    )
    assert r.root_cause == "nccl_failure", r.summary
    # control: the same ready server with idle GPUs is a healthy idle server, not a hang
    r2 = _run(
        _card(
            "sglang",
            "one prefill line then nothing",
            ps=ps,
            nvidia_smi=idle,
            files={"/home/llm/s.log": log},
        ),
        tmp_path / "b",
    )
    assert r2.root_cause != "nccl_failure"


def test_a_server_on_another_port_is_another_launch_not_ours_alive(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Our launch (port 30000) was SIGKILLed mid-load; a second server on port 31000 runs as
    another user. Its fds are unreadable, but its port says it is not this launch."""
    from agent.facts import derive
    from agent.observe import run_many

    log = (
        "[2026-03-02 10:00:01] server_args=ServerArgs(model_path='/models/qwen', port=30000, tp_size=1)\n"
        "[2026-03-02 10:00:05] Load weight begin. avail mem=78.83 GB\n"
        "Loading safetensors checkpoint shards:  40% Completed | 2/5 [00:08<00:12,  4.1s/it]\n"
    )
    other = PS_IDLE + (
        "alice     9120 99.0  3.1 9123456 4123456 ?      Sl   09:02   2:11 python3 -m sglang.launch_server --model-path /models/other --port 31000\n"
    )
    card = _card(
        "sglang",
        "my server vanished while loading",
        ps=other,
        nvidia_smi=GPU_CLEAN,
        files={"/srv/s.log": log},
        dmesg="",
    )
    host = ReplayHost(card)
    obs = run_many(host, [("processes", {}), ("log_tail", {"path": "/srv/s.log"})], 1, 0)
    f = derive(obs)
    assert f.server_alive is False and 9120 in f.other_launch_pids, f.server_pids
    r = _run(card, tmp_path)
    assert r.root_cause == "killed_externally", r.summary
    # control: the same process (our model, our port) is ours, and alive
    same = other.replace("--port 31000", "--port 30000").replace("/models/other", "/models/qwen")
    obs2 = run_many(
        ReplayHost(_card("sglang", "s", ps=same, nvidia_smi=GPU_CLEAN, files={"/srv/s.log": log})),
        [("processes", {}), ("log_tail", {"path": "/srv/s.log"})],
        1,
        0,
    )
    assert derive(obs2).server_alive is True


def test_a_misspelled_visible_devices_is_the_cause_of_the_oom_it_allowed(tmp_path) -> None:  # type: ignore[no-untyped-def]
    oom = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
        "capacity of 79.10 GiB of which 1.02 GiB is free. Process 7001 has 68.55 GiB memory in use.\n"
    )
    script = "#!/bin/bash\nexport CUDA_VISIBILE_DEVICES=1\npython3 -m sglang.launch_server --model-path /m --port 30000\n"
    files = {
        "/srv/launch.sh": script,
        "/srv/server.log": "Traceback (most recent call last):\n" + oom,
    }
    r = _run(
        _card(
            "sglang",
            "OOM at start-up on an empty GPU?",
            ps=PS_IDLE,
            nvidia_smi=GPU_CLEAN,
            files=files,
        ),
        tmp_path / "a",
    )
    assert r.root_cause == "bad_launch_argument", r.summary
    assert "export CUDA_VISIBILE_DEVICES=1" in _cited(r)
    # control: spelled right, the same OOM is an OOM
    files_ok = {**files, "/srv/launch.sh": script.replace("VISIBILE", "VISIBLE")}
    r2 = _run(
        _card(
            "sglang",
            "OOM at start-up on an empty GPU?",
            ps=PS_IDLE,
            nvidia_smi=GPU_CLEAN,
            files=files_ok,
        ),
        tmp_path / "b",
    )
    assert r2.root_cause != "bad_launch_argument"


def test_an_undefined_cu_symbol_is_an_old_driver_and_a_mangled_one_is_not(tmp_path) -> None:  # type: ignore[no-untyped-def]
    def log(sym: str) -> dict[str, str]:
        return {
            "/srv/trt.log": "Traceback (most recent call last):\n"
            '  File "/usr/lib/python3/dist-packages/tensorrt_llm/__init__.py", line 32, in <module>\n'
            f"ImportError: /usr/local/lib/python3.10/dist-packages/tensorrt_llm/libs/libth_common.so: undefined symbol: {sym}\n"
        }

    r = _run(
        _card(
            "trtllm",
            "trtllm-serve fails to import",
            ps=PS_IDLE,
            nvidia_smi=GPU_CLEAN,
            files=log("cuKernelGetName"),
        ),
        tmp_path / "a",
    )
    assert r.root_cause == "cuda_driver_mismatch", r.summary
    r2 = _run(
        _card(
            "trtllm",
            "trtllm-serve fails to import",
            ps=PS_IDLE,
            nvidia_smi=GPU_CLEAN,
            files=log("_ZN3c104cuda20CUDACachingAllocator9allocatorE"),
        ),
        tmp_path / "b",
    )
    assert r2.root_cause != "cuda_driver_mismatch"


def test_nccl_on_loopback_for_ranks_on_two_hosts_is_the_interface_setting(tmp_path) -> None:  # type: ignore[no-untyped-def]
    lines = (
        "node-a:2101:2101 [0] NCCL INFO Bootstrap : Using lo:127.0.0.1<0>\n"
        "node-a:2101:2101 [0] NCCL INFO NET/Socket : Using [0]lo:127.0.0.1<0>\n"
        "node-b:3301:3301 [0] NCCL INFO Bootstrap : Using lo:127.0.0.1<0>\n"
        "node-a:2101:2180 [0] NCCL INFO comm 0x55d0 rank 0 nranks 2 cudaDev 0 busId 1000 - Init START\n"
    )
    env = "NCCL_SOCKET_IFNAME=^docker0\n"
    r = _run(
        _card(
            "other",
            "two-node job hangs at init",
            ps=PS_IDLE,
            nvidia_smi=GPU_CLEAN,
            env=env,
            files={"/srv/job.log": lines},
        ),
        tmp_path / "a",
    )
    assert r.root_cause == "bad_launch_argument", r.summary
    assert any("lo:127.0.0.1" in c for c in _cited(r))
    # control: one host with a GPU per rank, loopback is fine (single-node jobs use it all the time)
    single = lines.replace("node-b:3301:3301", "node-a:2102:2102")
    r2 = _run(
        _card(
            "other",
            "two-node job hangs at init",
            ps=PS_IDLE,
            nvidia_smi=GPU_CLEAN + GPU_CLEAN.replace("0,", "1,", 1),
            env=env,
            files={"/srv/job.log": single},
        ),
        tmp_path / "b",
    )
    assert r2.root_cause != "bad_launch_argument"


# -- round 11's general rules ------------------------------------------------------------------------
WATCHDOG = (
    "[rank0]:[E325 14:10:49.482913201 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective "
    "operation timeout: WorkNCCL(SeqNum=884201, OpType=SEND, NumelIn=7340032, NumelOut=7340032, Timeout(ms)=600000) ran for 600029 milliseconds before timing out.\n"
    "[rank0]:[E325 14:10:49.483281538 ProcessGroupNCCL.cpp:698] [Rank 0] To avoid data inconsistency, we are taking the entire process down.\n"
)
HEALTH = '[2026-03-25 14:11:{s:02d}] INFO:     10.42.7.1:43108 - "GET /health HTTP/1.1" 200 OK\n'


def test_a_dead_scheduler_behind_a_live_health_endpoint_is_the_crash(tmp_path) -> None:  # type: ignore[no-untyped-def]
    ps = PS_HEADER + (
        "root         1  0.4  0.3 28361044 3981220 ?    Ssl  13:31   3:02 python3 -m sglang.launch_server --model-path /m --tp 2 --port 30000\n"
        "root       214  0.0  0.0      0     0 ?        Z    13:31  41:17 [sglang::schedul] <defunct>\n"
        "root       215  0.0  0.0      0     0 ?        Z    13:31  40:55 [sglang::schedul] <defunct>\n"
    )
    log = "[2026-03-25 14:00:41 TP0] Decode batch. #running-req: 37, #token: 51234,\n" + WATCHDOG
    log += "".join(HEALTH.format(s=s) for s in (4, 14, 24, 34))
    gpus = "0, NVIDIA H200, 0 MiB, 143156 MiB, 143771 MiB, 0 %\n1, NVIDIA H200, 0 MiB, 143156 MiB, 143771 MiB, 0 %\n"
    r = _run(
        _card(
            "sglang",
            "requests hang, pods healthy",
            ps=ps,
            nvidia_smi=gpus,
            files={"/var/log/s.log": log},
        ),
        tmp_path / "a",
    )
    assert r.root_cause == "nccl_failure", r.summary
    # what changed: a probe the front-end answers is not the engine's progress; the engine's own
    # lines still are
    from agent.rules import proof

    assert proof.frontend_only(HEALTH.format(s=4))
    assert not proof.frontend_only("[2026-03-25 14:00:41 TP0] Decode batch. #running-req: 37")


def test_an_unresolvable_rendezvous_host_is_the_setting_and_ipv6_alone_is_not(tmp_path) -> None:  # type: ignore[no-untyped-def]
    host = "job-01k72wn5.internal"
    v6 = f"[W1008 23:40:22.781961348 socket.cpp:767] [c10d] The IPv6 network addresses of ({host}, 50745) cannot be retrieved (gai error: -2 - Name or service not known).\n"
    refused = f"[W1008 23:40:22.836678340 socket.cpp:767] [c10d] The client socket has failed to connect to [{host}]:50745 (errno: 22 - Invalid argument).\n"
    env = f"MASTER_ADDR={host}\nMASTER_PORT=50745\n"
    gpu8 = "".join(
        f"{i}, NVIDIA H100 80GB HBM3, 523 MiB, 80519 MiB, 81559 MiB, 0 %\n" for i in range(2)
    )
    log = "rank 0: initializing process group (backend=nccl)\n" + (v6 + refused) * 3
    r = _run(
        _card("torch", "8 ranks sit at init", nvidia_smi=gpu8, env=env, files={"/jobs/w.log": log}),
        tmp_path / "a",
    )
    assert r.root_cause == "bad_launch_argument", r.summary
    assert f"MASTER_ADDR={host}" in _cited(r) and "getent hosts" in r.next_step
    # control: the IPv6 lookup failing alone (the connect works) is torch's harmless warning
    r2 = _run(
        _card(
            "torch",
            "8 ranks sit at init",
            nvidia_smi=gpu8,
            env=env,
            files={"/jobs/w.log": "rank 0: init\n" + v6 * 3},
        ),
        tmp_path / "b",
    )
    assert r2.root_cause != "bad_launch_argument"


def test_rays_memory_monitor_kill_is_a_host_oom(tmp_path) -> None:  # type: ignore[no-untyped-def]
    log = (
        "INFO 09-23 06:11:58 llm_engine.py:207] # GPU blocks: 36214, # CPU blocks: 2730\n"
        "(raylet) [2023-09-23 06:15:07,512 E 20471 20471] (raylet) node_manager.cc:3007: 2 Workers (tasks / actors) killed due to memory pressure (OOM), 0 Workers crashed due to other reasons at node\n"
        "ray.exceptions.RayActorError: The actor died unexpectedly before finishing this task.\n"
    )
    r = _run(
        _card(
            "vllm",
            "workers disappear",
            ps=PS_IDLE,
            nvidia_smi=GPU_CLEAN,
            files={"/home/u/run.log": log},
        ),
        tmp_path,
    )
    assert r.root_cause == "host_oom_killed", r.summary


def test_a_warmup_behind_a_green_health_check_is_still_starting(tmp_path) -> None:  # type: ignore[no-untyped-def]
    log = (
        "[08-05 10:17:52] INFO:     Uvicorn running on http://0.0.0.0:30010 (Press CTRL+C to quit)\n"
        "[08-05 10:17:52] Running server warmup request (1/1), requests will wait until warmup is done\n"
        + "".join(
            f'[08-05 10:18:{s:02d}] INFO:     10.0.12.4:55410 - "GET /health HTTP/1.1" 200 OK\n'
            for s in (0, 10, 20)
        )
    )
    ps = (
        PS_HEADER
        + "root        27 99.0  3.1 9123456 4123456 ?      Sl   10:11  12:11 python3 -m sglang.launch_server --model-path /m --port 30010\n"
    )
    pinned = "0, NVIDIA B300, 201344 MiB, 73568 MiB, 274912 MiB, 100 %\n"
    r = _run(
        _card(
            "sglang",
            "health is green but my request hangs",
            ps=ps,
            nvidia_smi=pinned,
            files={"/var/log/h3.log": log},
        ),
        tmp_path / "a",
    )
    assert r.root_cause == "still_starting", r.summary
    # control: no warm-up phase after "ready": an idle ready server is not "still starting"
    ready = log.replace(
        "[08-05 10:17:52] Running server warmup request (1/1), requests will wait until warmup is done\n",
        "",
    )
    r2 = _run(
        _card(
            "sglang",
            "health is green but my request hangs",
            ps=ps,
            nvidia_smi=pinned.replace("100 %", "0 %"),
            files={"/var/log/h3.log": ready},
        ),
        tmp_path / "b",
    )
    assert r2.root_cause != "still_starting"


def test_eagle_without_a_draft_model_is_the_launch_setting(tmp_path) -> None:  # type: ignore[no-untyped-def]
    args = "[2026-08-26 10:14:02] server_args=ServerArgs(model_path='Qwen/Qwen2.5-0.5B-Instruct', speculative_algorithm='EAGLE3', speculative_draft_model_path={d}, port=30000)\n"
    tb = (
        "[2026-08-26 10:14:14 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/speculative/eagle_worker.py", line 161, in __init__\n'
        "    self.draft_model_runner.model.set_embed(embed)\n"
        "AttributeError: 'Qwen2ForCausalLM' object has no attribute 'set_embed'\n"
    )
    r = _run(
        _card(
            "sglang",
            "it dies at start-up",
            ps=PS_IDLE,
            nvidia_smi=GPU_CLEAN,
            files={"/var/log/q.log": args.format(d="None") + tb},
        ),
        tmp_path / "a",
    )
    assert r.root_cause == "bad_launch_argument" and "speculative_draft_model_path=None" in _cited(
        r
    )
    r2 = _run(
        _card(
            "sglang",
            "it dies at start-up",
            ps=PS_IDLE,
            nvidia_smi=GPU_CLEAN,
            files={"/var/log/q.log": args.format(d="'/m/eagle3'") + tb},
        ),
        tmp_path / "b",
    )
    assert "speculative_draft_model_path=None" not in _cited(r2)


def test_a_single_rank_compiling_with_its_gpu_busy_is_at_work_even_without_ps(tmp_path) -> None:  # type: ignore[no-untyped-def]
    log = (
        "(EngineCore pid=42) INFO 06-20 14:45:37 [compilation/backends.py:1069] Using cache directory: /home/u/.cache/vllm/torch_compile_cache/3fbdd\n"
        "(EngineCore pid=42) INFO 06-20 14:45:52 [compilation/backends.py:339] Compiling a graph for compile range (1, 2048) takes 14.62 s\n"
    )
    busy = "0, NVIDIA H100 80GB HBM3, 63120 MiB, 18097 MiB, 81559 MiB, 38 %\n"
    r = _run(
        _card(
            "vllm", "new pod up but not ready, hung?", nvidia_smi=busy, files={"/tmp/w.log": log}
        ),
        tmp_path / "a",
    )
    assert r.root_cause == "still_starting", r.summary
    # control: the same silence over an idle GPU proves nothing
    r2 = _run(
        _card(
            "vllm",
            "new pod up but not ready, hung?",
            nvidia_smi=busy.replace("38 %", "0 %"),
            files={"/tmp/w.log": log},
        ),
        tmp_path / "b",
    )
    assert r2.root_cause != "still_starting"


# -- round 12: Gloo on loopback across nodes, a bar slower than the watch, a core gone ---------------
GLOO_LO = (
    "[W216 12:58:02.412773291 ProcessGroupGloo.cpp:715] Warning: Unable to resolve hostname to a "
    "(local) address. Using the loopback address as fallback. Manually set the network interface "
    "to bind to with GLOO_SOCKET_IFNAME. (function operator())\n"
)


def _sg_launch(nodes: int) -> str:
    extra = f" --nnodes {nodes} --node-rank 0 --dist-init-addr 10.0.0.1:20000" if nodes > 1 else ""
    return (
        PS_HEADER
        + "root         812  0.6  0.1 13301528 1083452 ?  Sl   12:57   0:09 python3 -m "
        + f"sglang.launch_server --model-path /m --tp 2{extra}\n"
        + "root         894  0.3  0.1 16412340 1204716 ?  Sl   12:57   0:04 sglang::scheduler_TP0\n"
        + "root         895  0.3  0.1 16412340 1204716 ?  Sl   12:57   0:04 sglang::scheduler_TP1\n"
    )


def test_gloo_on_loopback_in_a_two_node_launch_is_the_interface_setting(tmp_path) -> None:  # type: ignore[no-untyped-def]
    log = "[2025-02-16 12:57:49 TP0] Init torch distributed begin.\n" + GLOO_LO
    r = _run(
        _card(
            "sglang",
            "both nodes hang at init",
            ps=_sg_launch(2),
            nvidia_smi=GPU_CLEAN,
            files={"/srv/s.log": log},
        ),
        tmp_path,
    )
    assert r.root_cause in ("bad_launch_argument", "nccl_failure"), r.summary
    assert any("loopback address as fallback" in line for line in _cited(r))
    assert "GLOO_SOCKET_IFNAME" in r.next_step


def test_gloo_on_loopback_on_one_node_is_no_cause(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """One node: every rank is on this host, so loopback reaches them all (a harmless warning)."""
    log = "[2025-02-16 12:57:49 TP0] Init torch distributed begin.\n" + GLOO_LO
    r = _run(
        _card(
            "sglang",
            "it is slow to start",
            ps=_sg_launch(1),
            nvidia_smi=GPU_CLEAN,
            files={"/srv/s.log": log},
        ),
        tmp_path,
    )
    assert not any("loopback address as fallback" in line for line in _cited(r)), r.summary


def _hf_loader(pace: float) -> dict[str, Any]:
    ps = PS_HEADER + (
        "ec2-user    7731  4.1  1.2 61427812 9633412 ?     Dl   10:02   0:16 python serve_hf.py "
        "--model /mnt/models/llama --port 8080\n"
    )
    bar = "".join(
        f"\rLoading checkpoint shards:  {i * 100 // 30:2d}%|#         | {i}/30 "
        f"[{int(i * pace) // 60:02d}:{int(i * pace) % 60:02d}<10:00, {pace:.2f}s/it]"
        for i in range(1, 4)
    )
    log = "2025-02-03 10:02:11,417 INFO serve_hf.py:41 starting server\n" + bar.lstrip("\r") + "\n"
    return {"ps": ps, "nvidia_smi": GPU_CLEAN, "files": {"/srv/hf.log": log}}


def test_a_bar_slower_than_the_watch_is_still_starting_said_inferred(tmp_path) -> None:  # type: ignore[no-untyped-def]
    r = _run(_card("torch", "stuck at 3/30 for minutes, hung?", **_hf_loader(124.0)), tmp_path)
    assert r.root_cause == "still_starting", r.summary
    assert r.confidence <= 0.6 and "inferred" in r.summary
    assert "PIVOT_LIVENESS_MAX_S=" in r.next_step


def test_a_bar_faster_than_the_watch_that_did_not_move_is_not_still_starting(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """At 2 s a step a 30 s silent watch is a stall: the slow-bar inference must not apply."""
    r = _run(_card("torch", "stuck at 3/30 for minutes, hung?", **_hf_loader(2.0)), tmp_path)
    assert r.root_cause != "still_starting", r.summary


SG_DECODE = (
    "[2025-05-26 09:39:58 TP0] Decode batch. #running-req: 14, #token: 21873, token usage: 0.09, "
    "gen throughput (token/s): 611.42, #queue-req: 0\n"
)
SG_HEALTH = '[2025-05-26 09:51:59] INFO:     10.1.1.14:60008 - "GET /health HTTP/1.1" 200 OK\n'
SG_FRONT = PS_HEADER + (
    "root           7  2.1  0.9 14420164 2381204 ?    Sl   08:02   2:41 python3 -m "
    "sglang.launch_server --model-path /m --port 8888\n"
    "root         186  0.1  0.4 9262048 1108436 ?     Sl   08:02   0:09 sglang::detokenizer\n"
)


def test_a_scheduler_gone_under_a_live_front_end_is_named(tmp_path) -> None:  # type: ignore[no-untyped-def]
    r = _run(
        _card(
            "sglang",
            "requests hang, /health is 200",
            ps=SG_FRONT,
            nvidia_smi=GPU_CLEAN,
            files={"/srv/s.log": SG_DECODE + SG_HEALTH * 3},
        ),
        tmp_path,
    )
    assert r.root_cause == "killed_externally", r.summary
    assert "kill 7" in r.next_step


def test_a_scheduler_that_died_of_its_own_error_is_that_error(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Control: a traceback of the core's own is the cause; its absence from ps is the effect."""
    crash = (
        "[2025-05-26 09:40:02 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "/x/sglang/srt/managers/scheduler.py", line 2880, in run_scheduler_process\n'
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
    )
    r = _run(
        _card(
            "sglang",
            "requests hang, /health is 200",
            ps=SG_FRONT,
            nvidia_smi=GPU_CLEAN,
            files={"/srv/s.log": SG_DECODE + crash + SG_HEALTH * 3},
        ),
        tmp_path,
    )
    assert r.root_cause != "killed_externally", r.summary


def _ds_host(mem_each: float) -> dict[str, Any]:
    ps = (
        PS_HEADER
        + (
            "abhay      18719  0.1  0.0 1120348 93412 pts/2   Sl+  14:02   0:00 /usr/bin/python3 -u -m "
            "deepspeed.launcher.launch --world_info=e30= --master_addr=127.0.0.1 infer.py\n"
        )
        + "".join(
            f"abhay      1873{r} 98.2 {mem_each:.1f} 29803716 14318204 pts/2 Rl+ 14:02   1:09 "
            f"/usr/bin/python3 -u infer.py --local_rank={r}\n"
            for r in range(4)
        )
    )
    log = "[2023-05-05 14:02:13,317] [INFO] [launch.py:247:main] dist_world_size=4\n"
    return {
        "ps": ps,
        "nvidia_smi": GPU_CLEAN,
        "dmesg": "[Fri May  5 13:58:02 2023] nvidia-uvm: Loaded the UVM driver.\n",
        "files": {"/home/abhay/ds_run.log": log},
    }


def test_ranks_filling_host_ram_make_the_oom_killer_the_lead_not_a_refuted_cause(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Alive now, 88% of RAM held: a clean kernel log means no kill yet, not never; the report
    names the OOM killer as the lead (not proven: nothing was killed yet)."""
    r = _run(_card("torch", "it dies with -9 after a minute", **_ds_host(22.0)), tmp_path)
    assert r.status == "insufficient_evidence"
    assert "host_oom_killed" in r.next_step and "88%" in r.next_step
    assert "host_oom_killed" not in r.ruled_out


def test_ranks_with_ram_to_spare_leave_the_oom_killer_refuted(tmp_path) -> None:  # type: ignore[no-untyped-def]
    r = _run(_card("torch", "it dies with -9 after a minute", **_ds_host(5.0)), tmp_path)
    assert "host_oom_killed" in r.ruled_out


# -- round 13 -----------------------------------------------------------------------------------------
def test_a_core_missing_from_ps_beside_a_silent_log_is_not_called_gone(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Control for the core-gone rule: a ps without the scheduler proves nothing unless the
    front end is seen answering after the core's last line (a cut ps, a hang)."""
    r = _run(
        _card(
            "sglang",
            "requests hang",
            ps=SG_FRONT,
            nvidia_smi=GPU_CLEAN,
            files={"/srv/s.log": SG_DECODE},
        ),
        tmp_path,
    )
    assert r.root_cause != "killed_externally", r.summary


TRITON_SHM = (
    "I0912 10:02:11.901231 1 model_lifecycle.cc:461] loading: preprocess:1\n"
    "E0912 10:02:12.231557 1 model_lifecycle.cc:597] failed to load 'postprocess' version 1: "
    "Internal: Unable to initialize shared memory key 'triton_python_backend_shm_region_2' to "
    "requested size (67108864 bytes).\n"
    "I0912 10:02:12.301100 1 model_lifecycle.cc:818] successfully loaded 'preprocess'\n"
    "I0912 10:02:12.344512 1 http_server.cc:184] Started Metrics Service at 0.0.0.0:8002\n"
)


def test_one_model_failing_in_a_live_multi_model_server_is_its_cause(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Triton serves on with one model UNAVAILABLE: that model's load failure is not noise."""
    ps = PS_HEADER + (
        "root           1  0.6  1.9 14020112 1302244 ?    Ssl  10:02   0:09 tritonserver "
        "--model-repository=/models\n"
    )
    r = _run(
        _card(
            "trtllm",
            "the second model is UNAVAILABLE",
            ps=ps,
            nvidia_smi=GPU_CLEAN,
            files={"/var/log/triton.log": TRITON_SHM},
        ),
        tmp_path,
    )
    board = {h.label: h for h in r.hypotheses}
    assert r.root_cause == "shm_too_small" or (
        r.hypotheses[0].label == "shm_too_small" and board["shm_too_small"].score >= 3
    ), (r.summary, [(h.label, h.score) for h in r.hypotheses])


def test_an_oom_printed_onto_a_loading_bar_is_a_weights_oom(tmp_path) -> None:  # type: ignore[no-untyped-def]
    line = (
        "Loading weights concurrently:  47%|####      | 667/1417 [00:03<00:05, 139.82it/s]"
        "[07/23/2025-06:37:06] [TRT-LLM] [RANK 1] [E] Error executing load_single_module: "
        "CUDA out of memory. Tried to allocate 126.00 MiB. GPU 0 has a total capacity of "
        "23.53 GiB of which 43.00 MiB is free.\n"
    )
    r = _run(
        _card(
            "trtllm",
            "OOM while loading",
            ps=PS_IDLE,
            nvidia_smi=GPU_CLEAN,
            files={"/srv/trt.log": line},
        ),
        tmp_path,
    )
    board = {h.label: h.score for h in r.hypotheses}
    # the bar the error was printed onto is the phase: weights, not a runtime OOM
    assert board.get("gpu_oom_weights", 0) > 0 >= board.get("cuda_oom_runtime", 0), board


PIP_LOG = (
    "Collecting flash-attn\n"
    "Building wheels for collected packages: flash-attn\n"
    "  Building wheel for flash-attn (setup.py): started\n"
    "  Building wheel for flash-attn (setup.py): still running...\n"
)


def _build_ps(compilers: bool) -> str:
    rows = "root        8812  0.4  0.1 402112 182300 pts/0   S+   01:14   0:02 /usr/bin/python /usr/local/bin/pip install flash-attn\n"
    if compilers:
        rows += "".join(
            f"root        910{i} 99.0  3.4 4902112 4561220 pts/0 R+   01:18   1:51 "
            f"/usr/local/cuda/nvvm/bin/cicc --c++17 -arch compute_80 flash_fwd_{i}.cu\n"
            for i in range(3)
        )
    return PS_HEADER + rows


def test_a_build_whose_compilers_are_at_work_is_never_called_killed(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """No server process, but compilers at 99% CPU beside a log whose last line says the build
    is still running: who writes the log is at work, not dead."""
    r = _run(
        _card(
            "other",
            "the flash-attn build dies",
            ps=_build_ps(True),
            nvidia_smi=GPU_CLEAN,
            files={"/workspace/pip.log": PIP_LOG},
        ),
        tmp_path,
    )
    assert r.root_cause != "killed_externally", r.summary


def test_a_log_whose_writer_is_gone_and_no_build_runs_may_be_called_killed(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Control: nothing at work beside it; the rule above must not block the inference."""
    log = SG_START + "[2026-03-02 10:00:45] Load weight begin. avail mem=78.83 GB\n"
    r = _run(
        _card(
            "sglang",
            "the server vanished",
            ps=PS_IDLE,
            nvidia_smi=GPU_CLEAN,
            dmesg="[Mon Mar  2 09:00:00 2026] nvidia-uvm: Loaded the UVM driver.\n",
            files={"/srv/sglang.log": log},
        ),
        tmp_path,
    )
    assert r.root_cause == "killed_externally", r.summary


GPU_FOUR = "".join(
    f"{i}, NVIDIA GeForce RTX 3060, 1 MiB, 12042 MiB, 12288 MiB, 0 %\n" for i in range(4)
)
OLLAMA_PS = PS_HEADER + (
    "ollama     1422  0.9  0.8 6112004 540112 ?       Ssl  09:10   0:21 /usr/local/bin/ollama serve\n"
)


def _ollama(visible: str, found: int) -> dict[str, Any]:
    log = (
        "May 02 09:41:11 rig ollama[1422]: ggml_cuda_init: found "
        f"{found} CUDA devices:\n"
        "May 02 09:41:14 rig ollama[1422]: llm_load_tensors: offloaded 21/81 layers to GPU\n"
    )
    return {
        "ps": OLLAMA_PS,
        "nvidia_smi": GPU_FOUR,
        "env": f"CUDA_VISIBLE_DEVICES={visible}\n",
        "files": {"/var/log/ollama.log": log},
    }


def test_a_visible_devices_pin_hiding_gpus_is_the_launch_setting(tmp_path) -> None:  # type: ignore[no-untyped-def]
    r = _run(_card("other", "it uses one GPU of four", **_ollama("3", 1)), tmp_path)
    assert r.root_cause == "bad_launch_argument", r.summary
    assert "CUDA_VISIBLE_DEVICES=0,1,2,3" in r.next_step


def test_a_visible_devices_setting_that_lists_what_was_found_hides_nothing_more(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Control: every GPU listed and found; the setting is not a cause."""
    r = _run(_card("other", "it is slow", **_ollama("0,1,2,3", 4)), tmp_path)
    assert r.root_cause != "bad_launch_argument", r.summary


UCX_WARN = (
    "[1745994234.385141] [node:711260:0]     ucp_context.c:1774 UCX  WARN  UCP version is "
    "incompatible, required: 1.18, actual: 1.12 (release 1)\n"
)
SG_READY = "[2025-04-30 14:23:59] The server is fired up and ready to roll!\n"
NIXL_FAIL = (
    "[2025-04-30 14:25:07 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
    '  File "/usr/local/lib/python3.10/dist-packages/nixl/_api.py", line 311, in initialize_xfer\n'
    "    handle = self.agent.createXferReq(op, local, remote, agent, notif, self.backends['UCX'])\n"
    "nixl._bindings.nixlBackendError: NIXL_ERR_BACKEND\n"
)
SG_PROC = PS_HEADER + (
    "root      711077  1.2  0.9 27104332 4812204 pts/1  Sl+  14:23   0:09 python3 -m "
    "sglang.launch_server --model-path /m --port 30000\n"
)


def test_a_library_mismatch_the_server_worked_past_until_it_failed_is_the_cause(tmp_path) -> None:  # type: ignore[no-untyped-def]
    r = _run(
        _card(
            "sglang",
            "the first request kills prefill",
            ps=SG_PROC,
            nvidia_smi=GPU_CLEAN,
            files={"/root/prefill.log": SG_START + UCX_WARN + SG_READY + NIXL_FAIL},
        ),
        tmp_path,
    )
    assert r.root_cause == "dependency_error", r.summary
    assert any("NIXL_ERR_BACKEND" in line for line in _cited(r)), _cited(r)


def test_a_library_mismatch_warning_on_a_server_that_serves_on_is_not_a_cause(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Control: the same warning, then nothing fails: it stays a remark."""
    r = _run(
        _card(
            "sglang",
            "is it healthy?",
            ps=SG_PROC,
            nvidia_smi=GPU_CLEAN,
            files={"/root/prefill.log": SG_START + UCX_WARN + SG_READY},
        ),
        tmp_path,
    )
    assert r.root_cause != "dependency_error", r.summary


def _llama(build: str, cc: str) -> dict[str, Any]:
    ps = PS_HEADER + (
        f"ai        418822  100  3.1 42611284 8203316 pts/2  Rl+  15:20  10:04 /opt/llama/{build}/"
        "llama-server -m /data/q.gguf -ngl 99 --port 8080\n"
    )
    log = (
        f"  Device 0: NVIDIA RTX PRO 6000 Blackwell, compute capability {cc}, VMM: yes\n"
        f"load_backend: loaded CUDA backend from /opt/llama/{build}/libggml-cuda.so\n"
        "main: HTTP server is listening, hostname: 0.0.0.0, port: 8080, http threads: 63\n"
        "load_tensors: offloaded 65/65 layers to GPU\n"
        "common_init_from_params: warming up the model with an empty run - please wait ...\n"
    )
    gpu = "0, NVIDIA RTX PRO 6000 Blackwell Workstation Edition, 19342 MiB, 77884 MiB, 97887 MiB, 0 %\n"
    return {"ps": ps, "nvidia_smi": gpu, "files": {"/home/ai/llama-server.log": log}}


def test_a_gpu_newer_than_the_builds_toolkit_is_the_arch(tmp_path) -> None:  # type: ignore[no-untyped-def]
    r = _run(_card("other", "stuck warming up", **_llama("cuda-12.4", "12.0")), tmp_path)
    assert r.root_cause == "unsupported_gpu_arch", r.summary
    assert "CUDA 12.8" in r.next_step


def test_a_build_that_covers_the_gpu_is_not_blamed(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Control: a CUDA 12.8 build knows compute capability 12.0."""
    r = _run(_card("other", "stuck warming up", **_llama("cuda-12.8", "12.0")), tmp_path)
    assert r.root_cause != "unsupported_gpu_arch", r.summary


VLLM_PS_HEADER = (
    "USER         PID    PPID %CPU %MEM    VSZ   RSS TTY      STAT START   TIME COMMAND\n"
)


def _vllm_orphans(ppid: int, access: bool) -> dict[str, Any]:
    ps = VLLM_PS_HEADER + (
        "svc      2120144       1  0.4  1.1 17731204 2931044 ?   Ssl  08:02   1:12 /opt/venv/bin/python3 "
        "/opt/venv/bin/vllm serve Qwen/Qwen2.5-7B-Instruct --tensor-parallel-size 2\n"
        f"svc      2120280 {ppid:7d}  0.0  2.9 48211476 7700312 ?   Sl   08:02   4:51 VLLM::Worker_TP0\n"
        f"svc      2120281 {ppid:7d}  0.0  2.9 48211476 7694228 ?   Sl   08:02   4:49 VLLM::Worker_TP1\n"
    )
    log = (
        "INFO 07-29 08:02:11 [api_server.py:1805] vLLM API server version 0.10.0\n"
        "INFO:     Application startup complete.\n"
        "INFO 07-29 11:58:20 [loggers.py:118] Engine 000: Avg prompt throughput: 388.9 tokens/s\n"
    ) + ('INFO:     10.0.4.2:40172 - "GET /health HTTP/1.1" 200 OK\n' * 3 if access else "")
    gpu = "".join(f"{i}, NVIDIA L40S, 41862 MiB, 3730 MiB, 46068 MiB, 0 %\n" for i in range(2))
    return {"ps": ps, "nvidia_smi": gpu, "files": {"/var/log/vllm/server.log": log}}


def test_workers_orphaned_under_init_beside_a_live_front_end_mean_the_core_is_gone(
    tmp_path,
) -> None:  # type: ignore[no-untyped-def]
    r = _run(_card("vllm", "completions hang, /health is 200", **_vllm_orphans(1, True)), tmp_path)
    assert r.root_cause == "killed_externally", r.summary
    assert "2120280" in r.next_step  # the orphans hold the GPUs: they are to be stopped too


def test_workers_under_their_parent_are_no_sign_of_a_gone_core(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Control: the same workers with a live parent (the EngineCore, not listed here)."""
    r = _run(
        _card("vllm", "completions hang, /health is 200", **_vllm_orphans(2120201, True)), tmp_path
    )
    assert r.root_cause != "killed_externally", r.summary


# -- host memory from free ------------------------------------------------------------------------
FREE_G = (
    "               total        used        free      shared  buff/cache   available\n"
    "Mem:             503         {used}           3           0          20          {avail}\n"
    "Swap:              0           0           0\n"
)


def test_free_showing_ram_nearly_all_held_keeps_the_oom_killer_the_lead(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """ps %MEM says little here (5% each), but free says 97% is held: a clean kernel log means
    no kill yet; the free row is what the report cites."""
    host = {**_ds_host(5.0), "commands": {"free -g": FREE_G.format(used=480, avail=15)}}
    r = _run(_card("torch", "it dies with -9 after a minute", **host), tmp_path)
    assert "host_oom_killed" not in r.ruled_out, r.summary
    assert "host_oom_killed" in r.next_step and "97%" in r.next_step, r.next_step


def test_free_with_ram_available_leaves_the_oom_killer_refuted(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Control: page cache is not pressure (used is high, available too)."""
    host = {**_ds_host(5.0), "commands": {"free -g": FREE_G.format(used=60, avail=420)}}
    r = _run(_card("torch", "it dies with -9 after a minute", **host), tmp_path)
    assert "host_oom_killed" in r.ruled_out, r.summary


# -- round 15 -----------------------------------------------------------------------------------
def _compiling(worker: bool) -> dict[str, Any]:
    ps = PS_HEADER + (
        "svc         6448 99.6  6.8 61021584 8974212 ?     Rl   14:16  23:51 VLLM::EngineCore\n"
        "svc         4120  1.0  0.6 13455512 812304 ?      Sl   14:15   0:13 /opt/venv/bin/python3 "
        "/opt/venv/bin/vllm serve m --port 8000\n"
    )
    if worker:
        ps += (
            "svc         6610 96.1  0.9 4821156 1180440 ?     R    14:23  15:52 /usr/bin/python3 "
            "/opt/venv/lib/python3.12/site-packages/torch/_inductor/compile_worker/__main__.py "
            "--pickler=torch._inductor.compile_worker.subproc_pool.SubprocPickler --kind=fork "
            "--workers=32 --parent=6448\n"
        )
    log = (
        "(EngineCore_DP0 pid=6448) INFO 02-12 14:22:52 [gpu_model_runner.py:3659] Model loading "
        "took 31.72 GiB memory and 402.118374 seconds\n"
        "(EngineCore_DP0 pid=6448) INFO 02-12 14:23:06 [backends.py:703] Dynamo bytecode "
        "transform time: 13.91 s\n"
    )
    gpu = "0, NVIDIA H100 80GB HBM3, 33164 MiB, 48065 MiB, 81559 MiB, 0 %\n"
    return {"ps": ps, "nvidia_smi": gpu, "files": {"/var/log/vllm/serve.log": log}}


def test_torch_compiles_worker_pool_busy_under_a_silent_core_is_still_starting(tmp_path) -> None:  # type: ignore[no-untyped-def]
    r = _run(_card("vllm", "no log line for 15 minutes, hung?", **_compiling(True)), tmp_path)
    assert r.root_cause == "still_starting", r.summary
    assert any("compile_worker" in line for line in _cited(r)), _cited(r)


def test_a_silent_core_with_no_compiler_at_work_is_not_called_compiling(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Control: the same silence and the same last line, nothing building: not proven."""
    r = _run(_card("vllm", "no log line for 15 minutes, hung?", **_compiling(False)), tmp_path)
    assert not any("compile_worker" in line for line in _cited(r))
    assert r.status != "concluded" or r.root_cause != "still_starting", r.summary


def _ray_left(actor: bool) -> dict[str, Any]:
    ps = PS_HEADER + (
        "ray         3377  0.3  0.0 2291044 398804 ?      Sl   21:02   0:06 /opt/venv/lib/python3.12/"
        "site-packages/ray/core/src/ray/raylet/raylet --node_ip_address=10.0.0.11\n"
        "ray         3390  0.2  0.0 2291044 298804 ?      Sl   21:02   0:04 /opt/venv/lib/python3.12/"
        "site-packages/ray/core/src/ray/gcs/gcs_server --log_dir=/tmp/ray/session_latest/logs\n"
    )
    if actor:
        ps += "ray         4410 97.2 13.0 301882112 102934420 ? Rl  21:06   3:58 ray::RayWorkerWrapper.execute_method\n"
    log = (
        "INFO 06-05 21:06:19 [core.py:93] Initializing a V1 LLM engine (v0.22.1) with config: "
        "model='m', tensor_parallel_size=1, distributed_executor_backend=ray\n"
        "(RayWorkerWrapper pid=4410) INFO 06-05 21:07:02 [gpu_model_runner.py:2418] Starting to "
        "load model m...\n"
    )
    return {"ps": ps, "nvidia_smi": GPU_CLEAN, "files": {"/var/log/vllm/serve.log": log}}


def test_a_ray_clusters_daemons_do_not_keep_a_dead_launch_alive(tmp_path) -> None:  # type: ignore[no-untyped-def]
    r = _run(_card("vllm", "the server vanished", **_ray_left(False)), tmp_path)
    assert "killed_externally" not in r.ruled_out, r.summary
    assert not any("raylet" in line or "gcs_server" in line for line in _cited(r)), _cited(r)


def test_a_ray_actor_of_the_launch_still_counts_as_alive(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Control: the vLLM worker actor is alive, so the launch is."""
    r = _run(_card("vllm", "the server vanished", **_ray_left(True)), tmp_path)
    assert "killed_externally" in r.ruled_out, r.summary


CICC = (
    "root       51228 99.3  0.4 1480312 1211000 ?       R    09:19   3:12 /usr/local/cuda/nvvm/bin/"
    "cicc --c++17 --orig_src_file_name /src/cpp/kernels/moe_gemm/moe_gemm_kernels_bf16_bf16.cu\n"
)
BUILD_LOG = (
    "#14 [wheel 4/5] RUN python3 scripts/build_wheel.py --clean --trt_root /usr/local/tensorrt\n"
    "#14 11.03 -- Build files have been written to: /src/tensorrt_llm/cpp/build\n"
    "#14 1079.3 [ 17%] Building CUDA object tensorrt_llm/kernels/CMakeFiles/kernels_src.dir/"
    "moe_gemm_kernels_bf16_bf16.cu.o\n"
)


def test_a_build_whose_compiler_is_at_work_is_still_starting_without_a_server(tmp_path) -> None:  # type: ignore[no-untyped-def]
    host = {"ps": PS_HEADER + CICC, "nvidia_smi": GPU_CLEAN, "files": {"/b/build.log": BUILD_LOG}}
    r = _run(_card("trtllm", "the build sits at 17% for 20 minutes, hung?", **host), tmp_path)
    assert r.root_cause == "still_starting", r.summary
    assert any("cicc" in line for line in _cited(r)), _cited(r)


def test_a_busy_compiler_beside_a_dead_servers_log_is_someone_elses_job(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Control: the log is a server's that stopped (no build step), a compiler runs elsewhere."""
    log = (
        "INFO 06-05 21:06:12 [__init__.py:245] vLLM version 0.22.1\n"
        "INFO 06-05 21:07:02 [gpu_model_runner.py:2418] Starting to load model m...\n"
    )
    host = {"ps": PS_HEADER + CICC, "nvidia_smi": GPU_CLEAN, "files": {"/v/serve.log": log}}
    r = _run(_card("vllm", "the server is gone, why?", **host), tmp_path)
    assert r.root_cause != "still_starting", r.summary


def _orphan_scheduler(ppid: int) -> dict[str, Any]:
    """A new launch died binding its port; a scheduler of an earlier launch holds GPU 0."""
    ps = VLLM_PS_HEADER + (
        f"runner    418822 {ppid:7d}  0.9  2.1 93817216 18211040 ?   Sl   02:05   0:41 "
        "sglang::scheduler_TP0\n"
        "runner    431207       1  0.3  0.0  24812 14420 ?        S    03:12   0:00 python3 "
        "/ci/run_suite.py --suite per-commit-1-gpu\n"
    )
    log = SG_START.replace(
        "10:00:40] INFO:     Uvicorn running",
        "10:00:40] ERROR:    [Errno 98] "
        "error while attempting to bind on address ('0.0.0.0', 30000): "
        "address already in use\n[2026-03-02 10:00:40] INFO:     Uvicorn x",
    )
    apps = "pid, process_name, used_gpu_memory [MiB]\n418822, sglang::scheduler_TP0, 201338 MiB\n"
    return {
        "ps": ps,
        "nvidia_smi": "0, NVIDIA H100 80GB HBM3, 79000 MiB, 2559 MiB, 81559 MiB, 0 %\n",
        "files": {"/ci/logs/server.log": log},
        "commands": {
            "nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv": apps
        },
    }


def test_a_scheduler_orphaned_under_init_is_a_leftover_not_the_server(tmp_path) -> None:  # type: ignore[no-untyped-def]
    r = _run(
        _card("sglang", "the next launch cannot start, why?", **_orphan_scheduler(1)), tmp_path
    )
    assert r.root_cause == "stale_gpu_process", r.summary
    assert "418822" in r.next_step and "orphan" in r.next_step, r.next_step


def test_a_scheduler_whose_parent_lives_is_not_called_a_leftover(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Control: the same scheduler under another parent is part of some launch."""
    r = _run(
        _card("sglang", "the next launch cannot start, why?", **_orphan_scheduler(5)), tmp_path
    )
    assert r.root_cause != "stale_gpu_process", r.summary


def test_a_scheduler_under_a_live_parent_is_still_part_of_a_launch(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Control: the same scheduler under a parent (not init) is not called an orphan."""
    from tools.processes import Proc, identify

    procs = [
        Proc(pid=418822, ppid=7, user="r", stat="Sl", command="sglang::scheduler_TP0",
             server="sglang", role="worker"),
        Proc(pid=7, ppid=1, user="r", stat="Sl", command="python3 -m sglang.launch_server",
             server="sglang", role="main"),
    ]  # fmt: skip
    identify(procs)
    assert procs[0].ours is not False
    orphan = [Proc(pid=418822, ppid=1, user="r", stat="Sl", command="sglang::scheduler_TP0",
                   server="sglang", role="worker")]  # fmt: skip
    identify(orphan)
    assert orphan[0].ours is False


def _disk_bound(grows: bool) -> dict[str, Any]:
    """A loader reading its checkpoint off a slow disk: log silent after the engine init, GPU
    at 0%, the process in D state; /proc/PID/io read twice."""
    ps = PS_HEADER + (
        "root       31244  6.1  4.3 37012448 9284412 pts/0    Dl   14:03   0:31 python -m "
        "vllm.entrypoints.openai.api_server --model /data/models/m --port 8000\n"
    )
    log = (
        "INFO 12-25 14:03:09 api_server.py:727] args: Namespace(host='0.0.0.0', port=8000)\n"
        "INFO 12-25 14:03:11 llm_engine.py:73] Initializing an LLM engine with config: "
        "model='/data/models/m', tensor_parallel_size=1\n"
    )
    io0 = "rchar: 9108402117\nwchar: 41733\nread_bytes: 9105326080\nwrite_bytes: 16384\n"
    io1 = io0.replace("9105326080", "9175326080" if grows else "9105326080")
    return {
        "ps": ps,
        "nvidia_smi": "0, NVIDIA A100-SXM4-80GB, 15274 MiB, 66646 MiB, 81920 MiB, 0 %\n",
        "files": {"/data/logs/vllm.log": log},
        "commands": {"cat /proc/31244/io": [{"at": 0, "text": io0}, {"at": 10, "text": io1}]},
    }


def test_a_silent_loader_reading_from_storage_is_still_starting(tmp_path) -> None:  # type: ignore[no-untyped-def]
    r = _run(_card("vllm", "8 minutes and no log line, hung?", **_disk_bound(True)), tmp_path)
    assert r.root_cause == "still_starting", r.summary
    assert "read_bytes: 9175326080" in _cited(r), _cited(r)
    assert "MiB/s" in r.next_step, r.next_step


def test_a_silent_loader_that_reads_nothing_is_not_proven_loading(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Control: the same process whose byte count stands still: no proof either way."""
    r = _run(_card("vllm", "8 minutes and no log line, hung?", **_disk_bound(False)), tmp_path)
    assert not any(line.startswith("read_bytes") for line in _cited(r)), _cited(r)
    assert r.root_cause != "still_starting", r.summary


def test_a_leader_whose_conclusion_was_refused_is_still_named_with_what_it_lacks(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """No kernel log recorded: the OOM killer leads on free's 97%, its conclusion is refused for
    want of a kill line, and the report says so instead of "no hypothesis leads"."""
    host = {**_ds_host(5.0), "commands": {"free -g": FREE_G.format(used=480, avail=15)}}
    host.pop("dmesg")
    r = _run(_card("torch", "it dies with -9 after a minute", **host), tmp_path)
    assert r.status == "insufficient_evidence"
    assert r.summary.startswith("host_oom_killed leads"), r.summary
    assert "Not concluded: it needs an OOM-kill line" in r.next_step, r.next_step


OLLAMA_LOG = (
    "Jul 22 09:02:11 n ollama[1688]: time=2026-07-22T09:02:11.419+02:00 level=INFO "
    'source=runner.go:67 msg="discovering available GPUs..."\n'
    "Jul 22 09:02:12 n ollama[1688]: time=2026-07-22T09:02:12.605+02:00 level=DEBUG "
    'source=cuda_compat.go:58 msg="NVIDIA driver too old" driver=12.2 '
    "driver_version=535.309.01 required=550 library=/usr/local/lib/ollama/cuda_v12\n"
    "Jul 22 09:11:52 n ollama[1688]: time=2026-07-22T09:11:52.918+02:00 level=INFO "
    'source=server.go:1289 msg="llama runner started in 12.68 seconds"\n'
)


def _ollama_on_cpu(runner_on_gpu: bool) -> dict[str, Any]:
    ps = PS_HEADER + (
        "ollama      1688  0.4  0.6 3382420 201312 ?      Ssl  09:02   0:04 /usr/local/bin/ollama serve\n"
        "ollama      2417  1493 22.9 38121544 30214008 ?  Sl   09:11  11:56 /usr/local/bin/ollama "
        "runner --model /usr/share/ollama/.ollama/models/blobs/sha256-6e4c --port 40211\n"
    )
    used = "18000 MiB, 6438 MiB" if runner_on_gpu else "0 MiB, 24438 MiB"
    host: dict[str, Any] = {
        "ps": ps,
        "nvidia_smi": f"0, Tesla P40, {used}, 24576 MiB, 0 %\n",
        "files": {"/var/log/ollama.log": OLLAMA_LOG},
    }
    if runner_on_gpu:
        host["commands"] = {
            "nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv": (
                "pid, process_name, used_gpu_memory [MiB]\n2417, ollama, 18000 MiB\n"
            )
        }
    return host


def test_a_server_computing_on_the_cpu_after_a_driver_too_old_line_is_the_driver(tmp_path) -> None:  # type: ignore[no-untyped-def]
    r = _run(_card("other", "every model runs 100% on CPU", **_ollama_on_cpu(False)), tmp_path)
    assert r.root_cause == "cuda_driver_mismatch", r.summary
    assert any(line.startswith("0, Tesla P40, 0 MiB") for line in _cited(r)), _cited(r)


def test_the_same_line_beside_a_runner_on_the_gpu_is_not_enough(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Control: the runner holds GPU memory, so the GPUs were not dropped."""
    r = _run(_card("other", "every model runs 100% on CPU", **_ollama_on_cpu(True)), tmp_path)
    assert r.status != "concluded" or r.root_cause != "cuda_driver_mismatch", r.summary


SG_LIVE = PS_HEADER + (
    "dev      1183021  4.1  1.2 24410812 3290144 pts/3 Sl+ 10:00   0:21 python -m "
    "sglang.launch_server --model-path /models/qwen --host 0.0.0.0 --port 30000\n"
    "dev      1183310 99.0  2.4 41201844 6510204 pts/3 Rl+ 10:00   1:02 sglang::scheduler\n"
)


def _proxied_launch(no_proxy: str) -> dict[str, Any]:
    return {
        "ps": SG_LIVE,
        "nvidia_smi": "0, NVIDIA H100 80GB HBM3, 72114 MiB, 9445 MiB, 81559 MiB, 0 %\n",
        "env": f"http_proxy=http://10.9.8.7:3128\nno_proxy={no_proxy}\n",
        "files": {"/srv/sglang.log": SG_START},
    }


def test_a_ready_server_whose_own_address_the_proxy_catches_is_named_a_risk(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Up and ready, no failure yet: the warm-up to 0.0.0.0 will reach the proxy. Not
    concluded (nothing failed), but the report says so instead of "the launch is fine"."""
    r = _run(_card("sglang", "is it up?", **_proxied_launch("localhost,127.0.0.1")), tmp_path)
    assert r.status == "insufficient_evidence", r.summary
    assert "the leading risk is bad_launch_argument" in r.summary, r.summary
    assert "0.0.0.0" in r.next_step, r.next_step


def test_a_ready_server_the_proxy_bypasses_is_just_up(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Control: no_proxy covers 0.0.0.0: nothing to warn about."""
    r = _run(
        _card("sglang", "is it up?", **_proxied_launch("localhost,127.0.0.1,0.0.0.0")), tmp_path
    )
    assert "risk" not in r.summary, r.summary
