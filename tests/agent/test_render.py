"""Host text in the human view prints as itself: log lines are data, never rich markup."""

from __future__ import annotations

import io

from rich.console import Console

from agent.render import live_printer, print_report
from store.records import Event, Evidence, HypothesisView, Report

HOSTILE = "[/] [red]evil[/red] [link=file:///etc/passwd]x"


def test_report_and_live_view_print_markup_in_host_text_literally() -> None:
    buf = io.StringIO()
    console = Console(file=buf, width=200, color_system=None)
    report = Report(
        session_id="s1",
        host="h",
        symptom="s",
        status="concluded",
        root_cause="port_in_use",
        evidence=[Evidence(observation="o1", line=HOSTILE)],
        next_step="[/bold] then [red]",
        hypotheses=[
            HypothesisView(label="port_in_use", evidence=[Evidence(observation="o1", line="[/]")])
        ],
    )
    print_report(console, report)
    show = live_printer(console)
    show(Event(session_id="s1", type="message", data={"role": "agent", "text": HOSTILE}))
    show(
        Event(
            session_id="s1",
            type="observation",
            data={"id": "o2", "tool": "log_tail", "ok": True, "args": {"path": "/tmp/[b]x.log"}},
        )
    )
    out = buf.getvalue()
    assert out.count(HOSTILE) == 2
    assert "[/bold] then [red]" in out and "/tmp/[b]x.log" in out
