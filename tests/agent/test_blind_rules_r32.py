"""Rules and knowledge after blind round 32 (scored before any change), each with a control
that must not trigger it: a fix is a general form or fact, never an answer keyed to one card."""

from __future__ import annotations

from typing import Any

import pytest

from agent.runner import investigate
from agent.settings import Settings
from cards.model import IncidentCard
from cards.replay import ReplayHost
from tests.agent.test_rules import GPU_HELD, PS_HEADER, PS_IDLE, PS_SERVER, _card, _run
from tools.container_host import ContainerHost

TRITON_UP = (
    "I0321 09:58:02.384916 1 grpc_server.cc:2513] Started GRPCInferenceService at 0.0.0.0:8001\n"
    "I0321 09:58:02.385149 1 http_server.cc:4497] Started HTTPService at 0.0.0.0:8000\n"
)
TRITON_LOADS_VLLM = (
    "I0321 10:02:11.904518 1 model_lifecycle.cc:461] loading: llama2_70b:1\n"
    "I0321 10:02:15.722930 1 python_be.cc:2199] TRITONBACKEND_ModelInstanceInitialize: "
    "llama2_70b_0 (GPU device 0)\n"
    "INFO 03-21 10:02:24 llm_engine.py:72] Initializing an LLM engine with config: "
    "model='/models/llama2_70b/1/weights', tensor_parallel_size=1, seed=0)\n"
)
TRITON_PS = PS_HEADER + (
    "root           1  0.1  0.4 14021308 1488220 ?    Ssl  09:57   0:04 tritonserver "
    "--model-repository=/models --model-control-mode=explicit\n"
    "root          87 41.6  9.8 61288104 33118404 ?   Sl   10:02   1:19 "
    "/opt/tritonserver/backends/python/triton_python_backend_stub /models/llama2_70b/1/model.py "
    "triton_python_backend_shm_region_1 1048576 1048576 1 /opt/tritonserver/backends/python 336 "
    "llama2_70b_0 DEFAULT\n"
)
INSPECT_RUNNING = (
    '[{"Id": "4be1a07d93c2", "Name": "/triton-llm", "State": {"Status": "running", '
    '"Running": true, "OOMKilled": false, "Pid": 1774410, "ExitCode": 0, "RestartCount": 0}, '
    '"Image": "nvcr.io/nvidia/tritonserver:23.11-vllm-python-py3", '
    '"HostConfig": {"ShmSize": 17179869184, "NetworkMode": "host"}}]'
)


def _triton_card(log: str, symptom: str) -> IncidentCard:
    return IncidentCard.model_validate(
        {
            "id": "ctr", "title": "t", "source": "test", "engine": "other", "symptom": symptom,
            "invocation": {"container": "triton-llm"},
            "host": {
                "ps": TRITON_PS, "nvidia_smi": GPU_HELD, "dmesg": "",
                "containers": {"triton-llm": {"inspect": INSPECT_RUNNING, "logs": log}},
            },
        }
    )  # fmt: skip


def _in_container(log: str, tmp_path: Any) -> Any:
    card = _triton_card(log, "the model never becomes ready in our Triton container: is it hung?")
    host = ContainerHost(ReplayHost(card), "triton-llm")
    return investigate(host, card.symptom, settings=Settings(home=tmp_path / "h"))


@pytest.mark.parametrize("loading", [True, False])
def test_a_serving_stack_hosting_another_engine_is_the_launch_and_its_ready_line_the_front_ends(
    tmp_path: Any, loading: bool
) -> None:
    """Triton's server (pid 1, glog's pid column) runs a vLLM backend in its Python stub: the
    log prints vLLM's engine banner, yet the live tritonserver is the launch that writes it, not
    another engine's neighbour, so the launch is alive, never "killed from outside". Its endpoints
    came up before the model load began: a ready line an engine's launch came after is not the
    engine's, so nothing says healthy (blind round 32: killed_externally, then healthy). The
    control: the model's engine up before the endpoints is a ready launch."""
    log = TRITON_LOADS_VLLM + TRITON_UP if not loading else TRITON_UP + TRITON_LOADS_VLLM
    r = _in_container(log, tmp_path)
    assert r.root_cause != "killed_externally", r.summary
    assert "killed_externally" in r.ruled_out, r.ruled_out
    assert (r.status == "healthy") is not loading, r.summary


@pytest.mark.parametrize("holder", ["colleague", "leftover"])
def test_a_live_colleagues_job_torch_names_in_an_oom_is_no_stale_process(
    tmp_path: Any, holder: str
) -> None:
    """torch's OOM names every process holding memory on the device ("Process N has X GiB in
    use"). When each of them that still runs is another user's live job, the launch ran short
    beside a co-tenant: the memory failure is the label, not stale_gpu_process (blind round 32:
    Triton's vLLM backend placed on a colleague's GPU). The control: a leftover of an earlier
    launch named the same way is the stale holder."""
    oom = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 260.00 MiB. GPU 0 has a "
        "total capacity of 79.15 GiB of which 98.44 MiB is free. Process 612044 has 69.52 GiB "
        "memory in use. Of the allocated memory 4.15 GiB is allocated by PyTorch."
    )
    log = (
        "$ python3 -m vllm.entrypoints.openai.api_server --model /models/qwen2-7b --port 8000\n"
        "INFO 08-30 04:19:57 model_runner.py:680] Starting to load model /models/qwen2-7b...\n"
        "Loading safetensors checkpoint shards:  25% Completed | 1/4 [00:01<00:05,  1.84s/it]\n"
        f"Traceback (most recent call last):\n{oom}\n"
    )
    theirs = (
        "hzhou     612044 99.2  6.1 61022480 63912332 pts/2 Rl+ Aug29 1012:51 python "
        "train_sft.py --bf16 --device cuda:0\n"
        if holder == "colleague"
        else "root      612044  0.0  2.1 36017520 2803112 ?    Sl   Aug29   0:41 python3 -c from "
        "multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=68, pipe_handle=74) "
        "--multiprocessing-fork\n"
    )
    gpu = "0, NVIDIA A100-SXM4-80GB, 71228 MiB, 9809 MiB, 81920 MiB, 99 %\n"
    apps = "00000000:07:00.0, 612044, 71212 MiB\n"
    card = _card(
        {"/home/dagoli/logs/serve.log": log},
        PS_IDLE + theirs,
        gpu,
        commands={
            "nvidia-smi --query-compute-apps=gpu_bus_id,pid,used_memory --format=csv,noheader": apps
        },
    )
    card.invocation.log = "/home/dagoli/logs/serve.log"
    r = _run(card, tmp_path)
    if holder == "colleague":
        assert r.root_cause == "gpu_oom_weights", r.summary
    else:
        assert r.root_cause == "stale_gpu_process", r.summary


@pytest.mark.parametrize(
    ("line", "bad"),
    [
        ("Error: No such option: --model", True),
        ("Error: Missing argument 'MODEL'.", True),
        ("Error: Invalid value for '--tp_size': 'two' is not a valid integer.", True),
        ("Error: No such container: vllm-0", False),
        ("[E] Error: CUDA out of memory", False),
    ],
)
def test_a_click_usage_error_is_a_refused_launch_argument(line: str, bad: bool) -> None:
    """trtllm-serve (and every Click CLI) refuses an option it does not have with "Error: No
    such option: --X" and exits 2 before loading anything (blind round 32: a README's `--model`
    for a positional MODEL). The control: other lines that begin with "Error:"."""
    from agent.signatures import scan

    fatal = {m.label for m in scan([line]) if m.strength == "fatal"}
    assert ("bad_launch_argument" in fatal) is bad, fatal


@pytest.mark.parametrize("named_log_starts", [True, False])
def test_a_rotation_of_the_named_log_is_an_earlier_run_even_without_timestamps(
    tmp_path: Any, named_log_starts: bool
) -> None:
    """server.log.1 is what server.log was before it rotated: when the log the operator named
    starts a launch of its own, the rotation's port clash is last week's, not this launch's,
    even where neither log carries a timestamp to order them (blind round 32: port_in_use from
    the rotated log over today's refused option). The control: a named log with no start of its
    own may continue its rotation's launch, so the rotation is weighed as before."""
    old = (
        "Traceback (most recent call last):\n"
        '  File "/usr/local/bin/trtllm-serve", line 8, in <module>\n'
        "RuntimeError: Failed to bind socket to 0.0.0.0:8000: [Errno 98] Address already in use\n"
    )
    banner = "[TensorRT-LLM] TensorRT LLM version: 1.3.0rc12\n" if named_log_starts else ""
    new = (
        banner + "Usage: trtllm-serve [OPTIONS] COMMAND [ARGS]...\nError: No such option: --model\n"
    )
    card = _card(
        {"/home/m/logs/serve.log": new, "/home/m/logs/serve.log.1": old},
        PS_IDLE,
        "0, NVIDIA H200, 4 MiB, 143000 MiB, 143771 MiB, 0 %\n",
        commands={"ss -ltnp": "State Recv-Q Send-Q Local Address:Port Peer Address:Port\n"
                  "LISTEN 0 4096 0.0.0.0:8000 0.0.0.0:*\n"},
    )  # fmt: skip
    card.invocation.log = "/home/m/logs/serve.log"
    r = _run(card, tmp_path)
    if named_log_starts:
        assert r.root_cause == "bad_launch_argument", r.summary
        assert not any("Failed to bind" in e.line for e in r.evidence), r.evidence
    else:
        assert "Failed to bind" in str(r.hypotheses), r.hypotheses


@pytest.mark.parametrize("tp", [2, 1])
def test_a_silent_spinning_launch_in_a_container_is_multi_rank_from_its_own_words(
    tmp_path: Any, tp: int
) -> None:
    """The launch's log is its container's log, and `--tensor-parallel-size 2` on its command
    line says it has peers: GPUs pinned at 100% with a context's worth of memory and a silent log
    is a collective spinning, concluded as inferred (stacks unread), not "insufficient" (blind
    round 32: the container's log was left out of the ranks' count). The control: a launch that
    says it runs one rank has no peer to wait for."""
    ps = PS_HEADER + (
        "root          31  0.4  1.1 9873244 1496120 ?     Sl   09:11   0:09 python3 -m "
        f"vllm.entrypoints.openai.api_server --port 8000 --model /m --tensor-parallel-size {tp}\n"
        "root         245 99.6  2.1 36017520 2803112 ?    Rl   09:12   8:41 python3 -c from "
        "multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=68, pipe_handle=74) "
        "--multiprocessing-fork\n"
    )
    log = (
        "INFO 04-01 09:11:50 [api_server.py:1040] vLLM API server version 0.9.0\n"
        "(VllmWorker rank=0 pid=245) INFO 04-01 09:12:22 [pynccl.py:69] vLLM is using "
        "nccl==2.21.5\n"
    )
    gpu = "".join(
        f"{i}, NVIDIA RTX A6000, 613 MiB, 48059 MiB, 49140 MiB, 100 %\n" for i in range(tp)
    )
    inspect = INSPECT_RUNNING.replace("triton-llm", "vllm-pod")
    card = IncidentCard.model_validate(
        {
            "id": "ctr", "title": "t", "source": "test", "engine": "vllm",
            "symptom": "the pod never becomes ready", "invocation": {"container": "vllm-pod"},
            "host": {
                "ps": [{"at": 0, "text": ps}, {"at": 420, "text": ps}],
                "nvidia_smi": [{"at": 0, "text": gpu}, {"at": 420, "text": gpu}],
                "containers": {"vllm-pod": {"inspect": inspect, "logs": log}},
            },
        }
    )  # fmt: skip
    host = ContainerHost(ReplayHost(card), "vllm-pod")
    r = investigate(host, card.symptom, settings=Settings(home=tmp_path / "h"))
    if tp == 2:
        assert r.root_cause == "nccl_failure", r.summary
        assert r.confidence <= 0.6 and "inferred" in r.summary, r.summary
    else:
        assert r.root_cause != "nccl_failure", r.summary


def test_the_stacks_read_of_a_silent_launch_is_of_its_busiest_process(tmp_path: Any) -> None:
    """Of a silent launch's processes, with no GPU process list to say which rank is where, the
    stacks read is of the one running flat out (a rank busy-polling its peer), not the idle
    entry point that happens to come first. The control is the order itself: the entry point,
    idle, is listed first."""
    from agent.checks import _silent_server_pid
    from agent.facts import derive
    from agent.observe import run_many

    ps = PS_SERVER.replace("99.0", " 0.4") + (
        "root       5203  1.2  0.9 12733804 1190212 ?    Sl   09:12   0:03 python3 -c from "
        "multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=64, pipe_handle=66) "
        "--multiprocessing-fork\n"
        "root       5245 99.6  2.1 36017520 2803112 ?    Rl   09:12   8:41 python3 -c from "
        "multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=68, pipe_handle=74) "
        "--multiprocessing-fork\n"
    )
    log = (
        "INFO vLLM API server version 0.9.0\n"
        "(VllmWorker rank=0 pid=5245) INFO [pynccl.py:69] vLLM is using nccl==2.21.5\n"
    )
    card = _card(
        {"/var/log/v.log": [{"at": 0, "text": log}, {"at": 60, "text": log}]}, ps, GPU_HELD
    )
    host = ReplayHost(card)
    obs = run_many(host, [("processes", {}), ("log_tail", {"path": "/var/log/v.log"})], 1, 0)
    obs += run_many(host, [("log_tail", {"path": "/var/log/v.log", "watch_s": 6})], 3, 1)
    assert _silent_server_pid(derive(obs)) == 5245


@pytest.mark.parametrize(
    ("text", "base", "found"),
    [
        ("source ~/venv/bin/activate\n", "/home/zv/serve", ["/home/zv/venv/bin/activate"]),
        (". ~/.conda/etc/profile.d/conda.sh\n", "/root", ["/root/.conda/etc/profile.d/conda.sh"]),
        ("source ~/venv/bin/activate\n", "/opt/serve", []),  # no home to expand it from
        ("source ~bob/env.sh\n", "/home/zv", []),  # another user's home: not guessed
        ("source env.sh\n", "/home/zv/serve", ["/home/zv/serve/env.sh"]),
    ],
)
def test_a_scripts_home_relative_source_is_read_from_its_owners_home(
    text: str, base: str, found: list[str]
) -> None:
    """`source ~/venv/bin/activate` in /home/zv/serve/run.sh is /home/zv/venv/bin/activate, not
    /home/zv/serve/~/venv/... (a model session saw the agent ask for such paths in round 32). The
    controls: with no home above the script, or another user's `~name`, nothing is guessed; a
    relative path is still the script's directory's."""
    from agent.launch import sourced_files

    assert sourced_files(text, base) == found


@pytest.mark.parametrize(
    ("symptom", "paths"),
    [
        ("Log is /home/kaiwu/logs/mixtral-fp8.log.", ["/home/kaiwu/logs/mixtral-fp8.log"]),
        ("see /var/log/vllm/server.log.1 and /srv/run.sh", ["/var/log/vllm/server.log.1", "/srv/run.sh"]),
        ("logs are in ~/llama-models/logs/ and logs/x/y", []),
    ],
)  # fmt: skip
def test_a_sentences_closing_period_is_not_part_of_the_path_it_names(
    symptom: str, paths: list[str]
) -> None:
    """An operator's "Log is /home/u/logs/x.log." names x.log: the agent read "x.log." (blind
    round 32), and "~/llama-models/logs/" is no absolute /llama-models/logs. The control: a
    rotation's ".1" is part of its name."""
    from agent.checks import ABS_PATH

    assert ABS_PATH.findall(symptom) == paths


def test_a_stall_read_the_host_cannot_give_is_named_not_asked_for_again() -> None:
    """A brain refused for an unproven hang is told which reads would prove the stall; one it
    tried that failed here (process_io with no counters) is named as not readable, not as "not
    read yet", so it is not sent back for it (blind round 32: a model asked twice and gave up).
    The control: a read never tried is still asked for."""
    from agent.facts import Facts
    from agent.rules.guardrails import _stall_reads_missing

    def obs(tool: str, ok: bool, watch: bool) -> Any:
        args = {"watch_s": 6} if watch else {}
        return {"id": tool, "tool": tool, "args": args, "ok": ok, "lines": [], "data": {}}

    reads = [obs("process_io", False, True), obs("gpu_status", True, True)]
    missing = _stall_reads_missing(reads, Facts(log_growth={"/l": False}))
    assert "process_io failed here: not readable on this host" in missing, missing
    assert any(m.startswith("py_stacks (") for m in missing), missing
    assert not any(m.startswith("gpu_status") for m in missing), missing


@pytest.mark.parametrize("driver_line", [False, True])
def test_a_library_failure_brings_its_lookalikes_and_a_proven_one_explains_them_away(
    tmp_path: Any, driver_line: bool
) -> None:
    """A library that will not load is read three ways (a package built for another torch, a
    driver too old, kernels without this GPU's build): a proven import error brings the driver
    and the architecture onto the board and, with nothing pointing at them, rules them out
    (`rivals.yaml` `confusable`; round 32's writers listed cuda_driver_mismatch as checked and
    refuted on such cards). The control: a driver line of the launch's own keeps the driver open."""
    log = (
        "$ python3 -m vllm.entrypoints.openai.api_server --model /models/m --port 8000\n"
        + (
            "WARNING CUDA initialization: The NVIDIA driver on your system is too old "
            "(found version 11040).\n"
            if driver_line
            else ""
        )
        + "Traceback (most recent call last):\n"
        '  File "/usr/lib/python3/dist-packages/vllm/_custom_ops.py", line 14, in <module>\n'
        "ImportError: /usr/lib/python3/dist-packages/vllm/_C.abi3.so: undefined symbol: "
        "_ZN3c106detail14torchCheckFailEPKcS2_jRKSs\n"
    )
    card = _card(
        {"/var/log/vllm/server.log": log},
        PS_IDLE,
        "0, NVIDIA H100 80GB HBM3, 0 MiB, 81008 MiB, 81559 MiB, 0 %\n",
    )
    card.invocation.log = "/var/log/vllm/server.log"
    r = _run(card, tmp_path)
    if driver_line:
        assert "cuda_driver_mismatch" not in r.ruled_out, r.ruled_out
    else:
        assert r.root_cause == "dependency_error", r.summary
        assert {"cuda_driver_mismatch", "unsupported_gpu_arch"} <= set(r.ruled_out), r.ruled_out


def test_the_download_check_asks_for_the_launchs_model_not_a_neighbours(tmp_path: Any) -> None:
    """On a busy box the first `--model org/name` in ps may be another user's server: the check
    of a download in progress names the launch's own model (a model session saw it offered for
    a neighbour's Qwen). The control: without the facts, the first one found is taken."""
    from agent.checks import hub_model
    from agent.facts import derive
    from agent.observe import run_many

    ps = PS_HEADER + (
        "ssun      640118  4.1  2.2 35118200 23409120 ?   Sl   Aug27 118:02 python -m "
        "vllm.entrypoints.openai.api_server --model Qwen/Qwen3-32B --port 8100\n"
        "kaiwu     700001 35.0  2.2 35118200 23409120 ?   Sl   09:02   8:02 python -m "
        "vllm.entrypoints.openai.api_server --model RedHatAI/Mixtral-8x7B-FP8 --port 8003\n"
    )
    log = (
        "INFO vLLM API server version 0.10.0\n"
        "INFO non-default args: {'model': 'RedHatAI/Mixtral-8x7B-FP8', 'port': 8003}\n"
    )
    card = _card({"/home/kaiwu/logs/mixtral.log": log}, ps, GPU_HELD)
    host = ReplayHost(card)
    calls = [
        ("processes", {"logs": ["/home/kaiwu/logs/mixtral.log"]}),
        ("log_tail", {"path": "/home/kaiwu/logs/mixtral.log"}),
    ]
    obs = run_many(host, calls, 1, 0)
    assert hub_model(obs, derive(obs)) == "RedHatAI/Mixtral-8x7B-FP8"
    assert hub_model(obs) == "Qwen/Qwen3-32B"


@pytest.mark.parametrize("loading", [True, False])
def test_the_gate_holds_healthy_to_the_engines_ready_line_not_the_front_ends(
    loading: bool,
) -> None:
    """The same proof for both brains: a brain concluding healthy on Triton's endpoints-up line,
    printed before a model load started the vLLM engine beneath it, is refused. The control: the
    same line after the engine came up proves the launch ready."""
    from agent.facts import derive
    from agent.observe import run_many
    from agent.rules.guardrails import check_conclusion

    log = TRITON_UP + TRITON_LOADS_VLLM if loading else TRITON_LOADS_VLLM + TRITON_UP
    host = ContainerHost(ReplayHost(_triton_card(log, "ready?")), "triton-llm")
    calls = [("processes", {}), ("container_inspect", {}), ("container_logs", {})]
    obs: list[Any] = run_many(host, calls, 1, 0)
    logs = next(o for o in obs if o["tool"] == "container_logs")
    ready = "Started HTTPService at 0.0.0.0:8000"
    line = next(ln for ln in logs["lines"] if ready in ln)
    action: Any = {
        "kind": "conclude",
        "label": "healthy",
        "confidence": 0.8,
        "evidence": [{"observation": logs["id"], "line": line}],
        "summary": "up",
    }
    problems = check_conclusion(action, obs, derive(obs))
    assert any("ready line" in p for p in problems) is loading, problems
