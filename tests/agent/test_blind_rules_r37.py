"""Rules and knowledge after blind round 37 (scored before any change), each with a control
that must not trigger it: a fix is a general form or fact, never an answer keyed to one card."""

from __future__ import annotations

import pytest

from agent.kills import _foreign
from agent.rules import proof
from agent.rules.structure import raising_statement

KILL = (
    "[Mon Jun  1 {t} 2026] Memory cgroup out of memory: Killed process 1874422 (python3) "
    "total-vm:42731988kB, anon-rss:6932140kB"
)
SPAN = ((None, 6, 1, 17, 40, 2), (None, 6, 1, 19, 22, 20))


@pytest.mark.parametrize(
    ("t", "ours"),
    [
        ("21:22:25", True),  # the log's end two hours on: dmesg -T local, the log in UTC
        ("19:23:01", True),  # the same clock, right at the end
        ("21:52:25", False),  # control: no whole-hour shift lands on the log's end
    ],
)
def test_a_kill_a_whole_number_of_hours_from_the_logs_end_is_its_end(t: str, ours: bool) -> None:
    """A pod's OOM kill at 21:22 by the machine's clock ended a log whose last line is 19:22 in
    UTC: set aside as "long after the log ended", the rulebook had no cause left (round 37)."""
    why = _foreign(KILL.format(t=t), SPAN, "", set())
    assert (why is None) is ours, why


E = "ERROR 02-11 20:39:41 core.py:208]"
T4 = [
    f"{E} EngineCore hit an exception: Traceback (most recent call last):",
    f'{E}   File "/usr/lib/python3/dist-packages/vllm/v1/attention/backends/flash_attn.py", '
    "line 155, in __init__",
    f"{E}     assert is_fa_version_supported(self.fa_version)",
    f"{E}            ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
    f"{E} AssertionError",
]


def test_a_bare_assert_in_an_attention_backends_setup_points_at_the_gpu() -> None:
    """FlashAttention's version check failing on a T4 (sm_75), under vLLM's ERROR prefix: the
    bare AssertionError ends the traceback, its statement (not the caret line under it) is
    cited, and the frame it was raised in points at the GPU's architecture. Control: the same
    assert raised in a model's own file points at nothing by its frame."""
    kinds = dict(proof.fatal_lines(T4))
    assert kinds[4] == "exception", kinds
    assert raising_statement(T4, 4) == T4[2]
    assert proof.frame_hint(T4, 4) == "unsupported_gpu_arch"
    other = [T4[0], T4[1].replace("attention/backends/flash_attn.py", "models/qwen2.py"), *T4[2:]]
    assert proof.frame_hint(other, 4) is None


@pytest.mark.parametrize("where", ["pod record", "the log"])
def test_a_signature_on_another_read_does_not_silence_the_logs_own_error(where: str) -> None:
    """kubectl's "Last State: Terminated" (a killed_externally signature on the pod's record)
    had kept the log's own bare AssertionError from being weighed (round 37). Control: a
    signature on the log's own lines still names the failure instead of the line's words."""
    from agent.facts import Facts
    from agent.rules.structure import structure_rules
    from agent.signatures import Match
    from agent.state import Observation

    log = Observation(id="o9", tool="log_tail", args={"path": "/l"}, ok=True, lines=T4,
                      data={}, round=0)  # fmt: skip
    pod = Observation(id="o6", tool="host_facts", args={}, ok=True,
                      lines=["    Last State:     Terminated"], data={}, round=0)  # fmt: skip
    on = pod if where == "pod record" else log
    hit = Match(signature="s", label="killed_externally", strength="strong",
                line=on["lines"][0], line_no=0)  # fmt: skip
    said: list[str] = []
    structure_rules(Facts(), [pod, log], [(on, hit)], lambda lb, *a: said.append(lb))
    assert ("unsupported_gpu_arch" in said) is (where == "pod record"), said


def test_kubectls_terminated_state_is_no_sigterm() -> None:
    """kubectl describe's `State: Terminated` (an init container that Completed) was read as
    the shell's "Terminated" after a SIGTERM (round 37: a TGI pod still loading, "killed").
    Control: the shell's own line still is one."""
    from agent.signatures import scan

    said = {m.signature for m in scan(["      State:          Terminated"])}
    assert "sigterm-received" not in said
    assert "sigterm-received" in {m.signature for m in scan(["Terminated"])}
