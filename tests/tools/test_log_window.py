"""The watch window: the base, a bar's rate, and the log's own pace between its lines."""

from __future__ import annotations

from tools.log_window import parse_progress, window_for
from tools.logtime import longest_silence

PREFILL = [
    "[2026-05-14 14:02:12 TP0] Prefill batch, #new-seq: 1, #new-token: 8192",
    "[2026-05-14 14:02:13 TP0] Prefill batch, #new-seq: 0, #new-token: 8192",
    "[2026-05-14 14:02:36] ERROR:    Health check failed.",
    "[2026-05-14 14:02:37 TP0] Prefill batch, #new-seq: 0, #new-token: 8192",
]


def test_the_longest_silence_between_stamped_lines() -> None:
    assert longest_silence(PREFILL) == 23.0
    assert longest_silence(["no stamps here", "nor here"]) is None
    # a restart the next day is no pace
    assert longest_silence(["[2026-05-14 14:02:12] a", "[2026-05-15 09:00:00] b"]) is None


def test_a_log_that_went_quiet_before_gets_that_long() -> None:
    assert window_for(6.0, None, 30.0, 23.0) == 24.0
    assert window_for(6.0, None, 30.0, 2.0) == 6.0  # a steady log: the base
    assert window_for(6.0, None, 10.0, 23.0) == 10.0  # never past the user's limit
    assert window_for(0.0, None, 30.0, 23.0) == 0.0  # no watch asked: none made


def test_a_bar_still_decides_its_own_window() -> None:
    bar = parse_progress("Loading safetensors checkpoint shards: 3/200 [00:12<13:00, 4.00s/it]")
    assert window_for(6.0, bar, 30.0, None) == 7.0


def test_an_errors_hint_naming_a_compile_is_no_slow_phase() -> None:
    """torch's "Compile with `TORCH_USE_CUDA_DSA` ..." under a CUDA error was taken for a slow
    compile phase (round 36 model session), stretching the watch of a dead log. Control: a
    compile phase's own line still is one."""
    from tools.log_window import parse_progress

    err = "ERROR 05-31 10:19:34 [core.py:387] Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions."
    assert parse_progress(err) is None
    p = parse_progress("INFO 05-31 10:19:34 [backends.py:1] Compiling a graph for dynamic shape")
    assert p is not None and p.slow_phase
