"""Rules, knowledge and sweep fixes after blind round 29 (scored before any change), each with a
control that must not trigger it: a fix is a general form or fact, never an answer keyed to one
card."""

from __future__ import annotations

from typing import Any

import pytest

from cards.model import IncidentCard
from cards.replay import ReplayHost
from tests.agent.test_rules import GPU_CLEAN, PS_HEADER, PS_IDLE, _card


def _investigate(card: IncidentCard, tmp_path: Any, **kw: Any) -> Any:
    from agent.runner import investigate
    from agent.settings import Settings

    return investigate(ReplayHost(card), card.symptom, settings=Settings(home=tmp_path / "h"), **kw)


# -- a systemd unit named by the operator is read from its journal ---------------------------------
@pytest.mark.parametrize(
    ("symptom", "configs", "unit"),
    [
        ("", ["/etc/systemd/system/vllm-qwen.service"], "vllm-qwen.service"),
        ("I did systemctl restart vllm-qwen and it never came back", [], "vllm-qwen.service"),
        ("systemctl --user status sglang.service says failed.", [], "sglang.service"),
        ("it died", ["/etc/vllm/serve.yaml"], None),
        ("I ran systemctl daemon-reload", [], None),
    ],
)
def test_the_unit_the_operator_names_is_the_one_read(
    symptom: str, configs: list[str], unit: str | None
) -> None:
    from tools.service_logs import unit_named

    assert unit_named(symptom, configs) == unit


UNIT = (
    "[Service]\nUser=svc\nExecStart=/opt/venv/bin/vllm serve /models/q --port 8000\n"
    "Restart=on-failure\n"
)
JOURNAL = (
    "Sep 21 09:58:29 gpu-11 vllm[52210]: (APIServer pid=52210) INFO 09-21 09:58:29 "
    "[api_server.py:1911] vLLM API server version 0.28.0\n"
    "Sep 21 09:58:31 gpu-11 vllm[52210]: (APIServer pid=52210) ERROR 09-21 09:58:31 "
    "[api_server.py:1012] OSError: [Errno 98] error while attempting to bind on address "
    "('0.0.0.0', 8000): address already in use\n"
    "Sep 21 09:58:33 gpu-11 systemd[1]: chat-prod.service: Main process exited, code=exited, "
    "status=1/FAILURE\n"
)


@pytest.mark.parametrize("named", [True, False])
def test_a_unit_file_given_as_the_config_has_its_journal_read(tmp_path: Any, named: bool) -> None:
    """The operator gives the unit file: its journal is the launch's log, whatever the unit is
    called (one named like a server, "vllm-*", is found without help; "chat-prod" is not). The
    control: with no unit named, nothing reads that journal and nothing is concluded from it."""
    card = _card(
        {"/etc/systemd/system/chat-prod.service": UNIT},
        PS_IDLE,
        GPU_CLEAN,
        commands={"journalctl -u chat-prod.service --no-pager | tail -n 40": JOURNAL},
    )
    cfg = ["/etc/systemd/system/chat-prod.service"] if named else []
    r = _investigate(card, tmp_path, configs=cfg)
    if named:
        assert r.root_cause == "port_in_use", r.summary
        assert any("address already in use" in e.line for e in r.evidence)
    else:
        assert r.root_cause != "port_in_use", r.summary


# -- the kubelet's kill of a pod's other container is not the launch's end --------------------------
def _obs(oid: str, tool: str, lines: list[str], data: dict[str, Any]) -> dict[str, Any]:
    return {"id": oid, "tool": tool, "args": {}, "ok": True, "lines": lines, "data": data}


@pytest.mark.parametrize(("killed", "foreign"), [("aibrix-runtime", True), ("ray-head", False)])
def test_a_probe_kill_of_a_sidecar_is_not_the_launchs(killed: str, foreign: bool) -> None:
    """The investigation runs inside container ray-head; the pod's events say the kubelet
    restarted the sidecar aibrix-runtime after its liveness probe failed: a bystander's kill,
    never cited for the launch. The control: the same kill of ray-head itself is the launch's."""
    from agent.kills import bystander_kills

    kill = (
        f"  Normal   Killing    40s (x6 over 14m)    kubelet            Container {killed} "
        "failed liveness probe, will be restarted"
    )
    obs: list[Any] = [
        _obs("o1", "container_logs", ["INFO loading"], {"container": "ray-head", "host": "h"}),
        _obs("o2", "service_logs", ["# kubectl describe pod p (state and events)", kill], {}),
    ]
    assert (kill in bystander_kills(obs)) is foreign


# -- a bar watched for less than one and a half of its steps proves no stall ------------------------
def _loading_card(bar: str) -> IncidentCard:
    ps = PS_HEADER + (
        "svc      710498  2.1  0.4 9923120 2231004 ?     Sl   06:11   0:21 /usr/bin/python3 -m "
        "vllm.entrypoints.openai.api_server --model /models/ds --port 8000\n"
    )
    log = (
        "INFO 04-28 06:11:20 api_server.py:1040] vLLM API server version 0.8.4\n"
        "INFO 04-28 06:12:02 model_runner.py:1110] Starting to load model /models/ds...\n"
        + bar
        + "\n"
    )
    gpus = "0, NVIDIA H20, 10866 MiB, 87005 MiB, 97871 MiB, 3 %\n"
    return IncidentCard.model_validate(
        {
            "id": "t", "title": "t", "source": "test", "engine": "vllm",
            "symptom": "the server looks hung, nothing answers on 8000",
            "invocation": {"log": "/srv/logs/server.log"},
            "host": {
                "ps": ps,
                "nvidia_smi": gpus,
                "dmesg": "[Mon Apr 21 02:14:09 2025] NVRM: loading NVIDIA UNIX Kernel Module\n",
                "files": {"/srv/logs/server.log": [{"at": 0, "text": log}, {"at": 600, "text": log}]},
            },
        }
    )  # fmt: skip


@pytest.mark.parametrize(
    ("bar", "starting"),
    [
        ("Loading safetensors checkpoint shards:  23% Completed | 38/163 [13:51<45:33, 21.87s/it]", True),
        ("Loading safetensors checkpoint shards:  23% Completed | 38/163 [02:31<08:20,  4.00s/it]", False),
    ],
)  # fmt: skip
def test_a_bar_watched_for_less_than_its_step_window_proves_no_stall(
    tmp_path: Any, bar: str, starting: bool
) -> None:
    """A loading bar at 22 s a shard, watched for the liveness limit (30 s, shorter than the
    one and a half steps a bar's silence needs to mean anything): no growth is what a loader
    looks like, still starting as an inference. The control: at 4 s a shard the same silence
    is a stall, and the launch is not called still starting."""
    card = _loading_card(bar)
    r = _investigate(card, tmp_path, logs=[card.invocation.log or ""])
    assert (r.root_cause == "still_starting") == starting, r.summary


# -- vLLM's placement-group warning is a wait, its ValueError a refusal ------------------------------
@pytest.mark.parametrize(
    ("line", "hit"),
    [
        ("WARNING 12-16 10:03:10 ray_utils.py:320] The number of required GPUs exceeds the total "
         "number of available GPUs in the placement group.", False),
        ("ValueError: The number of required GPUs exceeds the total number of available GPUs in "
         "the placement group.", True),
    ],
)  # fmt: skip
def test_the_placement_group_warning_is_a_wait_not_a_refusal(line: str, hit: bool) -> None:
    """Since vLLM 0.6.5 the placement group short of GPUs is a warning and a wait (a Ray node may
    still join); raised, as before, it is the launch asking for more GPUs than exist."""
    from agent.signatures import scan

    assert any(m.signature == "vllm-tp-larger-than-gpus" for m in scan([line])) is hit


# -- a wrapper's log that names the server's log has that log read ---------------------------------
HARNESS = (
    "2026-06-26 12:41:10 [ladder] run smoke: model=Qwen/Qwen2.5-1.5B-Instruct\n"
    "2026-06-26 12:41:10 [ladder] launched sglang pid=40391, log=/runs/0626/sglang-smoke.log\n"
    "2026-06-26 12:56:10 [ladder] FAIL smoke: TimeoutError: sglang did not become healthy at "
    "http://127.0.0.1:30000/health within 900s\n"
)
SERVER = (
    "[2026-06-26 12:41:19] server_args=ServerArgs(model_path='Qwen/Qwen2.5-1.5B-Instruct', "
    "port=30000, attention_backend='flashinfer')\n"
    "[2026-06-26 12:41:31] Capture cuda graph begin. This can take up to several minutes.\n"
    "[2026-06-26 12:41:33] Scheduler hit an exception: Traceback (most recent call last):\n"
    '  File "/v/flashinfer/jit/cpp_ext.py", line 329, in run_ninja\n'
    "FileNotFoundError: [Errno 2] No such file or directory: 'ninja'\n"
)


@pytest.mark.parametrize("wrapper", [True, False])
def test_a_wrappers_log_that_names_the_servers_log_has_it_read(
    tmp_path: Any, wrapper: bool
) -> None:
    """The operator names a test harness's log: it prints no launch of its own, only the path
    of the log the server writes; that log is read and its error is the cause (the harness's
    timeout is a symptom). The control: a named log that prints the launch itself is the
    launch's log, and a path it mentions is not read."""
    given = HARNESS if wrapper else SERVER + "see also /runs/0626/sglang-smoke.log\n"
    files = {"/runs/0626/ladder.log": given, "/runs/0626/sglang-smoke.log": SERVER}
    card = _card(files, PS_IDLE, GPU_CLEAN)
    events: list[Any] = []
    r = _investigate(card, tmp_path, logs=["/runs/0626/ladder.log"], on_event=events.append)
    assert r.root_cause == "dependency_error", r.summary
    assert any("ninja" in e.line for e in r.evidence), r.evidence
    reads = [
        e.data["args"].get("path")
        for e in events
        if e.type == "observation" and e.data.get("tool") == "log_tail"
    ]
    assert ("/runs/0626/sglang-smoke.log" in reads) is wrapper, reads


# -- a wait for GPUs past any node's join time proves they do not exist -----------------------------
def _placement_card(waited: int) -> IncidentCard:
    ps = PS_HEADER + (
        "root           1  2.3  1.2 9844120 1602440 ?     Ssl  09:02   0:17 python3 -m "
        "vllm.entrypoints.openai.api_server --model /models/q --tensor-parallel-size 2 "
        "--distributed-executor-backend ray --port 8000\n"
    )
    wait = (
        "INFO 01-12 09:{m:02d}:29 [ray_utils.py:214] Waiting for creating a placement group of "
        "specs for {s} seconds. specs=[{{'GPU': 1.0}}, {{'GPU': 1.0}}]. Check `ray status` to see "
        "if you have enough resources.\n"
    )
    log = (
        "INFO 01-12 09:02:41 [api_server.py:1040] vLLM API server version 0.9.2\n"
        "WARNING 01-12 09:02:59 [ray_utils.py:320] The number of required GPUs exceeds the total "
        "number of available GPUs in the placement group.\n"
        + "".join(wait.format(m=3 + s // 60, s=s) for s in (10, 30, waited))
    )
    gpu = "0, NVIDIA L40S, 0 MiB, 45458 MiB, 46068 MiB, 0 %\n"
    return IncidentCard.model_validate(
        {
            "id": "t", "title": "t", "source": "test", "engine": "vllm",
            "symptom": "the server never becomes ready",
            "invocation": {"log": "/var/log/vllm.log"},
            "host": {
                "ps": ps, "nvidia_smi": gpu, "dmesg": "",
                "files": {"/var/log/vllm.log": [{"at": 0, "text": log}, {"at": 600, "text": log}]},
            },
        }
    )  # fmt: skip


@pytest.mark.parametrize(("waited", "layout"), [(630, True), (70, False)])
def test_a_placement_group_pending_past_any_join_is_a_layout_asking_too_much(
    tmp_path: Any, waited: int, layout: bool
) -> None:
    """vLLM waits for a Ray placement group its cluster cannot fill; 630 s with no node joining
    is a layout asking for GPUs that do not exist (a worker pod never created), concluded from
    the engine's own count. The control: 70 s is a node still joining, and the same lines
    prove no launch argument wrong."""
    card = _placement_card(waited)
    r = _investigate(card, tmp_path, logs=[card.invocation.log or ""])
    assert (r.root_cause == "bad_launch_argument") is layout, r.summary


# -- a container on the host's IPC namespace has the host's /dev/shm --------------------------------
@pytest.mark.parametrize(("ipc", "refuted"), [("host", True), ("private", False)])
def test_a_container_sharing_the_hosts_ipc_refutes_a_small_shm(ipc: str, refuted: bool) -> None:
    """`--ipc=host`: the container's /dev/shm is the host's, never docker's 64 MiB default, so
    with no shared-memory error shm_too_small is refuted on the inspect's own line. The control:
    a private IPC namespace with the default 64 MiB segment refutes nothing."""
    import json

    from agent.findings import compute
    from agent.observe import run_many
    from tools.container_host import ContainerHost

    host_cfg: dict[str, Any] = {"IpcMode": ipc}
    if ipc != "host":
        host_cfg["ShmSize"] = 67108864
    inspect = json.dumps(
        [
            {
                "Id": "e8a1c7d04b2f" * 4,
                "Name": "/vllm-qwen3",
                "State": {"Status": "exited", "Running": False, "ExitCode": 1},
                "HostConfig": host_cfg,
                "Config": {"Image": "vllm/vllm-openai:v0.18.1"},
            }
        ],
        indent=4,
    )
    card = IncidentCard.model_validate(
        {
            "id": "ctr", "title": "t", "source": "test", "engine": "vllm",
            "symptom": "The container died, why?",
            "invocation": {"container": "vllm-qwen3"},
            "host": {
                "ps": PS_IDLE, "nvidia_smi": GPU_CLEAN, "dmesg": "",
                "containers": {"vllm-qwen3": {"inspect": inspect, "logs": "INFO starting\n"}},
            },
        }
    )  # fmt: skip
    host = ContainerHost(ReplayHost(card), "vllm-qwen3")
    obs: list[Any] = run_many(host, [("container_inspect", {})], 1, 0)
    board, _ = compute(obs)
    shm = [f for f in board if f["label"] == "shm_too_small" and f["strength"] < 0]
    assert bool(shm) is refuted, board
    if refuted:
        assert '"IpcMode": "host"' in shm[0]["line"]
