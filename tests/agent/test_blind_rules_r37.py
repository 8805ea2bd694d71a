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


def test_a_traceback_may_end_on_any_class_a_module_path_names() -> None:
    """Triton's `triton.runtime.errors.OutOfResources: out of resource: shared memory` ends a
    traceback though its name ends in no "Error": a model session's conclusion citing it was
    refused three times as "no fatal line" (round 37). Control: a logger's line naming a
    module path after frames is no exception."""
    tb = ["Traceback (most recent call last):", '  File "x.py", line 1, in f', "    raise X(a)"]
    oor = "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 1"
    assert proof.fatal_lines([*tb, oor]) == [(3, "exception")]
    assert proof.fatal_lines([*tb, "INFO some.module.Thing: ok"]) == []


SERVE = "[2025-08-20 16:10:31] server_args=ServerArgs(model_path='/model/GLM-4.5V-FP8', tp_size=2)"
LOADING = "[2025-08-20 16:15:20 TP0] Load weight begin. avail mem=46.12 GB"


@pytest.mark.parametrize("restarts", [7, 0])
def test_a_containers_earlier_instance_died_of_what_its_restart_loop_repeats(
    restarts: int,
) -> None:
    """`restart: always`: the instance before the current one died of Triton's shared-memory
    limit, the current one is loading the same launch again. The earlier end is why it keeps
    restarting, and the current try is no launch "still starting". Control: a container never
    restarted does not read an earlier launch in its log as its own."""
    from agent.facts import Facts
    from agent.rules.restarts import restart_rules
    from agent.state import Observation
    from tools.container_inspect import ContainerState

    tb = ["Traceback (most recent call last):", '  File "jit.py", line 591, in run', "    x()"]
    oor = (
        "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 147456, "
        "Hardware limit: 101376. Reducing block sizes or `num_stages` may help."
    )
    lines = [SERVE, *tb, oor, SERVE.replace("16:10:31", "16:15:09"), LOADING]
    o = Observation(id="o9", tool="container_logs", args={}, ok=True, lines=lines, data={},
                    round=0)  # fmt: skip
    f = Facts()
    f.container = ContainerState(name="glm", restart_count=restarts)
    said: list[tuple[str, float, str]] = []
    restart_rules(f, [o], lambda lb, k, w, oid, ln, n: said.append((lb, w, ln)))
    if restarts:
        assert ("unsupported_gpu_arch", 2.0, oor) in said, said
        assert any(lb == "still_starting" and w < 0 for lb, w, _ in said), said
    else:
        assert said == []
