"""Rules and knowledge after blind round 41 (scored before any change), each with a control
that must not trigger it: a fix is a general form or fact, never an answer keyed to one card."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agent.facts import Facts
from agent.hits import set_aside_logs
from agent.rules import proof
from agent.rules.restarts import restart_rules
from cards.model import IncidentCard
from cards.replay import ReplayHost
from tests.cardkit import minimal_card
from tools.container_inspect import ContainerState

ROOT = Path(__file__).resolve().parents[2]


def _commands_host(commands: dict[str, str]) -> ReplayHost:
    """A replayed host holding only these command outputs."""
    return ReplayHost(IncidentCard.model_validate(minimal_card({"commands": commands})))


def _obs(oid: str, tool: str, args: dict[str, Any], lines: list[str], **data: Any) -> dict:
    return {"id": oid, "tool": tool, "args": args, "ok": True, "lines": lines, "data": data}


BANNER = "INFO 09-19 08:57:11 api_server.py:495] vLLM API server version 0.6.1.post2"
BIND = (
    "ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 8000): "
    "address already in use"
)
EARLIER = [
    BANNER,
    "INFO 09-19 08:57:22 model_runner.py:1008] Loading model weights took 3.3757 GB",
    "INFO 09-19 08:57:55 launcher.py:27] Route: /v1/embeddings, Methods: POST",
    "INFO:     Application startup complete.",
    BIND,
    "INFO:     Waiting for application shutdown.",
    "INFO:     Application shutdown complete.",
    "INFO 09-19 08:57:57 multiproc_worker_utils.py:124] Killing local vLLM worker processes",
]
CURRENT = [
    BANNER.replace("08:57:11", "08:58:35"),
    "INFO 09-19 08:58:43 model_runner.py:997] Starting to load model /models/e5...",
]


def _restart_findings(restarts: int, earlier: list[str]) -> list[tuple[str, float, str]]:
    got: list[tuple[str, float, str]] = []

    def add(label, kind, strength, oid, line, why):  # type: ignore[no-untyped-def]
        got.append((label, strength, line))

    obs = [_obs("o1", "container_logs", {}, [*earlier, *CURRENT])]
    facts = Facts(container=ContainerState(name="c", running=True, restart_count=restarts))
    restart_rules(facts, obs, add)  # type: ignore[arg-type]
    return got


def test_a_restart_loops_earlier_instance_ended_by_a_one_line_fatal_is_the_cause() -> None:
    """uvicorn's failed bind is one ERROR line and then an orderly shutdown, no traceback: the
    restart rule read only tracebacks, so a compose service looping on a taken port (17
    restarts, the current instance loading again) was called still starting."""
    got = _restart_findings(17, EARLIER)
    assert ("port_in_use", 4.0, BIND) in got
    assert any(lbl == "still_starting" and w < 0 for lbl, w, _ in got)
    # the stage the instance before got through refutes what it would have failed at
    assert any(lbl == "model_load_error" and w < 0 for lbl, w, _ in got)
    # controls: no restarts (two runs an operator started by hand), or an earlier instance that
    # ended in an orderly shutdown with no fatal line of its own
    assert _restart_findings(0, EARLIER) == []
    orderly = [ln for ln in EARLIER if ln != BIND]
    assert _restart_findings(17, orderly) == []


def test_a_runtime_log_of_the_named_pod_sets_aside_a_file_that_ended_before_it() -> None:
    """An operator's saved copy of the pod before (killed by a rollout restart) ended before
    the named pod's own log began: its KeyboardInterrupt is not this launch's."""
    old = [
        "INFO 04-01 09:00:04 [api_server.py:981] vLLM API server version 0.8.2",
        "INFO 04-01 09:00:25 [gpu_model_runner.py:1174] Starting to load model /m...",
        "KeyboardInterrupt: terminated",
    ]
    pod = [
        "INFO 04-01 09:12:04 [api_server.py:981] vLLM API server version 0.8.2",
        "INFO 04-01 09:12:24 [gpu_model_runner.py:1174] Starting to load model /m...",
    ]
    file_read = _obs("o1", "log_tail", {"path": "/home/ops/previous.log"}, old)
    named = _obs("o2", "service_logs", {"kind": "kubectl", "name": "vllm-x-1"}, pod)
    assert set_aside_logs([file_read, named]) == {"/home/ops/previous.log"}  # type: ignore[list-item]
    # controls: a pod found by a cluster-wide search is not known to be the launch; and a
    # file that goes on after the pod's start is not an earlier run
    found = _obs("o2", "service_logs", {"kind": "kubectl"}, pod)
    assert set_aside_logs([file_read, found]) == set()  # type: ignore[list-item]
    looping = _obs(
        "o2", "service_logs", {"kind": "kubectl", "name": "vllm-x-1"}, [*pod, "  Restart Count:  6"]
    )
    assert set_aside_logs([file_read, looping]) == set()  # type: ignore[list-item]  # a crash loop's story
    later = [*old[:2], "INFO 04-01 09:13:00 [core.py:1] still going"]
    assert set_aside_logs([_obs("o1", "log_tail", {"path": "/p.log"}, later), named]) == set()  # type: ignore[list-item]


def test_trtllm_cuda_graph_warmup_is_a_quiet_phase_and_warnings_name_no_phase() -> None:
    """TRT-LLM warms one CUDA graph per batch size (tens of seconds each) and prints workspace
    warnings between: a model session inferred a hang from a two-minute silence there."""
    warm = "[10/11/2025-10:31:02] [TRT-LLM] [RANK 0] [I] Run generation only CUDA graph warmup for batch size=112, draft_len=1"
    assert proof.quiet_phase(warm)
    assert proof.quiet_phase(
        "[TRT-LLM] [RANK 0] [I] Creating CUDA graph instances for 19 batch sizes."
    )
    ws = "[TensorRT-LLM][WARNING] Attention workspace size is not enough, increase the size from 0 bytes to 33624960 bytes"
    assert proof.phase_warning(ws)
    # controls: an error is no warning to skip, and a plain step line names no quiet phase
    assert not proof.phase_warning("[TensorRT-LLM][ERROR] Assertion failed: workspace")
    assert not proof.quiet_phase("[TRT-LLM] [RANK 0] [I] Loading weights 3/61")


def test_a_pod_log_answers_a_longer_tail_from_the_fuller_recording() -> None:
    """A card recording `kubectl logs POD` and `kubectl logs POD --tail=20` answered our
    `--tail=200` with the twenty lines: the live host prints the banner too."""
    full = "".join(f"line {i}\n" for i in range(60))
    short = "".join(f"line {i}\n" for i in range(40, 60))
    host = _commands_host(
        {"kubectl -n llm logs pod-1 --tail=20": short, "kubectl -n llm logs pod-1": full}
    )
    assert host.run("kubectl -n llm logs --tail=200 pod-1").stdout == full
    assert host.run("kubectl -n llm logs --tail=5 pod-1").stdout.splitlines() == [
        f"line {i}" for i in range(55, 60)
    ]
    # control: with only the short recording, it still answers (what the card has)
    only = _commands_host({"kubectl -n llm logs pod-1 --tail=20": short})
    assert only.run("kubectl -n llm logs --tail=200 pod-1").stdout == short


def test_a_readiness_probe_ends_nothing_and_another_pods_kill_is_not_this_ones() -> None:
    """A 70B pod loading for minutes fails its readiness probe all along; the Killing events
    were of the pods the operator's rollouts replaced. A model session concluded
    killed_externally from them and the gate let it through."""
    from agent.rules.guardrails import positive_external_sign

    ready = 'Warning  Unhealthy  61s  kubelet  Readiness probe failed: Get "http://10.0.0.7:8000/health"'
    assert not proof.external_end(ready)
    # control: a liveness or startup probe failure gets the container restarted
    assert proof.external_end(ready.replace("Readiness", "Liveness"))
    assert proof.external_end(ready.replace("Readiness", "Startup"))
    events = _obs(
        "o1",
        "host_facts",
        {},
        ["17m   Normal   Killing   pod/vllm-x-old   Stopping container vllm"],
    )
    named = _obs("o2", "service_logs", {"kind": "kubectl", "name": "vllm-x-new"}, ["INFO up"])
    assert positive_external_sign([events, named], hits=[]) is None  # type: ignore[list-item]
    # control: the named pod's own Killing event is a sign; so is any when no pod is named
    own = _obs(
        "o1", "host_facts", {}, ["1m   Normal   Killing   pod/vllm-x-new   Stopping container vllm"]
    )
    assert positive_external_sign([own, named], hits=[]) is not None  # type: ignore[list-item]
    assert positive_external_sign([events], hits=[]) is not None  # type: ignore[list-item]


def test_a_deployments_recorded_log_answers_the_read_of_its_pod() -> None:
    """A card recorded `kubectl logs deployment/vllm-tpu`; Pivot reads `kubectl logs POD` of the
    Deployment's pod, which a live cluster answers with the same log. The replay had answered
    nothing, so both brains saw no log at all."""
    host = _commands_host(
        {
            "kubectl logs deployment/vllm-tpu": "OSError: [Errno 28] No space left on device\n",
            "kubectl logs deployment/other": "fine\n",
        }
    )
    out = host.run("kubectl logs --tail=200 vllm-tpu-5c8b7f9d64-xq7nr").stdout
    assert "No space left" in out
    # control: another workload's pod is not answered by this one's log
    assert "No space left" not in host.run("kubectl logs --tail=200 embed-7f8c9d6b4-hq2zr").stdout
