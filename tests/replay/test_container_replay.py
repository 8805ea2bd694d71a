"""A card's host.containers answers the container host's reads: inspect, logs, exec."""

from __future__ import annotations

import json

from cards.model import IncidentCard
from cards.replay import ReplayHost
from tools.container_host import ContainerHost
from tools.registry import TOOLS


def card() -> IncidentCard:
    text = json.dumps(
        [
            {
                "Id": "ab12cd34ef56" * 4,
                "Name": "vllm-0",
                "State": {"Status": "exited", "ExitCode": 137, "OOMKilled": True},
                "HostConfig": {"ShmSize": 67108864, "Memory": 34359738368},
                "Config": {"Env": ["HF_TOKEN=hf_x"], "Image": "vllm/vllm-openai:v0.6.3"},
            }
        ],
        indent=4,
    )
    return IncidentCard.model_validate(
        {
            "id": "ctr",
            "title": "t",
            "source": "test",
            "engine": "vllm",
            "symptom": "s",
            "invocation": {"container": "vllm-0"},
            "host": {
                "containers": {
                    "vllm-0": {
                        "inspect": text,
                        "logs": "2026-01-01T10:00:01Z INFO loading\n",
                        "ps": "USER PID\nroot 1 python3 -m vllm\n",
                        "commands": {"df -h /dev/shm": "shm 64M 0 64M 0% /dev/shm\n"},
                    }
                }
            },
        }
    )


def test_container_reads_come_from_the_card() -> None:
    host = ContainerHost(ReplayHost(card()), "vllm-0")
    assert host.cli() == "docker"
    res = TOOLS["container_inspect"].call(host, {})
    assert res.ok and res.container is not None and res.container.killed_by_limit
    assert res.container.env["HF_TOKEN"] == "<redacted>"
    logs = TOOLS["container_logs"].call(host, {"tail": 50})
    assert logs.ok and [e.text for e in logs.entries] == ["INFO loading"]
    assert "python3 -m vllm" in host.run("ps aux").stdout
    assert "64M" in host.run("df -h /dev/shm").stdout
    assert host.run("nvidia-smi").error  # outside, and the card has no nvidia_smi: unknown


def test_unrecorded_and_unknown_containers_are_not_facts() -> None:
    other = ContainerHost(ReplayHost(card()), "nope")
    assert other.unavailable() is not None
    host = ContainerHost(ReplayHost(card()), "vllm-0")
    res = host.run("cat /etc/hosts")
    assert res.rc is None and "not recorded" in (res.error or "")


def podman_card(running: bool, logs: str) -> IncidentCard:
    data = card().model_dump(exclude_none=True)
    snap = data["host"]["containers"]["vllm-0"]
    snap["cli"] = "podman"
    snap["inspect"] = snap["inspect"].replace(
        '"Status": "exited"', f'"Running": {str(running).lower()}'
    )
    snap["logs"] = logs
    data["host"]["dmesg"] = "".join(f"line {i}\n" for i in range(1000))
    return IncidentCard.model_validate(data)


def test_the_card_says_which_cli_knew_the_container() -> None:
    """A podman card answers podman, and docker knows no such container: the probe (and every
    next step in run-command terms) names the CLI the live host had."""
    host = ContainerHost(ReplayHost(podman_card(True, "")), "vllm-0")
    assert host.cli() == "podman"
    assert host.outer.run("docker inspect vllm-0").rc == 1


def test_exec_into_a_stopped_container_fails_as_the_cli_does() -> None:
    """Replay is no easier than live: a recorded read inside a container its record shows
    stopped is the CLI's refusal, which the container host reports as 'not running'."""
    host = ContainerHost(ReplayHost(podman_card(False, "")), "vllm-0")
    res = host.run("df -h /dev/shm")
    assert not res.ok and "is not running" in (res.error or ""), res
    assert ContainerHost(ReplayHost(podman_card(True, "")), "vllm-0").run("df -h /dev/shm").ok


def test_log_tail_and_search_and_the_kernel_tail_are_applied() -> None:
    lines = "".join(f"2026-01-01T10:00:{i:02d}Z step {i}\n" for i in range(60))
    host = ContainerHost(
        ReplayHost(podman_card(True, lines + "2026-01-01T10:01:00Z boom\n")), "vllm-0"
    )
    tail = TOOLS["container_logs"].call(host, {"tail": 5})
    assert [e.text for e in tail.entries] == ["step 56", "step 57", "step 58", "step 59", "boom"]
    hit = TOOLS["container_logs"].call(host, {"pattern": "BOOM|step 1$"})
    assert [e.text for e in hit.entries] == ["step 1", "boom"]
    dmesg = host.run("dmesg -T | tail -n 500").stdout.splitlines()
    assert len(dmesg) == 500 and dmesg[-1] == "line 999"


def test_a_python_regex_search_of_a_container_log_is_said_in_grep_terms() -> None:
    """GNU grep -E matches nothing for `(?i)...` or `\\d` (checked: it warns and exits 1, and the
    pipeline's tail exits 0): the tool says the pattern in ERE, and replay's grep does as grep."""
    from cards.replay import _filtered

    host = ContainerHost(ReplayHost(card()), "vllm-0")
    r = TOOLS["container_logs"].call(host, {"pattern": r"(?i)LOADING|\d+ GiB"})
    assert r.ok and any("loading" in e.text for e in r.entries), r.lines()
    assert "(?i)" not in r.command and r"\d" not in r.command, r.command
    raw = "Out of memory 12\n"
    assert _filtered(raw, [["grep", "-E", "-i", "-e", "(?i)out"]]) == ""
    assert _filtered(raw, [["grep", "-E", "-i", "-e", "out|[0-9]+ GiB"]]) == raw
