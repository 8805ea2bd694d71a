"""Rules and knowledge after blind rounds 48 and 49 (scored before any change), and the patient
watch: each with a control that must not trigger it. A fix is a general form or fact, never an
answer keyed to one card."""

from __future__ import annotations

from typing import Any

import pytest

from cards.model import IncidentCard, Invocation
from cards.replay import ReplayHost
from tests.agent.test_rules import PS_HEADER, _card, _run

LOG = "/srv/logs/server.log"
VLLM = (
    "root      4242  2.1  9.8 14829011 10388200 pts/5 Dl+ 09:12   1:13 python -m "
    "vllm.entrypoints.openai.api_server --model /data/models/m --tensor-parallel-size 1 --port 8000\n"
)
START = (
    "INFO 12-21 09:12:36 llm_engine.py:73] Initializing an LLM engine with config: "
    "model='/data/models/m', tensor_parallel_size=1\n"
)
IO0 = "rchar: 9108402117\nread_bytes: 9105326080\n"
IO1 = "rchar: 13284118903\nread_bytes: 13281378304\n"
GPU = "0, NVIDIA A100-SXM4-80GB, 15274 MiB, 66646 MiB, 81920 MiB, 0 %\n"


def _quiet_loader(io_at: float | None, patience: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A live vLLM whose log stopped after its first lines, its GPU static, its stacks not
    readable; its storage reads grow at `io_at` s (None: never)."""
    monkeypatch.setenv("PIVOT_PATIENCE_S", patience)
    io: list[dict[str, Any]] = [{"at": 0, "text": IO0}]
    if io_at is not None:
        io.append({"at": io_at, "text": IO1})
    card = _card(
        {LOG: START},
        PS_HEADER + VLLM,
        GPU,
        dmesg="[Thu Dec 21 08:02:17 2023] NVRM: loading module\n",
        commands={"cat /proc/4242/io": io},
    )
    return card.model_copy(update={"invocation": Invocation(log=LOG)})


def test_a_silent_loader_whose_reads_grow_after_minutes_is_still_starting(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The short reads see nothing for a minute and a half; the patient watch sees the process
    read 4 GB from storage at 170 s: a slow load, proven by the read_bytes line."""
    r = _run(_quiet_loader(170, "300", monkeypatch), tmp_path)
    assert r.root_cause == "still_starting", (r.root_cause, r.summary)
    assert any("read_bytes" in e.line for e in r.evidence), r.evidence


@pytest.mark.parametrize(("io_at", "patience"), [(None, "300"), (170, "60")])
def test_nothing_moving_within_the_patience_stays_unsure(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, io_at: float | None, patience: str
) -> None:
    """Controls: reads that never grow, or grow only after the patience is spent: no sign of
    work, no error: not 'still starting', and no guess."""
    r = _run(_quiet_loader(io_at, patience, monkeypatch), tmp_path)
    assert r.root_cause != "still_starting" and r.status == "insufficient_evidence", (
        r.root_cause,
        r.summary,
    )


def test_a_launch_that_dies_during_the_patient_watch_is_read_again(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The launch dies at 120 s with the launcher's -9 line; the kernel log then holds the OOM
    kill: the process table, the log and the kernel log are read again after the death."""
    monkeypatch.setenv("PIVOT_PATIENCE_S", "300")
    kill = (
        "[Thu Dec 21 09:14:40 2023] Out of memory: Killed process 4242 (python) "
        "total-vm:148290112kB, anon-rss:103882004kB\n"
    )
    card = _card(
        {LOG: [{"at": 0, "text": START}, {"at": 120, "text": START + _DS_KILL}]},
        [{"at": 0, "text": PS_HEADER + VLLM}, {"at": 120, "text": PS_HEADER}],
        [{"at": 0, "text": GPU}, {"at": 120, "text": GPU.replace("15274 MiB", "0 MiB")}],
        dmesg=[{"at": 0, "text": "[Thu] NVRM: loading module\n"}, {"at": 120, "text": kill}],
    )
    card = card.model_copy(update={"invocation": Invocation(log=LOG)})
    r = _run(card, tmp_path)
    assert r.root_cause == "host_oom_killed", (r.root_cause, r.summary)


_DS_KILL = (
    "[2023-12-21 09:14:39,301] [ERROR] [launch.py:434:sigkill_handler] ['/usr/bin/python3', "
    "'-u', 'infer.py', '--local_rank=3'] exits with return code = -9\n"
)


@pytest.mark.parametrize(
    ("line", "exit_line"),
    [
        (_DS_KILL.strip(), True),
        # control: a zero return code is no death
        ("[INFO] [launch.py:351:main] Process 18733 exits successfully.", False),
    ],
)
def test_a_launcher_reporting_its_child_s_negative_return_code_is_an_exit_line(
    line: str, exit_line: bool
) -> None:
    from agent.rules import proof

    assert (proof.fatal_kind(line) == "exit_signal") == exit_line


@pytest.mark.parametrize(
    ("line", "oom"),
    [
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.", True),
        # control: the JVM flag on a DJL/Triton command line names no failure
        (
            "2024-02-01T18:08:41.375Z\tCommand line: -Xmx1g -Xms1g -XX:+ExitOnOutOfMemoryError",
            False,
        ),
    ],
)
def test_a_jvm_flag_is_not_a_cuda_oom(line: str, oom: bool) -> None:
    from agent.signatures import scan

    assert ("cuda-oom" in [m.signature for m in scan([line])]) == oom


KV = (
    "ValueError: To serve at least one request with the models's max seq len (262144), "
    "({need} GiB KV cache is needed, which is larger than the available KV cache memory "
    "(6.94 GiB). Based on the available memory, the estimated maximum model length is 50512."
)


@pytest.mark.parametrize(("need", "refuted"), [("36.0", True), ("9.0", False)])
def test_memory_held_elsewhere_explains_a_shortfall_only_if_it_would_cover_it(
    tmp_path: Any, need: str, refuted: bool
) -> None:
    """The engine needed 36 GiB of KV cache and had 6.94: the 3 GiB nvidia-smi shows held with
    the server gone could not have made it fit (refuted, the KV shortage stands); short by
    2 GiB, the same 3 GiB could have (not refuted on that ground)."""
    gpu = "0, NVIDIA GeForce RTX 5090, 3118 MiB, 28986 MiB, 32607 MiB, 0 %\n"
    card = _card({LOG: START + KV.format(need=need) + "\n"}, PS_HEADER, gpu, dmesg="[Wed] NVRM\n")
    card = card.model_copy(update={"invocation": Invocation(log=LOG)})
    r = _run(card, tmp_path)
    stale = next(h for h in r.hypotheses if h.label == "stale_gpu_process")
    assert (stale.status == "refuted") == refuted, (stale, r.summary)
    if refuted:
        assert r.root_cause == "kv_cache_no_room", (r.root_cause, r.summary)


SCRIPT = (
    "#!/bin/bash\nENGINE=/workspace/engines/m/fp16/1-gpu\n\n"
    "trtllm-build \\\n    --checkpoint_dir /workspace/ckpt/m \\\n    --output_dir ${ENGINE} \\\n"
    "    --gemm_plugin float16\n\n"
    "python3 /workspace/serve/serve.py \\\n    --llm_engine_dir ${ENGINE} \\\n    --port 8090\n"
)
BUILD_FAIL = (
    "[TensorRT-LLM] TensorRT-LLM version: 0.15.0\n"
    "[11/01/2024-03:33:04] [TRT-LLM] [I] Build TensorRT engine Unnamed Network 0\n"
    "[11/01/2024-03:33:08] [TRT] [E] IBuilder::buildSerializedNetwork: Error Code 9: API Usage "
    "Error (Target GPU SM 70 is not supported by this TensorRT release.)\n"
    "Traceback (most recent call last):\n"
    '  File "/usr/local/lib/python3.10/dist-packages/tensorrt_llm/builder.py", line 416, in build_engine\n'
    "    assert engine is not None, 'Engine building failed, please check the error log.'\n"
    "AssertionError: Engine building failed, please check the error log.\n"
)
SERVE_FAIL = (
    "[TensorRT-LLM] TensorRT-LLM version: 0.15.0\n"
    "2024-11-01 03:33:20,117 serve INFO loading LLM engine from {path}\n"
    "Traceback (most recent call last):\n"
    '  File "/usr/local/lib/python3.10/dist-packages/tensorrt_llm/builder.py", line 1012, in from_dir\n'
    "    with open(os.path.join(engine_dir, 'config.json'), 'r') as f:\n"
    "FileNotFoundError: [Errno 2] No such file or directory: '{path}/config.json'\n"
)


@pytest.mark.parametrize(
    ("served", "label"),
    [
        # the server read the engine dir the failed build was to write: the build's error
        ("/workspace/engines/m/fp16/1-gpu", "unsupported_gpu_arch"),
        # control: it read another dir: two failures, the last one stands
        ("/workspace/engines/other", "model_load_error"),
    ],
)
def test_a_script_step_that_failed_leaves_the_next_without_its_output(
    tmp_path: Any, served: str, label: str
) -> None:
    """No `bash -x` trace in the log: the launch script says the build writes ENGINE and the
    server reads it; the log's last run failed on a file under ENGINE; its earlier run (the
    build) failed first, with TensorRT refusing the GPU: that is the cause."""
    script = (
        SCRIPT
        if served.endswith("1-gpu")
        else SCRIPT.replace("--llm_engine_dir ${ENGINE}", f"--llm_engine_dir {served}")
    )
    card = _card(
        {
            "/data/deploy/deploy.log": BUILD_FAIL + SERVE_FAIL.format(path=served),
            "/data/deploy/deploy.sh": script,
        },
        PS_HEADER,
        "0, Tesla V100-SXM2-16GB, 0 MiB, 16160 MiB, 16160 MiB, 0 %\n",
        dmesg="[Fri] NVRM: loading module\n",
    )
    card = IncidentCard.model_validate(
        {
            **card.model_dump(exclude_none=True),
            "engine": "trtllm",
            "invocation": {"log": "/data/deploy/deploy.log", "config": "/data/deploy/deploy.sh"},
        }
    )
    r = _run(card, tmp_path)
    assert r.root_cause == label, (r.root_cause, r.summary)


@pytest.mark.parametrize("neighbour", [True, False])
def test_a_neighbour_s_busy_job_makes_an_unowned_pinned_gpu_no_proof_of_a_hang(
    tmp_path: Any, neighbour: bool
) -> None:
    """nvidia-smi names no pids and the launch names no GPUs: GPUs pinned at 98% beside another
    user's busy training processes may be theirs, so no spin-wait is read from them. Control:
    without the neighbour the same pinned GPUs are the launch's (a hang, inferred)."""
    from agent.facts import derive
    from agent.rules.hang import pinned_gpus

    gpus = "".join(
        f"{i}, NVIDIA A800-SXM4-80GB, {71890 if i >= 4 else 18421} MiB, 9027 MiB, 81920 MiB, "
        f"{98 if i >= 4 else 0} %\n"
        for i in range(8)
    )
    mine = (
        "cy       3392011  2.1  9.8 148290112 103882004 pts/5 Sl+ 09:12   1:13 python -m "
        "vllm.entrypoints.openai.api_server --model /data/m --tensor-parallel-size 4 --port 8000\n"
    )
    theirs = "".join(
        f"lhq      330124{r} 99.4  4.1 61882340 43211204 pts/2 Rl+ Dec20 1771:40 python -u "
        f"pretrain.py --local_rank={r} --deepspeed ds_config_zero3.json\n"
        for r in range(4)
    )
    card = _card(
        {LOG: START.replace("tensor_parallel_size=1", "tensor_parallel_size=4")},
        PS_HEADER + mine + (theirs if neighbour else ""),
        gpus,
        dmesg="[Thu] NVRM: loading module\n",
    )
    card = card.model_copy(update={"invocation": Invocation(log=LOG)})
    host = ReplayHost(card)
    from agent.observe import run_many
    from tools import registry

    obs = run_many(host, [(s.name, dict(s.first_sweep_args)) for s in registry.first_sweep()], 1, 0)
    got, _idle = pinned_gpus(derive(obs), obs)
    assert bool(got) != neighbour, got
    r = _run(card, tmp_path)
    assert (r.root_cause == "nccl_failure") != neighbour, (r.root_cause, r.summary)


LOCALAI = [
    "Jul 16 09:20:31 INFO  BackendLoader starting modelID=m backend=vllm model=Org/M",
    'Jul 16 09:20:44 DEBUG GRPC stderr id=m-127.0.0.1:38821 line="ValueError: max_model_len too big"',
    "Jul 16 09:20:45 DEBUG GRPC process exited id=m-127.0.0.1:38821 exitCode=1",
    'Jul 16 09:21:12 ERROR failed starting/connecting to the gRPC service error="rpc error: '
    'code = Unavailable desc = connection error"',
    "Jul 16 09:43:10 INFO  BackendLoader starting modelID=m backend=vllm model=Org/M",
    'Jul 16 09:44:48 DEBUG GRPC stderr id=m-127.0.0.1:40117 line="Loading shards: 3/10"',
    'Jul 16 09:44:50 ERROR failed starting/connecting to the gRPC service error="rpc error: '
    'code = Canceled desc = context canceled"',
    "Jul 16 09:44:52 DEBUG GRPC process exited id=m-127.0.0.1:40117 exitCode=120",
    'Jul 16 09:44:52 ERROR Failed to load model modelID=m error="grpc service not ready" '
    "backend=vllm",
]


@pytest.mark.parametrize(
    ("lines", "own"),
    [
        # the last load was cancelled by its caller; its front server's reports of the backend
        # not answering are a wrapper's; the earlier load's errors are an earlier run's
        (LOCALAI, None),
        # control: the last load's backend printed an error of its own
        (
            [*LOCALAI[:6], 'Jul 16 09:44:49 ERROR backend error="CUDA error: out of memory"'],
            'Jul 16 09:44:49 ERROR backend error="CUDA error: out of memory"',
        ),
    ],
)
def test_a_caller_s_cancellation_and_a_front_server_s_report_are_not_the_backend_s_error(
    lines: list[str], own: str | None
) -> None:
    from agent.rules.own_fatal import own_fatal_since_launch

    obs = {
        "id": "o9",
        "tool": "log_tail",
        "args": {"path": "/var/log/localai.log"},
        "ok": True,
        "round": 0,
        "lines": lines,
        "data": {"path": "/var/log/localai.log"},
    }
    got = own_fatal_since_launch([obs])  # type: ignore[list-item]
    assert (got[1] if got else None) == own, got


def test_a_cancelled_grpc_call_is_an_end_from_outside() -> None:
    from agent.rules import proof

    assert proof.external_end('error="rpc error: code = Canceled desc = context canceled"')
    assert not proof.external_end('error="rpc error: code = Unavailable desc = connection error"')


def _stopped_container(shm_bytes: int, ipc: str) -> IncidentCard:
    inspect = (
        "[\n    {\n"
        '        "Name": "/tgi-4s",\n'
        '        "Path": "text-generation-launcher",\n'
        '        "Args": ["--num-shard", "4"],\n'
        '        "State": {\n'
        '            "Status": "exited",\n'
        '            "Running": false,\n'
        '            "OOMKilled": false,\n'
        '            "ExitCode": 1\n'
        "        },\n"
        '        "HostConfig": {\n'
        f'            "IpcMode": "{ipc}",\n'
        f'            "ShmSize": {shm_bytes}\n'
        "        }\n    }\n]\n"
    )
    logs = (
        '2024-03-20T10:24:42.011Z  INFO text_generation_launcher: Args { model_id: "m", '
        "num_shard: Some(4) }\n"
        "2024-03-20T10:25:06.947641Z ERROR shard-manager: text_generation_launcher: Shard "
        "process was signaled to shutdown with signal 7 rank=1\n"
        "Error: ShardCannotStart\n"
    )
    host = {
        "ps": PS_HEADER,
        "nvidia_smi": "0, NVIDIA A100 80GB PCIe, 0 MiB, 81050 MiB, 81920 MiB, 0 %\n",
        "dmesg": "[Wed Mar 20 10:00:00 2024] NVRM: loading module\n",
        "commands": {
            "df -hP": "Filesystem Size Used Avail Use% Mounted on\n"
            "/dev/nvme0n1p2 1.8T 600G 1.2T 34% /\n",
            "df -hP /dev/shm": "Filesystem Size Used Avail Use% Mounted on\n"
            "tmpfs 433G 0 433G 0% /dev/shm\n",
        },
        "containers": {"tgi-4s": {"inspect": inspect, "logs": logs}},
    }
    card = _card({}, PS_HEADER, host["nvidia_smi"])
    return IncidentCard.model_validate(
        {
            **card.model_dump(exclude_none=True),
            "engine": "other",
            "host": host,
            "invocation": {"container": "tgi-4s"},
        }
    )


@pytest.mark.parametrize(
    ("shm", "ipc", "label"), [(64 << 20, "private", "shm_too_small"), (64 << 20, "host", None)]
)
def test_the_machine_s_dev_shm_is_not_a_stopped_container_s(
    tmp_path: Any, shm: int, ipc: str, label: str | None
) -> None:
    """The container is stopped, so df answers from the machine (433 GiB /dev/shm); the
    container's own /dev/shm is what its record gave it (64 MiB): a shard's SIGBUS is that.
    Control: with --ipc=host the container shares the machine's /dev/shm: not short."""
    from agent.runner import investigate
    from agent.settings import Settings
    from tools.container_host import ContainerHost

    card = _stopped_container(shm, ipc)
    host = ContainerHost(ReplayHost(card), "tgi-4s")
    r = investigate(host, card.symptom, settings=Settings(home=tmp_path / "h"))
    if label:
        assert r.root_cause == label, (r.root_cause, r.summary)
    else:
        assert r.root_cause != "shm_too_small", (r.root_cause, r.summary)


@pytest.mark.parametrize(
    ("line", "shaped"),
    [
        # a probe that moves on, filed at INFO by a logfmt logger: no error of the process
        (
            'time=2025-03-03T08:20:14.517Z level=INFO source=amd_linux.go:296 msg="unsupported '
            'Radeon iGPU detected skipping" id=0',
            False,
        ),
        # control: the same logger's ERROR line is one
        (
            'time=2025-03-03T08:21:00.000Z level=ERROR source=server.go:612 msg="llama runner '
            'process has terminated: exit status 2"',
            True,
        ),
    ],
)
def test_a_logfmt_info_line_is_not_error_shaped(line: str, shaped: bool) -> None:
    from agent.rules import proof

    assert proof.error_shaped(line) == shaped


def test_gpu_memory_that_moved_in_the_patient_watch_is_not_static() -> None:
    from agent.rules.hang import gpu_memory_moved, gpu_memory_static

    row = "0, NVIDIA A100-SXM4-80GB, 15274 MiB, 66646 MiB, 81920 MiB, 0 %"
    moved = "0, NVIDIA A100-SXM4-80GB, 74107 MiB, 7813 MiB, 81920 MiB, 0 %"
    watched = _obs("o14", "gpu_status", [row], {"watched": True, "memory_moved_mib": 0.0})
    patient = _obs(
        "o16",
        "launch_progress",
        ["# watched ...: GPU memory moved", moved],
        {
            "moved": "gpu",
            "memory_moved_mib": 58833.0,
            "moved_line": moved,
            "waited_s": 170.0,
            "watched": ["the log", "GPU memory"],
        },
    )
    quiet = _obs(
        "o16",
        "launch_progress",
        ["# watched ...: NOTHING moved"],
        {"moved": None, "watched": ["the log", "GPU memory"]},
    )
    assert gpu_memory_static([watched, patient]) is None  # type: ignore[list-item]
    assert gpu_memory_moved([watched, patient]) is not None  # type: ignore[list-item]
    assert gpu_memory_static([watched, quiet]) == ("o14", row)  # type: ignore[list-item]


def _served_then(util: int) -> IncidentCard:
    """A vLLM TP=2 server that came up and served, then its log stopped; its GPUs at `util`%."""
    log = (
        "INFO 05-14 10:20:01 api_server.py:112] vLLM API server version 0.6.3\n"
        "INFO:     Application startup complete.\n"
        "INFO:     Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)\n"
        'INFO:     10.0.0.5:51234 - "POST /v1/completions HTTP/1.1" 200 OK\n'
        "INFO 05-14 10:42:17 metrics.py:351] Avg prompt throughput: 120.3 tokens/s, Running: 10 reqs\n"
    )
    ps = PS_HEADER + (
        "svc      5120 99.0  3.1 9123456 4123456 ?      Sl   10:19   22:11 python3 -m "
        "vllm.entrypoints.openai.api_server --model /models/m --tensor-parallel-size 2 --port 8000\n"
        "svc      5188 99.0  3.1 9123456 4123456 ?      Sl   10:19   22:10 VLLM::Worker_TP1\n"
    )
    gpu = "".join(f"{i}, NVIDIA A40, 44221 MiB, 1395 MiB, 46068 MiB, {util} %\n" for i in (0, 1))
    card = _card({LOG: log}, ps, gpu, dmesg="[Tue May 14 09:00:00 2024] NVRM: loading module\n")
    return card.model_copy(update={"invocation": Invocation(log=LOG)})


@pytest.mark.parametrize(("util", "healthy"), [(100, False), (0, True)])
def test_ready_then_silent_with_spinning_gpus_is_not_healthy(
    tmp_path: Any, util: int, healthy: bool
) -> None:
    """It came up and served, then its log stopped while both GPUs spin at 100%: a stall after
    start-up, never 'healthy'. Control: idle GPUs under a quiet log after ready are a server
    with no traffic: healthy."""
    r = _run(_served_then(util), tmp_path)
    assert (r.root_cause == "healthy") == healthy, (r.root_cause, r.summary)


def _obs(oid: str, tool: str, lines: list[str], data: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": oid,
        "tool": tool,
        "args": {},
        "ok": True,
        "round": 1,
        "lines": lines,
        "data": data,
    }


@pytest.mark.parametrize(
    ("hit", "own"),
    [
        # the search found the earlier load's error: before the last launch of the whole read
        (LOCALAI[3], False),
        # control: an error the whole read shows after the last launch is the launch's own
        ('Jul 16 09:44:49 ERROR backend error="CUDA error: out of memory"', True),
    ],
)
def test_a_search_hit_from_before_the_last_launch_is_not_its_own(hit: str, own: bool) -> None:
    """A search of a log returns hits from anywhere in it; the newest whole read of the same log
    says where its last launch starts, and a hit before it (or older than that read's window)
    is an earlier run's."""
    from agent.rules.own_fatal import own_fatal_since_launch

    tail = [*LOCALAI[4:6], hit] if own else LOCALAI[4:]
    path = "/var/log/localai.log"
    full = {**_obs("o9", "log_tail", [*LOCALAI[:4], *tail], {"path": path}), "args": {"path": path}}
    search = {
        **_obs("o12", "log_search", [hit], {"path": path}),
        "args": {"path": path, "pattern": "ERROR"},
    }
    got = own_fatal_since_launch([full, search])  # type: ignore[list-item]
    assert (got is not None and got[1] == hit) == own, got
