"""Rules and replay fixes after blind round 27 (scored before any change), each with a control
that must not trigger it: a fix is a general form or fact, never an answer keyed to one card."""

from __future__ import annotations

import json
from typing import Any

import pytest

from cards.model import IncidentCard
from cards.replay import ReplayHost
from tests.agent.test_rules import PS_HEADER
from tests.cardkit import minimal_card
from tools import service_logs
from tools.container_host import ContainerHost
from tools.container_inspect import parse_inspect

POD = "qwen3-32b-vllm-6c9f8d7b54-q8xlm"
DESCRIBE = f"""Name:             {POD}
Namespace:        llm
Status:           Running
Containers:
  vllm:
    State:          Running
      Started:      Wed, 12 Aug 2026 20:25:44 +0000
    Last State:     Terminated
      Reason:       Error
      Exit Code:    137
    Ready:          False
    Restart Count:  3
Events:
  Warning  Unhealthy  4m (x182 over 41m)  kubelet  Startup probe failed: Get "http://10.244.7.41:8000/health": dial tcp 10.244.7.41:8000: connect: connection refused
  Normal   Killing    4m (x3 over 31m)    kubelet  Container vllm failed startup probe, will be restarted
"""
LOG = (
    "(APIServer pid=1) INFO 08-12 20:25:53 [api_server.py:2011] vLLM API server version 0.26.1\n"
    "(EngineCore pid=812) INFO 08-12 20:26:01 [multiproc_executor.py:781] Creating 4 worker "
    "processes for TP=4\n"
    "(Worker pid=958) INFO 08-12 20:26:08 [parallel_state.py:1607] world_size=4 rank=0 "
    "local_rank=0 distributed_init_method=tcp://127.0.0.1:40517 backend=nccl\n"
    "(Worker pid=958) INFO 08-12 20:26:09 [pynccl.py:113] vLLM is using nccl==2.28.9\n"
)
GPUS = "".join(
    f"{i}, NVIDIA H100 80GB HBM3, 612 MiB, 80396 MiB, 81559 MiB, 0 %\n" for i in range(4)
)


def _pod_card(cpu: str) -> IncidentCard:
    """A pod restarted by its startup probe three times, its current instance alive: workers at
    `cpu` % CPU, the log and the GPUs still over five minutes."""
    ps = PS_HEADER + (
        "root           1  1.2  0.3 9901232 1402220 ?     Ssl  20:25   0:07 python3 -m "
        "vllm.entrypoints.openai.api_server --model /models/Qwen3-32B --tensor-parallel-size 4\n"
        + "".join(
            f"root         {958 + i}  {cpu}  0.2 14120044 1198120 ?    Sl   20:26   0:04 "
            f"VLLM::Worker_TP{i}\n"
            for i in range(4)
        )
    )
    return IncidentCard.model_validate(
        {
            "id": "made-up",
            "title": "t",
            "source": "test",
            "engine": "vllm",
            "symptom": "the pod never becomes ready and restarts every 10 minutes, why?",
            "invocation": {"container": "vllm"},
            "host": {
                "nvidia_smi": [{"at": 0, "text": GPUS}, {"at": 300, "text": GPUS}],
                "dmesg": "[Wed Aug 12 20:25:41 2026] IPv6: link becomes ready\n",
                "commands": {f"kubectl -n llm describe pod {POD}": DESCRIBE},
                "containers": {
                    "vllm": {
                        "logs": [{"at": 0, "text": LOG}, {"at": 300, "text": LOG}],
                        "ps": ps,
                        "commands": {
                            "df -h /dev/shm": "Filesystem Size Used Avail Use% "
                            "Mounted on\ntmpfs 64G 12M 64G 1% /dev/shm\n"
                        },  # fmt: skip
                    }
                },
            },
        }
    )


def _run_in(card: IncidentCard, tmp_path: Any) -> Any:
    from agent.runner import investigate
    from agent.settings import Settings

    host = ContainerHost(ReplayHost(card), card.invocation.container or "")
    return investigate(host, card.symptom, settings=Settings(home=tmp_path / "h"))


@pytest.mark.parametrize(("cpu", "stuck"), [("0.0", True), ("97.0", False)])
def test_a_probe_kill_of_an_earlier_instance_is_no_proof_while_this_one_is_alive(
    tmp_path: Any, cpu: str, stuck: bool
) -> None:
    """The kubelet killed three earlier instances; the current one runs. While it is not seen at
    work (log and GPU memory still, workers idle) the kills may follow from a stall where that
    one stopped: no "killed from outside". The control: its workers busy on a CPU (a download,
    a CPU-bound load), the probe kills it again for taking too long: killed_externally."""
    r = _run_in(_pod_card(cpu), tmp_path)
    if stuck:
        assert r.root_cause != "killed_externally", r.summary
    else:
        assert r.root_cause == "killed_externally", r.summary


def test_a_container_the_card_records_without_its_inspect_still_exists() -> None:
    """A pod's container recorded with its log and processes but not its record: the CLI probe
    finds it (as a live `inspect --format` would), its record stays unknown. The control: a
    container the card does not record is not there."""
    card = _pod_card("0.0")
    inside = ContainerHost(ReplayHost(card), "vllm")
    assert inside.unavailable() is None
    assert "not recorded" in (inside.outer.run("docker inspect vllm").error or "")
    assert ContainerHost(ReplayHost(card), "other").unavailable() is not None


def _cmd_host(commands: dict[str, str]) -> ReplayHost:
    """A replayed host that answers these commands only."""
    return ReplayHost(IncidentCard.model_validate(minimal_card({"commands": commands})))


def test_a_kubectl_log_of_one_container_is_never_another_containers() -> None:
    """`kubectl logs POD -c init` is answered only by the card's log of that container; a
    container the card does not record is not recorded, never another container's log."""
    h = _cmd_host(
        {
            "kubectl logs -n llm p1 -c kserve-container": "waiting to start: PodInitializing\n",
            "kubectl logs -n llm p1 -c storage-initializer": "GatedRepoError: 401\n",
        }
    )
    init = h.run("kubectl -n llm logs --tail=200 p1 -c storage-initializer").stdout
    server = h.run("kubectl -n llm logs --tail=200 p1 -c kserve-container").stdout
    assert "GatedRepoError" in init and "PodInitializing" in server
    assert h.run("kubectl -n llm logs --tail=200 p1 -c sidecar").error  # not recorded


FAILED_INIT = (
    "Status:           Pending\n"
    "  Warning  BackOff  11s (x86 over 21m)  kubelet  Back-off restarting failed container "
    "storage-initializer in pod p1_llm(3a7f)\n"
)


@pytest.mark.parametrize(
    ("own_log", "describe", "read"),
    [
        ("container is waiting to start: PodInitializing\n", FAILED_INIT, True),
        # control: no container named failing
        ("container is waiting to start: PodInitializing\n", "Status:    Pending\n", False),
    ],
)
def test_the_log_of_a_failing_init_container_is_read_beside_the_pods(
    own_log: str, describe: str, read: bool
) -> None:
    """A pod whose server container waits (PodInitializing) has no log of its own; the events
    name the container that keeps failing, and its log holds the cause."""
    h = _cmd_host(
        {
            "kubectl get pods -A --no-headers": "llm p1-predictor 0/1 Init:CrashLoopBackOff 9 21m\n",
            "kubectl logs -n llm p1-predictor": own_log,
            "kubectl describe pod -n llm p1-predictor": describe,
            "kubectl logs -n llm p1-predictor -c storage-initializer": "GatedRepoError: 401\n",
        }
    )
    r = service_logs.run(h, service_logs.Args(kind="kubectl"))
    assert ("storage-initializer" in r.failing) == read, r.failing
    assert any("GatedRepoError" in ln for ln in r.lines()) == read


BASE = {"Id": "0c4e9b1d7a22", "Name": "/srv", "State": {"Status": "running", "Running": True}}


@pytest.mark.parametrize(
    ("extra", "shown"),
    [
        ({}, False),  # a trimmed record: nothing shown, nothing missing
        ({"HostConfig": {"DeviceRequests": None, "PortBindings": {}}, "Mounts": []}, True),
    ],
)
def test_a_part_of_a_container_record_not_shown_proves_nothing_missing(
    extra: dict[str, Any], shown: bool
) -> None:
    """A record without HostConfig's devices, port map or mounts (a trimmed paste, a card) says
    nothing of --gpus, -p or volumes; `docker inspect` prints them always, null when empty, and
    only then is "no GPU passed", "no port published", "no cache mounted" a fact."""
    from agent.containers import notes

    c = parse_inspect(json.dumps([{**BASE, **extra}]))
    assert (c.gpus_shown, c.ports_shown, c.mounts_shown) == (shown, shown, shown)
    said = " ".join(notes(c, "docker", 8000))
    for words in ("No GPU was passed", "publishes no host port"):
        assert (words in said) == shown, said


@pytest.mark.parametrize(
    ("line", "ready"),
    [
        ("(ProxyActor pid=1631) INFO:     Started server process [1631]", False),
        ("(APIServer pid=55102) INFO:     Started server process [55102]", True),  # control
    ],
)
def test_ray_serves_proxy_coming_up_is_not_the_model_ready(line: str, ready: bool) -> None:
    """Ray Serve's HTTP proxy starts its uvicorn before any replica is placed; a server's own
    uvicorn line (vLLM's API server) still says it is up."""
    from agent.signatures import scan

    assert any(m.strength == "ready" for m in scan([line])) == ready


@pytest.mark.parametrize(
    ("line", "port"),
    [
        # gRPC names its own source line (chttp2_server.cc:1080) before the address
        (
            "E1221 09:27:15.347306746 165 chttp2_server.cc:1080] UNKNOWN:No address added out of "
            "total 1 resolved for '0.0.0.0:8001' {children:[UNKNOWN:bind: Address already in use]}",
            8001,
        ),
        ("failed to start GRPC service: Unavailable - Socket '0.0.0.0:8001' already in use", 8001),
        (
            "ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 30000): "
            "address already in use",
            30000,
        ),
        ("I0101 main.cc:244] Started GRPCInferenceService at 0.0.0.0:8001", None),  # control
    ],
)
def test_the_port_of_a_failed_bind_is_the_addresss_not_a_source_line(
    line: str, port: int | None
) -> None:
    """The port the `ports` check asks about is the one after the bound address's host; a
    `file.cc:LINE]` prefix on the same line is C++, and a line with no failed bind names none."""
    from agent.server_port import PORT

    m = PORT.search(line)
    assert (int(next(g for g in m.groups() if g)) if m else None) == port


TODAY = (
    "(APIServer pid=55102) INFO 05-20 10:02:11 [api_server.py:1953] vLLM API server version 0.20.1\n"
    "(EngineCore_DP0 pid=55188) INFO 05-20 10:05:43 [shm_broadcast.py:681] No available shared "
    "memory broadcast block found in 60 seconds.\n"
)
SMOKE = (
    "(APIServer pid=48771) INFO 05-19 17:20:02 [api_server.py:1953] vLLM API server version 0.20.1\n"
    "(Worker_TP0 pid=48901) ERROR 05-19 17:21:44 [multiproc_executor.py:772] torch.OutOfMemoryError: "
    "CUDA out of memory. Tried to allocate 3.50 GiB. GPU 0 has a total capacity of 95.08 GiB of "
    "which 1.21 GiB is free.\n"
)


@pytest.mark.parametrize("named", [True, False])
def test_an_earlier_runs_log_beside_the_named_one_is_not_this_launchs(named: bool) -> None:
    """Yesterday's smoke test died of a CUDA OOM; today's server.log, the log the operator
    named, starts a launch of its own: the smoke test's OOM is none of this launch's evidence.
    The control: no log named, the two logs weighed as before (which is the launch's is not
    known from their names)."""
    from agent.hits import signature_hits

    def tail(oid: str, path: str, text: str) -> dict[str, Any]:
        return {"id": oid, "tool": "log_tail", "args": {"path": path}, "ok": True,
                "lines": text.splitlines(), "data": {}}  # fmt: skip

    given = ["/srv/logs/server.log"] if named else []
    obs = [
        {
            "id": "o1",
            "tool": "processes",
            "args": {"logs": given},
            "ok": True,
            "lines": [],
            "data": {},
        },  # fmt: skip
        tail("o2", "/srv/logs/server.log", TODAY),
        tail("o3", "/srv/logs/smoke-0519.log", SMOKE),
    ]
    oom = [m for o, m in signature_hits(obs) if o["id"] == "o3" and m.strength == "fatal"]
    assert (oom == []) == named, oom
