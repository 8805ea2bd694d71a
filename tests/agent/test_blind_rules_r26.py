"""Rules added after blind round 26 (scored before any change), each with a control that must
not trigger it: a fix is a general form or fact, never an answer keyed to one card."""

from __future__ import annotations

from typing import Any

import pytest

from agent import facts as facts_mod
from agent import kills
from agent.containers import NOT_FOR_WANT_OF_A_GPU, no_gpu_line
from tests.agent.test_rules import GPU_CLEAN, PS_HEADER, PS_IDLE, _card, _run

LMDEPLOY_LOG = (
    "2024-07-19 10:21:31,907 - lmdeploy - INFO - input backend=turbomind, tp=4\n"
    "2024-07-19 10:21:32,402 - lmdeploy - WARNING - model_config:\n"
    "[TM][WARNING] Device 3 peer access Device 2 is not available.\n"
)


@pytest.mark.parametrize(
    ("stamp", "comm", "own"),
    [
        ("Fri Jul 19 10:21:58 2024", "lmdeploy", True),  # the launch's program, in its life
        ("Tue Jul 16 22:47:03 2024", "lmdeploy", False),  # control: days before the launch
        ("Fri Jul 19 10:21:58 2024", "gzip", False),  # control: no program a launch runs
    ],
)
def test_a_kernel_crash_line_of_the_launch_is_a_crash_not_a_stop_from_outside(
    tmp_path: Any, stamp: str, comm: str, own: bool
) -> None:
    """The kernel's "traps: lmdeploy[N] trap divide error" within the launch's life says the
    process died of its own fault: never "killed from outside, inferred from absence"; the
    verdict abstains and quotes it. Another program's, or one from days before, is no proof."""
    dmesg = f"[{stamp}] traps: {comm}[2771397] trap divide error ip:7f3b sp:7f2a error:0 in x.so\n"
    card = _card({"/home/u/logs/glm4.log": LMDEPLOY_LOG}, PS_IDLE, GPU_CLEAN, dmesg=dmesg)
    r = _run(card, tmp_path)
    if own:
        assert r.root_cause != "killed_externally", r.summary
        assert r.status == "insufficient_evidence" and "trap divide error" in r.summary
    else:
        assert "trap divide error" not in r.summary


def test_crashed_names_the_process_of_a_kernel_fault_line() -> None:
    assert kills.crashed("[x] traps: lmdeploy[12] trap divide error ip:1 sp:2") == (12, "lmdeploy")
    assert kills.crashed("[x] python3[4412]: segfault at 0 ip 0 sp 0 error 4 in libc") == (
        4412,
        "python3",
    )
    assert kills.crashed("[x] docker0: port 1(veth1) entered disabled state") is None


def _log_obs(oid: str, path: str, text: str) -> dict[str, Any]:
    """A log_tail observation of `text`, as the rules read one."""
    return {"id": oid, "tool": "log_tail", "args": {"path": path}, "ok": True,
            "lines": text.splitlines(), "data": {}}  # fmt: skip


VLLM_START = (
    "INFO 07-02 14:02:11 [__init__.py:244] Automatically detected platform cuda.\n"
    "INFO 07-02 14:02:14 [api_server.py:1287] vLLM API server version 0.9.1\n"
    "INFO 07-02 14:03:01 [kv_cache_utils.py:719] Maximum concurrency for 32,768 tokens: 6.44x\n"
)
YESTERDAY = (
    "INFO 07-01 16:40:05 [api_server.py:1287] vLLM API server version 0.9.1\n"
    "ERROR 07-01 16:40:20 [core.py:515] ValueError: Free memory on device (41.37/79.25 GiB) on "
    "startup is less than desired GPU memory utilization (0.9, 71.33 GiB). Decrease GPU memory "
    "utilization or reduce GPU memory used by other processes.\n"
)


@pytest.mark.parametrize("current_starts", [True, False])
def test_a_rotated_log_of_an_earlier_run_is_not_this_launchs_evidence(
    tmp_path: Any, current_starts: bool
) -> None:
    """server.log.1 ended yesterday on an error; server.log starts a launch of its own today:
    yesterday's error says nothing about today's launch. The control: a server.log that logs no
    start of its own continues the rotation, whose lines are still the launch's."""
    from agent.hits import signature_hits

    current = VLLM_START if current_starts else "INFO 07-02 14:03:01 still capturing\n"
    obs = [
        _log_obs("o1", "/srv/logs/server.log", current),
        _log_obs("o2", "/srv/logs/server.log.1", YESTERDAY),
    ]
    cited = [m.line for _o, m in signature_hits(obs)]  # type: ignore[arg-type]
    assert any("Free memory on device" in ln for ln in cited) is (not current_starts)


TGI_LOG = (
    '2023-07-20T12:31:05.102811Z  INFO text_generation_launcher: Args {{ model_id: "LLaMA-13B", '
    "num_shard: Some(2), port: 6006, master_port: 29500 }}\n"
    "2023-07-20T12:31:14.506674Z  WARN text_generation_launcher: Could not import Flash Attention "
    "enabled models: {why}\n"
    "2023-07-20T12:31:16.820419Z ERROR text_generation_launcher: Error when initializing model\n"
    "Traceback (most recent call last):\n"
    '  File "/srv/tgi/server/text_generation_server/models/__init__.py", line 193, in get_model\n'
    '    raise NotImplementedError(FLASH_ATT_ERROR_MESSAGE.format("Sharded Llama"))\n'
    "NotImplementedError: Sharded Llama requires Flash Attention enabled models.\n"
    "Error: ShardCannotStart\n"
)


@pytest.mark.parametrize(
    ("why", "label"),
    [
        ("No module named 'vllm_cache_ops'", "dependency_error"),
        ("GPU with CUDA capability 7 0 is not supported", "unsupported_gpu_arch"),
    ],
)
def test_an_earlier_failed_import_is_the_cause_of_the_error_that_asks_for_it(
    tmp_path: Any, why: str, label: str
) -> None:
    """ "Could not import Flash Attention enabled models: X" before "Sharded Llama requires Flash
    Attention enabled models": the failed import is the cause, labelled by what it failed of."""
    r = _run(_card({"/home/m/tgi.log": TGI_LOG.format(why=why)}, PS_IDLE, GPU_CLEAN), tmp_path)
    assert r.root_cause == label, (r.summary, r.hypotheses)
    assert any("Could not import Flash Attention" in e.line for e in r.evidence)


def test_an_unrelated_import_warning_explains_nothing() -> None:
    """The control: a failed import that shares no words with the fatal error is no chain."""
    from agent.rules.causes import import_chain

    log = TGI_LOG.format(why="x").replace(
        "Could not import Flash Attention enabled models: x",
        "Could not import optional tokenizer plugin: No module named 'sentencepiece_extra'",
    )
    obs = [_log_obs("o1", "/l", log)]
    assert import_chain(obs, []) is None  # type: ignore[arg-type]


def test_a_no_gpu_warning_does_not_explain_a_failure_of_its_own_kind() -> None:
    """NGC's "The NVIDIA Driver was not detected" is a no-GPU line; a model the server cannot
    load, a taken port or a full disk are failures a missing GPU does not cause."""
    assert no_gpu_line("WARNING: The NVIDIA Driver was not detected.  GPU functionality will not")
    assert not no_gpu_line("E0327 unexpected platform type caffe2_netdef for resnet50_netdef")
    assert "model_load_error" in NOT_FOR_WANT_OF_A_GPU
    assert "cuda_driver_mismatch" not in NOT_FOR_WANT_OF_A_GPU


def _recs(ps: str) -> dict[int, dict[str, Any]]:
    from tools.processes import parse_ps

    return {p.pid: {**p.model_dump(mode="json"), "zombie": False} for p in parse_ps(ps).procs}


def test_a_spawned_worker_belongs_to_the_one_live_main_of_its_program_user_and_minute() -> None:
    """Without a ppid column, a `multiprocessing.spawn` child holding GPU memory is the worker of
    the one live server main of the same program, user and start minute; with two such mains
    (the control) it is no one's by this rule."""
    main = (
        "ann  51203  1.1  3.9 58419224 41301120 ?   Sl   08:31   3:02 /opt/v/bin/python3 -m "
        "vllm.entrypoints.openai.api_server --model /models/Qwen2.5-72B --port 8000\n"
    )
    child = (
        "ann  51388  0.6  0.4 9120332 4410216 ?     Sl   08:31   1:40 /opt/v/bin/python3 -c from "
        "multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=5, pipe_handle=7) "
        "--multiprocessing-fork\n"
    )
    recs = _recs(PS_HEADER + main + child)
    recs[51203]["role"] = "main"
    assert facts_mod._spawned_by_live_main(recs, 51388, set()) == 51203
    twin = main.replace("51203", "51299").replace("8000", "8001")
    recs = _recs(PS_HEADER + main + twin + child)
    for p in (51203, 51299):
        recs[p]["role"] = "main"
    assert facts_mod._spawned_by_live_main(recs, 51388, set()) is None


@pytest.mark.parametrize(
    ("line", "model"),
    [
        ('INFO text_generation_launcher: Args { model_id: "LLaMA-13B", port: 6006 }', "llama-13b"),
        ("INFO non-default args: {'model': '/models/Qwen2.5-14B', 'port': 8300}", "qwen2.5-14b"),
        # the control: an example command in a hint names no model the launch serves
        ("It is recommended to run: python3 -m sglang.compile_deep_gemm --model DeepSeek-V3", None),
    ],
)
def test_the_model_a_log_serves_is_read_from_its_argument_dump_only(
    line: str, model: str | None
) -> None:
    found = [
        facts_mod._model_key(next(g for g in m.groups() if g))
        for m in facts_mod._LOG_MODEL.finditer(line)
    ]
    assert found == ([model] if model else [])


def test_tgi_args_name_the_port_and_not_the_master_port() -> None:
    line = 'Args { model_id: "LLaMA-13B", master_port: 29500, port: 6006, shard_uds_path: "/tmp" }'
    assert [int(m.group(1)) for m in facts_mod.LOG_PORT.finditer(line)] == [6006]


READY_THEN_NOTHING = (
    "INFO 02-22 10:12:01 [api_server.py:1885] vLLM API server version 0.10.1\n"
    "INFO 02-22 10:13:40 [api_server.py:1920] Starting vLLM API server 0 on http://0.0.0.0:8081\n"
    "(APIServer pid=14) INFO:     Started server process [14]\n"
    "(APIServer pid=14) INFO:     Application startup complete.\n"
)


@pytest.mark.parametrize("kernel_log_read", [False, True])
def test_a_ready_server_no_process_here_runs_is_not_called_killed_without_the_kernel_log(
    tmp_path: Any, kernel_log_read: bool
) -> None:
    """Up, then no process on this host runs it, no line of an end: with the kernel log unread
    an OOM kill, a stop from outside and a server on another machine (a cluster job's node)
    cannot be told apart, so the verdict abstains. The control: a kernel log that was read and
    shows no kill leaves the stop from outside as the inference it was."""
    extra = {"dmesg": "[Sun Feb 22 09:00:00 2026] eth0: link up\n"} if kernel_log_read else {}
    card = _card({"/h/j/logs/job.err": READY_THEN_NOTHING}, PS_IDLE, GPU_CLEAN, **extra)
    r = _run(card, tmp_path)
    if kernel_log_read:
        assert r.root_cause == "killed_externally", r.summary
    else:
        assert r.status == "insufficient_evidence", r.summary
        assert "cannot be told apart" in (r.next_step or "")


@pytest.mark.parametrize(
    ("cited", "accepted"),
    [
        ("traps: lmdeploy[2771397] trap divide error", True),
        ("[TM][WARNING] Device 3 peer access Device 2 is not available.", False),  # control
    ],
)
def test_the_gate_takes_the_kernels_crash_line_of_the_launch_as_its_fatal_line(
    cited: str, accepted: bool
) -> None:
    """A conclusion that cites the kernel's fault line of the launch's own process cites its
    crash (the process printed nothing after it); a warning it printed is no crash."""
    from agent.facts import derive
    from agent.observe import run_many
    from agent.rules.guardrails import check_conclusion
    from cards.replay import ReplayHost

    trap = (
        "[Fri Jul 19 10:21:58 2024] traps: lmdeploy[2771397] trap divide error ip:7f3b "
        "sp:7f2a error:0 in _turbomind.so"
    )
    card = _card({"/home/u/logs/glm4.log": LMDEPLOY_LOG}, PS_IDLE, GPU_CLEAN, dmesg=trap + "\n")
    calls = [("processes", {}), ("log_tail", {"path": "/home/u/logs/glm4.log"}), ("dmesg", {})]
    obs: list[Any] = run_many(ReplayHost(card), calls, 1, 0)
    line = trap if accepted else cited
    action: Any = {
        "kind": "conclude",
        "label": "bad_launch_argument",
        "evidence": [{"observation": "o3" if accepted else "o2", "line": line}],
    }
    problems = check_conclusion(action, obs, derive(obs))
    assert any("cites no fatal line" in p for p in problems) is (not accepted), problems


def test_a_segfault_inside_libcuda_names_no_driver_mismatch() -> None:
    """The kernel's fault line proves the launch crashed, not why: a segfault that happened in
    libcuda.so is no driver/CUDA version error, so cuda_driver_mismatch is refused on it alone
    (the control above: the same kind of line stands as the crash of a launch-argument fault)."""
    from agent.facts import derive
    from agent.observe import run_many
    from agent.rules.guardrails import check_conclusion
    from cards.replay import ReplayHost

    segv = (
        "[Fri Jul 19 10:21:58 2024] lmdeploy[2771397]: segfault at 0 ip 00007f6e sp 00007ffd "
        "error 4 in libcuda.so.550.127.05[7f6e1b800000+1c2f000]"
    )
    card = _card({"/home/u/logs/glm4.log": LMDEPLOY_LOG}, PS_IDLE, GPU_CLEAN, dmesg=segv + "\n")
    calls = [("processes", {}), ("log_tail", {"path": "/home/u/logs/glm4.log"}), ("dmesg", {})]
    obs: list[Any] = run_many(ReplayHost(card), calls, 1, 0)
    cite = [{"observation": "o3", "line": segv}]
    facts = derive(obs)
    driver: Any = {"kind": "conclude", "label": "cuda_driver_mismatch", "evidence": cite}
    assert any("what the driver refused" in p for p in check_conclusion(driver, obs, facts))
    launch: Any = {"kind": "conclude", "label": "bad_launch_argument", "evidence": cite}
    assert not any("cites no fatal line" in p for p in check_conclusion(launch, obs, facts))
