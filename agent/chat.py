"""`pivot chat`: the investigation as a conversation in the terminal, for the engineer already
on an SSH session to the GPU box.

Type the symptom; the steps stream as plain sentences (agent/narrate.py); a proposed change
shows its diff and waits for y/n; questions get prose answers from the board (agent/followup.py);
`/resume`, `/todo`, `/handoff`. The session is the same one the web page shows: it goes through
the same Runner into the same memory and checkpoint files under PIVOT_HOME, with the host named
as the service names it (`local`, the SSH alias, `replay:<card>`).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TextIO

import typer

from agent.chat_view import ChatView, Kind
from agent.cli.investigate import ContainerOpt, in_container
from agent.narrate import conclusion, sentence
from store.records import Decision, Event, Report
from tools.host import Host

if TYPE_CHECKING:  # the graph machinery loads only when a chat starts, not for every `pivot`
    from agent.runner import Runner

HELP = (
    "Type the symptom to start; then ask follow-ups (why did you rule out X? what would the next "
    "check show?) or ask for a check (check dmesg too).\n"
    "  /resume [id]    continue a past session (no id: list them)\n"
    "  /todo [text]    add a todo for this host (no text: list the open ones)\n"
    "  /handoff [text] leave a note for the next session on this host (no text: show the last)\n"
    "  /approve, /deny [reason]  decide a change left waiting\n"
    "  /quit"
)
AGENT = "pivot> "
PROMPT = "you> "
#: Answers to a yes/no question; typed when no question is asked, they start nothing.
YES_NO = frozenset({"y", "yes", "n", "no", "ok", "okay", "sure", "nope"})


class Chat:
    """One terminal conversation; `read` and `out` are injectable (tests, other terminals)."""

    def __init__(
        self,
        runner: Runner,
        host: Host,
        host_spec: str,
        brain: str | None = None,
        read: Callable[[str], str] = input,
        out: TextIO = sys.stdout,
    ) -> None:
        self.runner, self.host, self.host_spec, self.brain = runner, host, host_spec, brain
        self.read, self.out = read, out
        self.view = ChatView(out)
        self.session_id: str | None = None
        self.logs: list[str] = []
        self.configs: list[str] = []
        self._standing: dict[str, str] = {}
        self._said: list[
            str
        ] = []  # the last conclusion's lines, so a repeat says only what changed

    # -- output ----------------------------------------------------------------------------------
    def say(self, text: str, lead: str = AGENT, kind: Kind = "agent") -> None:
        self.view.say(text, lead, kind)

    def on_event(self, ev: Event) -> None:
        if ev.type == "message" and ev.data.get("kind") == "answer":
            self.say(str(ev.data.get("text", "")))
            return
        if ev.type == "conclusion":
            self.conclusion(conclusion(ev.data))
            return
        line = sentence(ev, self._standing)
        if line:
            self.say(line, "  · ", "step")

    def conclusion(self, lines: list[str]) -> None:
        """The final reply; a run that concludes again (after a change) says only what is new."""
        new = [ln for ln in lines if ln not in self._said]
        if self._said and lines[0] == self._said[0] and lines[0].startswith("Root cause: "):
            new = [f"Still {lines[0].removeprefix('Root cause: ')}", *new]
        self._said = lines
        self.say("\n".join(new))

    # -- the loop --------------------------------------------------------------------------------
    def run(self, resume: str | None = None) -> None:
        mem = self.runner.memory
        self.say(f"Pivot on {self.host.name}. Describe what you saw, or /help.")
        for t in mem.todos(self.host.name):
            self.say(f"open todo #{t.id}: {t.text}", "  note: ", "note")
        last = mem.last_handoff(self.host.name)
        if last:
            self.say(f"last handoff ({last.created[:10]}): {last.text}", "  note: ", "note")
        if resume:
            self.resume(resume)
        while True:
            try:
                line = self.read(PROMPT).strip()
            except (EOFError, KeyboardInterrupt):
                self.out.write("\n")
                return
            if not line:
                continue
            try:
                if line.startswith("/"):
                    if not self.command(line):
                        return
                    continue
                self.talk(line)
            except Exception as exc:  # a failed run is said, and the conversation goes on
                self.say(f"That failed: {type(exc).__name__}: {exc}")

    def talk(self, text: str) -> None:
        if text.lower().rstrip(".!") in YES_NO:
            self.stray_answer(text)
            return
        if self.session_id is None:
            report = self.runner.start(
                self.host,
                text,
                brain=self.brain,
                on_event=self.on_event,
                host_spec=self.host_spec,
                logs=self.logs,
                configs=self.configs,
            )
            self.session_id = report.session_id
        elif self.runner.is_question(self.session_id, text):
            # answered in prose; a change left for later stays waiting, it is not asked again
            self.runner.answer(self.session_id, text, self.on_event)
            return
        else:
            report = self.runner.message(self.host, self.session_id, text, on_event=self.on_event)
        self.approvals(report)

    def stray_answer(self, text: str) -> None:
        """A bare yes/no with no question asked: ask what was meant rather than investigate it."""
        pending = self.runner.pending(self.session_id) if self.session_id else None
        if pending is not None:
            path = pending.args.get("path", "")
            self.say(
                f"{text!r} to what? A change is waiting ({pending.tool} on {path}): "
                "/approve or /deny decides it."
            )
        elif self.session_id is None:
            self.say(
                f"{text!r} to what? No question is waiting. Describe what you saw to start "
                "an investigation, or /help."
            )
        else:
            self.say(f"{text!r} to what? No question is waiting; ask one, or /help.")

    def approvals(self, report: Report) -> None:
        """Ask about each change the run pauses on, with its diff, until it stops asking.

        The diff is shown once per change: `why` answers in prose and asks again without it."""
        shown: str | None = None
        while report.status == "awaiting_approval" and report.pending_approval is not None:
            p = report.pending_approval
            change = next(
                (c for c in self.runner.known(report.session_id).changes if c.state == "waiting"),
                None,
            )
            path, source = p.args.get("path", ""), p.args.get("copy_from", "")
            what = f"restore {path} from {source}" if source else f"run {p.tool} on {path}"
            key = f"{report.session_id}:{p.tool}:{path}:{source}"
            if shown == key:
                self.say(f"(The change above: {what}.)")
            else:
                shown = key
                self.say(f"I want to {what}: {p.reason}")
                diff = (change.diff if change else []) or ["(no diff: a file was not read whole)"]
                self.say("\n".join(diff), "    ", "diff")
            try:
                answer = self.read("Approve this change? [y/N/later/why] ").strip().lower()
            except (EOFError, KeyboardInterrupt):
                answer = "later"
            if answer in ("l", "later"):
                self.say(
                    "Left waiting for your approval: /approve or /deny here, "
                    f"or /resume {report.session_id} later."
                )
                return
            if answer in ("?", "why"):
                self.runner.answer(report.session_id, f"why {what}?", self.on_event)
                continue
            if answer not in ("y", "yes", "n", "no", ""):
                self.say("Answer y, n, later or why.")
                continue
            ok = answer in ("y", "yes")
            report = self.runner.resume(
                self.host,
                report.session_id,
                Decision(approve=ok, reason="chat: approved" if ok else "chat: denied"),
                self.on_event,
            )

    def command(self, line: str) -> bool:
        """Run one /command; False ends the chat."""
        word, _, arg = line.partition(" ")
        arg = arg.strip()
        mem = self.runner.memory
        if word in ("/quit", "/exit", "/q"):
            if self.session_id:
                self.say(f"Session {self.session_id} is kept; /resume {self.session_id} later.")
            return False
        if word in ("/help", "/?"):
            self.say(HELP)
        elif word == "/todo":
            if arg:
                t = mem.add_todo(self.host.name, arg, self.session_id)
                self.say(f"Todo #{t.id} added for {self.host.name}.")
            else:
                todos = mem.todos(self.host.name)
                self.say("\n".join(f"#{t.id} {t.text}" for t in todos) or "No open todos.")
        elif word == "/handoff":
            if arg:
                h = mem.add_handoff(self.host.name, arg, self.session_id)
                self.say(
                    f"Handoff #{h.id} saved; the next session on {self.host.name} starts from it."
                )
            else:
                last = mem.last_handoff(self.host.name)
                self.say(f"{last.created[:16]} {last.text}" if last else "No handoff yet.")
        elif word == "/resume":
            self.resume(arg or None)
        elif word in ("/approve", "/deny"):
            self.decide(word == "/approve", arg)
        else:
            self.say(f"Unknown command {word}. /help lists them.")
        return True

    def decide(self, approve: bool, reason: str) -> None:
        """Answer the change this session left waiting ("later")."""
        pending = self.runner.pending(self.session_id) if self.session_id else None
        if pending is None or self.session_id is None:
            self.say("No change is waiting for your approval here.")
            return
        why = reason or ("chat: approved" if approve else "chat: denied")
        report = self.runner.resume(
            self.host, self.session_id, Decision(approve=approve, reason=why), self.on_event
        )
        self.approvals(report)

    def resume(self, session_id: str | None) -> None:
        mem = self.runner.memory
        if session_id is None:
            rows = mem.list_sessions(self.host.name, limit=8)
            if not rows:
                self.say(f"No sessions on {self.host.name} yet.")
                return
            self.say(
                "\n".join(
                    f"{r.id}  {r.created[:16]}  {r.status:18} {r.root_cause or '-':20} {r.symptom[:50]}"
                    for r in rows
                )
            )
            self.say("/resume ID opens one.")
            return
        row = mem.get_session(session_id)
        if row is None:
            self.say(f"No session {session_id}; /resume lists them.")
            return
        if row.host != self.host.name:
            self.say(f"Session {session_id} is on {row.host}; run pivot chat for that host.")
            return
        self.session_id = session_id
        self.say(f"Resumed {session_id}: {row.symptom}")
        report = mem.report(session_id)
        pending = self.runner.pending(session_id)
        if report is not None:
            self.conclusion(conclusion(report))
        if pending is not None:
            base = report or Report(
                session_id=session_id,
                host=row.host,
                symptom=row.symptom,
                status="awaiting_approval",
            )
            self.approvals(
                base.model_copy(update={"status": "awaiting_approval", "pending_approval": pending})
            )


def _open(host: str | None, local: bool, card: str | None) -> tuple[Host, str]:
    """The host, named as the service names it, and how to reach it again (for --resume)."""
    from tools.hosts import resolve_host

    if card:
        from tools.cards import load_card
        from tools.replay_host import ReplayHost

        path = Path(card).resolve()
        return ReplayHost(load_card(path), name=f"replay:{path.stem}"), f"replay:{path}"
    if local:
        from tools.local_host import LocalHost

        return LocalHost(name="local"), "local"
    return resolve_host(host), f"ssh:{host}"


def chat(
    host: Annotated[
        str | None, typer.Option("--host", help="SSH alias (from ~/.ssh/config)")
    ] = None,
    local: Annotated[bool, typer.Option("--local", help="this machine")] = False,
    card: Annotated[
        str | None, typer.Option("--card", help="replay an incident card (demos)")
    ] = None,
    brain: Annotated[str | None, typer.Option(help="rulebook | llm")] = None,
    resume: Annotated[str | None, typer.Option("--resume", help="continue a session")] = None,
    log: Annotated[
        list[str] | None, typer.Option("--log", help="a log to read (repeatable)")
    ] = None,
    config: Annotated[
        list[str] | None, typer.Option("--config", help="a config to read (repeatable)")
    ] = None,
    container: ContainerOpt = None,
) -> None:
    """Talk to Pivot in the terminal: type the symptom, watch the steps, approve, ask why.

    In the chat: /resume [id], /todo [text], /handoff [text], /approve, /deny, /help, /quit.
    Sessions are the ones `pivot serve` shows (same PIVOT_HOME)."""
    from agent.settings import get_settings

    if sum(bool(x) for x in (host, local, card)) != 1:
        raise typer.BadParameter("give exactly one of --host ALIAS, --local or --card CARD.yaml")
    if brain not in (None, "rulebook", "llm"):
        raise typer.BadParameter(f"unknown brain {brain!r}: use rulebook or llm")
    s = get_settings()
    if (brain or s.default_brain) == "llm" and not (s.llm_base_url or s.llm_replay_dir):
        raise typer.BadParameter("the llm brain needs PIVOT_LLM_BASE_URL, or use --brain rulebook")
    try:
        h, spec = _open(host, local, card)
    except (ValueError, OSError) as exc:
        raise typer.BadParameter(str(exc)) from exc
    if host:
        probe = h.run("true", timeout=20)
        if probe.error or probe.rc != 0:
            typer.echo(f"error: {probe.error or probe.stderr.strip()}", err=True)
            if probe.fix:
                typer.echo(f"fix: {probe.fix}", err=True)
            raise typer.Exit(2)
    if container:
        # the same view `pivot investigate --container` reads through; an unknown one exits 2
        h, spec = in_container(h, container), f"{spec}|container={container}"
    with contextlib.suppress(ImportError):
        import readline  # noqa: F401  (line editing and history for input())
    from agent.runner import Runner

    runner = Runner(s)
    try:
        c = Chat(runner, h, spec, brain)
        c.logs, c.configs = list(log or []), list(config or [])
        c.run(resume)
    finally:
        runner.close()


def register(app: typer.Typer) -> None:
    app.command("chat")(chat)
