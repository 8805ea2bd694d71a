"""Rules and knowledge after blind round 44 (scored before any change), each with a control
that must not trigger it: a fix is a general form or fact, never an answer keyed to one card."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent.runner import investigate
from agent.settings import Settings
from cards.model import Invocation
from cards.replay import ReplayHost
from tests.agent.test_rules import PS_HEADER, _card

KV_SHORT = (
    "ValueError: The model's max seq len (32768) is larger than the maximum number of tokens "
    "that can be stored in KV cache (21488). Try increasing `gpu_memory_utilization` or "
    "decreasing `max_model_len` when initializing the engine."
)


def _dead_launch_beside_a_notebook(notebook_user: str, holder: str) -> Any:
    """root's vLLM launch died on its own KV-cache sizing check; nothing of it is alive and its
    log's owner is not recorded. `notebook_user`'s `holder` sleeps holding 3 GiB of an idle
    GPU; root reads the box (the process list's own `ps aux` row)."""
    ps = PS_HEADER + (
        f"{notebook_user:<8}   3190  0.4  5.1 31875404 3377120 ?    Ssl  Jul16   9:44 {holder}\n"
        "root       47012  0.0  0.0  10344  4128 pts/1    Ss   01:58   0:00 -bash\n"
        "root       48790  0.0  0.0  10076  3420 pts/1    R+   02:19   0:00 ps aux\n"
    )
    log = (
        "INFO 07-18 02:11:07 api_server.py:206] vLLM API server version 0.5.1\n"
        "INFO 07-18 02:11:09 model_runner.py:255] Loading model weights took 13.4966 GB\n"
        "INFO 07-18 02:11:21 gpu_executor.py:84] # GPU blocks: 1343, # CPU blocks: 2048\n"
        "[rank0]: Traceback (most recent call last):\n"
        '[rank0]:   File "/x/vllm/worker/worker.py", line 368, in raise_if_cache_size_invalid\n'
        "[rank0]:     raise ValueError(\n"
        f"[rank0]: {KV_SHORT}\n"
    )
    apps = "pid, process_name, used_gpu_memory [MiB]\n3190, python, 3234 MiB\n"
    gpu = "0, NVIDIA L4, 3242 MiB, 19410 MiB, 23034 MiB, 0 %\n"
    cmd = "nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv"
    card = _card({"/root/logs/serve.log": log}, ps, gpu, commands={cmd: apps})
    return card.model_copy(update={"invocation": Invocation(log="/root/logs/serve.log")})


@pytest.mark.parametrize(
    ("user", "holder", "stale"),
    [
        ("mluser", "/opt/conda/envs/rag/bin/python -m ipykernel_launcher -f k.json", False),
        # controls: the reader's own idle holder is a leftover of theirs; another account's
        # engine process may be the launch's own leftover under a scheduler's account
        ("root", "/opt/conda/envs/rag/bin/python -m ipykernel_launcher -f k.json", True),
        ("slurmu", "sglang::scheduler_DP0_TP0_EP0", True),
    ],
)
def test_another_users_notebook_is_theirs_when_nothing_says_who_ran_the_launch(
    tmp_path: Path, user: str, holder: str, stale: bool
) -> None:
    """Nothing of the launch is alive and its log's owner is unknown (a replayed card; a live
    host's stat names it): the one reading the box asks about their own launch, so another
    user's sleeping notebook kernel is that user's job, a co-tenant, not a leftover to kill, and
    the engine's own sizing error is the cause. A 3 GiB kernel had made `stale_gpu_process`."""
    card = _dead_launch_beside_a_notebook(user, holder)
    r = investigate(ReplayHost(card), card.symptom, settings=Settings(home=tmp_path / "h"))
    holders = {g["pid"]: g["owner"] for g in r.launch["gpu"]}
    if stale:
        assert holders.get(3190) == "leftover", r.launch["gpu"]
        assert r.root_cause == "stale_gpu_process", (r.root_cause, r.summary)
    else:
        assert holders.get(3190) == "another user's job", r.launch["gpu"]
        assert r.root_cause == "kv_cache_no_room", (r.root_cause, r.summary)


JOURNAL = "\n".join(
    [
        "Jul 25 14:20:02 box lemond[594237]: [Info] (Server) IPv4 HTTP server listening on 0.0.0.0:8000",
        "Jul 25 14:21:00 box sshd[912]: Accepted publickey for jens from 10.0.0.5 port 50122",
        "Jul 25 14:27:21 box lemond[594237]: [Info] (vLLM) Starting vllm-server on port 8001...",
        "Jul 25 14:27:21 box lemond[594237]: Waiting for vllm-server to be ready (timeout: 0s)...",
        "Jul 25 14:27:21 box lemond[594237]: [Error] (WrappedServer) vllm-server failed to start "
        "within timeout",
        "Jul 25 14:27:21 box lemond[595102]: Shutdown signal received, exiting...",
        "Jul 25 14:27:26 box lemond[594237]: [Warn] (ProcessManager) Process did not respond to "
        "SIGTERM, using SIGKILL",
    ]
)
QUOTE = "vllm-server failed to start within timeout"
MANUAL = (
    "$ ./venv/bin/vllm serve Qwen/Qwen3.5-0.8B --port {port}\n"
    "Traceback (most recent call last):\n"
    '  File "/home/jens/venv/lib/python3.12/site-packages/torch/__init__.py", line 409, in <module>\n'
    "ImportError: libamdhip64.so.7: cannot open shared object file: No such file or directory\n"
)


def _supervised(manual_port: int, symptom: str) -> Any:
    ps = PS_HEADER + (
        "jens      594237  0.4  0.1 1902884 161104 ?      Ssl  14:20   0:03 /usr/bin/lemond\n"
        "jens      598377  0.0  0.0  10388  3644 pts/1    R+   14:40   0:00 ps aux\n"
    )
    card = _card(
        {"/home/jens/vllm-manual-test.log": MANUAL.format(port=manual_port)},
        ps,
        "0, AMD Radeon 8060S, 0 MiB, 512 MiB, 512 MiB, 0 %\n",
        commands={"journalctl -u lemonade --no-pager": JOURNAL},
    )
    return card.model_copy(update={"symptom": symptom})


def test_the_journal_is_searched_for_the_error_the_operator_quotes() -> None:
    """service_logs(journalctl, grep=...): the sender of the newest line holding the text, and
    that sender's lines only (another program's journal lines are not the launch's). Control:
    a text the journal's newest lines do not hold is said so, as a search of part of it."""
    from tools.service_logs import Args, read_once

    host = ReplayHost(_supervised(8011, "why?"))
    r = read_once(host, Args(kind="journalctl", grep=QUOTE))
    assert r.ok and r.name == "lemond"
    assert any(QUOTE in ln for ln in r.tail) and not any("sshd" in ln for ln in r.tail)
    miss = read_once(host, Args(kind="journalctl", grep="no such text anywhere at all"))
    assert miss.ok and not miss.name and "older lines were not searched" in miss.tail[0]


@pytest.mark.parametrize(("manual_port", "quoted", "label"), [
    (8011, True, "killed_externally"),
    # controls: the found log of the child's own port stays the launch's; with no quote the
    # journal is not searched and the found log is what there is
    (8001, True, "dependency_error"),
    (8011, False, "dependency_error"),
])  # fmt: skip
def test_a_found_log_of_another_port_than_the_supervisors_child_is_set_aside(
    tmp_path: Path, manual_port: int, quoted: bool, label: str
) -> None:
    """The operator quotes a supervisor's error that no file found holds: the journal is
    searched for it, and a found log whose launch serves another port than the one the
    supervisor started its child on is another launch's (a run by hand days before). Lemonade's
    readiness wait of 0 s then reads as the kill it is, not the old run's ImportError."""
    symptom = f'Every load fails at once with "{QUOTE}"' if quoted else "Every load fails. Why?"
    card = _supervised(manual_port, symptom)
    r = investigate(ReplayHost(card), card.symptom, settings=Settings(home=tmp_path / "h"))
    assert r.root_cause == label, (r.root_cause, r.summary)


@pytest.mark.parametrize(
    ("command", "engine", "role"),
    [
        ("/home/u/.venv/omni/bin/python /home/u/.venv/omni/bin/sgl-omni serve --model-path "
         "Qwen/Qwen3-Omni-30B-A3B-Instruct --port 8000", "sglang", "main"),
        ("sglang-omni::talker_TP0", "sglang", "worker"),
        ("sglang-omni::code2wav", "sglang", "worker"),
        ("python3 omni_notes.py --about sgl-omni", None, None),  # control: a mention, no engine
    ],
)  # fmt: skip
def test_sglang_omni_is_sglang(command: str, engine: str | None, role: str | None) -> None:
    """SGLang-Omni runs an SGLang engine per stage (`sgl-omni serve`, stage processes titled
    `sglang-omni::talker_TP0`): unknown to the registry, a live launch read as "no inference
    server is running" and its JIT-compiling talker had no server to belong to."""
    from tools import engines

    m = engines.classify(command)
    assert (m.engine, m.role) == (engine, role), m


PS_JIT = PS_HEADER + (
    "cuzmi    40288  3.1  2.4 38812264 6421880 pts/2 Sl  10:02   0:12 /home/cuzmi/.venv/bin/python "
    "/home/cuzmi/.venv/bin/sgl-omni serve --model-path Qwen/Qwen3-Omni-30B-A3B-Instruct --port 8000\n"
    "cuzmi    40342 14.2  4.1 61220480 10885120 pts/2 Sl 10:02   0:51 sglang-omni::talker_TP0\n"
    "cuzmi    41377 99.8  4.6 13108224 12210456 pts/2 R  10:06   2:29 /usr/local/cuda/nvvm/bin/cicc "
    "--c++17 --orig_src_file_name /home/cuzmi/{where}/fused_moe_90/moe_gemm_kernels.cu\n"
)


@pytest.mark.parametrize(
    ("where", "kept"),
    [(".cache/flashinfer/0.6.18/90/generated", True), ("src/cutlass/build", False)],
)
def test_a_jit_in_the_launch_users_cache_is_the_launchs_build(where: str, kept: bool) -> None:
    """With no process tree (`ps aux`), a compiler working in a home other than the log's was
    taken for that user's own project build. A kernel JIT builds in the cache of whoever runs
    the launch (~/.cache/flashinfer): the launch's build. Control: a source tree in the same
    home stays the user's own build."""
    from agent.facts import derive
    from tools import processes

    card = _card(
        {},
        PS_JIT.format(where=where),
        "0, NVIDIA H100 80GB HBM3, 72871 MiB, 8233 MiB, 81559 MiB, 0 %\n",
    )
    res = processes.run(ReplayHost(card), processes.Args())
    log = "[2026-07-27 10:02:14] sgl-omni serve: model=Qwen/Qwen3-Omni-30B-A3B-Instruct port=8000\n"
    obs = [
        {"id": "o1", "tool": "processes", "args": {}, "ok": True, "lines": res.lines(),
         "data": res.model_dump(mode="json"), "round": 0},
        {"id": "o2", "tool": "log_tail", "args": {"path": "/srv/omni/logs/serve.log"}, "ok": True,
         "lines": log.splitlines(), "round": 0,
         "data": {"host": "h", "path": "/srv/omni/logs/serve.log", "size": len(log), "tail": log.splitlines()}},
    ]  # fmt: skip
    assert (41377 in derive(obs).building_pids) == kept  # type: ignore[arg-type]


_SERVED_LOG = (
    "INFO 05-13 18:40:02 [api_server.py:1043] vLLM API server version 0.8.5\n"
    "INFO 05-13 18:40:02 [api_server.py:1044] args: Namespace(model_tag='Qwen/Qwen2.5-32B', port=8000)\n"
    "INFO 05-13 18:41:40 [api_server.py:1090] Starting vLLM API server 0 on http://0.0.0.0:8000\n"
    "INFO:     Application startup complete.\n"
    'INFO:     127.0.0.1:51234 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
)


@pytest.mark.parametrize(
    ("beside", "healthy"),
    [
        ("", False),
        # control: a wrapper the registry does not know, started with the engine core by the
        # same user, may be its main: the server may well run
        ("zhang     205050  0.4  2.1 12230044 4012212 ?    Ssl  May13   0:41 /srv/venv/bin/python3 "
         "/srv/venv/bin/mineru-vllm-server --port 8000\n", True),
    ],
)  # fmt: skip
def test_an_engine_core_outliving_its_api_server_is_not_a_healthy_server(
    tmp_path: Path, beside: str, healthy: bool
) -> None:
    """vLLM's API server (the front end that answers) died with the operator's SSH session;
    its EngineCore lives on, holding 70 GB, and the log ends in served requests. The core's
    being alive had made the launch "healthy"; only workers alive, and nothing that could be
    their main, is no server answering."""
    ps = PS_HEADER + (
        f"{beside}"
        "zhang     205117  0.2  4.1 39812340 10871204 ?   Sl   May13   2:31 VLLM::EngineCore\n"
        "zhang     301022  0.0  0.0  10076  3420 pts/1    R+   09:02   0:00 ps aux\n"
    )
    gpu = "0, NVIDIA A100-SXM4-80GB, 71342 MiB, 9695 MiB, 81920 MiB, 0 %\n"
    card = _card({"/home/zhang/vllm-qwen.log": _SERVED_LOG}, ps, gpu)
    card = card.model_copy(update={"symptom": "this morning the API is down, what killed it?"})
    r = investigate(ReplayHost(card), card.symptom, settings=Settings(home=tmp_path / "h"))
    assert (r.root_cause == "healthy") == healthy, (r.root_cause, r.summary)


@pytest.mark.parametrize(
    ("before", "label"),
    [
        ("[05/15/2024-14:02:49] [TRT-LLM] [I] Set gemm_plugin to bfloat16.", "gpu_oom_weights"),
        ("[05/15/2024-14:02:58] [TRT] [I] Detected 13 inputs and 1 output network tensors.",
         "gpu_oom_weights"),
        ("[TensorRT-LLM][INFO] Using 117760 tokens in paged KV cache.", "cuda_oom_runtime"),  # control
    ],
)  # fmt: skip
def test_an_oom_inside_trtllm_build_is_about_the_weights(before: str, label: str) -> None:
    """trtllm-build of an older release prints no "Build TensorRT engine": its plugin set-up
    lines and TensorRT's parse of the network say the build runs, and a build that runs out of
    GPU memory holds the weights it is building (a 15 GB checkpoint on a 12 GB card). Control:
    an OOM after the runtime sized its KV cache is not a build's."""
    from agent.rules.memory import oom_phase
    from agent.signatures import scan

    lines = [
        before,
        "[05/15/2024-14:03:05] [TRT] [E] 2: [virtualMemoryBuffer.cpp::resizePhysical::155] Error "
        "Code 2: OutOfMemory (no further information)",
    ]
    obs = {"id": "o1", "tool": "log_tail", "args": {}, "ok": True, "lines": lines, "data": {}}
    hits = [(obs, m) for m in scan(lines)]
    oom = next(
        m for _, m in hits if "OutOfMemory" in m.line and not m.signature.startswith("phase-")
    )
    assert oom_phase(obs, oom, hits)[0] == label  # type: ignore[arg-type]


def _inspect(device_ids: list[str], env: str = "") -> str:
    import json

    env_list = [env] if env else []
    return json.dumps([{
        "Name": "/qwen72b-triton",
        "State": {"Status": "running", "Running": True, "Pid": 4242},
        "HostConfig": {"Runtime": "runc", "DeviceRequests": [
            {"Driver": "", "Count": 0, "DeviceIDs": device_ids, "Capabilities": [["gpu"]]}]},
        "Config": {"Env": env_list, "Image": "nvcr.io/nvidia/tritonserver:23.10-trtllm-python-py3"},
    }])  # fmt: skip


@pytest.mark.parametrize(
    ("device_ids", "mine"),
    [
        (["0", "1", "2", "3"], {0, 1, 2, 3}),
        (["GPU-6f1c2a8e-0d5b-4c1e-9a7f-2b3c4d5e6f70"], None),  # control: a UUID names no index
        ([], None),  # control: --gpus all
    ],
)
def test_the_gpus_a_container_was_given_are_the_launchs(
    device_ids: list[str], mine: set[int] | None
) -> None:
    """A launch in a container was given GPUs 0-3 (`--gpus '"device=0,1,2,3"'`); another
    user's fine-tune pins GPUs 4-7 at 98%. Inside the container the server's pids are not the
    ones nvidia-smi names on the machine, so nothing tied the launch to its GPUs and the busy
    neighbour read as a rank spinning in a collective ("nccl_failure" for a healthy server).
    The container's record names its GPUs by the machine's indices."""
    from agent.launch import launch_gpus
    from tools.container_inspect import parse_inspect

    state = parse_inspect(_inspect(device_ids))
    assert state.gpu_ids == (sorted(mine) if mine else None)
    obs = {"id": "o3", "tool": "container_inspect", "args": {}, "ok": True, "lines": [],
           "data": {"container": state.model_dump(mode="json")}, "round": 0}  # fmt: skip
    assert launch_gpus([obs]) == mine  # type: ignore[list-item]


def test_the_named_pods_running_container_is_the_server_alive_whatever_this_box_runs() -> None:
    """A CI runner reads the cluster with kubectl: its own process table holds no server (the
    pod runs on a node), and "no inference-server process is running" had refuted a pod that
    was still loading its shards. The named pod's Running container is the server alive.
    Control: with no pod record, the box's own process table speaks."""
    from agent.facts import Facts

    assert Facts(ps_available=True, pod_running=True).server_alive is True
    assert Facts(ps_available=True).server_alive is False


BAR = "Loading safetensors checkpoint shards:  53% Completed | 9/17 [08:36<07:38, 57.37s/it]"


@pytest.mark.parametrize(("window", "slow"), [(30.0, True), (120.0, False)])
def test_a_pods_progress_bar_slower_than_the_watch_refutes_nothing(
    window: float, slow: bool
) -> None:
    """A pod's log watched for 30 s without a new line, ending on a bar at 57 s per shard: the
    watch was too short to see a step, as for a file's log (`hang.slow_bar`); the pod's record
    printed after its log is not the log's last line. Control: a watch of two minutes that saw
    no step is silence that counts."""
    from agent.facts import Facts
    from agent.rules.hang import slow_bar
    from tools.log_window import last_progress

    tail = ["(EngineCore_DP0 pid=287) INFO 09-15 09:02:50 [cuda.py:362] Using Flash Attention", BAR]
    prog = last_progress(tail)
    assert prog is not None
    o = {"id": "o12", "tool": "service_logs", "args": {"kind": "kubectl", "name": "p", "watch_s": 6},
         "ok": True, "round": 1,
         "lines": ["# kubectl log of p", *tail, "# kubectl describe pod p", "    State:  Running"],
         "data": {"tail": tail, "watched": True, "grew": False, "window_s": window,
                  "last_progress": prog.model_dump(mode="json")}}  # fmt: skip
    got = slow_bar([o], Facts(pod_running=True))  # type: ignore[list-item]
    assert (got is not None) == slow, got


@pytest.mark.parametrize(
    ("line", "consequence"),
    [
        ("ERROR [open_webui.routers.ollama] 500, message='Internal Server Error', "
         "url='http://localhost:11434/api/chat'", True),
        ("requests.exceptions.HTTPError: 500 Server Error: Internal Server Error for url: "
         "http://127.0.0.1:8000/v1/completions", True),
        # controls: a remote service's refusal is the caller's own error (the Hub's 429), and so
        # is a 4xx from anywhere
        ("requests.exceptions.HTTPError: 429 Client Error: Too Many Requests for url: "
         "https://huggingface.co/api/models/Qwen/Qwen2.5-1.5B-Instruct", False),
        ("aiohttp.ClientResponseError: 404, message='Not Found', url='http://localhost:8000/x'", False),
    ],
)  # fmt: skip
def test_a_clients_report_of_the_local_servers_500_is_not_its_own_error(
    line: str, consequence: bool
) -> None:
    """Open WebUI relays Ollama's 500 after Ollama's own load timeout killed its runner: the
    client's line had counted as an error of the launch's own and barred the kill (the gate:
    "conclude what that error says"). A 5xx reply of a server on the box, as a client reports
    it, is that server's failure."""
    from agent.rules.proof import peer_lost

    assert peer_lost(line) == consequence
