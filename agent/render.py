"""Human views of a run: live event lines and the final report (rich).

Host text (log lines, paths, reasons) is escaped everywhere: a log line like "[/]" or "[red]"
must print as itself, never as markup (or crash the view)."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape as esc
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from store.records import Event, Report

STATUS_STYLE = {
    "confirmed": "bold green",
    "supported": "yellow",
    "refuted": "dim strike",
    "open": "cyan",
}


def live_printer(console: Console):  # type: ignore[no-untyped-def]
    """An on_event callback that shows hypotheses and checks as they happen."""

    def show(ev: Event) -> None:
        d = ev.data
        if ev.type == "observation":
            mark = "[green]ok[/]" if d.get("ok") else "[red]fail[/]"
            args = d.get("args") or {}
            arg = args.get("path") or args.get("port") or args.get("pattern") or ""
            console.print(
                f"  [dim]{d.get('id')}[/] {d.get('tool')} {esc(str(arg))} {mark}", highlight=False
            )
        elif ev.type == "hypothesis":
            st = d.get("status", "open")
            console.print(
                f"  [bold]hypothesis[/] {d.get('label')}: [{STATUS_STYLE.get(st, '')}]{st}[/] ({d.get('score', 0):.1f})",
                highlight=False,
            )
        elif ev.type == "message" and d.get("role") == "agent":
            # host text is data: never let it be read as rich markup
            console.print(Text("› ", style="blue") + Text(str(d.get("text", ""))), highlight=False)
        elif ev.type == "approval_request":
            console.print(
                f"[magenta]approval needed[/]: {d.get('tool')} {esc(str(d.get('args', {}).get('path', '')))}: {esc(str(d.get('reason')))}",
                highlight=False,
            )
        elif ev.type == "error":
            # host text is data: the refusal is printed as text, its word styled, never markup
            console.print(Text("refused", style="red") + Text(f": {d}"), highlight=False)

    return show


def print_report(console: Console, r: Report) -> None:
    head = {
        "concluded": f"[bold green]Root cause: {r.root_cause}[/] (confidence {r.confidence:.2f})",
        "healthy": f"[bold green]Healthy[/]: the launch is up and answering (confidence {r.confidence:.2f})",
        "insufficient_evidence": "[bold yellow]Insufficient evidence[/]: no hypothesis leads with proof",
        "budget_exhausted": "[bold red]Budget exhausted[/] before a conclusion",
        "awaiting_approval": "[bold magenta]Waiting for approval[/]",
    }.get(r.status, r.status)
    body = [head, ""]
    if r.where:
        body += [esc(r.where), ""]
    if r.evidence:
        body.append("[bold]Evidence[/] (verbatim):")
        body += [f"  {e.observation}: {esc(e.line)}" for e in r.evidence]
    if r.ruled_out:
        body.append(f"[bold]Ruled out[/]: {', '.join(r.ruled_out)}")
    if r.next_step:
        body.append(f"[bold]Next step[/]: {esc(r.next_step)}")
    if r.launch:
        from agent.launch import Launch, summary_lines

        lines = summary_lines(Launch.model_validate(r.launch))
        body.append(f"[bold]Launch[/]: {esc(lines[0])}")
        body += [f"  {esc(x)}" for x in lines[1:]]
    for u in r.unknowns:
        body.append(f"[bold]Unknown[/]: {esc(u)}")
    for s in r.seen_before:
        body.append(f"[bold]Memory[/]: {esc(s)}")
    for n in r.notes:
        body.append(f"[bold]Notes[/]: {esc(n)}")
    if r.pending_approval:
        p = r.pending_approval
        body.append(
            f"[bold]Pending[/]: {p.tool} {esc(str(p.args.get('path', '')))}: {esc(p.reason)}"
        )
        body.append(f"Resume: pivot investigate --resume {r.session_id} --approve | --deny")
    body.append(f"[dim]session {r.session_id} · {r.tool_calls} tool calls · {r.rounds} rounds[/]")
    console.print(Panel("\n".join(body), title=f"Pivot · {r.host}", expand=False), highlight=False)
    t = Table("hypothesis", "status", "score", "evidence / against", box=None)
    for h in r.hypotheses:
        line = (h.evidence[0].line if h.evidence else (h.against[0].line if h.against else ""))[
            :100
        ]
        t.add_row(
            h.label,
            f"[{STATUS_STYLE.get(h.status, '')}]{h.status}[/]",
            f"{h.score:.1f}",
            Text(line),
        )
    console.print(t)
