"""The concluding brain's reasons against its rivals count only when they quote a line that
refutes the rival (issue 21): checked like evidence, never taken on the brain's word."""

from __future__ import annotations

from typing import Any

import pytest

from agent.nodes import refute_rivals
from agent.state import Action, Observation

GPU = "0, NVIDIA H200, 0 MiB, 143771 MiB, 143771 MiB, 0 %"
DMESG = "# 120 kernel lines scanned (dmesg -T): 0 OOM kills, 0 Xid, 0 fallen-off-the-bus"
LOG = "RuntimeError: CUDA error: out of memory"


def _obs() -> list[Observation]:
    return [
        Observation(id="o1", tool="gpu_status", args={}, ok=True, lines=[GPU], data={}, round=0),
        Observation(id="o2", tool="dmesg", args={}, ok=True, lines=[DMESG], data={}, round=0),
        Observation(
            id="o3", tool="log_tail", args={"path": "/l"}, ok=True, lines=[LOG], data={}, round=0
        ),
    ]


def _act(*refs: dict[str, str]) -> Action:
    return Action(kind="conclude", label="cuda_oom_runtime", refutations=list(refs))


@pytest.mark.parametrize(
    ("ref", "refuted"),
    [
        ({"label": "stale_gpu_process", "observation": "o1", "line": GPU, "why": "GPU free"}, True),
        ({"label": "host_oom_killed", "observation": "o2", "line": DMESG}, True),
        # not verbatim, or in another observation: refutes nothing
        ({"label": "stale_gpu_process", "observation": "o1", "line": "the GPU looked free"}, False),
        ({"label": "host_oom_killed", "observation": "o1", "line": DMESG}, False),
        # the concluded label itself, or a label outside the taxonomy
        ({"label": "cuda_oom_runtime", "observation": "o1", "line": GPU}, False),
        ({"label": "gremlins", "observation": "o1", "line": GPU}, False),
    ],
)
def test_a_refutation_counts_only_with_its_verbatim_line(
    ref: dict[str, Any], refuted: bool
) -> None:
    board = refute_rivals({}, _act(ref), _obs())
    assert (board.get(ref["label"], {}).get("status") == "refuted") is refuted


def test_a_line_that_is_a_sign_of_the_rival_cannot_refute_it() -> None:
    """The CUDA OOM line is a sign of cuda_oom_runtime/gpu_oom_weights: it cannot rule out
    gpu_oom_weights, whatever the brain says."""
    ref = {"label": "gpu_oom_weights", "observation": "o3", "line": LOG, "why": "runtime"}
    board = refute_rivals({}, _act(ref), _obs())
    assert board.get("gpu_oom_weights", {}).get("status") != "refuted"


@pytest.mark.parametrize(
    ("line", "refuted"),
    [
        # a phase marker says where the launch got to: past the capture, so not its OOM
        ("INFO 09-02 10:12:35 model_runner.py:1300] Graph capturing finished in 9 secs.", True),
        # the control: a line that is a sign of the rival still cannot refute it
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", False),
    ],
)
def test_a_phase_line_may_refute_the_oom_of_that_phase(line: str, refuted: bool) -> None:
    """Phase markers carry the label of the OOM their phase would imply (to tell a runtime OOM
    from a load OOM), but they are not signs of a failure: a healthy verdict may cite the
    capture having finished against cuda_oom_runtime (blind round 31)."""
    obs = [Observation(id="o9", tool="log_tail", args={"path": "/l"}, ok=True, lines=[line],
                       data={}, round=0)]  # fmt: skip
    act = Action(kind="conclude", label="healthy", refutations=[
        {"label": "cuda_oom_runtime", "observation": "o9", "line": line, "why": "capture done"}
    ])  # fmt: skip
    board = refute_rivals({}, act, obs)
    assert (board.get("cuda_oom_runtime", {}).get("status") == "refuted") is refuted


@pytest.mark.parametrize(
    ("line", "refuted"),
    [
        # a table's header names columns and holds no state: it refutes nothing
        ("USER         PID %CPU %MEM    VSZ   RSS TTY      STAT START   TIME COMMAND", False),
        ("index, name, memory.used [MiB], memory.total [MiB], utilization.gpu [%]", False),
        # the control: a row of the same table is state
        ("root      4242 99.0  1.2 9999 999 ?  Rl 10:00 9:59 python3 -m vllm serve m", True),
    ],
)
def test_a_tables_header_row_refutes_nothing(line: str, refuted: bool) -> None:
    """A model session cited the `ps` header against still_starting (session 17): the row that
    shows the process, or its absence found by the board, is the proof; the header is neither."""
    obs = [Observation(id="o4", tool="processes", args={}, ok=True, lines=[line], data={},
                       round=0)]  # fmt: skip
    act = Action(kind="conclude", label="cuda_oom_runtime", refutations=[
        {"label": "still_starting", "observation": "o4", "line": line, "why": "the table"}
    ])  # fmt: skip
    board = refute_rivals({}, act, obs)
    assert (board.get("still_starting", {}).get("status") == "refuted") is refuted
