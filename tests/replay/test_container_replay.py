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
