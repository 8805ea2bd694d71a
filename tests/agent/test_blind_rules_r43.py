"""Rules, knowledge and replay fidelity after blind round 43 (scored before any change), each
with a control that must not trigger it: a fix is a general form or fact, never an answer keyed
to one card."""

from __future__ import annotations

from typing import Any

import pytest

from agent.nodes import _pod_named, _previous_instances
from agent.rules.hang import killed_at_work
from agent.signatures import scan
from cards.model import IncidentCard
from cards.replay import ReplayHost
from tests.cardkit import minimal_card
from tools import logtime

POD = "llama31-8b-6d9f7c8b54-x2kq9"


def test_an_iommu_fault_in_the_format_of_current_kernels_is_known() -> None:
    """Kernels since 5.x print "[DMA Write NO_PASID]": the DMAR signature knew only "[DMA
    Write]", so a TP=2 hang in the first all-reduce behind the IOMMU read as a healthy server.
    Control: the DMAR driver's own status line is no fault."""
    fault = (
        "[Mon Sep  9 03:19:05 2024] DMAR: [DMA Write NO_PASID] Request device [ca:00.0] fault "
        "addr 0x38ffc0000000 [fault reason 0x05] PTE Write access is not set"
    )
    assert any(m.label == "nccl_failure" for m in scan([fault]))
    assert not scan(["[Mon Sep  9 03:19:05 2024] DMAR: DRHD: handling fault status reg 2"])


def test_a_pod_records_rfc2822_times_are_read() -> None:
    """`kubectl describe pod` prints "Start Time: Wed, 14 May 2025 11:20:51 +0000": a saved log
    of yesterday's pod is then seen to end before this pod began."""
    s = logtime.span(["Start Time:       Wed, 14 May 2025 11:20:51 +0000"])
    assert s is not None and s[0] == (2025, 5, 14, 11, 20, 51)
    assert logtime.before((None, 5, 13, 16, 41, 27), s[0])
    assert logtime.span(["Wednesday 14 May"]) is None  # control: no time in it


def test_the_pod_the_operator_names_is_read_whatever_it_is_called() -> None:
    """A Deployment `llama31-8b` names no engine: its pod was not taken for a server's, so the
    sweep read no pod log and concluded from yesterday's saved log. Control: an unnamed pod."""
    listed = ["embed-bge-m3-5b7c9d6f8-q4wz2", POD]
    assert _pod_named("deployment llama31-8b keeps crashing in namespace llm", listed) == POD
    assert _pod_named("our inference keeps crashing", listed) is None


def _sl(name: str, describe: list[str], previous: bool = False) -> dict[str, Any]:
    args: dict[str, Any] = {
        "kind": "kubectl",
        "name": name,
        **({"previous": True} if previous else {}),
    }
    return {"id": "o9", "tool": "service_logs", "args": args, "ok": True, "lines": [],
            "data": {"kind": "kubectl", "name": name, "describe": describe}}  # fmt: skip


def test_a_restarted_pods_instance_before_is_read() -> None:
    """A pod whose record says its container restarted: the instance that ended is the one
    asked about, so its `--previous` log is read. Controls: no restart; a previous read."""
    got = _previous_instances([_sl(POD, ["    Restart Count:  4"])])  # type: ignore[list-item]
    assert got == [("service_logs", {"kind": "kubectl", "name": POD, "previous": True})]
    assert _previous_instances([_sl(POD, ["    Restart Count:  0"])]) == []  # type: ignore[list-item]
    assert _previous_instances([_sl(POD, ["Restart Count: 4"], previous=True)]) == []  # type: ignore[list-item]


COMPILING = [
    "INFO 05-14 11:29:47 [backends.py:430] Dynamo bytecode transform time: 11.84 s",
    "INFO 05-14 11:29:51 [backends.py:136] Cache the graph of shape None for later use",
    "INFO 05-14 11:30:22 [launcher.py:80] Shutting down FastAPI HTTP server.",
    '  File "/usr/local/lib/python3.12/dist-packages/vllm/entrypoints/openai/api_server.py", line 1077, in signal_handler',
    '    raise KeyboardInterrupt("terminated")',
    "KeyboardInterrupt: terminated",
]


@pytest.mark.parametrize(
    ("lines", "at_work"),
    [
        (COMPILING, True),
        # control: the instance before died of an error of its own
        (
            ["INFO loading", "Traceback (most recent call last):", "ValueError: bad max_model_len"],
            False,
        ),
        # control: at work, but nothing from outside ended it (its log was cut)
        (COMPILING[:2], False),
    ],
)
def test_an_instance_stopped_while_at_work_was_not_stuck(lines: list[str], at_work: bool) -> None:
    """A liveness probe restarts the vLLM pod during torch.compile: the kill of the instance
    before counted for nothing until the live one was seen at work (it may be stuck where that
    one was). Its own `--previous` log shows it compiling until SIGTERM: it was at work."""
    obs = _sl(POD, [], previous=True)
    obs["lines"] = lines
    assert (killed_at_work([obs]) is not None) is at_work  # type: ignore[list-item]


def _pods_host(status: str) -> ReplayHost:
    return ReplayHost(
        IncidentCard.model_validate(
            minimal_card(
                {
                    "commands": {
                        "kubectl -n llm get pods": f"NAME READY STATUS RESTARTS AGE\n{POD}   0/1     {status}   4   9m\n",
                        f"kubectl -n llm logs {POD} --previous": "KeyboardInterrupt: terminated\n",
                    }
                }
            )
        )
    )


def test_a_running_pods_log_is_not_answered_with_its_previous_instances() -> None:
    """The replay answered `kubectl logs POD` with the card's `--previous` recording: the
    running instance's log read as the one that ended. Now only where no container runs (a
    pod waiting in CrashLoopBackOff, whose last instance the kubelet serves)."""
    assert (
        "KeyboardInterrupt"
        not in _pods_host("Running").run(f"kubectl logs --tail=200 {POD}").stdout
    )
    assert (
        "KeyboardInterrupt"
        in _pods_host("CrashLoopBackOff").run(f"kubectl logs --tail=200 {POD}").stdout
    )
    assert (
        "KeyboardInterrupt"
        in _pods_host("Running").run(f"kubectl logs --tail=200 --previous {POD}").stdout
    )


def test_enospc_into_dev_shm_is_the_shared_memory_not_a_disk() -> None:
    """grok-1's loader copies each tensor into /dev/shm: "[Errno 28] No space left on device:
    '...' -> '/dev/shm/tmp...'" in a pod with the 64 MiB default read as a full disk by the
    words of the line (no signature knew it). Control: ENOSPC writing a model cache."""
    shm = "OSError: [Errno 28] No space left on device: './ckpt/tensor00000_000' -> '/dev/shm/tmp238nenvh'"
    disk = "OSError: [Errno 28] No space left on device: '/root/.cache/huggingface/hub/blobs/3a5b.incomplete'"
    assert {m.label for m in scan([shm])} == {"shm_too_small"}
    assert {m.label for m in scan([disk])} == {"disk_full"}


ASSERTION = (
    "[01/23/2026-04:43:47] [TRT-LLM] [E] Failed to initialize executor on rank 0: [TensorRT-LLM]"
    "[ERROR] Assertion failed: maxNumTokens.value() % tokensPerBlock == 0 "
    "(../tensorrt_llm/batch_manager/cacheTransBuffer.cpp:206)"
)


def _o(oid: str, tool: str, lines: list[str]) -> dict[str, Any]:
    return {"id": oid, "tool": tool, "args": {"path": "/x"}, "ok": True, "lines": lines, "data": {}}


@pytest.mark.parametrize(
    ("config", "found"),
    [
        (["max_batch_size: 96", "max_num_tokens: 96"], "max_num_tokens"),
        (["max_batch_size: 96"], None),  # control: the launch set nothing the check names
    ],
)
def test_an_assertion_on_a_setting_the_launch_set_is_that_settings_fault(
    config: list[str], found: str | None
) -> None:
    """TRT-LLM asserts `maxNumTokens % tokensPerBlock == 0` deep in its start-up: the generated
    config set max_num_tokens to 96, not a multiple of the 32-token block. The expression's
    names (camelCase) are settings (snake_case): the launch's value failed the check."""
    from agent.rules.asserted import asserted_setting

    got = asserted_setting([_o("o10", "log_tail", [ASSERTION]), _o("o12", "config_read", config)])  # type: ignore[list-item]
    assert (got[4] if got else None) == found
    if got:
        assert got[3] == "max_num_tokens: 96"


@pytest.mark.parametrize(
    ("stdout", "read"),
    [
        (["[2026-04-14 09:03:11] logging to /srv/omni/logs/omni-speech.log"], True),
        # control: a container whose own log prints the launch is its log; nothing else is read
        (["INFO 04-14 09:03:11 [api_server.py:1043] vLLM API server version 0.8.5",
          "logging to /srv/omni/logs/omni-speech.log"], False),
    ],
)  # fmt: skip
def test_a_container_log_that_names_the_servers_log_file_gets_it_read(
    stdout: list[str], read: bool
) -> None:
    """sgl-omni's container prints only "logging to <file>" and the stage's exit: the OOM-check
    error and the memory fraction were in that file, never read, so the run stayed unsure."""
    from agent.nodes import _container_pointed_logs

    host = ReplayHost(
        IncidentCard.model_validate(
            minimal_card(
                {"files": {"/srv/omni/logs/omni-speech.log": "RuntimeError: Not enough memory.\n"}}
            )
        )
    )
    obs = [
        {"id": "o9", "tool": "container_logs", "args": {}, "ok": True, "lines": stdout, "data": {}}
    ]
    got = _container_pointed_logs(host, obs)  # type: ignore[arg-type]
    assert bool(got) is read
    if read:
        assert got[0]["args"] == {"path": "/srv/omni/logs/omni-speech.log"} and got[0]["id"] == "o2"


def test_the_instance_befores_log_does_not_take_the_running_ones_place() -> None:
    """`--previous` of the named pod was keyed as the same log as its running container's: the
    newer read replaced the current one, the pod's start was lost with it, and yesterday's saved
    log was no longer set aside (a model session saw its error on the board and the gate
    refused the probe's kill over it). Control: a second read of the running log replaces it."""
    from agent.evidence import latest_text_observations

    cur, prev, again = _sl(POD, []), _sl(POD, [], previous=True), _sl(POD, [])
    cur["id"], prev["id"], again["id"] = "o11", "o14", "o17"
    got = [o["id"] for o in latest_text_observations([cur, prev])]  # type: ignore[list-item]
    assert sorted(got) == ["o11", "o14"]
    assert [o["id"] for o in latest_text_observations([cur, again])] == ["o17"]  # type: ignore[list-item]


def test_a_set_aside_log_says_nothing_of_what_this_launch_got_past() -> None:
    """Stage refutations read the launch's own logs: a rotation of the named log that ended
    before the named log began its own launch (yesterday's run) is set aside, so its "Loading
    weights took" no longer rules out a weights failure for today's run. Control: the same line
    in the named log itself still does."""
    from agent.facts import Facts
    from agent.rules.passed import passed_rules

    # no timestamps: only the rotation's name says which run came first
    banner = "INFO [api_server.py:1351] vLLM API server version 0.9.2"
    took = "INFO [loader.py:458] Loading weights took 24.61 seconds"

    def log(oid: str, path: str, lines: list[str]) -> dict[str, Any]:
        return {"id": oid, "tool": "log_tail", "args": {"path": path}, "ok": True,
                "lines": lines, "data": {"path": path}, "round": 0}  # fmt: skip

    procs = {"id": "o1", "tool": "processes", "args": {"logs": ["/var/log/vllm/server.log"]},
             "ok": True, "lines": [], "data": {}, "round": 0}  # fmt: skip
    today = log("o2", "/var/log/vllm/server.log", [banner, "INFO [core.py:61] init"])
    yesterday = log("o3", "/var/log/vllm/server.log.1", [banner, took])

    def refuted(observations: list[dict[str, Any]]) -> set[str]:
        said: list[tuple[str, str]] = []
        passed_rules(Facts(), observations, lambda lb, k, w, o, ln, n: said.append((lb, ln)))  # type: ignore[arg-type]
        return {lb for lb, ln in said if "Loading weights took" in ln}

    assert "gpu_oom_weights" not in refuted([procs, today, yesterday])
    today_loaded = log("o4", "/var/log/vllm/server.log", [banner, took])
    assert "gpu_oom_weights" in refuted([procs, today_loaded, yesterday])
