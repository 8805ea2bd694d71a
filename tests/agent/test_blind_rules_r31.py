"""Rules and knowledge after blind round 31 (scored before any change), each with a control
that must not trigger it: a fix is a general form or fact, never an answer keyed to one card."""

from __future__ import annotations

from typing import Any

import pytest

from tests.agent.test_rules import _card


@pytest.mark.parametrize(
    ("line", "signature"),
    [
        ("ValueError: The configured object store size (20.240216064 GB) exceeds /dev/shm size "
         "(10.73741824 GB). This will harm performance. Consider deleting files in /dev/shm or "
         "increasing its size with --shm-size in Docker.", "ray-object-store-exceeds-dev-shm"),
        ("2023-07-03 03:27:55,911 WARNING services.py:1826 -- WARNING: The object store is using "
         "/tmp instead of /dev/shm because /dev/shm has only 67108864 bytes available. This will "
         "harm performance!", None),
    ],
)  # fmt: skip
def test_ray_refusing_an_object_store_larger_than_shm_is_fatal(
    line: str, signature: str | None
) -> None:
    """ray.init raises when the object store it is configured for exceeds /dev/shm (above
    10 GB): the container's --shm-size. The control: below that Ray falls back to /tmp with a
    warning and runs on."""
    from agent.signatures import scan

    fatal = {m.signature for m in scan([line]) if m.strength == "fatal"}
    assert ("ray-object-store-exceeds-dev-shm" in fatal) is bool(signature), fatal


@pytest.mark.parametrize("alive", [True, False])
def test_a_proven_healthy_launch_explains_away_the_suspects_nothing_points_at(
    tmp_path: Any, alive: bool
) -> None:
    """Alive, its own ready line, requests served, no error since: the worry is explained, so
    suspects the operator raised with nothing pointing at them (a /dev/shm too small for the
    collective they fear) are ruled out, as a proven cause rules them out, quoting the ready
    line (blind round 31). The control: the same log with the launch gone is no healthy
    verdict, and nothing is ruled out for being explained by one."""
    from tests.agent.test_rules import GPU_HELD, PS_IDLE, PS_SERVER, _run

    up = (
        "INFO Loading weights took 31.2 seconds\nINFO:     Application startup complete.\n"
        "INFO:     Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)\n"
    )
    served = up + 'INFO:     127.0.0.1:50312 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
    card = _card(
        {"/var/log/vllm/server.log": [up, served]}, PS_SERVER if alive else PS_IDLE, GPU_HELD
    )
    card.symptom = "It answers slowly at times: is it stuck on an NCCL collective?"
    r = _run(card, tmp_path)
    assert (r.status == "healthy") is alive, r.summary
    assert ("shm_too_small" in r.ruled_out) is alive, r.ruled_out


@pytest.mark.parametrize(
    ("line", "arch", "wrapper"),
    [
        ("[05/23/2025-09:15:19] [TRT-LLM] [RANK 0] [E] Failed to initialize executor on rank 0: "
         "Unsupported SM version for FP8 block scaling GEMM", True, False),
        ("RuntimeError: Executor worker returned error", False, True),
        ("[TensorRT-LLM][INFO] Detected SM version 89 (compute capability 8.9)", False, False),
    ],
)  # fmt: skip
def test_trtllm_names_the_sm_it_lacks_and_its_proxy_error_is_a_wrapper(
    line: str, arch: bool, wrapper: bool
) -> None:
    """TensorRT-LLM's kernels refuse an SM they have no build for (unsupported_gpu_arch), and
    its proxy's closing "Executor worker returned error" only says a worker failed: the rank's
    own error above it is the cause (it was read as model_load_error). The control: the SM
    version printed at start-up is neither."""
    from agent.rules import proof
    from agent.signatures import scan

    fatal = {m.signature for m in scan([line]) if m.strength == "fatal"}
    assert ("trtllm-unsupported-sm-version" in fatal) is arch, fatal
    assert proof.is_wrapper(line) is wrapper


ENGINE_RPC = """Process 87: VLLM::EngineCore
Python v3.12.12 (/usr/bin/python3.12)

Thread 87 (idle): "MainThread"
    acquire_read (vllm/distributed/device_communicators/shm_broadcast.py:589)
    dequeue (vllm/distributed/device_communicators/shm_broadcast.py:671)
    get_response (vllm/v1/executor/multiproc_executor.py:393)
    collective_rpc (vllm/v1/executor/multiproc_executor.py:412)
    determine_available_memory (vllm/v1/executor/abstract.py:132)
    run_engine_core (vllm/v1/engine/core.py:1082)
"""
WORKER_IDLE = """Process 151: VLLM::Worker_PP0_TP0
Python v3.12.12 (/usr/bin/python3.12)

Thread 151 (idle): "MainThread"
    acquire_read (vllm/distributed/device_communicators/shm_broadcast.py:589)
    dequeue (vllm/distributed/device_communicators/shm_broadcast.py:671)
    worker_busy_loop (vllm/v1/executor/multiproc_executor.py:858)
    worker_main (vllm/v1/executor/multiproc_executor.py:781)
"""
WORKER_ALL_REDUCE = """Process 152: VLLM::Worker_TP1
Python v3.12.12 (/usr/bin/python3.12)

Thread 152 (active): "MainThread"
    all_reduce (vllm/distributed/device_communicators/custom_all_reduce.py:287)
    custom_all_reduce (vllm/distributed/device_communicators/custom_all_reduce.py:318)
    _all_reduce_out_place (vllm/distributed/parallel_state.py:521)
    execute_model (vllm/v1/worker/gpu_worker.py:300)
    worker_busy_loop (vllm/v1/executor/multiproc_executor.py:863)
"""


def _stacks(oid: str, pid: int, text: str) -> Any:
    from agent.state import Observation
    from tools.py_stacks import parse_py_spy

    d = parse_py_spy(text).model_dump()
    return Observation(id=oid, tool="py_stacks", args={"pid": pid}, ok=True,
                       lines=d["raw"], data=d, round=1)  # fmt: skip


@pytest.mark.parametrize(
    ("reads", "proves_hang"),
    [
        # the engine waits for replies its idle workers here have given: owed from elsewhere
        ([(87, ENGINE_RPC), (151, WORKER_IDLE)], False),
        # a worker idle in its command loop, alone: nothing of a hang is shown
        ([(151, WORKER_IDLE)], False),
        # controls: a worker inside an all-reduce, and the engine's wait with no worker read
        ([(152, WORKER_ALL_REDUCE)], True),
        ([(87, ENGINE_RPC)], True),
    ],
)
def test_stacks_that_wait_on_a_member_elsewhere_prove_no_collective_hang(
    reads: list[tuple[int, str]], proves_hang: bool
) -> None:
    """vLLM's engine and workers block on a message-queue read that looks like a collective:
    the engine waiting for its workers' replies while a worker here idles for its next command
    means the reply is owed by a member on another node (round 31: a follower that died there);
    both brains read it as an NCCL hang. An all-reduce in flight, or the engine's wait read
    alone (round 26's cross-node queue), still prove the stall."""
    from agent.facts import Facts
    from agent.rules.guardrails import stall_proof

    obs = [_stacks(f"o{i}", pid, text) for i, (pid, text) in enumerate(reads)]
    assert (stall_proof(obs, Facts()) == "stacks") is proves_hang


@pytest.mark.parametrize(
    ("label", "brought"),
    [
        ("host_oom_killed", {"gpu_oom_weights", "cuda_oom_runtime"}),
        ("port_in_use", set()),
    ],
)
def test_an_out_of_memory_label_brings_the_memories_it_is_taken_for(
    label: str, brought: set[str]
) -> None:
    """Which memory ran out is the first question after an OOM: a host OOM kill with support
    brings the GPU's OOMs onto the board (empty, to be refuted by a read or explained away by
    the proven kill; round 31's DGX Spark container left them off and unproven). The control:
    a port conflict brings no memory label."""
    from agent.board import build
    from agent.state import Finding

    f = Finding(id="f1", label=label, kind="fatal", strength=3.0, observation="o1",
                line="x", note="")  # fmt: skip
    board = build("", [f])
    assert {"gpu_oom_weights", "cuda_oom_runtime"} & set(board) == brought


@pytest.mark.parametrize(
    ("last", "clue"),
    [
        # a supervisor telling that a process of its job ended: not that process's own error
        ("2026-09-12 10:23:55 ERROR srtctl: a worker process exited during startup; stopping "
         "the job", False),
        ("RuntimeError: Engine process exited during startup with code 1", False),
        # the control: the supervisor's own failure is an error of its own
        ("2026-09-12 10:03:01 ERROR srtctl: config validation failed: unknown key 'sidecar'", True),
    ],
)  # fmt: skip
def test_a_supervisors_word_that_its_worker_exited_is_no_error_of_the_worker(
    last: str, clue: bool
) -> None:
    """A harness that timed out on the server's port killed it (a positive outside end), and
    its next line, "a worker process exited during startup", reports that end: neither is an
    error of the server's own that would block killed_externally (round 31: the gate refused
    the LLM brain's right answer on that line). The control: the harness's own config error."""
    from agent.rules import proof

    timed_out = "Timed out waiting for SGLang native gRPC on port 50051"
    assert proof.external_end(timed_out)
    assert not proof.external_end("waiting for port 8000 to open (attempt 3)")
    lines = ["DeepGEMM warmup:  52%|#####     | 8515/16384", timed_out, last]
    assert (proof.unexplained_error(lines) is not None) is clue


@pytest.mark.parametrize("worker_idle", [True, False])
def test_an_idle_workers_engine_has_its_stacks_read_and_the_clue_names_the_member_elsewhere(
    tmp_path: Any, worker_idle: bool
) -> None:
    """A silent live launch whose rank-0 worker idles in its command loop: the next read is its
    engine's stacks, and an engine waiting for replies its idle workers gave ends the run unsure,
    quoting the engine's RPC frame and saying a member not on this host owes the reply. The
    control: a worker inside an all-reduce proves the collective hang as before."""
    from tests.agent.test_rules import PS_HEADER, _run

    ps = PS_HEADER + (
        "root           1  0.1  0.5 9123456 412345 ?       Ssl  09:02   0:40 python3 -m "
        "vllm.entrypoints.openai.api_server --model /models/m --tensor-parallel-size 2 "
        "--pipeline-parallel-size 2 --nnodes 2 --node-rank 0 --port 8000\n"
        "root          87  0.2  2.1 61002344 11421904 ?    Sl   09:26   0:47 VLLM::EngineCore\n"
        "root         151  0.2  2.1 61002344 11421904 ?    Sl   09:26   0:47 VLLM::Worker_PP0_TP0\n"
        "root         152  0.2  2.1 61002344 11421904 ?    Sl   09:26   0:47 VLLM::Worker_PP0_TP1\n"
    )
    log = (
        "INFO 03-14 09:26:10 [api_server.py:1040] vLLM API server version 0.17.1\n"
        "(Worker_PP0_TP0 pid=151) INFO 03-14 09:32:09 [gpu_model_runner.py:2070] Model loading "
        "took 47.21 GiB and 360.2 seconds\n"
    )
    gpu = "0, NVIDIA H100 80GB HBM3, 49618 MiB, 31406 MiB, 81559 MiB, 0 %\n"
    worker = WORKER_IDLE if worker_idle else WORKER_ALL_REDUCE.replace("152", "151")
    card = _card(
        {"/var/log/vllm.log": [{"at": 0, "text": log}, {"at": 120, "text": log}]},
        ps,
        gpu,
        commands={"py-spy dump --pid 87": ENGINE_RPC, "py-spy dump --pid 151": worker},
    )
    card.symptom = "the server never becomes ready, the log stopped after loading"
    r = _run(card, tmp_path)
    if worker_idle:
        assert r.status == "insufficient_evidence", r.summary
        assert "get_response" in (r.summary + r.next_step) and "not on this host" in r.next_step
    else:
        assert r.root_cause == "nccl_failure", r.summary


@pytest.mark.parametrize(
    ("visible", "xid_bus", "refused"),
    [
        ("1", "0000:18:00", True),  # the launch has GPU 1 (bus 3b); the Xid is GPU 0's
        ("0", "0000:18:00", False),  # the Xid is of the launch's own GPU
        (None, "0000:18:00", False),  # the launch's GPUs unknown: nothing is set aside
    ],
)
def test_an_xid_of_a_gpu_the_launch_was_not_given_is_not_its_fault(
    visible: str | None, xid_bus: str, refused: bool
) -> None:
    """Both brains cited another GPU's Xid (round 30): an Xid names its GPU's PCI bus, the
    launch's own settings name its GPUs, nvidia-smi ties the two. A fault shown to be on a GPU
    the launch was not given proves nothing of it; unknown GPUs leave the line as it was."""
    from agent.facts import Facts, GpuFact
    from agent.rules.guardrails import check_conclusion
    from agent.state import Action, Observation

    xid = (
        f"[Sun Jan 11 09:47:30 2026] NVRM: Xid (PCI:{xid_bus}): 31, pid=4242, name=python3, "
        "Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f_a000"
    )
    obs = [
        Observation(id="o1", tool="dmesg", args={}, ok=True, lines=[xid], data={}, round=0),
    ]
    if visible is not None:
        obs.append(Observation(id="o2", tool="launch_env", args={}, ok=True,
                               lines=[f"CUDA_VISIBLE_DEVICES={visible}"], data={}, round=0))  # fmt: skip
    facts = Facts(gpus=[GpuFact(index=0, bus_id="00000000:18:00.0"),
                        GpuFact(index=1, bus_id="00000000:3B:00.0")])  # fmt: skip
    act = Action(kind="conclude", label="gpu_hardware_fault", confidence=0.8,
                 evidence=[{"observation": "o1", "line": xid}])  # fmt: skip
    problems = check_conclusion(act, obs, facts)
    assert any("not a GPU this launch was given" in p for p in problems) is refused, problems
