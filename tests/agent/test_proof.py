"""The proof gate, one rule at a time: bad conclusions refused, right ones accepted even when no
signature knows their fatal line. Each case is a tiny host (log lines + facts) and a conclusion.
"""

from __future__ import annotations

from typing import Any

import pytest

from agent.facts import Facts
from agent.rules import proof
from agent.rules.guardrails import check_conclusion, qualify
from agent.signatures import scan
from agent.state import Action, Observation

LOG = "/var/log/server.log"
START = [
    "[2025-01-08 18:02:10] server_args=ServerArgs(model_path='m', tp_size=2, port=30000)",
    "[2025-01-08 18:02:20 TP0] Load weight begin. avail mem=139.20 GB",
    "Loading safetensors checkpoint shards:  50% Completed | 1/2 [00:02<00:02,  2.00s/it]",
]


def _obs(oid: str, lines: list[str], tool: str = "log_tail", **args: Any) -> Observation:
    return Observation(
        id=oid,
        tool=tool,
        args=args or ({"path": LOG} if tool in ("log_tail", "log_search") else {}),
        ok=True,
        lines=lines,
        data={},
        round=0,
    )


def _facts(alive: bool | None = False, **kw: Any) -> Facts:
    f = Facts(**kw)
    if alive is not None:
        f.ps_available = True
        f.ps_obs = "o2"
        f.server_pids = [4242] if alive else []
        f.procs = {4242: "root 4242 python -m sglang.launch_server"} if alive else {}
    return f


def _conclude(label: str, *cites: tuple[str, str]) -> Action:
    return Action(
        kind="conclude",
        label=label,
        confidence=0.8,
        evidence=[{"observation": o, "line": ln} for o, ln in cites],
    )


def _log(*lines: str) -> list[Observation]:
    return [_obs("o1", [*START, *lines])]


# -- bad conclusions: every one must be refused ---------------------------------------------------
AUTOTUNE = "ERROR [autotune] OutOfMemoryError: out of resource: triton_mm Required: 262144"
CAPTURE = "Capturing batches (bs=8 avail_mem=20.1 GB):  40%|████      | 2/5 [00:01<00:02]"
BAD: list[tuple[str, list[Observation], Facts, Action]] = [
    (
        "one-letter citation of a missing observation",
        _log("RuntimeError: boom happened here"),
        _facts(),
        _conclude("dependency_error", ("o99", "E")),
    ),
    (
        "missing observation id, real line",
        _log("RuntimeError: boom happened here"),
        _facts(),
        _conclude("dependency_error", ("o7", "RuntimeError: boom happened here")),
    ),
    (
        "line not in the named observation",
        _log("RuntimeError: boom happened here"),
        _facts(),
        _conclude("dependency_error", ("o1", "RuntimeError: something else entirely")),
    ),
    (
        "fragment under 16 characters",
        _log("RuntimeError: boom happened here"),
        _facts(),
        _conclude("dependency_error", ("o1", "boom happened")),
    ),
    (
        "empty line",
        _log("RuntimeError: boom"),
        _facts(),
        _conclude("dependency_error", ("o1", "  ")),
    ),
    ("no evidence at all", _log("RuntimeError: boom"), _facts(), _conclude("dependency_error")),
    (
        "not a taxonomy label",
        _log("RuntimeError: boom happened here"),
        _facts(),
        _conclude("cosmic_rays", ("o1", "RuntimeError: boom happened here")),
    ),
    (
        "phase marker as a weights OOM, server dead",
        _log(),
        _facts(),
        _conclude("gpu_oom_weights", ("o1", START[1])),
    ),
    (
        "phase marker as a weights OOM, server alive (a /generate hang)",
        _log(),
        _facts(alive=True),
        _conclude("gpu_oom_weights", ("o1", START[1])),
    ),
    (
        "an INFO line as a crash",
        _log("[2025-01-08 18:03:00] INFO: Started server process [4242]"),
        _facts(),
        _conclude("model_load_error", ("o1", "INFO: Started server process [4242]")),
    ),
    (
        "torch.compile autotune ERROR lines on a healthy busy server",
        _log(AUTOTUNE, CAPTURE),
        _facts(alive=True),
        _conclude("cuda_oom_runtime", ("o1", AUTOTUNE)),
    ),
    (
        "error line while the log still advances",
        _log("ERROR transient failure talking to metrics"),
        _facts(alive=True, log_growth={LOG: True}),
        _conclude("bad_launch_argument", ("o1", "ERROR transient failure talking to metrics")),
    ),
    (
        "a WARNING is not a crash",
        _log("WARNING 01-08 18:03:00 [config.py:1] ValueError: soon deprecated"),
        _facts(),
        _conclude("bad_launch_argument", ("o1", "ValueError: soon deprecated")),
    ),
    (
        "disk_full with no full mount and no ENOSPC line",
        _log("RuntimeError: could not write cache"),
        _facts(disk_available=True),
        _conclude("disk_full", ("o1", "RuntimeError: could not write cache")),
    ),
    (
        "shm_too_small on a 64 GiB /dev/shm citing an unrelated line",
        _log("RuntimeError: worker died unexpectedly"),
        _facts(shm_mib=65536.0, shm_use_pct=1.0),
        _conclude("shm_too_small", ("o1", "RuntimeError: worker died unexpectedly")),
    ),
    (
        "host_oom_killed citing a CUDA OOM line",
        _log("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"),
        _facts(),
        _conclude(
            "host_oom_killed",
            ("o1", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"),
        ),
    ),
    (
        "stale_gpu_process with the GPUs free",
        [
            *_log("RuntimeError: CUDA error: out of memory"),
            _obs("o3", ["0, NVIDIA H200, 0 MiB, 143771 MiB, 143771 MiB, 0 %"], tool="gpu_status"),
        ],
        _facts(gpu_available=True, gpus=[{"index": 0, "used_mib": 0.0, "total_mib": 143771.0}]),
        _conclude(
            "stale_gpu_process", ("o3", "0, NVIDIA H200, 0 MiB, 143771 MiB, 143771 MiB, 0 %")
        ),
    ),
    (
        "still_starting with the server dead",
        _log(),
        _facts(alive=False),
        _conclude("still_starting", ("o1", START[2])),
    ),
    (
        "still_starting alive but silent",
        _log(),
        _facts(alive=True, log_growth={LOG: False}),
        _conclude("still_starting", ("o1", START[2])),
    ),
    (
        "killed_externally while the server is alive",
        _log(),
        _facts(alive=True),
        _conclude("killed_externally", ("o1", START[2])),
    ),
    (
        "killed_externally although the log holds an NCCL WARN",
        _log("host:1:1 [0] bootstrap.cc:114 NCCL WARN Bootstrap : no socket interface found"),
        _facts(),
        _conclude("killed_externally", ("o1", START[2])),
    ),
    (
        "killed_externally although a traceback ends in an error no signature knows",
        _log(
            "Traceback (most recent call last):",
            '  File "x.py", line 1, in <module>',
            "FooBarError: flux capacitor misaligned",
        ),
        _facts(),
        _conclude("killed_externally", ("o1", START[2])),
    ),
    (
        "killed_externally although an ERROR line ended it",
        _log(
            "ERROR 01-08 18:03:00 [engine.py:42] engine core initialisation failed: bad shard map"
        ),
        _facts(),
        _conclude("killed_externally", ("o1", START[2])),
    ),
    (
        "killed_externally when the kernel log shows an OOM kill",
        _log(),
        _facts(
            dmesg_available=True,
            dmesg_obs="o4",
            dmesg_lines=["Out of memory: Killed process 4242 (python3)"],
        ),
        _conclude("killed_externally", ("o1", START[2])),
    ),
    (
        "gpu_hardware_fault with no Xid and nvidia-smi answering",
        _log("RuntimeError: mysterious failure in kernel launch"),
        _facts(),
        _conclude(
            "gpu_hardware_fault", ("o1", "RuntimeError: mysterious failure in kernel launch")
        ),
    ),
    (
        "cuda_driver_mismatch citing an INFO line",
        _log("INFO 01-08 CUDA driver version is 12.4 here"),
        _facts(),
        _conclude("cuda_driver_mismatch", ("o1", "INFO 01-08 CUDA driver version is 12.4 here")),
    ),
    (
        "dependency_error citing only a CUDA OOM line",
        _log(
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity of 79.10 GiB"
        ),
        _facts(),
        _conclude(
            "dependency_error",
            (
                "o1",
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity of 79.10 GiB",
            ),
        ),
    ),
    (
        "a ten-character fragment of a real line",
        _log("RuntimeError: boom happened here"),
        _facts(),
        _conclude("dependency_error", ("o1", "boom happe")),
    ),
    (
        "a line that differs by one character",
        _log("RuntimeError: boom happened here"),
        _facts(),
        _conclude("dependency_error", ("o1", "RuntimeError: boom happened hera")),
    ),
    (
        "nccl_failure citing a progress bar",
        _log(),
        _facts(),
        _conclude("nccl_failure", ("o1", START[2])),
    ),
    (
        "model_load_error citing the launch line",
        _log(),
        _facts(),
        _conclude("model_load_error", ("o1", START[0])),
    ),
    (
        "a line quoted from the operator's words, not the host",
        _log("RuntimeError: boom happened here"),
        _facts(),
        _conclude("unsupported_gpu_arch", ("o1", "my GPU is an RTX 5090 and it says sm_120")),
    ),
    (
        "a DEBUG line",
        _log("DEBUG 01-08 18:03:00 [x.py:1] retry budget exhausted for probe"),
        _facts(),
        _conclude(
            "bad_launch_argument",
            ("o1", "DEBUG 01-08 18:03:00 [x.py:1] retry budget exhausted for probe"),
        ),
    ),
    (
        "killed_externally with ps unknown and an exception in the log",
        _log("RuntimeError: Engine core initialization failed. See root cause above."),
        _facts(alive=None),
        _conclude("killed_externally", ("o1", START[2])),
    ),
]


@pytest.mark.parametrize("name,obs,facts,action", BAD, ids=[b[0] for b in BAD])
def test_bad_conclusion_is_refused(
    name: str, obs: list[Observation], facts: Facts, action: Action
) -> None:
    problems = check_conclusion(action, obs, facts)
    assert problems, f"accepted: {name}"
    assert all(p.startswith("[") for p in problems)


def test_at_least_thirty_bad_cases() -> None:
    assert len(BAD) >= 30


# -- right conclusions whose fatal line no signature knows: every one must be accepted ------------
UNKNOWN_FATAL: list[tuple[str, str]] = [
    (
        "model_load_error",
        "ValueError: The checkpoint's quant_method 'modelopt_fp4' needs a newer tokenizer-free loader path",
    ),
    (
        "bad_launch_argument",
        "RuntimeError: Expected all tensors of the rotary table to share a dtype, found bfloat16 and float8_e4m3fn",
    ),
    (
        "nccl_failure",
        "ERROR 07-02 09:11:45 [multiproc_executor.py:140] Worker proc VllmWorker-1 reported a failed handshake with the router",
    ),
    (
        "model_load_error",
        "[2025-07-02 09:11:45 TP1] Scheduler hit an exception: IndexError: index 151936 is out of bounds for dimension 0 with size 151936",
    ),
    ("bad_launch_argument", "FATAL: eplb rebalance produced an empty expert map for layer 17"),
    (
        "bad_launch_argument",
        "CRITICAL 2025-05-05 12:00:00 router.py:88 no prefill worker registered after 120 s",
    ),
    (
        "nccl_failure",
        "mooncake.transfer_engine: ERROR: failed to register memory region with RDMA device mlx5_3",
    ),
    (
        "bad_launch_argument",
        "AssertionError: speculative num_draft_tokens (8) must not exceed speculative_num_steps * topk (4)",
    ),
    (
        "bad_launch_argument",
        "OverflowError: cannot fit 'int' into an index-sized integer while building the cuda graph batch list",
    ),
    (
        "model_load_error",
        "RecursionError: maximum recursion depth exceeded while resolving the chat template include",
    ),
    (
        "kv_cache_no_room",
        "ValueError: max_num_seqs (512) exceeds available Mamba cache blocks (100)",
    ),
    (
        "unsupported_gpu_arch",
        "[rank0]: RuntimeError: Triton Error [CUDA]: invalid argument while launching _fwd_kernel_zq",
    ),
    (
        "bad_launch_argument",
        "ERROR 03-11 10:22:01 [core.py:586] AssertionError: expected 3 dims, got 2 in rotary cache",
    ),
    (
        "nccl_failure",
        "gpu-7:811:902 [3] NCCL WARN NET/IB : Got completion from peer 10.0.0.2<4242> with error 12, opcode 0",
    ),
    (
        "nccl_failure",
        "E1203 12:00:01.123456 811 ucx_worker.c:123] UCX endpoint to 10.0.0.2 failed: Destination is unreachable",
    ),
    (
        "bad_launch_argument",
        "[TensorRT-LLM][ERROR] Assertion failed: mpiSize == tp * pp (worldConfig.cpp:101)",
    ),
    (
        "dependency_error",
        "torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised: CompilationError: at 12:4",
    ),
    ("model_load_error", "KeyError: 'model.layers.0.mlp.experts.w13_weight_scale_inv'"),
    (
        "bad_launch_argument",
        "CRITICAL: the scheduler refused the plan: chunk size 0 leaves no room for prefill",
    ),
    (
        "bad_launch_argument",
        "2025-01-01 10:00:00,000 - dynamo.runtime - ERROR - failed to reach the discovery store at 127.0.0.1:2379",
    ),
    (
        "cuda_driver_mismatch",
        "RuntimeError: CUDA error: operation not supported when calling `cuMemCreate(&handle, size, &prop, 0)`",
    ),
    (
        "bad_launch_argument",
        "NotImplementedError: FP8 block quantization is not implemented for the cutlass MoE runner yet",
    ),
    (
        "dependency_error",
        "AttributeError: 'Qwen3NextConfig' object has no attribute 'linear_conv_kernel_dim'",
    ),
    (
        "model_load_error",
        "safetensors_rust.SafetensorError: Error while deserializing header: InvalidHeaderDeserialization",
    ),
    (
        "dependency_error",
        "Fatal Python error: Segmentation fault in flash_attn_2_cuda extension init",
    ),
    (
        "cuda_oom_runtime",
        "[E] [TRT] 1: [defaultAllocator.cpp::allocate::20] Error Code 1: Cuda Runtime (out of memory)",
    ),
    (
        "nccl_failure",
        "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.",
    ),
    (
        "nccl_failure",
        "RuntimeError: Worker failed with error 'NVSHMEM bootstrap over uid failed', please check the stack trace above",
    ),
    (
        "dependency_error",
        "ImportError: /opt/venv/lib/python3.12/site-packages/sgl_kernel/common_ops.abi3.so: undefined symbol: _ZN3c104cuda9SetDeviceEab",
    ),
    (
        "unsupported_gpu_arch",
        "RuntimeError: DeepGEMM only supports sm90a/sm100a, got compute capability 8.9 on this device",
    ),
    (
        "bad_launch_argument",
        'level=error msg="engine config rejected: max_batch_size 4096 above the engine\'s 2048"',
    ),
    (
        "disk_full",
        "ERROR: write /tmp/torchinductor_root/triton/0/abc.cubin: no space left on device",
    ),
    (
        "port_in_use",
        "OSError: [Errno 98] error while attempting to bind on address ('0.0.0.0', 30000): address in use",
    ),
    (
        "model_load_error",
        "huggingface_hub.errors.GatedRepoError: 403 Client Error. Cannot access gated repo for url https://huggingface.co/x",
    ),
]


@pytest.mark.parametrize(
    "label,line", UNKNOWN_FATAL, ids=[f"{i}-{x[0]}" for i, x in enumerate(UNKNOWN_FATAL)]
)
def test_right_conclusion_on_an_unknown_fatal_line_is_accepted(label: str, line: str) -> None:
    obs = _log("Traceback (most recent call last):", '  File "/srv/app.py", line 7, in main', line)
    assert check_conclusion(_conclude(label, ("o1", line)), obs, _facts()) == []


def test_most_accepted_lines_are_unknown_to_every_signature() -> None:
    """The point of the gate: these stand on structure, not on our list."""
    unknown = [
        line
        for _, line in UNKNOWN_FATAL
        if not any(m.label and m.strength in ("fatal", "strong") for m in scan([line]))
    ]
    assert len(unknown) >= 20, len(unknown)


def test_a_hang_on_an_nccl_warn_with_the_server_alive_is_accepted() -> None:
    warn = "node1:77:90 [1] NCCL WARN Call to connect returned Connection timed out, retrying"
    obs = _log(warn)
    assert (
        check_conclusion(
            _conclude("nccl_failure", ("o1", warn)),
            obs,
            _facts(alive=True, log_growth={LOG: False}),
        )
        == []
    )


def test_a_component_traceback_while_the_front_end_serves_on_is_a_crash() -> None:
    oom = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 616.00 MiB. GPU 0 has 79 GiB"
    )
    obs = _log(
        "Traceback (most recent call last):",
        '  File "scheduler.py", line 1',
        oom,
        'INFO:     10.0.0.1:1 - "GET /health HTTP/1.1" 200 OK',
    )
    assert (
        check_conclusion(_conclude("cuda_oom_runtime", ("o1", oom)), obs, _facts(alive=True)) == []
    )


def test_killed_with_a_signal_line_stands_at_full_confidence() -> None:
    line = "INFO:     Received SIGTERM, shutting down (startup probe failed)"
    obs = _log(line)
    facts = _facts(
        dmesg_available=True, dmesg_obs="o4", dmesg_lines=["[  1.0] usb 1-1: new device"]
    )
    action = _conclude("killed_externally", ("o1", line))
    assert check_conclusion(action, obs, facts) == []
    assert qualify(action, obs, facts)["confidence"] == 0.8


def test_killed_inferred_from_absence_says_so_and_lowers_confidence() -> None:
    obs = _log()
    facts = _facts()  # kernel log not read
    action = _conclude("killed_externally", ("o1", START[2]))
    assert check_conclusion(action, obs, facts) == []
    q = qualify(action, obs, facts)
    assert q["confidence"] <= 0.6
    assert (
        "inferred from absence" in q["summary"] and "kernel log could not be read" in q["summary"]
    )
    assert "dmesg" in q["next_step"]


def test_still_starting_and_shm_from_facts_are_accepted() -> None:
    obs = _log()
    assert (
        check_conclusion(
            _conclude("still_starting", ("o1", START[2])),
            obs,
            _facts(alive=True, log_growth={LOG: True}),
        )
        == []
    )
    shm = [*obs, _obs("o5", ["shm  64M  0  64M  0% /dev/shm"], tool="disk")]
    assert (
        check_conclusion(
            _conclude("shm_too_small", ("o5", "shm  64M  0  64M  0% /dev/shm")),
            shm,
            _facts(shm_mib=64.0, shm_use_pct=0.0),
        )
        == []
    )


# -- the structure table itself --------------------------------------------------------------------
@pytest.mark.parametrize(
    "line,kind",
    [
        ("RuntimeError: x", "exception"),
        ("[rank1]: torch.distributed.DistBackendError: NCCL error in: x", "nccl"),
        ("ERROR 05-12 10:00:00 [core.py:1] boom", "error_level"),
        ("[TensorRT-LLM][ERROR] Assertion failed: x", "error_level"),
        ("NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus.", "kernel"),
        ("Out of memory: Killed process 1234 (python3)", "kernel"),
        ("RuntimeError: CUDA error: an illegal memory access was encountered", "cuda"),
        ("Segmentation fault (core dumped)", "exit_signal"),
        ("WARNING 05-12 some ValueError: mentioned in a warning", None),
        ("INFO 05-12 Loading weights took 3.2 s", None),
        ("Traceback (most recent call last):", None),
        ('  File "x.py", line 3, in main', None),
        (
            "llama_model_load: error loading model: tensor 'b' data is not within the file bounds",
            "error_level",
        ),
        (
            "/bin/executorWorker: error while loading shared libraries: libnvinfer.so.10: x",
            "error_level",
        ),
        ("[2025] Ignore import error when loading sglang.srt.x: Exception: y", None),
        ("foo: no error: all good", None),
    ],
)
def test_fatal_kind(line: str, kind: str | None) -> None:
    assert proof.fatal_kind(line) == kind


def test_exception_inside_a_traceback_counts_even_mid_line() -> None:
    lines = [
        "Traceback (most recent call last):",
        '  File "a.py", line 1',
        "some.module.CustomError: bad",
    ]
    assert proof.fatal_lines(lines) == [(2, "exception")]
    assert proof.kind_in_context(lines, 2) == "traceback"


def test_still_starting_with_a_silent_log_stands_on_a_compiler_the_server_runs() -> None:
    nvcc = "root 633 96.4 0.3 1120332 812112 ? R 11:58 0:21 /usr/local/cuda/bin/nvcc -gencode=arch=compute_90a"
    facts = _facts(alive=True, log_growth={LOG: False})
    action = _conclude("still_starting", ("o1", START[2]))
    assert check_conclusion(action, _log(), facts)  # silent, nothing working: refused
    facts.building_pids = {633: nvcc}
    assert check_conclusion(action, _log(), facts) == []


def _static_gpu(oid: str, moved: float) -> Observation:
    row = "0, NVIDIA H200, 70211 MiB, 73560 MiB, 143771 MiB, 0 %"
    return Observation(
        id=oid,
        tool="gpu_status",
        args={"watch_s": 60},
        ok=True,
        lines=[row, "1, NVIDIA H200, 70203 MiB, 73568 MiB, 143771 MiB, 0 %"],
        data={"watched": True, "memory_moved_mib": moved, "moved_line": row, "waited_s": 60},
        round=1,
    )


@pytest.mark.parametrize(("moved", "accepted"), [(0.0, True), (2048.0, False)])
def test_a_silent_multi_rank_launch_with_static_gpu_memory_is_an_inferred_stall(
    moved: float, accepted: bool
) -> None:
    """The stall form without stacks (issue 21): alive, silent over the watched window, GPU
    memory still over a watched read: an inferred hang, capped; memory that moved is work."""
    from agent.facts import GpuFact

    line = "[2025-01-08 18:02:31 TP0] Init torch distributed begin. tp_size=2"
    obs = [*_log(line), _static_gpu("o3", moved)]
    f = _facts(alive=True, log_growth={LOG: False})
    f.gpus = [
        GpuFact(index=0, used_mib=70211, util_pct=0),
        GpuFact(index=1, used_mib=70203, util_pct=0),
    ]
    act = _conclude("nccl_failure", ("o1", line))
    assert (check_conclusion(act, obs, f) == []) is accepted
    if accepted:
        q = qualify(act, obs, f)
        assert float(q["confidence"]) <= 0.6 and "static" in q["summary"]
        assert "py-spy dump" in q["next_step"]


def test_a_refused_hang_says_what_would_prove_it_and_which_reads_are_missing() -> None:
    """nccl_failure with no error line and no stall shown: the refusal names the hang's proof
    form and the reads not made yet (issue 21: a refusal says which form would prove the label)."""
    line = "[2025-01-08 18:02:31 TP0] Init torch distributed begin. tp_size=2"
    obs = _log(line)
    refusal = check_conclusion(_conclude("nccl_failure", ("o1", line)), obs, _facts(alive=True))
    assert refusal and "for a hang, show the stall" in refusal[0], refusal
    assert "py_stacks" in refusal[0] and "gpu_status with watch_s" in refusal[0], refusal
