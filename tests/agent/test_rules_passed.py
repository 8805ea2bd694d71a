"""A stage the launch got past rules out the failures of that stage; a launch that died on its own
error was not killed from outside. Each form has controls that must not trigger it: a label with
support of its own, a line from an earlier launch, a grep hit, a live launch."""

from __future__ import annotations

from typing import Any

import pytest

from agent.rules import passed as rules_passed
from tests.agent.test_rules import GPU_CLEAN, PS_IDLE, PS_SERVER, _card, _run

VLLM_START = "INFO 05-08 00:41:30 [api_server.py:1043] vLLM API server version 0.9.0\n"
WEIGHTS = "INFO 05-08 00:41:42 [loader.py:458] Loading weights took 6.71 seconds\n"
KV = "INFO 05-08 00:41:50 [kv_cache_utils.py:634] GPU KV cache size: 497,408 tokens\n"
BAD_ARG = (
    "Traceback (most recent call last):\n"
    '  File "/usr/lib/python3/site-packages/vllm/engine/arg_utils.py", line 1012, in create_engine_config\n'
    "ValueError: max_num_batched_tokens (2048) is smaller than max_model_len (32768).\n"
)


@pytest.mark.parametrize(("stage", "rx"), [(s, rx) for s, rx in rules_passed.stages()])
def test_each_stage_matches_its_examples_and_not_its_counter_examples(stage: Any, rx: Any) -> None:
    for line in stage.examples:
        assert rx.search(line), (stage.name, line)
    for line in stage.not_examples:
        assert not rx.search(line), (stage.name, line)


def test_weights_and_kv_lines_rule_out_their_stages_failures(tmp_path: Any) -> None:
    log = VLLM_START + WEIGHTS + KV + BAD_ARG
    r = _run(_card({"/var/log/vllm/server.log": log}, PS_IDLE, GPU_CLEAN), tmp_path)
    assert r.root_cause == "bad_launch_argument", r.summary
    for label in ("gpu_oom_weights", "model_load_error", "kv_cache_no_room"):
        assert label in r.ruled_out, (label, r.ruled_out)


def test_control_no_stage_line_rules_nothing_out(tmp_path: Any) -> None:
    r = _run(
        _card({"/var/log/vllm/server.log": VLLM_START + BAD_ARG}, PS_IDLE, GPU_CLEAN), tmp_path
    )
    assert "model_load_error" not in r.ruled_out
    # (the launch ended on its own error, its log read from the start: kv_cache_no_room falls
    # for that, never for a stage it was not shown to pass)
    stage_rx = dict((s.name, rx) for s, rx in rules_passed.stages())["the KV cache was sized"]
    cited = [e.line for h in r.hypotheses if h.label == "kv_cache_no_room" for e in h.against]
    assert not any(stage_rx.search(c) for c in cited), cited


def test_control_a_stage_line_of_an_earlier_launch_proves_nothing_now(tmp_path: Any) -> None:
    old = VLLM_START + WEIGHTS + KV + "INFO:     Shutting down\n"
    r = _run(
        _card({"/var/log/vllm/server.log": old + VLLM_START + BAD_ARG}, PS_IDLE, GPU_CLEAN),
        tmp_path,
    )
    assert "model_load_error" not in r.ruled_out, r.ruled_out


def test_control_a_label_with_its_own_support_is_not_ruled_out_by_a_stage(tmp_path: Any) -> None:
    # the target model loaded, then a second load (a draft model) ran out of GPU memory
    oom = (
        "Traceback (most recent call last):\n"
        '  File "/usr/lib/python3/site-packages/vllm/model_executor/model_loader/default_loader.py", line 269, in load_weights\n'
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 30.00 GiB. GPU 0 has a "
        "total capacity of 79.10 GiB of which 2.02 GiB is free. Of the allocated memory 75.10 GiB "
        "is allocated by PyTorch.\n"
    )
    log = VLLM_START + WEIGHTS + "INFO 05-08 00:41:44 [loader.py:120] Loading weights\n" + oom
    r = _run(_card({"/var/log/vllm/server.log": log}, PS_IDLE, GPU_CLEAN), tmp_path)
    assert "gpu_oom_weights" not in r.ruled_out or r.root_cause == "cuda_oom_runtime", r.hypotheses


def test_an_own_traceback_at_the_end_rules_out_a_kill(tmp_path: Any) -> None:
    r = _run(
        _card({"/var/log/vllm/server.log": VLLM_START + BAD_ARG}, PS_IDLE, GPU_CLEAN), tmp_path
    )
    assert "host_oom_killed" in r.ruled_out, r.ruled_out


def test_control_a_kernel_oom_kill_keeps_host_oom_killed(tmp_path: Any) -> None:
    dmesg = (
        "[Fri May  8 00:41:55 2026] Out of memory: Killed process 5120 (python3) total-vm:91234560kB, "
        "anon-rss:60123456kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:123456kB oom_score_adj:0\n"
    )
    log = (
        VLLM_START
        + WEIGHTS
        + 'Traceback (most recent call last):\n  File "x.py", line 1\nEOFError\n'
    )
    r = _run(_card({"/var/log/vllm/server.log": log}, PS_IDLE, GPU_CLEAN, dmesg=dmesg), tmp_path)
    assert "host_oom_killed" not in r.ruled_out, (r.root_cause, r.ruled_out)


def test_control_a_live_launch_is_not_said_to_have_ended(tmp_path: Any) -> None:
    lines = [ln for ln in BAD_ARG.splitlines()]
    assert rules_passed.own_end(lines) == lines[-1]
    r = _run(
        _card({"/var/log/vllm/server.log": VLLM_START + WEIGHTS + BAD_ARG}, PS_SERVER, GPU_CLEAN),
        tmp_path,
    )
    assert not any(
        e.line == lines[-1] for h in r.hypotheses if h.label == "host_oom_killed" for e in h.against
    ), r.hypotheses


def test_own_end_skips_signals_peers_and_see_above_lines() -> None:
    assert rules_passed.own_end(["INFO start", "Killed"]) is None
    peer = [
        "Traceback (most recent call last):",
        '  File "x.py", line 3, in <module>',
        "RuntimeError: Connection closed by peer [10.0.0.2]:29500",
    ]
    assert rules_passed.own_end(peer) is None


def test_a_refused_command_line_rules_out_every_loading_failure(tmp_path: Any) -> None:
    before, rx = rules_passed.ended_before()
    assert all(rx.search(ex) for ex in before.examples)
    log = "usage: vllm [-h] [-v] {chat,complete,serve} ...\nvllm: error: unrecognized arguments: --task=embed\n"
    r = _run(_card({"/var/log/vllm/server.log": log}, PS_IDLE, GPU_CLEAN), tmp_path)
    assert r.root_cause == "bad_launch_argument", r.summary
    assert {"model_load_error", "gpu_oom_weights", "kv_cache_no_room"} <= set(r.ruled_out)


def test_control_an_error_after_loading_began_rules_nothing_out_as_never_started(
    tmp_path: Any,
) -> None:
    log = VLLM_START + "INFO 05-08 00:41:35 [loader.py:120] Loading weights\n" + BAD_ARG
    r = _run(_card({"/var/log/vllm/server.log": log}, PS_IDLE, GPU_CLEAN), tmp_path)
    notes = [e.line for h in r.hypotheses if h.label == "gpu_oom_weights" for e in h.against]
    assert not any("error: unrecognized" in n for n in notes), notes


def test_a_log_that_advances_rules_out_a_stuck_collective(tmp_path: Any) -> None:
    from tests.agent.test_rules import GPU_HELD, LOADING

    start = VLLM_START + "INFO 05-08 00:41:35 [loader.py:120] Loading weights\n"
    snaps = [start + LOADING.format(p=10, n=3, s=6), start + LOADING.format(p=40, n=12, s=25)]
    r = _run(_card({"/var/log/vllm/server.log": snaps}, PS_SERVER, GPU_HELD), tmp_path)
    assert r.root_cause == "still_starting", r.summary
    assert "nccl_failure" in r.ruled_out, r.ruled_out


@pytest.mark.parametrize(("stage", "begins", "ends"), rules_passed.begun_stages())
def test_each_begun_stage_matches_its_begin_examples(stage: Any, begins: Any, ends: Any) -> None:
    for line in stage.begin_examples:
        assert begins.search(line) and not ends.search(line), (stage.name, line)
    for line in stage.begin_not_examples:
        assert not begins.search(line), (stage.name, line)


KILL_DMESG = (
    "[Thu Aug 27 14:28:03 2026] Out of memory: Killed process 5120 (python3) total-vm:91234560kB, "
    "anon-rss:60123456kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:123456kB oom_score_adj:0\n"
)
LOADING_START = VLLM_START + (
    "INFO 05-08 00:41:35 [gpu_model_runner.py:3560] Starting to load model /models/glm...\n"
)


def test_a_launch_killed_while_loading_weights_never_reached_the_kv_cache(tmp_path: Any) -> None:
    from tests.agent.test_rules import LOADING

    log = LOADING_START + LOADING.format(p=57, n=17, s=44) + "\n"
    r = _run(
        _card({"/var/log/vllm/server.log": log}, PS_IDLE, GPU_CLEAN, dmesg=KILL_DMESG), tmp_path
    )
    for label in ("kv_cache_no_room", "cuda_oom_runtime"):
        assert label in r.ruled_out, (label, r.ruled_out)
    cited = [e.line for h in r.hypotheses if h.label == "kv_cache_no_room" for e in h.against]
    assert any("57% Completed" in c for c in cited), cited


def test_control_a_finished_load_does_not_say_the_kv_cache_was_never_reached(tmp_path: Any) -> None:
    from tests.agent.test_rules import LOADING

    done = "Loading safetensors checkpoint shards: 100% Completed | 30/30 [01:03<00:00,  2.1s/it]\n"
    log = LOADING_START + LOADING.format(p=57, n=17, s=44) + "\n" + done
    r = _run(
        _card({"/var/log/vllm/server.log": log}, PS_IDLE, GPU_CLEAN, dmesg=KILL_DMESG), tmp_path
    )
    notes = [e.note for h in r.hypotheses if h.label == "kv_cache_no_room" for e in h.against]
    assert not any("later stage" in n for n in notes), notes


def test_control_a_kv_failure_after_the_load_keeps_its_label(tmp_path: Any) -> None:
    kv = (
        "INFO 05-08 00:41:50 [gpu_worker.py:227] Available KV cache memory: -2.26 GiB\n"
        "ERROR 05-08 00:41:51 [core.py:866] ValueError: No available memory for the cache blocks. "
        "Try increasing `gpu_memory_utilization` when initializing the engine.\n"
    )
    log = LOADING_START + WEIGHTS + kv
    r = _run(_card({"/var/log/vllm/server.log": log}, PS_IDLE, GPU_CLEAN), tmp_path)
    assert r.root_cause == "kv_cache_no_room", r.summary


def test_the_named_logs_run_decides_the_stop_not_yesterdays_log_beside_it(tmp_path: Any) -> None:
    """Only the launch's current run counts: yesterday's log, which loaded and then failed on
    the KV cache, neither blocks nor supports anything about today's run killed while loading."""
    from tests.agent.test_rules import LOADING

    old = (
        "INFO 08-26 19:02:31 [default_loader.py:314] Loading weights took 768.52 seconds\n"
        "INFO 08-26 19:03:10 [gpu_worker.py:359] Available KV cache memory: -2.26 GiB\n"
        "ERROR 08-26 19:03:11 [core.py:866] ValueError: No available memory for the cache blocks.\n"
    )
    today = (
        "INFO 08-27 14:20:09 [api_server.py:1043] vLLM API server version 0.9.0\n"
        "INFO 08-27 14:20:56 [gpu_model_runner.py:3560] Starting to load model /models/glm...\n"
        + LOADING.format(p=57, n=17, s=44)
        + "\n"
    )
    files = {"/var/log/vllm/server.log": today, "/var/log/vllm/server-08-26.log": old}
    from agent.runner import investigate
    from agent.settings import Settings
    from cards.replay import ReplayHost

    card = _card(files, PS_IDLE, GPU_CLEAN, dmesg=KILL_DMESG)
    r = investigate(
        ReplayHost(card),
        card.symptom,
        settings=Settings(home=tmp_path / "h"),
        logs=["/var/log/vllm/server.log"],
    )
    assert r.root_cause != "kv_cache_no_room", r.summary
    cited = [e.line for h in r.hypotheses if h.label == "kv_cache_no_room" for e in h.against]
    assert any("57% Completed" in c for c in cited), r.hypotheses


GPU_TABLE = (
    "+----------------------------------------------------------------------+\n"
    "| Processes:                                                           |\n"
    "|  GPU   GI   CI        PID   Type   Process name            GPU Memory |\n"
    "|=======================================================================|\n"
    "|    0   N/A  N/A      {pid}      C   python3                 70200MiB |\n"
    "+----------------------------------------------------------------------+\n"
)
GPU_HELD_ROW = "0, NVIDIA H100 80GB HBM3, 70211 MiB, 10797 MiB, 81559 MiB, 0 %\n"


@pytest.mark.parametrize(("pid", "refuted"), [("5120", True), ("8841", False)])
def test_the_launchs_process_on_the_gpu_rules_out_a_driver_mismatch(
    tmp_path: Any, pid: str, refuted: bool
) -> None:
    """The launch's own pid holding GPU memory made a CUDA context; another user's (8841, the
    control) says nothing about this launch's driver and runtime."""
    ps = PS_SERVER + (
        "bob       8841 30.0  2.0 912345 412345 ?      Sl   09:02   2:11 python main.py --port 8188\n"
    )
    card = _card(
        {
            "/var/log/vllm/server.log": VLLM_START
            + "INFO 05-08 00:41:35 [loader.py:120] Loading weights\n"
        },
        ps,
        GPU_HELD_ROW,
        nvidia_smi_full=GPU_TABLE.format(pid=pid),
    )
    card.symptom = "Is vLLM not detecting the GPU? it never answers"
    r = _run(card, tmp_path)
    h = next((h for h in r.hypotheses if h.label == "cuda_driver_mismatch"), None)
    assert h is not None, r.hypotheses
    cited = any(pid in e.line and "MiB" in e.line for e in h.against)
    assert cited is refuted, h


def test_cuda_stage_lines_rule_out_a_driver_mismatch_and_a_mismatch_line_keeps_it(
    tmp_path: Any,
) -> None:
    took = "INFO 05-08 00:41:43 [gpu_model_runner.py:1347] Model loading took 14.9596 GiB and 8.7 seconds\n"
    card = _card({"/var/log/vllm/server.log": VLLM_START + took + BAD_ARG}, PS_IDLE, GPU_CLEAN)
    card.symptom = "It died: is the CUDA driver version wrong?"
    r = _run(card, tmp_path)
    assert "cuda_driver_mismatch" in r.ruled_out, r.hypotheses
    ptx = "RuntimeError: CUDA error: the provided PTX was compiled with an unsupported toolchain.\n"
    r2 = _run(
        _card({"/var/log/vllm/server.log": VLLM_START + took + ptx}, PS_IDLE, GPU_CLEAN),
        tmp_path / "2",
    )
    assert r2.root_cause == "cuda_driver_mismatch", r2.summary


def test_an_own_end_read_from_the_launchs_start_rules_out_the_failures_that_announce_themselves(
    tmp_path: Any,
) -> None:
    """The launch ended on its own error and its log was read from the start: no CUDA OOM line,
    no KV-cache sizing error in it, so neither happened (each prints its own line)."""
    card = _card({"/var/log/vllm/server.log": VLLM_START + BAD_ARG}, PS_IDLE, GPU_CLEAN)
    card.symptom = "It died at start-up: out of memory?"
    r = _run(card, tmp_path)
    assert r.root_cause == "bad_launch_argument", r.summary
    for label in ("gpu_oom_weights", "cuda_oom_runtime", "kv_cache_no_room"):
        assert label in r.ruled_out, (label, r.hypotheses)


def test_control_a_log_read_in_part_refutes_nothing_by_a_missing_line(tmp_path: Any) -> None:
    """400 lines with no banner: the read is the file's last 200, the run's start unread; a
    CUDA OOM could be in the part never read."""
    filler = "".join(f"INFO 05-08 00:41:{i % 60:02d} [engine.py:1] step {i}\n" for i in range(400))
    card = _card({"/var/log/vllm/server.log": filler + BAD_ARG}, PS_IDLE, GPU_CLEAN)
    card.symptom = "It died at start-up: out of memory?"
    r = _run(card, tmp_path)
    notes = [
        e.line
        for h in r.hypotheses
        if h.label in ("gpu_oom_weights", "cuda_oom_runtime")
        for e in h.against
        if "max_num_batched_tokens" in e.line
    ]
    assert not notes, r.hypotheses
