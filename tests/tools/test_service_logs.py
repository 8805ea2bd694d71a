"""service_logs: container/pod/unit logs when there is no log file (real commands, fake PATH)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from cards.model import IncidentCard
from cards.replay import ReplayHost
from tools.local_host import LocalHost
from tools.service_logs import SPEC, pick

OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."


def _script(bin_dir: Path, name: str, body: str) -> None:
    p = bin_dir / name
    p.write_text("#!/bin/sh\n" + body)
    p.chmod(p.stat().st_mode | stat.S_IEXEC)


def test_pick_prefers_an_inference_server_name() -> None:
    listing = (
        "redis redis:7 Up 3 days\nvllm-qwen vllm/vllm-openai:v0.8.5 Exited (1) 2 minutes ago\n"
    )
    assert pick(listing) == "vllm-qwen"
    assert pick("") is None


def test_docker_logs_found_and_read_through_a_real_shell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # a stand-in docker CLI (no daemon here): lists one container, prints its log on `logs`
    _script(
        bin_dir,
        "docker",
        f'if [ "$1" = ps ]; then echo "vllm-qwen vllm/vllm-openai Exited (1)"; '
        f'elif [ "$1" = logs ]; then echo "INFO start"; echo "{OOM}" >&2; else exit 1; fi\n',
    )
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    r = SPEC.call(LocalHost(), {"kind": "docker"})
    assert r.ok and r.name == "vllm-qwen"
    assert OOM in r.lines()  # stderr is merged: engines log errors there


def test_names_are_never_a_shell() -> None:
    r = SPEC.call(LocalHost(), {"kind": "docker", "name": "x; rm -rf /"})
    assert not r.ok and "not a container" in (r.error or "")


def test_replayed_card_answers_kubectl_logs_and_missing_readers_are_a_clear_error() -> None:
    card = IncidentCard.model_validate(
        {
            "id": "k",
            "title": "t",
            "source": "test",
            "engine": "vllm",
            "symptom": "s",
            "host": {
                "commands": {
                    "kubectl get pods --no-headers": "vllm-0   0/1   CrashLoopBackOff   4   9m\n",
                    "kubectl logs --tail=200 vllm-0": f"INFO start\n{OOM}\n",
                }
            },
        }
    )
    r = SPEC.call(ReplayHost(card), {})
    assert r.ok and r.kind == "kubectl" and OOM in r.lines()
    empty = IncidentCard.model_validate(
        {"id": "e", "title": "t", "source": "s", "engine": "other", "symptom": "s"}
    )
    r2 = SPEC.call(ReplayHost(empty), {})
    assert not r2.ok and "no container, pod or unit log" in (r2.error or "") and r2.fix


def test_a_pod_in_another_namespace_is_found_and_its_record_read() -> None:
    """Servers rarely run in `default`: the pod is found across namespaces, its log read with its
    namespace, and when it never ran (an empty log) `describe` says how it ended."""
    from tools.service_logs import pick_pod

    listing = (
        "kube-system   coredns-5d78c9869d-abcde          1/1   Running            0              9d\n"
        "ai            llama-strix-5f8b7c9d6d-kq4wz      0/1   CrashLoopBackOff   6 (2m1s ago)   8m40s\n"
    )
    assert pick_pod(listing) == "ai/llama-strix-5f8b7c9d6d-kq4wz"
    # a listing without the namespace column (one namespace) still parses
    assert pick_pod("vllm-0   0/1   CrashLoopBackOff   4   9m\n") == "vllm-0"
    message = (
        '      Message:      failed to create containerd task: exec: "llama-server": '
        "executable file not found in $PATH: unknown"
    )
    card = IncidentCard.model_validate(
        {
            "id": "k",
            "title": "t",
            "source": "test",
            "engine": "other",
            "symptom": "s",
            "host": {
                "commands": {
                    "kubectl get pods -A --no-headers": listing,
                    "kubectl -n ai logs --tail=200 llama-strix-5f8b7c9d6d-kq4wz": "",
                    "kubectl -n ai describe pod llama-strix-5f8b7c9d6d-kq4wz": (
                        "Name:         llama-strix-5f8b7c9d6d-kq4wz\n"
                        "    Image:         ghcr.io/x/llama:b6412\n"
                        "    Last State:     Terminated\n"
                        "      Reason:       StartError\n"
                        f"{message}\n"
                        "      Exit Code:    128\n"
                    ),
                }
            },
        }
    )
    r = SPEC.call(ReplayHost(card), {"kind": "kubectl"})
    assert r.ok and r.name == "ai/llama-strix-5f8b7c9d6d-kq4wz", r.lines()
    assert message in r.lines() and "      Exit Code:    128" in r.lines()
    assert not any("Image:" in ln for ln in r.lines())  # only the lines that say how it ended


def test_an_empty_journal_is_no_log_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """journald's "-- No entries --" is its remark, not the unit's line: an empty journal is no
    log (it was once cited as the last line a killed server printed)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _script(bin_dir, "journalctl", 'echo "-- No entries --"\n')
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    r = SPEC.call(LocalHost(), {"kind": "journalctl", "name": "sglang.service"})
    assert not r.ok and "-- No entries --" not in r.lines()
    _script(
        bin_dir,
        "journalctl",
        'echo "-- Boot 3f2a --"; echo "Dec 02 12:00:01 box python[7]: Loading weights"\n',
    )
    r = SPEC.call(LocalHost(), {"kind": "journalctl", "name": "sglang.service"})
    assert r.ok and r.tail == ["Dec 02 12:00:01 box python[7]: Loading weights"]
