"""Rules and knowledge after blind round 38 (scored before any change), each with a control
that must not trigger it: a fix is a general form or fact, never an answer keyed to one card."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.facts import Facts
from agent.rules.host import host_rules
from agent.signatures import load_signatures, scan
from tests.agent.test_rules import GPU_CLEAN, GPU_HELD, PS_HEADER, PS_IDLE, _card, _run

SHM_LINE = "shm              64M  4.6M   60M   8% /dev/shm"


@pytest.mark.parametrize(
    ("use_pct", "alive", "refuted"),
    [
        (8.0, True, True),  # four NCCL segments in a 64 MiB /dev/shm, the ranks alive and stuck
        (97.0, True, False),  # control: the small /dev/shm is used up
        (8.0, False, False),  # control: the launch is gone; its segments went with it
    ],
)
def test_a_small_dev_shm_the_live_launch_barely_uses_did_not_run_out(
    use_pct: float, alive: bool, refuted: bool
) -> None:
    """Four TP ranks hung in NCCL's P2P set-up inside a container with Docker's default 64 MiB
    /dev/shm, 8% of it used: "small" had made shm_too_small the cause of the hang (it explains
    nccl_failure), where running out of shared memory is an error at once, not a silent wait.
    Controls: a small /dev/shm that is full still supports it; so does one whose launch is gone
    (its processes' segments are freed, so its use says nothing)."""
    facts = Facts(
        shm_mib=64.0,
        shm_use_pct=use_pct,
        shm_line=SHM_LINE,
        disk_obs="o4",
        ps_available=True,
        server_pids=[511] if alive else [],
    )
    said: list[tuple[str, float, str]] = []
    host_rules(facts, [], lambda lb, k, w, o, ln, n: said.append((lb, w, n)))
    shm = [w for lb, w, _ in said if lb == "shm_too_small"]
    assert shm, said
    assert (all(w < 0 for w in shm)) is refuted, said


@pytest.mark.parametrize(
    ("line", "label"),
    [
        (
            "NotImplementedError: The given huggingface model architecture DeepseekV3ForCausalLM "
            "is not supported in TRT-LLM yet",
            "model_load_error",
        ),
        (
            "NotImplementedError: AfmoeForCausalLM is not supported in TRT-LLM yet",
            "model_load_error",
        ),
        # control: an option the engine rejects stays a launch argument's
        (
            "NotImplementedError: FP8 KV cache is not supported for this attention backend",
            "bad_launch_argument",
        ),
    ],
)
def test_an_architecture_the_engine_lacks_is_the_models_not_a_flags(line: str, label: str) -> None:
    """TensorRT-LLM 0.17's "model architecture DeepseekV3ForCausalLM is not supported in TRT-LLM
    yet" matched the generic "X is not supported in" flag signature: the answer was "drop the
    option", where no option helps and the engine version lacks the model class."""
    labels = {m.label for m in scan([line], load_signatures())}
    assert label in labels, labels
    other = {"model_load_error", "bad_launch_argument"} - {label}
    assert not labels & other, labels


SG = "[2025-10-24 02:03:13 TP0]"
CAPTURE = (
    "$ python3 -m sglang.launch_server --model-path /models/q --tp 2 --enable-torch-compile\n"
    f"{SG} Load weight end. type=Qwen3ForCausalLM, avail mem=47.27 GB\n"
    f"{SG} Capture cuda graph begin. This can take up to several minutes.\n"
    "Capturing batches (bs=64 avail_mem=19.03 GB):  54%|#####4    | 13/24 [00:19<00:16,  1.49s/it]\n"
    "Capturing batches (bs=24 avail_mem=18.97 GB):  71%|#######   | 17/24 [13:02<32:41, {pace}s/it]\n"
)
PS_COMPILING = PS_HEADER + (
    "root         85  0.0  0.3 9123456 412345 ?      Sl   02:02   0:19 python3 -m sglang.launch_server "
    "--model-path /models/q --tp 2 --enable-torch-compile\n"
    "root         86 96.0  1.8 61240332 9912044 ?    Rl   02:02  14:47 sglang::scheduler_TP0\n"
    "root        419 38.0  0.4 4102332 1533004 ?     Rl   02:04   5:12 /usr/bin/python3 "
    "/usr/lib/python3.12/dist-packages/torch/_inductor/compile_worker/__main__.py --workers=32\n"
)


@pytest.mark.parametrize(
    "after", ["", "RuntimeError: CUDA error: an illegal memory access was encountered\n"]
)
def test_a_slow_bars_pace_judges_the_silence_while_compile_workers_run(
    tmp_path: Path, after: str
) -> None:
    """A CUDA-graph capture at 280 s a batch size, with torch.compile's Inductor workers busy: a
    30 s watch with no new line is what that pace looks like, yet the compile workers had kept
    the bar's pace from being weighed and nothing else spoke for the start-up (insufficient).
    Control: the same bar followed by an error of the launch's own is no start-up in progress."""
    log = CAPTURE.format(pace="280.2") + after
    card = _card({"/var/log/sglang.log": [log, log, log]}, PS_COMPILING, GPU_HELD)
    card.symptom = "The sglang launch is not ready after 15 minutes: is it hung?"
    r = _run(card, tmp_path)
    if after:
        assert r.root_cause != "still_starting", r.summary
    else:
        assert r.root_cause == "still_starting", r.summary
        assert "per 280 s" in r.summary, r.summary


@pytest.mark.parametrize(
    ("cmd", "builder"),
    [
        ("/usr/bin/python3 /usr/lib/python3.12/site-packages/torch/_inductor/compile_worker/__main__.py --pickler=x", True),
        ("python3 -m torch._inductor.compile_worker --workers=20", True),
        ("/usr/bin/python3 -c from torch._inductor.compile_worker.__main__ import main; main() --kind=fork", True),
        ("python3 train.py --note torch._inductor.compile_worker", False),  # an argument, not the program
        ("python3 -m vllm.entrypoints.openai.api_server --model m", False),
    ],
)  # fmt: skip
def test_inductors_compile_workers_are_builders_however_python_was_pointed_at_them(
    cmd: str, builder: bool
) -> None:
    from tools import engines

    assert bool(engines.builder_pattern().search(cmd)) is builder


TB = [
    "[2025-07-29 15:06:50 TP0] Scheduler hit an exception: Traceback (most recent call last):",
    '  File "/usr/lib/python3/site-packages/sglang/srt/layers/moe/fused_moe_triton/fused_moe.py", '
    "line 1210, in fused_experts_impl",
    "    invoke_fused_moe_kernel(",
    "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 147456, "
    "Hardware limit: 101376. Reducing block sizes or `num_stages` may help.",
    "[2025-07-29 15:06:51] Received sigquit from a child process. It usually means the child failed.",
]


@pytest.mark.parametrize("traceback", [True, False])
def test_a_strong_line_that_ends_a_traceback_weighs_as_the_crash(
    tmp_path: Path, traceback: bool
) -> None:
    """Triton's OutOfResources ends the scheduler's traceback: its class has no "Error" in its
    name, so the line alone did not read as the exception, and the signature kept its "strong"
    weight (the leader, refused as unproven). Read in order it is the exception that ended the
    run. Control: the same message quoted on its own (no traceback above it) stays a lead."""
    head = "$ python -m sglang.launch_server --model-path /m/glm --tp-size 2\n"
    body = TB if traceback else [TB[3], TB[4]]
    card = _card({"/logs/glm.log": head + "\n".join(body) + "\n"}, PS_IDLE, GPU_CLEAN)
    r = _run(card, tmp_path)
    concluded = r.status == "concluded" and r.root_cause == "unsupported_gpu_arch"
    assert concluded is traceback, (r.status, r.root_cause, r.summary)


A = "(APIServer pid=3790211) INFO 08-27"
SERVING = (
    f"{A} 00:31:12 [api_server.py:1751] vLLM API server version 0.11.0\n"
    f"(EngineCore pid=3790877) INFO 08-27 00:39:58 [gpu_model_runner.py:3262] Model loading took 74.02 GiB\n"
    f"{A} 00:41:49 [api_server.py:1689] Starting vLLM API server 0 on http://0.0.0.0:8000\n"
    "(APIServer pid=3790211) INFO:     Application startup complete.\n"
    '(APIServer pid=3790211) INFO:     10.0.0.21:51814 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
    f"{A} 00:52:31 [loggers.py:236] Engine 000: Avg prompt throughput: 0.0 tokens/s, Running: 1 reqs\n"
)
PS_LMCACHE = PS_HEADER + (
    "root     3790211  1.1  0.9 4210332 1183004 ?     Ssl  00:31   0:26 python3 -m vllm.entrypoints.cli.main "
    "serve /models/m --port 8000 --kv-transfer-config "
    '{"kv_connector":"LMCacheMPConnector","kv_role":"kv_both"}\n'
    "root     3790877  3.9 61.2 98214332 75421880 ?   Sl   00:31   1:52 VLLM::EngineCore\n"
)
OOM = (
    "[Thu Aug 27 {t} 2026] Out of memory: Killed process 3742074 ({name}) total-vm:81306880kB, "
    "anon-rss:1058560kB, file-rss:21412kB, shmem-rss:428kB, UID:0 pgtables:28484kB oom_score_adj:0\n"
)


@pytest.mark.parametrize(
    ("name", "t", "dependency"),
    [
        ("lmcache", "00:39:44", True),  # the KV-cache server the launch's connector names
        ("promtail", "00:39:44", False),  # control: a process the launch does not name
        ("lmcache", "19:02:10", False),  # control: a kill five hours before the launch
    ],
)
def test_a_kill_of_what_the_live_launch_names_is_its_cause(
    tmp_path: Path, name: str, t: str, dependency: bool
) -> None:
    """vLLM up and answering, its LMCache connector's server OOM-killed by the kernel while it
    ran: requests that need the cache park. The kill was another cgroup's, so it was set aside as
    a bystander's and the run ended "healthy" (round 38). A victim the launch's command line
    names, killed while it ran, is what the launch uses. Controls: a process it does not name;
    the same name killed long before the launch."""
    card = _card(
        {"/logs/vllm.log": SERVING}, PS_LMCACHE, GPU_HELD, dmesg=OOM.format(t=t, name=name)
    )
    card.symptom = (
        "Since the restart, long-context requests hang with zero tokens. Is TP deadlocked?"
    )
    r = _run(card, tmp_path)
    assert (r.root_cause == "host_oom_killed") is dependency, (r.root_cause, r.summary)


def test_a_sidecars_log_read_after_the_launchs_does_not_take_its_place() -> None:
    """A model session read the LMCache server's container log after the engine's: the board
    then weighed that log as the launch's newest (its refutations from the engine's log gone).
    Control: the launch's own container read again, by name, replaces its earlier read."""
    from agent.evidence import latest_text_observations
    from agent.state import Observation

    def read(oid: str, name: str | None) -> Observation:
        args = {"name": name} if name else {}
        return Observation(id=oid, tool="container_logs", args=args, ok=True, lines=["x"],
                           data={"container": name or "vllm"}, round=0)  # fmt: skip

    latest = {o["id"] for o in latest_text_observations([read("o9", None), read("o13", "lmcache")])}
    assert latest == {"o9", "o13"}
    again = {o["id"] for o in latest_text_observations([read("o9", None), read("o13", "vllm")])}
    assert again == {"o13"}


@pytest.mark.parametrize("length", [320, 120])
def test_the_llm_view_marks_a_board_line_it_cuts(length: int) -> None:
    """The board quoted lines cut at 200 characters inside quotes, mid-word, as if verbatim: a
    model copying one cites a line that occurs nowhere. Control: a short line is quoted whole."""
    from prompts import render

    line = ("x" * (length - 4)) + " end"
    board = [{"label": "nccl_failure", "status": "supported", "score": 2.0,
              "evidence": [{"observation": "o7", "line": line}], "against": []}]  # fmt: skip
    text = render("decide.j2", symptom="s", notes=[], board=board, options=[], changes=False,
                  rejections=[], budget={}, decided=[], concluded=None, observations=[])  # fmt: skip
    assert ("(cut here; the whole line is in o7)" in text) is (length > 200), text
    if length <= 200:
        assert f'"{line}"' in text


HEAD_LOG = (
    "(APIServer pid=1) INFO 04-21 10:20:49 [api_server.py:1751] vLLM API server version 0.11.0\n"
    "(APIServer pid=1) INFO 04-21 10:20:49 [utils.py:238] non-default args: {'model_tag': "
    "'/models/q', 'host': '{ip}', 'port': 40011, 'tensor_parallel_size': 4}\n"
    "(EngineCore_DP0 pid=89) INFO 04-21 10:21:16 [ray_utils.py:214] Waiting for creating a "
    "placement group of specs for 10 seconds.\n"
)


@pytest.mark.parametrize(
    ("ip", "elsewhere"),
    [
        ("172.16.11.65", True),  # the head node's address: its log, copied onto this follower
        ("172.16.11.66", False),  # control: this machine's own address
        ("172.17.0.5", False),  # control: a container on this machine's docker bridge
    ],
)
def test_absent_here_proves_gone_only_for_a_launch_that_ran_here(
    tmp_path: Path, ip: str, elsewhere: bool
) -> None:
    """A GPUStack follower node: the operator pointed at the head node's vLLM log (it binds
    172.16.11.65; this machine is 172.16.11.66). None of its processes run here, so the rulebook
    said "killed_externally: the server is gone" (round 37's one wrong answer). A log that binds
    another machine's address ran there. Controls: this machine's address; a container's
    address on this machine's bridge (docker0 172.17.0.1)."""
    log = HEAD_LOG.replace("{ip}", ip)
    card = _card({"/root/head.log": log}, PS_IDLE, GPU_CLEAN,
                 commands={"hostname -I": "172.16.11.66 172.17.0.1\n"})  # fmt: skip
    card.symptom = "Our two-node deployment has been starting for 20 minutes. Is it just slow?"
    r = _run(card, tmp_path)
    assert (r.root_cause == "killed_externally") is not elsewhere, (r.root_cause, r.summary)


@pytest.mark.parametrize(
    ("lines", "addrs", "bridges"),
    [
        (["lo UNKNOWN 127.0.0.1/8", "eth0 UP 10.0.0.5/24", "docker0 DOWN 172.17.0.1/16"],
         ["10.0.0.5", "172.17.0.1"], ["172.17.0"]),
        (["10.0.0.5 172.17.0.1"], ["10.0.0.5", "172.17.0.1"], ["172.17.0"]),
        (["10.0.0.1"], ["10.0.0.1"], []),  # a lone address ending in .1 is the machine's own
    ],
)  # fmt: skip
def test_the_machines_addresses_and_its_container_bridges(
    lines: list[str], addrs: list[str], bridges: list[str]
) -> None:
    from agent.facts import machine_addresses

    assert machine_addresses(lines) == (addrs, bridges)


@pytest.mark.parametrize(
    ("line", "shm"),
    [
        ("pod:262:301 [0] misc/shmutils.cc:88 NCCL WARN Error: failed to extend "
         "/dev/shm/nccl-Qm3ZtP to 9637892 bytes, error: No space left on device (28)", True),
        ("OSError: [Errno 28] No space left on device: '/data/ckpt/model-00003.safetensors'",
         False),  # control: a disk the launch writes to
    ],
)  # fmt: skip
def test_a_write_to_dev_shm_that_found_no_space_rules_the_disks_out(line: str, shm: bool) -> None:
    """NCCL's "failed to extend /dev/shm/nccl-... No space left on device" in a pod whose df was
    not read by the disk tool: disk_full stayed open beside shm_too_small (a model session's
    conclusion lacked it as ruled out). The failing write names its own file."""
    from agent.signatures import Match
    from agent.state import Observation

    log = Observation(id="o9", tool="container_logs", args={}, ok=True, lines=[line], data={},
                      round=0)  # fmt: skip
    hit = Match(signature="s", label="shm_too_small" if shm else "disk_full", strength="fatal",
                line=line, line_no=0)  # fmt: skip
    said: list[tuple[str, float]] = []
    host_rules(Facts(), [(log, hit)], lambda lb, k, w, o, ln, n: said.append((lb, w)))
    against = [w for lb, w in said if lb == "disk_full" and w < 0]
    assert bool(against) is shm, said
