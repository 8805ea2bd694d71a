"""The phase, ready and ETA readings of a watch, as tables of log lines (pure functions)."""

from __future__ import annotations

import pytest

from watch.outcome import Outcome, Status, Target
from watch.progress import LoadRate, engine_of, is_ready_line, markers, phase_of


@pytest.mark.parametrize(
    ("lines", "command", "engine"),
    [
        ([], "python3 -m sglang.launch_server --model-path m --port 1", "sglang"),
        (["[2025-06-01 10:00:00] server_args=ServerArgs(model_path='m')"], None, "sglang"),
        (["INFO 06-05 21:06:12 [core.py:93] Initializing a V1 LLM engine (v0.9.1)"], None, "vllm"),
        (["nothing that names an engine"], None, None),
    ],
)
def test_engine_of(lines: list[str], command: str | None, engine: str | None) -> None:
    assert engine_of(lines, command) == engine


@pytest.mark.parametrize(
    ("engine", "line", "phase", "ready"),
    [
        (
            "sglang",
            "[2025-06-01 10:00:10 TP0] Load weight begin. avail mem=139.10 GB",
            "load_weights",
            False,
        ),
        (
            "sglang",
            "[2025-06-01 10:00:20] The server is fired up and ready to roll!",
            "ready",
            True,
        ),
        (
            "vllm",
            "INFO 06-05 21:06:12 [gpu_model_runner.py:1] Starting to load model m...",
            "load_weights",
            False,
        ),
        ("vllm", "INFO:     Application startup complete.", "ready", True),
        (None, "INFO:     Application startup complete.", None, True),  # no phases unknown engine
        ("sglang", "Ignore import error when loading sglang.srt.models.glm4v_moe", None, False),
    ],
)
def test_phase_and_ready_lines(
    engine: str | None, line: str, phase: str | None, ready: bool
) -> None:
    m = markers(engine)
    assert phase_of(line, m) == phase
    assert is_ready_line(line, m) is ready


def test_rate_from_the_logs_own_stamps_when_lines_carry_them() -> None:
    r = LoadRate()
    for i in range(1, 5):  # all read at once (a backlog): only the stamps say the pace
        r.observe(
            f"[2025-06-01 10:00:{10 + 3 * i:02d}] Loading safetensors checkpoint shards: {i}/8",
            0.0,
            backlog=True,
        )
    assert r.s_per_item() == 3.0 and r.eta_s() == 12.0
    bar = r.measured()
    assert bar is not None and bar.label == "Loading safetensors checkpoint shards"


def test_rate_from_observed_times_and_a_backlog_says_nothing() -> None:
    r = LoadRate()
    r.observe("Loading safetensors checkpoint shards: 2/10 [00:00<?]", 100.0, backlog=True)
    assert r.s_per_item() is None and r.eta_s() is None  # a bar whose clock reads 0: unknown
    r.observe("Loading safetensors checkpoint shards: 3/10 [00:01<?]", 100.0)
    r.observe("Loading safetensors checkpoint shards: 5/10 [00:03<?]", 104.0)
    assert r.s_per_item() == 2.0 and r.eta_s() == 10.0


def test_a_new_bar_starts_a_new_rate() -> None:
    r = LoadRate()
    r.observe("Loading safetensors checkpoint shards: 1/4", 0.0)
    r.observe("Loading safetensors checkpoint shards: 2/4", 1.0)
    r.observe("Capturing batches: 1/35", 5.0)
    assert r.s_per_item() is None and r.bar is not None and r.bar.total == 35


def test_the_webhook_body_is_slack_compatible_and_structured() -> None:
    o = Outcome(status=Status.died, detail="pid 7 exited", target=Target(host="gpu-1", pid=7))
    body = o.webhook_body()
    assert body["text"].startswith("DIED: pid 7 on gpu-1") and body["status"] == "died"
    assert body["exit_code"] == 1 and body["target"]["pid"] == 7


def test_a_backlog_bar_read_again_is_not_a_new_item() -> None:
    """A tqdm bar's line ends when the next update begins: the bar read in the backlog comes
    back as a finished line on the next read, and must not count as reached then."""
    r = LoadRate()
    r.observe("Loading safetensors checkpoint shards: 1/6 [00:00<?]", 10.0, backlog=True)
    r.observe("Loading safetensors checkpoint shards: 1/6 [00:00<?]", 10.3)
    r.observe("Loading safetensors checkpoint shards: 2/6 [00:01<?]", 10.3)
    r.observe("Loading safetensors checkpoint shards: 3/6 [00:02<?]", 11.1)
    assert r.seen == [(10.3, 2), (11.1, 3)]
