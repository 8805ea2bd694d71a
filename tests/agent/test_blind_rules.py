"""Rules added after blind rounds 19 and 20 (scored before any change), each with a control
that must not trigger it: a fix is a general form or fact, never an answer keyed to one card."""

from __future__ import annotations

from typing import Any

import pytest

from tests.agent.test_rules import GPU_CLEAN, PS_IDLE, _card, _run

SGL_ARGS = (
    "[09:58:40] server_args=ServerArgs(model_path='/data/models/Qwen2.5-72B-Instruct-AWQ', "
    "host='0.0.0.0', port=30000, mem_fraction_static={frac}, tp_size=2)\n"
)
NO_ROOM = "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.\n"


@pytest.mark.parametrize(
    ("frac", "label"), [(0.01, "bad_launch_argument"), (0.85, "kv_cache_no_room")]
)
def test_a_tiny_memory_fraction_is_the_setting_not_the_gpu(
    tmp_path: Any, frac: float, label: str
) -> None:
    log = SGL_ARGS.format(frac=frac) + "[09:59:10 TP0] Load weight end.\n" + NO_ROOM
    r = _run(_card({"/srv/sgl/logs/server.log": log}, PS_IDLE, GPU_CLEAN), tmp_path)
    assert r.root_cause == label, (r.status, r.summary)


TRITON = (
    "I0625 08:07:30.000000 1073 server.cc:674] Started tritonserver\n"
    "E0625 08:07:36.583107 1073 model_lifecycle.cc:638] \"failed to load 'tensorrt_llm' version 1: "
    "Invalid argument: unable to find backend library for backend '{backend}', try specifying "
    'runtime on the model configuration."\n'
    "error: creating server: Internal - failed to load all models\n"
)


@pytest.mark.parametrize(
    ("backend", "label"),
    [("${triton_backend}", "bad_launch_argument"), ("vllm", "dependency_error")],
)
def test_an_unfilled_template_placeholder_is_the_config(
    tmp_path: Any, backend: str, label: str
) -> None:
    card = _card({"/var/log/triton/server.log": TRITON.format(backend=backend)}, PS_IDLE, GPU_CLEAN)
    r = _run(card.model_copy(update={"engine": "trtllm"}), tmp_path)
    assert r.root_cause == label, (r.status, r.summary)


@pytest.mark.parametrize(
    ("err", "label"),
    [
        (
            "ERROR:    [Errno 13] error while attempting to bind on address ('0.0.0.0', 80): permission denied",
            "bad_launch_argument",
        ),
        (
            "ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 8000): address already in use",
            "port_in_use",
        ),
    ],
)
def test_a_denied_bind_is_the_privileged_port_not_a_taken_one(
    tmp_path: Any, err: str, label: str
) -> None:
    log = (
        "INFO:     Started server process [5120]\nINFO:     Waiting for application startup.\n"
        + err
        + "\n"
    )
    r = _run(_card({"/var/log/vllm/server.log": log}, PS_IDLE, GPU_CLEAN), tmp_path)
    assert r.root_cause == label, (r.status, r.summary)


VLLM_DEAD = (
    "INFO 08-27 17:02:10 api_server.py:339] vLLM API server version 0.5.5\n"
    "INFO 08-27 17:02:10 api_server.py:340] args: Namespace(host=None, port=8030, model='/srv/models/llama')\n"
    "INFO 08-27 17:02:19 model_runner.py:890] Loading model weights took 14.9888 GB\n"
)


@pytest.mark.parametrize(
    ("cmd", "alive"),
    [
        # a neighbour's training job under torchrun: another launch, the vLLM server is gone
        ("python -m torch.distributed.run --nproc_per_node 2 pretrain.py --gpus 0,1", False),
        # torchrun that runs vLLM itself is the launch
        (
            "python -m torch.distributed.run --nproc_per_node 2 -m vllm.entrypoints.openai.api_server --port 8030",
            True,
        ),
    ],
)
def test_a_live_server_of_another_engine_is_another_launch(
    tmp_path: Any, cmd: str, alive: bool
) -> None:
    from agent.facts import derive
    from agent.runner import Runner
    from agent.settings import Settings

    ps = PS_IDLE + f"tli        220110 98.0  3.0 40112230 15602210 ?   Rl   Aug26 2011:40 {cmd}\n"
    card = _card({"/srv/eval/vllm.log": VLLM_DEAD}, ps, GPU_CLEAN)
    r = _run(card, tmp_path)
    runner = Runner(Settings(home=tmp_path / "h"))
    try:
        obs = runner.graph.get_state(runner._config(r.session_id)).values["observations"]
    finally:
        runner.close()
    assert (220110 in derive(obs).server_pids) is alive


STOPPED = (
    "INFO 01-16 02:10:16 model_runner.py:1056] Starting to load model meta-llama/Llama-3.1-8B-Instruct...\n"
    "model-00002-of-00004.safetensors:  58%|#####     | 2.89G/5.00G [04:47<03:30, 10.0MB/s]\n"
    "{middle}"
    "Signal (15) received.\n"
    "E                   RuntimeError: Server failed to start in time.\n"
    "ERROR: Job failed: exit code 1\n"
)


@pytest.mark.parametrize(
    ("middle", "killed"),
    [
        ("", True),  # stopped from outside while downloading; the harness's errors follow
        (
            "RuntimeError: CUDA error: an illegal memory access was encountered\n",
            False,
        ),  # its own error first
    ],
)
def test_errors_after_a_stop_signal_are_fallout(tmp_path: Any, middle: str, killed: bool) -> None:
    log = STOPPED.format(middle=middle)
    r = _run(_card({"/srv/ci/logs/job.log": log}, PS_IDLE, GPU_CLEAN), tmp_path)
    assert (r.root_cause == "killed_externally") is killed, (r.status, r.root_cause, r.summary)


# Rules added after blind rounds 21 and 22 (scored before any change at 2497aad).

TGI_OOM = (
    "2023-11-30T14:53:18.902211Z ERROR text_generation_launcher: Error when initializing model\n"
    "Traceback (most recent call last):\n"
    '  File "/opt/conda/lib/python3.9/site-packages/text_generation_server/models/flash_llama.py", line 67, in __init__\n'
    '  File "{frame}", line 88, in {func}\n'
    "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 448.00 MiB. GPU 0 has a "
    "total capacty of 22.20 GiB of which 205.12 MiB is free. Process 41 has 21.99 GiB memory in use. "
    "Of the allocated memory 20.45 GiB is allocated by PyTorch.\n"
)


@pytest.mark.parametrize(
    ("frame", "func", "label"),
    [
        (
            "/opt/conda/lib/python3.9/site-packages/text_generation_server/utils/weights.py",
            "get_sharded",
            "gpu_oom_weights",
        ),
        (
            "/opt/conda/lib/python3.9/site-packages/text_generation_server/models/flash_causal_lm.py",
            "warmup",
            "cuda_oom_runtime",
        ),
    ],
)
def test_an_oom_whose_traceback_runs_through_weight_loading_is_a_weights_oom(
    tmp_path: Any, frame: str, func: str, label: str
) -> None:
    log = TGI_OOM.format(frame=frame, func=func)
    r = _run(_card({"/data/tgi/server.log": log}, PS_IDLE, GPU_CLEAN), tmp_path)
    assert r.root_cause == label, (r.status, r.summary)


KV_CAP = (
    "[TensorRT-LLM][INFO] Loaded engine size: 13260 MiB\n"
    "[TensorRT-LLM][ERROR] maxTokensInPagedKvCache must be large enough to process at least 1 "
    "sequence to completion (i.e. must be larger than beam_width * tokensPerBlock * maxBlocksPerSeq)\n"
)
GPU_PART = "0, NVIDIA A100-SXM4-80GB, 14210 MiB, 67710 MiB, 81920 MiB, 0 %\n"


def test_memory_in_use_with_processes_not_read_is_no_leftover(tmp_path: Any) -> None:
    card = _card({"/workspace/logs/triton.log": KV_CAP}, PS_IDLE, GPU_PART)
    host = card.host.model_copy(update={"ps": None})
    r = _run(card.model_copy(update={"host": host, "engine": "trtllm"}), tmp_path)
    assert r.root_cause == "kv_cache_no_room", (r.status, r.summary)


def test_control_memory_in_use_with_no_server_in_ps_is_still_a_suspect(tmp_path: Any) -> None:
    card = _card({"/workspace/logs/triton.log": KV_CAP}, PS_IDLE, GPU_PART)
    r = _run(card.model_copy(update={"engine": "trtllm"}), tmp_path)
    stale = next(h for h in r.hypotheses if h.label == "stale_gpu_process")
    assert stale.evidence, r.hypotheses


GGUF = (
    "Traceback (most recent call last):\n"
    '  File "/venv/lib/python3.10/site-packages/aphrodite/engine/args_tools.py", line 290, in create_engine_configs\n'
    "    model_config = ModelConfig(\n"
    '  File "{frame}", line 88, in __init__\n'
    "    self._build_tensors(offs, tensors_fields)\n"
    "ValueError: 17 is not a valid GGMLQuantizationType\n"
)


@pytest.mark.parametrize(
    ("frame", "label"),
    [
        ("/venv/lib/python3.10/site-packages/gguf/gguf_reader.py", "model_load_error"),
        (
            "/venv/lib/python3.10/site-packages/aphrodite/engine/args_tools.py",
            "bad_launch_argument",
        ),
    ],
)
def test_a_generic_exception_raised_in_the_model_reader_is_the_model_file(
    tmp_path: Any, frame: str, label: str
) -> None:
    r = _run(
        _card({"/home/ai/aphro/server.log": GGUF.format(frame=frame)}, PS_IDLE, GPU_CLEAN), tmp_path
    )
    assert r.root_cause == label, (r.status, r.summary)


LLAMAFILE = (
    "llm_load_tensors: offloaded 33/33 layers to GPU\n"
    "llama_new_context_with_model: kv self size  = 64.00 MB\n"
    "{end}\n"
)


@pytest.mark.parametrize(
    ("end", "bound"),
    [
        ("couldn't bind to server socket: hostname=0.0.0.0 port=8080", False),
        ("llama server listening at http://0.0.0.0:8080", True),
    ],
)
def test_an_older_llama_cpp_bind_failure_is_the_port(tmp_path: Any, end: str, bound: bool) -> None:
    r = _run(
        _card({"/home/j/llm/server.log": LLAMAFILE.format(end=end)}, PS_IDLE, GPU_CLEAN), tmp_path
    )
    if bound:
        assert r.root_cause != "port_in_use" and "port_in_use" in r.ruled_out, r.ruled_out
    else:
        assert r.root_cause == "port_in_use", (r.status, r.summary)


def _exited_container(code: int) -> Any:
    import json

    from cards.model import IncidentCard

    inspect = json.dumps(
        [
            {
                "Id": "e8a1c7d04b2f" * 4,
                "Name": "/vllm-qwen3",
                "State": {
                    "Status": "exited",
                    "Running": False,
                    "OOMKilled": False,
                    "ExitCode": code,
                    "StartedAt": "2026-04-13T22:03:40Z",
                    "FinishedAt": "2026-04-14T01:47:54Z",
                },
                "HostConfig": {"IpcMode": "host", "Memory": 0},
                "Config": {"Image": "vllm/vllm-openai:v0.18.1", "Tty": True},
            }
        ],
        indent=4,  # as docker inspect prints it
    )
    logs = (
        "(APIServer pid=1) INFO:     Application startup complete.\n"
        '(APIServer pid=1) INFO:     192.168.1.44:58744 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
    )
    return IncidentCard.model_validate(
        {
            "id": "ctr",
            "title": "t",
            "source": "test",
            "engine": "vllm",
            "symptom": "The container died overnight, why?",
            "invocation": {"container": "vllm-qwen3"},
            "host": {
                "ps": PS_IDLE,
                "nvidia_smi": GPU_CLEAN,
                "dmesg": "",
                "containers": {"vllm-qwen3": {"inspect": inspect, "logs": logs}},
            },
        }
    )


@pytest.mark.parametrize(("code", "killed"), [(129, True), (143, True), (1, False)])
def test_a_container_ended_by_a_signal_from_outside_was_killed(
    tmp_path: Any, code: int, killed: bool
) -> None:
    from agent.runner import investigate
    from agent.settings import Settings
    from cards.replay import ReplayHost
    from tools.container_host import ContainerHost

    card = _exited_container(code)
    host = ContainerHost(ReplayHost(card), "vllm-qwen3")
    r = investigate(host, card.symptom, settings=Settings(home=tmp_path / "h"))
    kill = next((h for h in r.hypotheses if h.label == "killed_externally"), None)
    assert (
        bool(kill and kill.evidence and any('"ExitCode"' in e.line for e in kill.evidence))
        is killed
    )
    assert "host_oom_killed" in r.ruled_out


TRITON_QUIET = (
    "I1109 10:02:12.830221 1 model_lifecycle.cc:459] loading: text_cleaner:1\n"
    "I1109 10:02:14.120110 1 python_be.cc:1767] Using Python execution env "
    "/models/text_cleaner/py38_env.tar.gz\n"
)
PS_TRITON = PS_IDLE + (
    "triton     2201  1.0  1.2 3120110 390112 ?      Ssl  10:02   0:02 tritonserver "
    "--model-repository=/models\n"
)
TAR = (
    "triton     2261 98.0  0.1  20332  6120 ?        R    10:02   0:03 tar -xzf "
    "{path} -C /tmp/python_env_cache/2f9c1a\n"
)


@pytest.mark.parametrize(
    ("extra", "working"),
    [
        (TAR.format(path="/models/text_cleaner/py38_env.tar.gz"), True),
        ("", False),  # control: nothing at work beside the quiet server
        (TAR.format(path="/backup/home.tar.gz"), False),  # control: busy on another file
    ],
)
def test_a_quiet_server_waiting_on_a_helper_at_work_on_its_file_is_starting(
    tmp_path: Any, extra: str, working: bool
) -> None:
    card = _card({"/var/log/triton/server.log": TRITON_QUIET}, PS_TRITON + extra, GPU_CLEAN)
    r = _run(card.model_copy(update={"engine": "other"}), tmp_path)
    if working:
        assert r.root_cause == "still_starting", (r.status, r.summary)
        assert any("tar -xzf" in e.line for e in r.evidence), r.evidence
        assert r.confidence <= 0.6 and "inferred" in r.summary, (r.confidence, r.summary)
    else:
        assert r.root_cause != "still_starting", (r.status, r.summary)


def test_container_logs_watch_sees_new_lines_and_says_when_none_came() -> None:
    import json

    from cards.model import IncidentCard
    from cards.replay import ReplayHost
    from tools.container_host import ContainerHost
    from tools.registry import TOOLS

    inspect = json.dumps(
        [
            {
                "Id": "77aa10bc3d2e" * 4,
                "Name": "/t",
                "State": {
                    "Status": "running",
                    "Running": True,
                    "StartedAt": "2022-11-09T10:02:11Z",
                },
                "HostConfig": {},
                "Config": {"Image": "x"},
            }
        ],
        indent=4,
    )

    def card(second_at: int) -> IncidentCard:
        logs = [
            {"at": 0, "text": "I1109 10:02:14.1 1 python_be.cc:1767] Using Python execution env\n"},
            {
                "at": second_at,
                "text": "I1109 10:02:14.1 1 python_be.cc:1767] Using Python execution env\n"
                "I1109 10:09:51.3 1 python_be.cc:2080] TRITONBACKEND_ModelInstanceInitialize: t_0\n",
            },
        ]
        return IncidentCard.model_validate(
            {
                "id": "c",
                "title": "t",
                "source": "test",
                "engine": "other",
                "symptom": "s",
                "invocation": {"container": "t"},
                "host": {"containers": {"t": {"inspect": inspect, "logs": logs}}},
            }
        )

    soon = TOOLS["container_logs"].call(ContainerHost(ReplayHost(card(3)), "t"), {"watch_s": 6})
    assert soon.ok and soon.watched and soon.grew and soon.waited_s >= 3, soon.lines()
    late = TOOLS["container_logs"].call(ContainerHost(ReplayHost(card(240)), "t"), {"watch_s": 6})
    assert late.ok and late.watched and late.grew is False and late.waited_s >= 6, late.lines()
    assert "# watched it for" in "\n".join(late.lines())
