"""One plain sentence per step: every registered tool has one, and arguments read as words."""

from __future__ import annotations

import pytest

from agent.narrate import sentence, step
from store.records import Event
from tools.registry import TOOLS


def test_every_registered_tool_has_a_sentence() -> None:
    from agent.narrate import _steps

    assert set(TOOLS) <= set(_steps())
    for name in TOOLS:
        said = step(name, {})
        assert "{" not in said and "}" not in said, (name, said)


@pytest.mark.parametrize(
    ("tool", "args", "said"),
    [
        ("log_tail", {"path": "/var/log/sglang.log"}, "Reading the end of /var/log/sglang.log"),
        (
            "log_tail",
            {"path": "/var/log/s.log", "watch_s": 6},
            "Reading the end of /var/log/s.log and watching whether it still grows",
        ),
        ("ports", {"port": 30000}, "Checking which ports are listening (port 30000)"),
        ("ports", {}, "Checking which ports are listening"),
        (
            "log_search",
            {"path": "/l", "pattern": "(?i)error|exception|traceback|killed|fatal|out of memory"},
            "Searching the whole of /l for error lines",
        ),
        (
            "config_apply",
            {"path": "/etc/a.py", "copy_from": "/etc/a.py.known-good"},
            "Restoring /etc/a.py from /etc/a.py.known-good",
        ),
    ],
)
def test_step_sentences(tool: str, args: dict, said: str) -> None:
    assert step(tool, args) == said


def test_trace_lines_are_not_repeated_and_a_standing_is_said_once() -> None:
    def ev(kind: str, **data: object) -> Event:
        return Event(session_id="s", type=kind, data=data)  # type: ignore[arg-type]

    assert (
        sentence(ev("message", role="agent", text="Next check: log_search {'path': 'x'}")) is None
    )
    seen: dict[str, str] = {}
    refuted = ev("hypothesis", label="nccl_failure", status="refuted", against=[{"note": "n"}])
    assert sentence(refuted, seen) == "Ruling out nccl_failure: n."
    assert sentence(ev("hypothesis", label="nccl_failure", status="open"), seen) is None
    assert sentence(refuted, seen) is None
    assert sentence(ev("observation", tool="dmesg", args={}, ok=False)) == (
        "Reading the kernel log for OOM kills and GPU errors (it could not be read)."
    )


def test_a_signature_note_reads_as_words() -> None:
    supported = Event(
        session_id="s",
        type="hypothesis",
        data={
            "label": "kv_cache_no_room",
            "status": "supported",
            "evidence": [{"note": "signature sglang-kv-pool-no-room"}],
        },
    )
    assert sentence(supported, {}) == (
        "kv_cache_no_room gains support: a line matches the known failure sglang-kv-pool-no-room."
    )
