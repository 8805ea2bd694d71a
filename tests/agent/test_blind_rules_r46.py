"""Rules and knowledge after blind rounds 46 and 47 (scored before any change), each with a
control that must not trigger it: a fix is a general form or fact, never an answer keyed to one
card."""

from __future__ import annotations

import pytest

from agent.evidence import launch_line
from tools.log_window import last_progress, window_for

BAR = "Loading weights from safetensors:  {pct}%|#   | {done}/163 [{el}<07:48,  6.24s/it]"


def _bar(done: int, elapsed: str) -> str:
    return BAR.format(pct=done * 100 // 163, done=done, el=elapsed)


def test_lmdeploy_marks_the_start_of_its_launch() -> None:
    """AsyncEngine logs its inputs once per launch: a log that starts with it starts anew, so
    a rotated copy beside it is an earlier run's story."""
    line = (
        "2025-01-20 08:50:29,611 - lmdeploy - INFO - async_engine.py:260 - input backend=pytorch, "
        "backend_config=PytorchEngineConfig(dtype='auto', tp=8)"
    )
    assert launch_line(line)
    # control: its chat-template line, printed right after, starts nothing
    assert not launch_line(
        "2025-01-20 08:50:29,611 - lmdeploy - INFO - async_engine.py:269 - input "
        "chat_template_config=None"
    )


def test_a_bar_that_prints_every_tenth_item_is_given_the_time_between_its_lines() -> None:
    """6.24 s per item, printed every ~62 s (its own elapsed times): a watch must outlast the
    gap between printed lines, not one item."""
    lines = ["INFO start", _bar(78, "08:09"), _bar(88, "09:11")]
    p = last_progress(lines)
    assert p is not None and p.s_per_item == pytest.approx(6.24)
    assert p.s_per_print == pytest.approx(62.0)
    assert p.step_s() == pytest.approx(62.0)
    assert window_for(6.0, p, 600.0) == pytest.approx(1.5 * 62 + 1)
    assert "prints a line every" in p.describe()


@pytest.mark.parametrize(
    "lines",
    [
        # a bar printed on every item: its pace is the item's
        [_bar(87, "09:05"), _bar(88, "09:11")],
        # another bar before it (another total) says nothing of this one's gaps
        ["Loading shards: 100%|#| 4/4 [00:10<00:00, 2.5s/it]", _bar(88, "09:11")],
        # a single print: no gap known
        [_bar(88, "09:11")],
    ],
)
def test_a_bar_without_a_longer_gap_keeps_its_rate(lines: list[str]) -> None:
    p = last_progress(lines)
    assert p is not None
    assert p.step_s() == pytest.approx(6.24)
    assert p.s_per_print is None or p.s_per_print <= 6.24


@pytest.mark.parametrize(("done", "slow"), [(12, True), (16, False)])
def test_a_finished_bar_has_no_next_step_to_wait_for(done: int, slow: bool) -> None:
    """A bar printed every ~22 s, watched 30 s without a new line: while it runs the watch was
    too short to see a print (`hang.slow_bar`); once it reads 16/16 there is nothing left for it
    to print, and the silence after it counts."""
    from agent.facts import Facts
    from agent.rules.hang import slow_bar

    tail = [
        "Loading safetensors checkpoint shards:  25% Completed | 4/16 [00:21<01:03,  2.66s/it]",
        f"Loading safetensors checkpoint shards:  75% Completed | {done}/16 [00:43<00:00,  2.71s/it]",
    ]
    prog = last_progress(tail)
    assert prog is not None and prog.s_per_print == pytest.approx(22.0)
    o = {"id": "o12", "tool": "log_tail", "args": {"path": "/l.log", "watch_s": 6}, "ok": True,
         "round": 1, "lines": ["# /l.log: 2 lines", *tail],
         "data": {"watched": True, "grew": False, "window_s": 30.0,
                  "last_progress": prog.model_dump(mode="json")}}  # fmt: skip
    got = slow_bar([o], Facts(ps_available=True, server_pids=[7]))  # type: ignore[list-item]
    assert (got is not None) == slow, got


@pytest.mark.parametrize(
    ("line", "signature"),
    [
        ("Failed, NCCL error /app/tensorrt_llm/cpp/tensorrt_llm/plugins/ncclPlugin/"
         "allreducePlugin.cpp:295 'internal error - please report this issue to the NCCL developers'",
         "nccl-error-torch"),
        # the tensorrtllm backend reads an unset optional parameter, logs a WARNING and goes on
        ("[TensorRT-LLM][WARNING] [json.exception.type_error.302] type must be number, but is null",
         None),
        # control: the same parse failing the model instance is the launch's fatal error
        ("UNAVAILABLE: Internal: unexpected error when creating modelInstanceState: "
         "[json.exception.type_error.302] type must be array, but is number",
         "triton-trtllm-json-type-error"),
    ],
)  # fmt: skip
def test_ncclcheck_fails_the_launch_and_a_warning_does_not(
    line: str, signature: str | None
) -> None:
    from agent.signatures import scan

    fatal = [m.signature for m in scan([line]) if m.strength == "fatal"]
    assert fatal == ([signature] if signature else []), fatal


@pytest.mark.parametrize(
    ("function", "kind"),
    [
        # the parent's pool manager waiting for its spawned workers: no collective of its own
        ("_manager_spawn", None),
        # control: a spawned worker connecting back to its manager is the MPI bootstrap
        ("client_sync", "collective"),
    ],
)
def test_mpi4py_pool_manager_waits_for_workers_not_peers(function: str, kind: str | None) -> None:
    from tools.py_stacks import Frame, classify_frame

    frame = Frame(function=function, file="mpi4py/futures/_core.py", line=367)
    assert classify_frame(frame) == kind


@pytest.mark.parametrize(
    ("line", "external"),
    [
        ("mpirun noticed that process rank 5 with PID 41279 on node gpu-h200-14 exited on "
         "signal 9 (Killed).", True),
        # control: a rank that failed on its own is no signal from outside
        ("mpirun detected that one or more processes exited with non-zero status, thus causing",
         False),
    ],
)  # fmt: skip
def test_open_mpi_names_a_rank_ended_by_a_signal(line: str, external: bool) -> None:
    from agent.rules import proof
    from agent.signatures import scan

    assert proof.external_end(line) == external
    assert ("mpirun-rank-sigkill" in [m.signature for m in scan([line])]) == external


def test_the_best_clue_is_the_first_exception_not_what_it_took_down() -> None:
    """With nothing proven, the clue quoted is the launch's first exception (a traceback's last
    line under vLLM's ERROR prefix), not the workers' exits and the 'failed to start' after it."""
    from agent.brains.rulebook import _best_clue

    err = "ERROR 03-05 21:12:52 engine.py:400] "
    lines = [
        "INFO 03-05 21:12:42 api_server.py:912] vLLM API server version 0.7.3",
        f"{err}Something nobody knows went wrong",
        f"{err}Traceback (most recent call last):",
        f'{err}  File "/v/vllm/platforms/cuda.py", line 223, in get_attn_backend_cls',
        f"{err}ValueError: Something nobody knows went wrong",
        "ERROR 03-05 21:12:57 multiproc_worker_utils.py:124] Worker VllmWorkerProcess pid 8 died, "
        "exit code: -15",
        "RuntimeError: Engine process failed to start. See stack trace for the root cause.",
    ]
    o = {"id": "o9", "tool": "log_tail", "args": {"path": "/j/slurm.out"}, "ok": True,
         "round": 1, "lines": ["# /j/slurm.out: 7 lines", *lines], "data": {}}  # fmt: skip
    clue = _best_clue({"observations": [o], "hypotheses": {}})  # type: ignore[typeddict-item]
    assert clue is not None and clue[1] == lines[4], clue


def test_an_attention_backend_the_platform_lacks_is_a_setting() -> None:
    from agent.signatures import scan

    line = "ERROR 03-05 21:12:52 engine.py:400] ValueError: Invalid attention backend for cuda, with use_v1: False use_mla: False"  # noqa: E501
    assert [m.label for m in scan([line]) if m.strength == "fatal"] == ["bad_launch_argument"]
    # control: no backend at all for this GPU's compute capability is the architecture
    other = (
        "ValueError: No valid attention backend found for cuda with AttentionSelectorConfig(). "
        "Reasons: {FLASH_ATTN_MLA: [compute capability not supported]}."
    )
    assert "bad_launch_argument" not in [m.label for m in scan([other])]


@pytest.mark.parametrize(
    ("line", "oom"),
    [
        ("Server error: Allocation on device 0 would exceed allowed memory. (out of memory)", True),
        # control: a log line about a memory fraction that failed nothing
        ("INFO Using memory fraction 0.9: allowed memory 22.20 GiB", False),
    ],
)
def test_the_caching_allocator_under_a_memory_fraction_is_a_cuda_oom(line: str, oom: bool) -> None:
    from agent.signatures import scan

    assert ("cuda-oom" in [m.signature for m in scan([line])]) == oom


def _proxy_waiting(gpu_mib: int, args: str = "") -> object:
    """trtllm-serve's entry point alive; its log names ranks 0 and 1 loading, then Open MPI's
    report of rank 1 SIGKILLed; nvidia-smi shows `gpu_mib` on each GPU; no kernel OOM kill."""
    from cards.model import Invocation
    from tests.agent.test_rules import PS_HEADER, _card

    ps = PS_HEADER + (
        "svc      41210  0.2  0.6 42116880 13520440 ?   Sl   09:12   0:41 /opt/venv/bin/python3 "
        f"/opt/venv/bin/trtllm-serve /models/K --port 8000 --tp_size 2{args}\n"
        "root     52881  0.0  0.0  13260  4220 pts/2    R+   09:44   0:00 ps aux\n"
    )
    log = (
        "[TensorRT-LLM] TensorRT-LLM version: 1.3.0rc20\n"
        "[RANK 0] Loading safetensors weights in parallel: 100%|#| 64/64 [00:09<00:00,  6.91it/s]\n"
        "[RANK 1] Loading safetensors weights in parallel:  41%|#| 26/64 [00:04<00:06,  6.12it/s]\n"
        "mpirun noticed that process rank 1 with PID 41279 on node h exited on signal 9 (Killed).\n"
    )
    gpu = "".join(f"{i}, NVIDIA H200, {gpu_mib} MiB, 143164 MiB, 143771 MiB, 0 %\n" for i in (0, 1))
    card = _card({"/var/log/trtllm/k.log": log}, ps, gpu, dmesg="[Tue] NVRM: loading module\n")
    return card.model_copy(
        update={"engine": "trtllm", "invocation": Invocation(log="/var/log/trtllm/k.log")}
    )


@pytest.mark.parametrize(
    ("gpu_mib", "args", "killed"),
    [(0, "", True), (523, "", False), (0, " --nnodes 2", False)],
)
def test_an_entry_point_whose_ranks_are_all_gone_waits_for_nothing(
    tmp_path: object, gpu_mib: int, args: str, killed: bool
) -> None:
    """Every rank the log names gone, no GPU memory held, the entry point still up: its workers
    were ended (killed_externally, the kernel log clean of OOM kills). Control: a CUDA context
    on each GPU (523 MiB) is ranks alive somewhere this ps does not show; a launch over two
    machines may run its ranks on the other one."""
    from agent.facts import derive
    from tests.agent.test_rules import _run

    r = _run(_proxy_waiting(gpu_mib, args), tmp_path)  # type: ignore[arg-type]
    assert (r.root_cause == "killed_externally") == killed, (r.root_cause, r.summary)
    if killed:
        assert "all gone" in r.summary
    assert derive([]).ranks_gone == []


@pytest.mark.parametrize(
    ("line", "own"),
    [
        # a wrapper's report that a pid (yesterday's launch) exited: that it ended, not why
        ("2026-08-10T17:09:40+00:00 ERROR health check failed: trtllm-serve pid 28814 exited", False),
        ("ERROR 03-05 21:12:57 multiproc_worker_utils.py:124] Worker VllmWorkerProcess pid 881012 "
         "died, exit code: -15", False),
        # a watcher's readiness deadline passing: the server never answered, nothing of its own
        ("2026-08-11T09:42:06+00:00 ERROR health check timed out after 1800 s, leaving "
         "trtllm-serve running for inspection", False),
        # control: the server's own error in the same log stays its own
        ("ERROR 03-05 21:12:52 engine.py:400] RuntimeError: CUDA error: an illegal memory access", True),
    ],
)  # fmt: skip
def test_a_report_that_a_pid_ended_is_not_its_own_error(line: str, own: bool) -> None:
    """killed_externally is refused while the log holds an error of the process's own; a
    parent's or wrapper's line that a pid exited is no such error."""
    from agent.rules.own_fatal import own_fatal_since_launch

    o = {"id": "o7", "tool": "log_tail", "args": {"path": "/var/log/w.log"}, "ok": True,
         "round": 1, "lines": ["# /var/log/w.log: 1 line", line], "data": {}}  # fmt: skip
    got = own_fatal_since_launch([o])  # type: ignore[list-item]
    assert (got is not None) == own, got


@pytest.mark.parametrize(
    ("line", "label"),
    [
        # a flag run as a command: the continuation before it broke, the flags were dropped
        ("/work/llava/build_engine.sh: line 11: --max_multimodal_len: command not found",
         "bad_launch_argument"),
        # control: a program the shell cannot find is the environment's
        ("run_server.sh: line 12: vllm: command not found", "dependency_error"),
    ],
)  # fmt: skip
def test_a_flag_run_as_a_command_is_a_broken_continuation(line: str, label: str) -> None:
    from agent.signatures import scan

    assert [m.label for m in scan([line]) if m.strength == "fatal"] == [label]
