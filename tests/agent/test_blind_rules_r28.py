"""Rules, knowledge and replay fixes after blind round 28 (scored before any change), each with a
control that must not trigger it: a fix is a general form or fact, never an answer keyed to one
card."""

from __future__ import annotations

from typing import Any

import pytest

from cards.model import IncidentCard
from cards.replay import ReplayHost
from tests.agent.test_rules import GPU_CLEAN, PS_HEADER, PS_IDLE, _card
from tests.cardkit import minimal_card


def _tail(oid: str, path: str, text: str) -> dict[str, Any]:
    return {"id": oid, "tool": "log_tail", "args": {"path": path}, "ok": True,
            "lines": text.splitlines(), "data": {"host": "h", "path": path}}  # fmt: skip


TODAY = (
    "INFO 02-20 15:12:31 api_server.py:209] args: Namespace(host=None, port=8000)\n"
    "INFO 02-20 15:12:31 llm_engine.py:79] Initializing an LLM engine with config: model='m'\n"
    "INFO:     Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)\n"
)
YESTERDAY = (
    "INFO 02-19 18:04:12 llm_engine.py:79] Initializing an LLM engine with config: model='m'\n"
    "Traceback (most recent call last):\n"
    '  File "/x/engine.py", line 342, in _init_cache\n'
    "ValueError: Frobnicator refused the widget count.\n"
)


@pytest.mark.parametrize("rotated", [True, False])
def test_a_rotated_logs_error_is_no_fatal_line_of_this_launch(rotated: bool) -> None:
    """Yesterday's server.log.1 ended on an error no signature knows; today's server.log starts
    a launch of its own: that error is neither this launch's fatal line (its words pointed the
    rulebook at a label) nor an error the proof gate holds against "healthy". The control: the
    same error in today's own log is this launch's."""
    from agent.facts import derive
    from agent.hits import signature_hits
    from agent.rules.own_fatal import own_fatal_since_launch
    from agent.rules.structure import own_fatal_lines

    old = "/data/logs/server.log.1" if rotated else "/data/logs/server.log"
    obs = [_tail("o1", old, YESTERDAY)]
    if rotated:
        obs.append(_tail("o2", "/data/logs/server.log", TODAY))
    own = own_fatal_lines(derive(obs), obs, signature_hits(obs))
    assert (own == []) == rotated, own
    assert (own_fatal_since_launch(obs) is None) == rotated


@pytest.mark.parametrize(
    ("line", "served"),
    [
        ('INFO:     10.31.4.77:52914 - "POST /v1/chat/completions HTTP/1.1" 200 OK', True),
        ('INFO:     127.0.0.1:40388 - "POST /generate HTTP/1.1" 200 OK', True),
        ('INFO:     127.0.0.1:40366 - "GET /health HTTP/1.1" 200 OK', False),  # the front end
        ('INFO:     127.0.0.1:40388 - "POST /v1/completions HTTP/1.1" 500 Internal', False),
    ],
)
def test_a_served_generation_request_is_told_from_a_probe(line: str, served: bool) -> None:
    from agent.rules.proof import served_request

    assert served_request(line) == served


def test_healthy_cites_the_line_that_says_where_it_listens_and_a_served_request() -> None:
    """uvicorn's announcement is three ready lines; the one with the address says it listens.
    A generation request answered 200 after it is cited too. The control: a start-up whose
    ready lines name no address cites its first."""
    from agent.brains.rulebook import _came_up, _served

    log = (
        "INFO:     Started server process [1877245]\n"
        "INFO:     Waiting for application startup.\n"
        "INFO:     Application startup complete.\n"
        "INFO:     Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)\n"
        'INFO:     10.31.4.77:52914 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
    )
    state: Any = {"observations": [_tail("o1", "/l/server.log", log)]}
    hits = [("o1", ln) for ln in log.splitlines()[:4] if "Waiting" not in ln]
    assert _came_up(state, hits)[1].startswith("INFO:     Uvicorn running on http://0.0.0.0:8000")
    assert _served(state, hits[0]) == [("o1", log.splitlines()[4])]
    plain = "[2025-05-12 06:51:58] The server is fired up and ready to roll!\n"
    state = {"observations": [_tail("o1", "/l/server.log", plain)]}
    assert _came_up(state, [("o1", plain.strip())]) == ("o1", plain.strip())
    assert _served(state, ("o1", plain.strip())) == []


INNER = "RuntimeError: DeepEP error: CPU recv timeout"
CHAINED = [
    '  File "/usr/local/lib/python3.10/dist-packages/deep_ep/buffer.py", line 299, in dispatch',
    INNER,
    "",
    "During handling of the above exception, another exception occurred:",
    "",
    "Traceback (most recent call last):",
    "Exception: Capture cuda graph failed: DeepEP error: CPU recv timeout",
]


@pytest.mark.parametrize("captured", [True, False])
def test_a_wrapping_line_that_names_the_context_supersedes_the_inner_error(captured: bool) -> None:
    """DeepEP's normal-mode "CPU recv timeout" inside CUDA graph capture is the flags (normal
    mode cannot be captured), and the chained traceback's inner line is that same failure seen
    without the capture: dropped. The control: the timeout outside capture stays a comms fault."""
    from agent.signatures import scan

    lines = CHAINED if captured else ["x", INNER]
    labels = {m.label for m in scan(lines) if m.label and m.strength == "fatal"}
    assert labels == ({"bad_launch_argument"} if captured else {"nccl_failure"}), labels


@pytest.mark.parametrize(
    ("line", "label"),
    [
        ("RuntimeError: Version mismatch: libfoo was built for 2.1 and found 2.3", "dependency_error"),
        ("ValueError: shape mismatch: value array of shape (4,) could not be broadcast", "bad_launch_argument"),
    ],
)  # fmt: skip
def test_a_version_mismatch_is_a_dependency_not_a_flag(line: str, label: str) -> None:
    from agent.rules.proof import label_hint

    assert label_hint(line) == label


@pytest.mark.parametrize(
    ("command", "engine"),
    [
        ("python3 -m dynamo.trtllm --model-path /m --tensor-parallel-size 2 --grpc-port 50051", "trtllm"),
        ("python3 -m dynamo.vllm --model Qwen/Qwen3-8B", "vllm"),
        ("python3 -m dynamo.sglang --model-path /m", "sglang"),
        ("python3 -m dynamo.frontend --http-port 8000", None),  # the router, no engine of its own
    ],
)  # fmt: skip
def test_dynamos_workers_are_their_engines_servers(command: str, engine: str | None) -> None:
    from tools import engines

    m = engines.classify(command)
    assert (m.engine, m.role) == ((engine, "main") if engine else (None, None))


PS_WORKER = PS_HEADER + (
    "root       48833  0.1  0.2 14220716 612400 ?     Sl   10:03   0:09 python3 -m dynamo.trtllm "
    "--model-path /models/m --tensor-parallel-size 2 --grpc-port 50051\n"
)
SS = (
    "State   Recv-Q  Send-Q   Local Address:Port    Peer Address:Port  Process\n"
    'LISTEN  0       4096           127.0.0.1:2379         0.0.0.0:*      users:(("etcd",pid=1488,fd=7))\n'
)


@pytest.mark.parametrize("bind_error", [False, True])
def test_a_free_own_port_and_no_bind_error_refute_port_in_use(
    tmp_path: Any, bind_error: bool
) -> None:
    """Nothing listens on the launch's own port (`--grpc-port 50051`) and its log has no bind
    error: nobody took it (cited: the ports read's own count of the listeners it read). The
    control: a bind error in the log keeps port_in_use open, its holder may have gone since."""
    from agent.runner import investigate
    from agent.settings import Settings

    log = "[TensorRT-LLM] TensorRT-LLM version: 1.3.0rc27\n" + (
        "E0922 10:03:50.1 main.cc:244] failed to start GRPC service: Unavailable - Socket "
        "'0.0.0.0:50051' already in use\n"
        if bind_error
        else "rank 0 using MpiPoolSession to spawn MPI processes\n"
    )
    card = IncidentCard.model_validate(
        {
            **minimal_card(
                {"ps": PS_WORKER, "commands": {"ss -ltnp": SS},
                 "files": {"/logs/worker.log": log}},
                engine="trtllm",
            ),
            "invocation": {"log": "/logs/worker.log"},
        }
    )  # fmt: skip
    r = investigate(
        ReplayHost(card), "s", logs=["/logs/worker.log"], settings=Settings(home=tmp_path / "h")
    )
    port = next(h for h in r.hypotheses if h.label == "port_in_use")
    assert (port.status == "refuted") != bind_error, port


def test_a_kubectl_sub_command_answers_only_itself() -> None:
    """`kubectl logs POD` is never answered by a recorded `kubectl get pod POD -o jsonpath=...`
    that shares the pod's name (its output is an image name, not a log). The control: the
    recorded `kubectl logs POD` answers our `kubectl logs --tail=200 POD`."""
    pod = "ms-qwen3-decode-5f7c9d8b6-vx4tn"
    get = {
        f"kubectl get pod -n llm-d {pod} -o jsonpath='{{.spec.containers[0].image}}'": "img:v1\n"
    }
    host = ReplayHost(IncidentCard.model_validate(minimal_card({"commands": get})))
    assert host.run(f"kubectl logs --tail=200 {pod}").stdout != "img:v1\n"
    logs = {**get, f"kubectl logs {pod}": "INFO starting\n"}
    host = ReplayHost(IncidentCard.model_validate(minimal_card({"commands": logs})))
    assert host.run(f"kubectl logs --tail=200 {pod}").stdout == "INFO starting\n"


def _tuning_card(bar: str) -> IncidentCard:
    """A live TP2 vLLM launch whose log ends on an autotuner's bar, both GPUs pinned, the log
    unchanged for ten minutes of snapshots (so any watch sees no growth)."""
    ps = PS_HEADER + (
        "svc      2422514  2.1  0.3 18839204 6201744 ?    Sl   15:22   0:25 /opt/venv/bin/python "
        "/opt/venv/bin/vllm serve moonshotai/Kimi-K3 --tensor-parallel-size 2 --port 30000\n"
        "svc      2422801 99.0  1.1 88402164 23611780 ?   Rl   15:22   9:11 VLLM::Worker_TP0\n"
        "svc      2422802 99.0  1.1 88402164 23611780 ?   Rl   15:22   9:10 VLLM::Worker_TP1\n"
    )
    log = (
        "(APIServer pid=2422514) INFO 09-01 15:22:31 [api_server.py:1896] vLLM API server "
        "version 0.29.1\n"
        "(EngineCore pid=2422677) INFO 09-01 15:28:42 [kv_cache_utils.py:1315] GPU KV cache "
        "size: 1,179,648 tokens\n" + bar + "\n"
    )
    gpus = "".join(
        f"{i}, NVIDIA B200, 171204 MiB, 11981 MiB, 183359 MiB, 100 %\n" for i in range(2)
    )
    return IncidentCard.model_validate(
        {
            "id": "t", "title": "t", "source": "test", "engine": "vllm",
            "symptom": "my server looks hung, /health times out",
            "invocation": {"log": "/srv/logs/server.log"},
            "host": {
                "ps": ps,
                "nvidia_smi": [{"at": 0, "text": gpus}, {"at": 600, "text": gpus}],
                "dmesg": "[Mon Aug 31 04:12:10 2026] nvidia-fabricmanager: fabric up\n",
                "files": {"/srv/logs/server.log": [{"at": 0, "text": log}, {"at": 600, "text": log}]},
            },
        }
    )  # fmt: skip


@pytest.mark.parametrize(
    ("bar", "starting"),
    [
        ("[AutoTuner]: Tuning flashinfer::moe:  50%|#####     | 11/22 [06:15<07:51, 42.84s/profile]", True),
        ("[AutoTuner]: Tuning flashinfer::moe:  50%|#####     | 11/22 [00:15<00:15,  1.40s/profile]", False),
    ],
)  # fmt: skip
def test_a_paced_bar_in_a_quiet_phase_is_judged_by_its_pace(
    tmp_path: Any, bar: str, starting: bool
) -> None:
    """An autotuner (a phase known to run quietly) prints a bar at 43 s a step; watched for less
    than one step, its silence is no stall and its pinned GPUs are its work: still starting, as
    an inference. The control: the same bar at 1.4 s a step, silent for the whole watch, is not
    "still starting"."""
    from agent.runner import investigate
    from agent.settings import Settings

    card = _tuning_card(bar)
    r = investigate(
        ReplayHost(card),
        card.symptom,
        logs=[card.invocation.log or ""],
        settings=Settings(home=tmp_path / "h"),
    )
    assert (r.root_cause == "still_starting") == starting, r.summary


def test_a_recorded_command_answers_only_the_names_it_names() -> None:
    """A model's remark on round 28, checked: `kubectl logs vllm-1-1` was answered by the card's
    `kubectl logs vllm-1` (the leader's log for the worker's), `py-spy dump --pid 1` by
    `py-spy dump --pid 153`. Every name ours gives must be one the recorded command gives. The
    control: flags and a pipe the card's author added still answer ours."""
    cmds = {
        "kubectl logs vllm-1 -n llm": "leader log\n",
        "py-spy dump --pid 153 | head -12": "Thread 153 (idle)\n",
    }
    host = ReplayHost(IncidentCard.model_validate(minimal_card({"commands": cmds})))
    assert host.run("kubectl logs --tail=200 vllm-1-1").stdout != "leader log\n"
    assert host.run("py-spy dump --pid 1").stdout != "Thread 153 (idle)\n"
    assert host.run("kubectl logs --tail=200 vllm-1").stdout == "leader log\n"
    assert host.run("py-spy dump --pid 153").stdout == "Thread 153 (idle)\n"


@pytest.mark.parametrize(
    ("command", "role"),
    [
        ("ray::DPMoEEngineCoreActor.run", "worker"),
        ("ray::DPEngineCoreActor.run", "worker"),
        ("ray::RayWorkerProc.run", "worker"),
        ("ray::IDLE", None),  # an idle Ray worker process: Ray's, no vLLM rank
    ],
)
def test_vllms_ray_data_parallel_actors_are_its_workers(command: str, role: str | None) -> None:
    """vLLM's data parallel on Ray runs its engine cores as Ray actors: their stacks are where a
    hang waits (the API server's event loop only waits on them)."""
    from tools import engines

    m = engines.classify(command)
    assert (m.engine == "vllm" and m.role == "worker") == (role is not None), m


@pytest.mark.parametrize(
    ("line", "pid"),
    [
        ("I1028 12:13:38.405865 632324 ProcessGroupNCCL.cpp:666] [Rank 0] ProcessGroupNCCL initialized", 632324),
        ("I1128 14:01:40.120331 140610 model_lifecycle.cc:461] loading: model:1", 140610),
        ("INFO 10-28 12:13:38 632324 worker.py:66] started", None),  # not glog's shape
    ],
)  # fmt: skip
def test_glog_lines_name_their_writer_in_cpp_sources_too(line: str, pid: int | None) -> None:
    """torch's c10d logs through glog from `.cpp` files: the pid after the time is the rank
    that wrote the launch's log, the process whose stacks a hang should be read from."""
    from agent.rules.proof import log_pids

    assert set(log_pids([line])) == ({pid} if pid else set())


PS_NO_TREE = PS_HEADER + (
    "lab      41822 99.0  1.2 38211044 4120112 ?     Rl   14:10  12:01 python3 -m vllm.entrypoints"
    ".openai.api_server --model /models/qwen2 --tensor-parallel-size 2\n"
    "{user}    39090  0.0  0.0  26408 16120 pts/3    S+   14:02   0:00 ninja -j8\n"
)


@pytest.mark.parametrize("user", ["kwang", "lab"])
def test_another_users_build_beside_a_launch_is_not_its_build(user: str) -> None:
    """`ps aux` shows no process tree: a compiler beside the launch is taken for the launch's
    own build only when it runs as the launch's user. The control: the launch's user's ninja
    may be the JIT build the launch is waiting on."""
    from agent.facts import derive
    from tools import processes

    card = IncidentCard.model_validate(minimal_card({"ps": PS_NO_TREE.format(user=user)}))
    res = processes.run(ReplayHost(card), processes.Args())
    obs = [{"id": "o1", "tool": "processes", "args": {}, "ok": True, "lines": res.lines(),
            "data": res.model_dump(mode="json")},
           _tail("o2", "/home/lab/vllm.log", "INFO 09-02 14:10:11 api_server.py:440] vLLM API server version 0.5.5\n")]  # fmt: skip
    assert (39090 in derive(obs).building_pids) == (user == "lab")


_BIND_LOG = (
    "$ python3 -m vllm.entrypoints.openai.api_server --model /models/qwen --port 8000\n"
    "INFO 12-03 10:00:01 Loading weights took 41.2 seconds\n"
    "ERROR 12-03 10:00:44 [api_server.py:1012] OSError: [Errno 98] error while attempting to "
    "bind on address ('0.0.0.0', 8000): address already in use\n"
)


@pytest.mark.parametrize("beside_unknown", [False, True])
def test_the_gate_refuses_a_label_whose_only_crash_line_is_another_labels_known_sign(
    beside_unknown: bool,
) -> None:
    """The crash lines must prove the label: when every cited crash line is a known sign of an
    unrelated label (a bind error cited for a CUDA OOM, beside a phase line that is no sign of
    anything), the facts say otherwise and the gate refuses. Control: an error line no
    signature knows cited beside it leaves the gate nothing to contradict."""
    from agent.facts import derive
    from agent.observe import run_many
    from agent.rules.guardrails import check_conclusion
    from cards.replay import ReplayHost

    unknown = "ERROR 12-03 10:00:45 [core.py:88] RuntimeError: worker 3 reported a fault"
    log = _BIND_LOG + (unknown + "\n" if beside_unknown else "")
    card = _card({"/var/log/vllm/server.log": log}, PS_IDLE, GPU_CLEAN)
    calls = [("processes", {}), ("log_tail", {"path": "/var/log/vllm/server.log"})]
    obs: list[Any] = run_many(ReplayHost(card), calls, 1, 0)
    bind = _BIND_LOG.splitlines()[2]
    evidence = [
        {"observation": "o2", "line": "INFO 12-03 10:00:01 Loading weights took 41.2 seconds"},
        {"observation": "o2", "line": bind},
    ]
    if beside_unknown:
        evidence.append({"observation": "o2", "line": unknown})
    action: Any = {"kind": "conclude", "label": "cuda_oom_runtime", "evidence": evidence}
    problems = check_conclusion(action, obs, derive(obs))
    refused = any("known signs of port_in_use" in p for p in problems)
    assert refused is (not beside_unknown), problems
