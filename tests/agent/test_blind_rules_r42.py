"""Rules and knowledge after blind round 42 (scored before any change), each with a control
that must not trigger it: a fix is a general form or fact, never an answer keyed to one card."""

from __future__ import annotations

import pytest

from agent.evidence import last_launch, launch_starts
from agent.facts import Facts
from agent.nodes import _shows_the_failure
from agent.rules.host import host_rules
from agent.rules.proof import shm_need_bytes
from agent.rules.restarts import restart_rules
from tools.container_inspect import ContainerState

BANNER = "(APIServer pid=1) INFO 07-15 08:59:47 [api_server.py:1896] vLLM API server version 0.27.1"
ARGS = "(APIServer pid=1) INFO 07-15 08:59:47 [utils.py:328] non-default args: {'tensor_parallel_size': 2}"
INIT = (
    "(EngineCore_DP0 pid=108) INFO 07-15 09:00:04 [core.py:93] Initializing a V1 LLM engine "
    "(v0.27.1) with config: model='m'"
)
RING = (
    "(EngineCore_DP0 pid=108) INFO 07-15 09:00:04 [shm_broadcast.py:313] vLLM message queue "
    "communication handle: Handle(local_reader_ranks=[0, 1], buffer_handle=(2, 25165824, 10, "
    "'psm_3c0f7e12'), local_subscribe_addr='ipc:///tmp/6e2b', remote_subscribe_addr=None)"
)
DIED = (
    "(EngineCore_DP0 pid=108) ERROR 07-15 11:47:36 [multiproc_executor.py:240] Worker proc "
    "VllmWorker-1 died unexpectedly, shutting down executor."
)
TRACE = [
    "(EngineCore_DP0 pid=108) ERROR 07-15 11:47:36 [core.py:955] Traceback (most recent call last):",
    '(EngineCore_DP0 pid=108) ERROR 07-15 11:47:36 [core.py:955]   File "core.py", line 946, in run_engine_core',
    "(EngineCore_DP0 pid=108) ERROR 07-15 11:47:36 [core.py:955] RuntimeError: Executor failed.",
]
SERVING = (
    '(APIServer pid=1) INFO:     172.17.0.1:41830 - "POST /v1/chat/completions HTTP/1.1" 200 OK'
)
SHM_LINE = "shm              64M  9.8M   55M  16% /dev/shm"


def test_one_launchs_header_is_one_launch_and_a_relaunch_starts_the_next() -> None:
    """vLLM prints three launch markers as it starts (banner, non-default args, engine init):
    they were read as three launches, so "from the last launch on" cut the first lines of the
    only run, and a restarted container's earlier instance was the one line between two markers
    of the relaunch's own header. Control: a relaunch (the banner again) starts the next."""
    one = [BANNER, ARGS, INIT, "loading", SERVING]
    assert launch_starts(one) == [0] and last_launch(one) == 0
    two = [*one, DIED, "Shutting down", BANNER, ARGS, INIT, SERVING]
    assert launch_starts(two) == [0, 7] and last_launch(two) == 7


def test_a_restarted_containers_earlier_instance_is_split_where_the_relaunch_begins() -> None:
    got: list[tuple[str, float]] = []
    lines = [
        BANNER,
        ARGS,
        INIT,
        SERVING,
        DIED,
        *TRACE,
        "Shutting down",
        BANNER,
        ARGS,
        INIT,
        SERVING,
    ]
    obs = [
        {"id": "o9", "tool": "container_logs", "args": {}, "ok": True, "lines": lines, "data": {}}
    ]
    facts = Facts(container=ContainerState(name="qwen-vl", running=True, restart_count=1))
    restart_rules(facts, obs, lambda lb, k, w, o, ln, n: got.append((lb, w)))  # type: ignore[arg-type]
    assert any(lb == "still_starting" and w < 0 for lb, w in got), got
    got.clear()  # control: the same log of a container that never restarted
    restart_rules(
        Facts(container=ContainerState(name="q", running=True)), obs, lambda *a: got.append(a)
    )  # type: ignore[arg-type]
    assert got == []


def _shm_said(need_line: str | None, shm_mib: float, restarts: int = 0) -> list[tuple[str, float]]:
    facts = Facts(
        shm_mib=shm_mib,
        shm_use_pct=16.0,
        shm_line=SHM_LINE,
        disk_obs="o4",
        ps_available=True,
        server_pids=[1],
        container=ContainerState(name="c", running=True, restart_count=restarts),
    )
    if need_line is not None:
        need = shm_need_bytes(need_line)
        assert need is not None
        facts.shm_need_mib, facts.shm_need_line, facts.shm_need_obs = need / 2**20, need_line, "o9"
    said: list[tuple[str, float]] = []
    host_rules(facts, [], lambda lb, k, w, o, ln, n: said.append((lb, w)))
    return [(lb, w) for lb, w in said if lb == "shm_too_small"]


def test_a_ring_bigger_than_dev_shm_is_the_shortfall_in_numbers() -> None:
    """vLLM's TP message queue maps max_chunks x max_chunk_bytes of /dev/shm (10 x 24 MiB):
    tmpfs hands pages out as they are written, so in Docker's 64 MiB default it starts fine,
    serves text, and a worker dies of SIGBUS with no traceback once image payloads fill the
    ring. The live instance's 16% use had refuted shm_too_small. Controls: the same ring in a
    16 GiB /dev/shm supports nothing; a small /dev/shm with no ring line and no restart is
    still refuted by the live launch's room."""
    assert shm_need_bytes(RING) == 10 * 25165824
    assert shm_need_bytes(INIT) is None
    said = _shm_said(RING, 64.0)
    assert said and all(w > 0 for _, w in said), said
    assert not any(w > 0 for _, w in _shm_said(RING, 16384.0))
    assert all(w < 0 for _, w in _shm_said(None, 64.0))


def test_a_restarted_containers_dev_shm_use_now_says_nothing_of_the_death() -> None:
    """The instance that uses /dev/shm now is not the one that died: its room refutes nothing.
    Control: the same container without a restart."""
    assert not any(w < 0 for _, w in _shm_said(None, 64.0, restarts=1))
    assert any(w < 0 for _, w in _shm_said(None, 64.0, restarts=0))


@pytest.mark.parametrize(
    ("symptom", "shows"),
    [
        (
            'my server on port 8000 is fine, but the new launch dies with "CUDA error: the provided PTX was compiled with an unsupported toolchain"',
            True,
        ),
        ("my server on port 8000 is fine, but the new launch dies with a CUDA error", False),
        ('the new launch dies with "no such error anywhere in this log"', False),
    ],
)
def test_the_log_that_shows_the_quoted_failure_is_the_one_asked_about(
    symptom: str, shows: bool
) -> None:
    """The operator names the port of a neighbour that works and quotes the error of the launch
    whose log they passed: that log is not set aside for the neighbour's. Controls: no quote, or
    a quote the log does not hold (the port then decides, as before)."""
    log = [
        BANNER,
        "(APIServer pid=7) INFO [utils.py:233] non-default args: {'port': 8001}",
        "RuntimeError: CUDA error: the provided PTX was compiled with an unsupported toolchain.",
    ]
    assert _shows_the_failure(symptom, log) is shows


def _log_obs(lines: list[str]) -> list[dict]:
    return [
        {
            "id": "o1",
            "tool": "log_tail",
            "args": {"path": "/srv/triton.log"},
            "ok": True,
            "lines": lines,
            "data": {"host": "gpu-box", "path": "/srv/triton.log", "size": 4096, "tail": lines},
            "round": 0,
        }
    ]


NOTICES = [
    f"[TensorRT-LLM][WARNING] {p} is not specified, will use default value"
    for p in ("max_tokens_in_paged_kv_cache", "kv_cache_free_gpu_mem_fraction", "max_num_sequences")
] + [
    f"[TensorRT-LLM][WARNING] [json.exception.out_of_range.403] key '{k}' not found"
    for k in ("version", "max_draft_len", "lora_rank", "beam_width", "gather_logits")
]
TOKENIZER = (
    "E1030 09:08:33.484284 1399 backend_model.cc:634] ERROR: Failed to create instance: "
    "ValueError: Tokenizer class BaichuanTokenizer does not exist or is not currently imported."
)


def test_repeated_notices_never_make_a_cause_that_takes_the_errors_belief() -> None:
    """Eight "parameter not specified, default used" notices (a weak signature of
    bad_launch_argument, 0.25 each) made it supported, and as a cause that explains
    model_load_error it took the tokenizer failure's belief. Weak lines now add up to at most
    `weak_cap`, below support. Control: the notices alone still weigh something (not nothing)."""
    from agent.board import SUPPORTED_AT, build
    from agent.findings import compute
    from agent.rules.common import WEAK_CAP

    findings, _ = compute(_log_obs([*NOTICES, TOKENIZER]))  # type: ignore[arg-type]
    weak = sum(f["strength"] for f in findings if f["label"] == "bad_launch_argument")
    assert 0 < weak <= WEAK_CAP < SUPPORTED_AT
    board = build("triton fails to load all models", findings)
    top = max(board.values(), key=lambda h: h["score"])
    assert top["label"] == "model_load_error", {k: h["score"] for k, h in board.items()}
    alone, _ = compute(_log_obs(NOTICES))  # type: ignore[arg-type]
    assert any(f["label"] == "bad_launch_argument" and f["strength"] > 0 for f in alone)


PIPELINE = [
    "+ python3 /backend/examples/llama/convert_checkpoint.py --model_dir /models/l3 --output_dir /engines/ckpt/l3",
    "[TensorRT-LLM] TensorRT-LLM version: 0.14.0",
    "Traceback (most recent call last):",
    '  File "/backend/examples/llama/convert_checkpoint.py", line 16, in <module>',
    "    from tensorrt_llm.models.convert_utils import infer_dtype",
    "ImportError: cannot import name 'infer_dtype' from 'tensorrt_llm.models.convert_utils'",
    "+ trtllm-build --checkpoint_dir /engines/ckpt/l3 --output_dir /engines/l3/1-gpu",
    "Traceback (most recent call last):",
    '  File "/usr/local/bin/trtllm-build", line 8, in <module>',
    "FileNotFoundError: [Errno 2] No such file or directory: '/engines/ckpt/l3/config.json'",
    "+ python3 /backend/tools/fill_template.py -i /repo/tensorrt_llm/config.pbtxt engine_dir:/engines/l3/1-gpu",
    "+ python3 /backend/scripts/launch_triton_server.py --world_size=1 --model_repo=/repo",
    'E1126 10:14:40.470114 211 backend_model.cc:692] "ERROR: Failed to create instance: '
    "unexpected error when creating modelInstanceState: [json.exception.parse_error.101] parse "
    'error at line 1, column 1: syntax error while parsing value - unexpected end of input"',
]


def test_a_scripts_first_failed_step_is_the_cause_of_the_steps_that_read_its_output() -> None:
    """A deploy script without `set -e`: the checkpoint conversion failed on an import, the
    build then found no checkpoint, Triton no engine config, and its JSON parse error (a
    model_load_error signature) was the answer. The build's command reads the path the failed
    step was to write: that link proves the failed step's error the cause. Control: the same
    failures in steps that share no path stay two independent failures."""
    from agent.rules.pipeline import pipeline_rules, starved_chain

    found = starved_chain(PIPELINE)
    assert found is not None
    cmd, fatal, later = found
    assert "convert_checkpoint.py" in cmd and fatal.startswith("ImportError")
    assert [p for _, _, p in later] == ["/engines/ckpt/l3", "/engines/l3/1-gpu"]
    got: list[tuple[str, float, str]] = []
    pipeline_rules(_log_obs(PIPELINE), lambda lb, k, w, o, ln, n: got.append((lb, w, ln)))  # type: ignore[arg-type]
    assert ("dependency_error", 4.0, fatal) in got, got
    assert any(lb == "model_load_error" and w < 0 for lb, w, _ in got), got
    # the build reads another checkpoint (its command and its error name another path)
    apart = PIPELINE[:6] + [
        ln.replace("/engines/ckpt/l3", "/elsewhere/ckpt") for ln in PIPELINE[6:]
    ]
    assert starved_chain(apart) is None
    assert starved_chain([ln for ln in PIPELINE if not ln.startswith("+ ")]) is None  # no trace


BUILD_LOG = [
    "Loading Model: [2/2]    Building TRT-LLM engine",
    "[08/18/2026-09:16:17] [TRT-LLM] [I] Set dtype to bfloat16.",
    "[08/18/2026-09:16:25] [TRT-LLM] [I] Build TensorRT engine Unnamed Network 0",
    "[08/18/2026-09:16:25] [TRT] [W] Unused Input: position_ids",
    "[08/18/2026-09:16:27] [TRT] [I] Global timing cache in use. Profiling results in this builder pass will be stored.",
]


def test_tensorrts_builder_lines_are_inside_the_build_phase() -> None:
    """trtllm-serve --backend tensorrt builds its engine for minutes; the log's last lines are
    TensorRT's own builder logger ("[TRT] [I] ..."), which speaks only inside a build: the
    phase is the TRT-LLM step line before them. Control: a log whose last line is an ordinary
    info line after the build names no quiet phase."""
    from agent.rules.hang import quiet_phase_line

    obs = _log_obs(BUILD_LOG)
    assert quiet_phase_line(obs) == BUILD_LOG[2]  # type: ignore[arg-type]
    after = [*BUILD_LOG, "[TensorRT-LLM][INFO] Loaded engine size: 62511 MiB"]
    assert quiet_phase_line(_log_obs(after)) is None  # type: ignore[arg-type]


TRACE_ON = (
    "WARNING 05-22 09:09:13 logger.py:105] VLLM_TRACE_FUNCTION is enabled. It will record every "
    "function executed by Python. This will slow down the code. It is suggested to be used for "
    "debugging hang or crashes only."
)


def _slowed(last: str, util: float, cpu: float) -> object:
    from agent.facts import GpuFact
    from agent.rules.hang import slowed_by_setting

    facts = Facts(
        ps_available=True,
        server_pids=[41002],
        gpus=[GpuFact(index=0, used_mib=1931.0, total_mib=23028.0, util_pct=util, line="0, A10G")],
        gpu_obs="o1",
    )
    facts._ps_recs[41002] = {"cpu_pct": cpu}
    lines = [BANNER, TRACE_ON, "INFO 05-22 09:11:46 selector.py:33] Using XFormers backend.", last]
    return slowed_by_setting(facts, _log_obs(lines))  # type: ignore[arg-type]


def test_a_launch_slowed_by_a_setting_the_engine_warned_of_is_at_work_not_hung() -> None:
    """A VLLM_TRACE_FUNCTION=1 left in an env file: the engine warns it slows every step, the
    log is quiet for half an hour, the process is busy on a CPU and its GPU idle: slow, not
    hung. Controls: the same warning with the log stopped in NCCL's set-up and the GPU pinned
    (tracing is what one turns on to debug a hang), or the process idle on its CPU."""
    assert _slowed("INFO 05-22 09:11:52 selector.py:33] Using XFormers backend.", 0.0, 99.6)
    nccl = (
        "NCCL INFO comm 0x5581 rank 0 nranks 2 cudaDev 0 busId 1000 commId 0x3c6a - Init COMPLETE"
    )
    assert _slowed(nccl, 100.0, 99.9) is None
    assert (
        _slowed("INFO 05-22 09:11:52 selector.py:33] Using XFormers backend.", 100.0, 99.9) is None
    )
    assert _slowed("INFO 05-22 09:11:52 selector.py:33] Using XFormers backend.", 0.0, 0.1) is None


def test_a_restarted_containers_live_instance_refutes_no_death() -> None:
    """The container restarted after its worker died; the live instance answers. Its being
    alive had refuted killed_externally and host_oom_killed ("nothing killed it"), though the
    incident is the instance before it (a model session flagged it from the board it saw).
    Control: the same live instance of a container that never restarted refutes both."""
    from agent.rules.liveness import liveness_rules

    lines = [BANNER, ARGS, INIT, SERVING, DIED, "Shutting down", BANNER, ARGS, INIT, SERVING]
    obs = [
        {
            "id": "o2",
            "tool": "processes",
            "args": {},
            "ok": True,
            "lines": ["PID", "1 vllm serve"],
            "data": {},
        },
        {"id": "o9", "tool": "container_logs", "args": {}, "ok": True, "lines": lines, "data": {}},
    ]

    def refuted(restarts: int) -> set[str]:
        facts = Facts(
            ps_available=True,
            ps_obs="o2",
            server_pids=[1],
            procs={1: "1 vllm serve"},
            container=ContainerState(name="qwen-vl", running=True, restart_count=restarts),
        )
        got: set[str] = set()
        liveness_rules(facts, obs, [], lambda lb, k, w, o, ln, n: got.add(lb) if w < 0 else None)  # type: ignore[arg-type]
        return got & {"killed_externally", "host_oom_killed"}

    assert refuted(1) == set()
    assert refuted(0) == {"killed_externally", "host_oom_killed"}


def test_a_ring_shortfall_without_the_bus_error_is_said_to_be_inferred() -> None:
    """The numbers show /dev/shm smaller than the ring; the death they cause (SIGBUS once the
    ring fills) is not seen: the conclusion stands at the inferred confidence, saying what would
    confirm it. Controls: a 'Bus error' line of the launch keeps it proven; a /dev/shm larger than
    the ring is not this rule's business."""
    from agent.rules.guardrails import INFERRED_CONFIDENCE, qualify

    action = {"kind": "conclude", "label": "shm_too_small", "confidence": 0.96, "summary": "s"}
    need = shm_need_bytes(RING)
    assert need is not None
    facts = Facts(shm_mib=64.0, shm_need_mib=need / 2**20, shm_need_line=RING, shm_need_obs="o9")
    log = {
        "id": "o9",
        "tool": "log_tail",
        "args": {"path": "/var/log/vllm.log"},
        "ok": True,
        "lines": [RING],
        "data": {},
        "round": 0,
    }
    q = qualify(action, [log], facts)  # type: ignore[arg-type]
    assert q["confidence"] == INFERRED_CONFIDENCE and "inferred" in q["summary"]
    assert "SIGBUS" in q["next_step"]
    died = {**log, "lines": [RING, "Bus error (core dumped)"]}
    assert qualify(action, [died], facts)["confidence"] == 0.96  # type: ignore[arg-type]
    roomy = Facts(shm_mib=16384.0, shm_need_mib=need / 2**20)
    assert qualify(action, [log], roomy)["confidence"] == 0.96  # type: ignore[arg-type]
