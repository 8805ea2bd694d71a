"""Rules added after blind rounds 23 and 24 (scored before any change), each with a control
that must not trigger it: a fix is a general form or fact, never an answer keyed to one card."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent.settings import Settings
from cards.model import IncidentCard
from cards.replay import ReplayHost
from tests.agent.test_rules import GPU_CLEAN, PS_HEADER, PS_IDLE, _card, _run
from tools.container_host import ContainerHost

CUSTOM_OPS_TB = (
    "INFO 04-21 14:09:02 model_runner.py:173] Loading model weights took 12.5523 GB\n"
    "Traceback (most recent call last):\n"
    '  File "/home/u/vllm/vllm/model_executor/layers/layernorm.py", line 60, in forward\n'
    "    ops.rms_norm(\n"
    '  File "/home/u/vllm/vllm/{frame}", line 106, in rms_norm\n'
    "    vllm_ops.rms_norm(out, input, weight, epsilon)\n"
    "NameError: name 'vllm_ops' is not defined\n"
)


@pytest.mark.parametrize(
    ("frame", "label"), [("_custom_ops.py", "dependency_error"), ("x.py", None)]
)
def test_a_name_missing_in_the_engine_s_custom_ops_is_its_compiled_extension(
    tmp_path: Any, frame: str, label: str | None
) -> None:
    """A generic NameError raised in vLLM's _custom_ops.py (the wrapper of its compiled _C ops)
    says the extension did not load (a source checkout shadowing the wheel); the same error in
    other code names no label."""
    log = CUSTOM_OPS_TB.format(frame=frame)
    r = _run(_card({"/var/log/vllm/server.log": log}, PS_IDLE, GPU_CLEAN), tmp_path)
    assert r.root_cause == label, (r.status, r.summary)


def _inspect(status: str, runtime: str = "runc", env: list[str] | None = None) -> str:
    cfg: dict[str, Any] = {"Image": "ghcr.io/huggingface/text-generation-inference:1.4"}
    if env is not None:
        cfg["Env"] = env
    running = status == "running"
    return json.dumps(
        [
            {
                "Id": "2e7d1c0b9a8f",
                "Name": "/tgi",
                "State": {
                    "Status": status,
                    "Running": running,
                    "Pid": 6010 if running else 0,
                    "ExitCode": 0 if running else 1,
                },
                "HostConfig": {"Runtime": runtime},
                "Config": cfg,
            }
        ]
    )


PS_TGI = PS_HEADER + (
    "root        6010  0.0  0.0 3221120 31120 ?      Ssl  10:14   0:01 text-generation-launcher "
    "--model-id m/x\n"
    "root        6021  2.1  3.2 42120112 16412220 ?   Sl   10:14   0:48 /opt/conda/bin/python3.10 "
    "/opt/conda/bin/text-generation-server serve m/x --sharded\n"
)


def _container_card(status: str, files: dict[str, str] | None = None) -> IncidentCard:
    return IncidentCard.model_validate(
        {
            "id": "made-up",
            "title": "t",
            "source": "test",
            "engine": "other",
            "symptom": "why?",
            "host": {
                "ps": PS_TGI,
                "files": files or {},
                "containers": {"tgi": {"inspect": _inspect(status), "logs": "started\n"}},
            },
        }
    )


@pytest.mark.parametrize(("status", "outside"), [("running", True), ("exited", False)])
def test_a_container_without_ps_is_read_through_the_machine_s_table(
    status: str, outside: bool
) -> None:
    """No ps inside a running container (a slim image): the machine's table shows its processes
    under the pids nvidia-smi names. A stopped container's processes are gone: no table of the
    machine's stands in for it (it would read as "the server is gone")."""
    from tools.processes import Args, run

    host = ContainerHost(ReplayHost(_container_card(status)), "tgi")
    res = run(host, Args())
    assert bool(res.read_outside) is outside
    assert (6021 in {p.pid for p in res.processes}) is outside


def test_a_stopped_container_s_log_is_read_on_the_machine_where_it_was_tee_d() -> None:
    """A log the operator tee'd on the machine: the stopped container cannot show it, the same
    path on the machine is the file they named. One that exists nowhere stays missing."""
    card = _container_card("exited", {"/raid/logs/node0.log": "NCCL WARN boom\n"})
    host = ContainerHost(ReplayHost(card), "tgi")
    assert host.read_tail("/raid/logs/node0.log").data == b"NCCL WARN boom\n"
    assert not host.read_tail("/raid/logs/other.log").data


@pytest.mark.parametrize(
    ("runtime", "env", "gpus"),
    [
        ("nvidia", None, True),
        ("nvidia", ["NVIDIA_VISIBLE_DEVICES=void"], False),
        ("runc", None, False),
    ],
)
def test_the_nvidia_runtime_without_env_shown_is_not_called_gpu_less(
    runtime: str, env: list[str] | None, gpus: bool
) -> None:
    from tools.container_inspect import parse_inspect

    state = parse_inspect(_inspect("running", runtime, env))
    assert state.gpus_requested is gpus


def test_requests_answered_5xx_after_the_ready_line_are_not_healthy(tmp_path: Any) -> None:
    """Up is not "answering": a server error after the ready line refuses healthy; the same
    503s before it (while loading) are start-up, and healthy stands."""
    ready = "INFO:     Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)\n"
    e503 = (
        'INFO:     10.0.0.7:4011 - "POST /v1/chat/completions HTTP/1.1" 503 Service Unavailable\n'
    )
    ps = PS_IDLE + (
        "root       5120  1.0  3.1 9123456 4123456 ?      Sl   09:02   2:11 python3 -m "
        "vllm.entrypoints.openai.api_server --model /models/llama --port 8000\n"
    )
    after = _run(_card({"/var/log/vllm/server.log": ready + e503}, ps, GPU_CLEAN), tmp_path / "a")
    before = _run(_card({"/var/log/vllm/server.log": e503 + ready}, ps, GPU_CLEAN), tmp_path / "b")
    assert after.root_cause != "healthy", after.summary
    assert before.root_cause == "healthy", (before.status, before.summary)


def _silent_ranks_card(last: str) -> IncidentCard:
    ps = (
        PS_IDLE
        + "".join(
            f"svc      4123{i}  0.3  1.2 18211040 3201120 ?    Sl   09:58   0:03 /opt/v/bin/python -u "
            f"/jobs/tp_generate.py --model /m --tp 2 --rank {i}\n"
            for i in range(2)
        )
        + (
            "svc      41214  0.1  0.0 1622880 402110 ?      Sl   09:58   0:01 /opt/v/bin/python "
            "/opt/v/bin/torchrun --nnodes 2 --nproc_per_node 2 /jobs/tp_generate.py --model /m\n"
        )
    )
    gpu = "0, NVIDIA A100-SXM4-80GB, 511 MiB, 80539 MiB, 81920 MiB, 0 %\n"
    log = "[rank0] world_size=4 building TP groups\n" + last + "\n"
    return _card({"/jobs/logs/node0.log": [log]}, ps, gpu)


@pytest.mark.parametrize(
    ("last", "hang"),
    [
        ("gpu-a01:41230:41301 [0] NCCL INFO Using network Socket", True),
        ("INFO:     generating GPU P2P access cache in /root/.config/x/p2p_cache_0,1.json", False),
    ],
)
def test_a_still_silent_launch_waits_on_its_peers_only_where_it_stopped_in_a_collective(
    tmp_path: Any, last: str, hang: bool
) -> None:
    """The stall form without stacks: alive, silent, GPU memory still over a watched read, its
    stacks and storage reads unreadable: ranks waiting on each other, inferred (capped) when the
    log stopped on distributed set-up; a log stopped on another step (a P2P probe) is stuck in
    that step, not in a collective."""
    card = _silent_ranks_card(last)
    r = investigate_card(card, tmp_path, logs=["/jobs/logs/node0.log"])
    if hang:
        assert r.root_cause == "nccl_failure", (r.status, r.summary)
        assert r.confidence <= 0.6 and "inferred" in r.summary
    else:
        assert r.root_cause != "nccl_failure", r.summary


def investigate_card(card: IncidentCard, tmp_path: Any, logs: list[str]) -> Any:
    from agent.runner import investigate

    return investigate(
        ReplayHost(card), card.symptom, settings=Settings(home=tmp_path / "h"), logs=logs
    )


OLLAMA_LOG = (
    'time=2025-04-29T00:37:20.001Z level=INFO source=server.go:105 msg="system memory"\n'
    "llama_model_load: error loading model: error loading model architecture: unknown model "
    "architecture: 'qwen3'\n"
    "llama_model_load_from_file_impl: failed to load model\n"
    'time=2025-04-29T00:37:26.468Z level=ERROR source=sched.go:457 msg="error loading llama server" '
    'error="llama runner process has terminated: error loading model"\n'
    'time=2025-04-29T00:38:40.000Z level=INFO source=server.go:619 msg="llama runner started in '
    '4.20 seconds"\n'
)


def test_ollama_speaks_its_llama_cpp_runner_s_lines(tmp_path: Any) -> None:
    """Ollama runs each model in a llama.cpp runner (engines.yaml `embeds`): the runner's load
    error is the live `ollama serve`'s own failure, not another engine's line, and the runner
    dying of it is no noise because another model loaded afterwards."""
    ps = (
        PS_IDLE
        + "ollama      2231  0.4  0.6 2904432 402112 ?      Ssl  Apr21  48:03 /bin/ollama serve\n"
    )
    r = _run(_card({"/var/log/ollama/server.log": OLLAMA_LOG}, ps, GPU_CLEAN), tmp_path)
    assert r.root_cause == "model_load_error", (r.status, r.summary)


def test_a_count_with_an_eta_is_a_bar_whose_step_is_the_eta_over_the_items_left() -> None:
    from tools.log_window import parse_progress

    p = parse_progress("INFO download: text_generation_launcher: Download: [3/9] -- ETA: 0:34:50")
    assert p is not None and (p.done, p.total) == (3, 9)
    assert p.s_per_item is not None and round(p.s_per_item) == 348 and p.eta_s == 2090
    assert parse_progress("Download: [3/9]") is not None  # no ETA: a count, no pace


TGI_DOWNLOAD = (
    "2023-06-25T10:04:11.410221Z  INFO text_generation_launcher: Starting download process.\n"
    "2023-06-25T10:15:41.402330Z  INFO download: text_generation_launcher: Download: [2/9] -- "
    "ETA: 0:40:04.500000\n"
    "2023-06-25T10:21:39.880230Z  INFO download: text_generation_launcher: Download: [3/9] -- "
    "ETA: 0:34:50\n"
    "2023-06-25T10:21:39.880341Z  INFO download: text_generation_launcher: Download file: "
    "pytorch_model-00004-of-00009.bin\n"
)


@pytest.mark.parametrize(
    ("tail", "starting"),
    [
        ("", True),
        (
            "2023-06-25T10:21:40.100000Z ERROR download: text_generation_launcher: Download "
            "encountered an error: OSError: [Errno 28] No space left on device\n",
            False,
        ),
    ],
)
def test_a_silent_log_whose_bar_steps_slower_than_the_watch_is_still_loading(
    tmp_path: Any, tail: str, starting: bool
) -> None:
    """The bar's own pace (ETA over the items left: ~6 min a file) is longer than the watch, so
    a silent watch proves no stall, even with the next file's start printed after the bar; an
    error after the bar is no bar to wait on."""
    ps = PS_IDLE + (
        "root       77141  0.0  0.0 2110220 18120 ?       Ssl  10:04   0:00 "
        "text-generation-launcher --model-id tiiuae/falcon-40b --num-shard 2\n"
    )
    card = _card({"/var/log/tgi/server.log": [TGI_DOWNLOAD + tail]}, ps, GPU_CLEAN)
    r = investigate_card(card, tmp_path, logs=["/var/log/tgi/server.log"])
    assert (r.root_cause == "still_starting") is starting, (r.status, r.summary)


def test_a_launchers_waiting_heartbeat_is_no_work_of_its_ranks() -> None:
    """TGI's launcher prints "Waiting for shard to be ready" every 10 s whether the shard loads
    or hangs: the log repeating it has not advanced. A new shard count has (control)."""
    from agent.facts import advancing

    beat = "2024-02-13T22:17:{s}Z  INFO shard-manager: text_generation_launcher: Waiting for shard to be ready... rank=0"
    before = [beat.format(s="39.6")]
    assert not advancing(before, [*before, beat.format(s="49.6")])
    conv = "2023-08-04T02:05:19Z  INFO download: text_generation_launcher: Convert: [2/3] -- Took: 0:00:41"
    assert advancing(before, [*before, conv])


def test_gpu_memory_that_moved_since_the_first_read_is_a_loader_at_work() -> None:
    """The watch saw no change within its window, but the GPU's memory differs from the first
    sweep's read: it moved between the two (a loader allocating); the same memory is still."""
    from agent.rules.hang import gpu_memory_moved

    def read(oid: str, mib: int, watched: bool) -> dict[str, Any]:
        line = f"0, NVIDIA A100-SXM4-80GB, {mib} MiB, 1 MiB, 81920 MiB, 12 %"
        gpu = {"index": 0, "memory_used_mib": mib, "line": line}
        data = {"gpus": [gpu], "watched": watched, "memory_moved_mib": 0, "waited_s": 60.0}
        return {"id": oid, "tool": "gpu_status", "ok": True, "lines": [line], "data": data}

    moved = gpu_memory_moved([read("o1", 9114, False), read("o9", 17396, True)])
    assert moved is not None and moved[2] == 8282
    assert gpu_memory_moved([read("o1", 17396, False), read("o9", 17396, True)]) is None
