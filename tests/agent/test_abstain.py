"""Unsure is said, never guessed: an error-shaped line at a dead launch's end blocks every
inference from absence, and the shell's own errors are the launch's errors (issues 20, 21)."""

from __future__ import annotations

from typing import Any

import pytest

from agent.rules import proof
from tests.agent.test_rules import GPU_CLEAN, PS_IDLE, _card, _run

LAUNCH = (
    "INFO 11-30 10:00:01 [api_server.py:1034] vLLM API server version 0.8.3\n"
    "INFO 11-30 10:00:02 [config.py:520] This model supports multiple tasks\n"
)


@pytest.mark.parametrize(
    ("line", "shaped"),
    [
        ("/bin/sh: 1: /usr/local/cuda/bin/nvcc: not found", True),
        ("No platform detected, vLLM is running on UnspecifiedPlatform", True),
        ("RuntimeError: Engine process failed to start", True),
        ("llama_model_load: error loading model: tensor 'x' has wrong shape", True),
        # controls: warnings, access lines and progress never count
        ("WARNING 11-30 10:00:03 failed to import triton, falling back", False),
        ('INFO:     127.0.0.1:41 - "GET /v1/x HTTP/1.1" 404 Not Found', False),
        ("INFO Loading weights took 31.2 seconds", False),
        ("Killed", False),
    ],
)
def test_error_shaped_lines(line: str, shaped: bool) -> None:
    assert proof.error_shaped(line) is shaped


def test_a_log_ending_inside_a_traceback_is_an_error_not_silence() -> None:
    lines = ["INFO x", "Traceback (most recent call last):", '  File "a.py", line 3', "    run()"]
    assert proof.unexplained_error(lines) == "    run()"
    closed = [*lines, "ValueError: bad"]
    assert proof.open_traceback(closed) is None


def _dead(log: str, tmp_path: Any) -> Any:
    card = _card({"/var/log/vllm/server.log": log}, PS_IDLE, GPU_CLEAN, dmesg="")
    return _run(card, tmp_path)


def test_an_unknown_error_at_the_end_makes_it_unsure_quoting_that_line(tmp_path) -> None:  # type: ignore[no-untyped-def]
    clue = "No platform detected, vLLM is running on UnspecifiedPlatform"
    r = _dead(LAUNCH + f"INFO 11-30 10:00:03 [__init__.py:250] {clue}\n", tmp_path)
    assert r.status == "insufficient_evidence", (r.root_cause, r.summary)
    assert clue in r.next_step


def test_control_a_log_that_just_stops_is_still_inferred_killed(tmp_path) -> None:  # type: ignore[no-untyped-def]
    r = _dead(LAUNCH + "INFO 11-30 10:00:03 Loading weights\n", tmp_path)
    assert r.root_cause == "killed_externally", r.summary
    assert r.confidence <= 0.6  # inferred from absence, and said so


@pytest.mark.parametrize(
    ("last", "label"),
    [
        ("run_server.sh: line 12: vllm: command not found", "dependency_error"),
        ("/bin/sh: 1: /usr/local/cuda/bin/nvcc: not found", "dependency_error"),
        ("exec /usr/bin/python3: exec format error", "dependency_error"),
        ("api_server.py: error: unrecognized arguments: --tp 8", "bad_launch_argument"),
    ],
)
def test_shell_and_launcher_errors_are_the_launchs_own(tmp_path, last: str, label: str) -> None:  # type: ignore[no-untyped-def]
    r = _dead(f"+ cd /srv/llm\n{last}\n", tmp_path)
    assert r.root_cause == label, (r.status, r.summary)
    assert any(last in e.line for e in r.evidence)
