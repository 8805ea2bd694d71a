"""Log timestamps: which of two logs belongs to an earlier run, and what that log may not say."""

from __future__ import annotations

import pytest

from tests.agent.test_rules_causes import _card, _run
from tools import logtime


@pytest.mark.parametrize(
    ("line", "want"),
    [
        ("[2026-03-02 10:00:01] INFO server_args=...", (2026, 3, 2, 10, 0, 1)),
        ("INFO 06-05 21:06:12 [core.py:93] Initializing", (None, 6, 5, 21, 6, 12)),
        ("(RayWorkerWrapper pid=4410) WARNING 06-05 21:06:51 [x.py:1] y", (None, 6, 5, 21, 6, 51)),
        ("[06/05/2026-21:06:12] [TRT-LLM] [I] Loading engine", (2026, 6, 5, 21, 6, 12)),
        ("I0605 21:06:12.123456  3377 node_manager.cc:1] raylet", (None, 6, 5, 21, 6, 12)),
        ("2026-06-05T21:06:12.512Z level=error msg=boom", (2026, 6, 5, 21, 6, 12)),
        ("Loading safetensors checkpoint shards:  46% Completed | 23/50", None),
        ("INFO 13-45 21:06:12 not a date", None),
    ],
)
def test_stamps(line: str, want: logtime.Stamp | None) -> None:
    assert logtime.stamp(line) == want


def test_a_log_that_ended_before_another_began_is_an_earlier_runs() -> None:
    old = logtime.span(["INFO 06-03 20:41:09 [a.py:1] x", "INFO 06-03 20:47:02 [a.py:1] ready"])
    new = logtime.span(["INFO 06-05 21:06:12 [a.py:1] x", "INFO 06-05 21:07:02 [a.py:1] y"])
    overlapping = logtime.span(["INFO 06-05 21:06:30 [b.py:1] x", "INFO 06-05 21:09:00 [b.py:1] y"])
    assert old and new and overlapping
    assert logtime.earlier_logs({"old": old, "new": new, "peer": overlapping}) == {"old"}
    assert logtime.earlier_logs({"new": new, "peer": overlapping}) == set()  # two of one run


LOADING = (
    "INFO 06-05 21:06:12 [__init__.py:245] vLLM version 0.22.1\n"
    "INFO 06-05 21:07:02 [gpu_model_runner.py:2418] Starting to load model m...\n"
    "Loading safetensors checkpoint shards:  46% Completed | 23/50 [02:05<02:27,  5.45s/it]\n"
)
YESTERDAY = (
    "INFO 06-03 20:41:09 [__init__.py:245] vLLM version 0.21.1\n"
    "INFO 06-03 20:47:02 [api_server.py:1896] Starting vLLM API server 0 on http://0.0.0.0:8000\n"
)
PS = (
    "USER         PID %CPU %MEM    VSZ   RSS TTY      STAT START   TIME COMMAND\n"
    "svc         4120 88.3  3.1 152114440 24621800 ?  Rl   21:06   2:41 /opt/venv/bin/python3 "
    "/opt/venv/bin/vllm serve m --port 8000\n"
)
GPU = "0, NVIDIA H100 80GB HBM3, 14212 MiB, 66867 MiB, 81559 MiB, 0 %\n"


def _loading_host(old: str) -> dict:  # type: ignore[type-arg]
    return {
        "ps": PS,
        "nvidia_smi": GPU,
        "files": {"/var/log/vllm/server.log": LOADING, "/var/log/vllm/server-before.log": old},
    }


def test_an_earlier_runs_ready_line_does_not_end_this_ones_start(tmp_path) -> None:  # type: ignore[no-untyped-def]
    r = _run(_card("vllm", "is it up yet?", **_loading_host(YESTERDAY)), tmp_path)
    assert "still_starting" not in r.ruled_out, r.summary
    assert not any("Starting vLLM API server" in e.line for e in r.evidence), r.summary


def test_a_ready_line_of_this_run_still_counts(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Control: the same ready line written after this run began is this server's."""
    today = YESTERDAY.replace("06-03", "06-05").replace("20:4", "21:1")
    r = _run(_card("vllm", "is it up yet?", **_loading_host(today)), tmp_path)
    assert "still_starting" in r.ruled_out, r.summary
