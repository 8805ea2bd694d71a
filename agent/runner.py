"""Runner: starts, resumes and follows up investigations; the contract in agent/api.py.

Checkpoints go to their own SQLite file (settings.checkpoint_path), or to the team's PostgreSQL
when `settings.database_url` is set, so a paused or crashed run resumes by session id in another
process (another replica, with PostgreSQL). Every event is stored in memory as it happens, so the
trajectory survives a crash, and handed to `on_event` for live views (CLI, SSE).
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from langgraph.types import Command

from agent.brains import make_brain
from agent.context import RunContext
from agent.followup import Answer, Intent, Known, answer, intent_of, known_from_state
from agent.graph import build_graph
from agent.narrate import step
from agent.observe import Prefetch
from agent.settings import Settings, get_settings
from store.factory import open_checkpointer, open_leases, open_memory
from store.memory.base import MemoryStore
from store.records import ApprovalRequest, Decision, Event, Evidence, HypothesisView, Report
from tools.host import Host

EventSink = Callable[[Event], None]
RECURSION_LIMIT = 400


class Runner:
    def __init__(self, settings: Settings | None = None, memory: MemoryStore | None = None) -> None:
        self.settings = settings or get_settings()
        self.settings.home.mkdir(parents=True, exist_ok=True)
        self.memory = memory or open_memory(self.settings.database_url, self.settings.memory_path)
        self._closers: list[Callable[[], None]] = []
        #: with a team database, whoever drives a session holds its run lease (store/leases.py)
        self.leases: Any = open_leases(self.settings.database_url)
        if self.leases is not None:
            self._closers.append(self.leases.close)
        self._saver = self._checkpointer()
        self._lock = threading.Lock()
        self.graph = build_graph(self._saver)

    def _checkpointer(self) -> Any:
        saver, close = open_checkpointer(self.settings.database_url, self.settings.checkpoint_path)
        self._closers.append(close)
        return saver

    # -- public API ------------------------------------------------------------------------------
    def start(
        self,
        host: Host,
        symptom: str,
        session_id: str | None = None,
        brain: str | None = None,
        on_event: EventSink | None = None,
        host_spec: str | None = None,
        logs: list[str] | None = None,
        configs: list[str] | None = None,
        prefetched: Prefetch | None = None,
    ) -> Report:
        brain_name = brain or self.settings.default_brain
        sid = session_id or uuid.uuid4().hex[:12]
        # The lease before the row says `running`: no replica may take the session for orphaned.
        with self.leases.holding(sid) if self.leases else contextlib.nullcontext():
            return self._start(
                host, symptom, sid, brain_name, on_event, host_spec, logs, configs, prefetched
            )

    def _start(
        self,
        host: Host,
        symptom: str,
        session_id: str,
        brain_name: str,
        on_event: EventSink | None,
        host_spec: str | None,
        logs: list[str] | None,
        configs: list[str] | None,
        prefetched: Prefetch | None = None,
    ) -> Report:
        sid = self.memory.create_session(host.name, symptom, brain_name, session_id)
        if host_spec:
            self.memory.set_host_spec(sid, host_spec)
        notes = self._notes(host.name)
        sink = self._sink(sid, on_event)
        sink(
            "session", {"host": host.name, "symptom": symptom, "brain": brain_name, "notes": notes}
        )
        state = {
            "session_id": sid,
            "host": host.name,
            "symptom": symptom,
            "notes": notes,
            "messages": [],
        }
        return self._drive(
            sid, host, brain_name, state, sink, logs or [], configs or [], prefetched
        )

    def resume(
        self, host: Host, session_id: str, decision: Decision, on_event: EventSink | None = None
    ) -> Report:
        row = self.memory.get_session(session_id)
        if row is None:
            raise KeyError(f"no session {session_id}")
        return self._drive(
            session_id,
            host,
            row.brain,
            Command(resume=decision.model_dump()),
            self._sink(session_id, on_event),
            [],
            [],
        )

    def continue_run(
        self, host: Host, session_id: str, on_event: EventSink | None = None
    ) -> Report:
        """Carry on a run whose process died, from its last checkpoint (another replica calls
        this). With no checkpoint yet, the run starts over from the stored session."""
        row = self.memory.get_session(session_id)
        if row is None:
            raise KeyError(f"no session {session_id}")
        sink = self._sink(session_id, on_event)
        if self.graph.get_state(self._config(session_id)).values:
            return self._drive(session_id, host, row.brain, None, sink, [], [])
        state = {
            "session_id": session_id,
            "host": host.name,
            "symptom": row.symptom,
            "notes": self._notes(host.name),
            "messages": [],
        }
        return self._drive(session_id, host, row.brain, state, sink, [], [])

    def message(
        self, host: Host, session_id: str, text: str, on_event: EventSink | None = None
    ) -> Report:
        """A follow-up: a question is answered in prose from the board (no tools run, no new
        conclusion); a request for another read ("check dmesg too") resumes the graph."""
        row = self.memory.get_session(session_id)
        if row is None:
            raise KeyError(f"no session {session_id}")
        sink = self._sink(session_id, on_event)
        if self.is_question(session_id, text):
            self.answer(session_id, text, on_event)
            return self._report(session_id, host, sink, save=False)
        sink("message", {"role": "user", "text": text})
        return self._drive(
            session_id, host, row.brain, {"messages": [text], "status": "running"}, sink, [], []
        )

    def known(self, session_id: str, running: bool = False) -> Known:
        """What the session knows at its latest checkpoint (readable while it runs)."""
        snap = self.graph.get_state(self._config(session_id))
        return known_from_state(snap.values or {}, self.pending(session_id, snap), running=running)

    def is_question(self, session_id: str, text: str) -> bool:
        """True when the follow-up asks about what is known, not for a new read."""
        return intent_of(text, self.known(session_id)) is not Intent.check

    def answer(
        self, session_id: str, text: str, on_event: EventSink | None = None, running: bool = False
    ) -> Answer:
        """Store the question and one prose answer as `message` events; touches no host and
        leaves the graph where it is (a paused approval stays pending)."""
        row = self.memory.get_session(session_id)
        if row is None:
            raise KeyError(f"no session {session_id}")
        sink = self._sink(session_id, on_event)
        sink("message", {"role": "user", "text": text})
        known = self.known(session_id, running=running)
        ans = answer(text, known)
        try:
            brain = make_brain(row.brain, self.settings)
        except ValueError:  # the session's model endpoint is gone: the rulebook's words stand
            brain = make_brain("rulebook", self.settings)
        ans = ans.model_copy(update={"text": brain.explain(text, ans, known)})
        sink(
            "message",
            {
                "role": "agent",
                "kind": "answer",
                "intent": ans.intent.value,
                "about": ans.about,
                "text": ans.text,
                "cites": [c.model_dump() for c in ans.cites],
            },
        )
        return ans

    def pending(self, session_id: str, snap: Any = None) -> ApprovalRequest | None:
        """The approval the run waits on, if any; `snap` is a state already read (reading the
        checkpoint again deserialises the whole state once more)."""
        snap = snap if snap is not None else self.graph.get_state(self._config(session_id))
        for task in snap.tasks:
            for intr in task.interrupts:
                v = intr.value if isinstance(intr.value, dict) else {}
                return ApprovalRequest(
                    id=f"{session_id}:{intr.id}",
                    session_id=session_id,
                    tool=str(v.get("tool")),
                    args=v.get("args", {}),
                    reason=str(v.get("reason", "")),
                )
        return None

    # -- internals -------------------------------------------------------------------------------
    def _config(self, sid: str) -> dict[str, Any]:
        return {"configurable": {"thread_id": sid}, "recursion_limit": RECURSION_LIMIT}

    def _notes(self, host: str) -> list[str]:
        notes = [f"open todo #{t.id}: {t.text}" for t in self.memory.todos(host)]
        last = self.memory.last_handoff(host)
        if last:
            notes.append(f"last handoff ({last.created[:10]}): {last.text}")
        return notes

    def _sink(self, sid: str, on_event: EventSink | None) -> Callable[[str, dict[str, Any]], None]:
        def emit(kind: str, data: dict[str, Any]) -> None:
            if kind in ("observation", "approval_request") and data.get("tool"):
                # the step as a plain sentence, for every live view (page, terminal)
                data = {**data, "say": step(str(data["tool"]), dict(data.get("args") or {}))}
            ev = self.memory.append_event(Event(session_id=sid, type=kind, data=data))  # type: ignore[arg-type]
            if kind == "observation":
                self.memory.record_observation(sid, data)
            if on_event:
                on_event(ev)

        return emit

    def _drive(
        self,
        sid: str,
        host: Host,
        brain_name: str,
        inp: Any,
        sink: Callable[[str, dict[str, Any]], None],
        logs: list[str],
        configs: list[str],
        prefetched: Prefetch | None = None,
    ) -> Report:
        ctx = RunContext(
            host=host,
            brain=make_brain(brain_name, self.settings),
            settings=self.settings,
            started=time.monotonic(),
            extra_logs=logs,
            extra_configs=configs,
            prefetched=prefetched,
        )
        lease = self.leases.holding(sid) if self.leases else contextlib.nullcontext()
        with lease:
            return self._drive_held(sid, host, inp, sink, ctx)

    def _drive_held(
        self,
        sid: str,
        host: Host,
        inp: Any,
        sink: Callable[[str, dict[str, Any]], None],
        ctx: RunContext,
    ) -> Report:
        try:
            for mode, chunk in self.graph.stream(
                inp,
                self._config(sid),
                context=ctx,
                stream_mode=["custom", "updates"],
                durability=self.settings.checkpoint_durability,
            ):
                if mode == "custom" and isinstance(chunk, dict):
                    sink(chunk.get("type", "message"), chunk.get("data", {}))
        except Exception as exc:  # a bug: record it so the trajectory says what happened
            sink("error", {"error": f"{type(exc).__name__}: {exc}"})
            self.memory.set_status(sid, "error")
            raise
        return self._report(sid, host, sink)

    def _report(
        self, sid: str, host: Host, sink: Callable[[str, dict[str, Any]], None], save: bool = True
    ) -> Report:
        snap = self.graph.get_state(self._config(sid))
        values = snap.values
        pending = self.pending(sid, snap)
        row = self.memory.get_session(sid)
        base = dict(values.get("report") or {})
        if pending is not None:
            base.update(status="awaiting_approval")
        report = Report(
            session_id=sid,
            host=host.name,
            symptom=row.symptom if row else values.get("symptom", ""),
            status=base.get("status", "insufficient_evidence"),
            root_cause=base.get("root_cause"),
            confidence=base.get("confidence", 0.0),
            summary=base.get("summary", ""),
            evidence=[Evidence(**e) for e in base.get("evidence", [])],
            ruled_out=base.get("ruled_out", []),
            hypotheses=[HypothesisView(**h) for h in base.get("hypotheses", [])]
            or [
                HypothesisView(
                    label=h["label"], statement=h["statement"], status=h["status"], score=h["score"]
                )  # type: ignore[arg-type]
                for h in (values.get("hypotheses") or {}).values()
            ],
            tool_calls=values.get("tool_calls", 0),
            rounds=values.get("rounds", 0),
            next_step=base.get("next_step", ""),
            notes=list(dict.fromkeys(values.get("notes") or [])),
            unknowns=base.get("unknowns", []),
            where=base.get("where", ""),
            pending_approval=pending,
            launch=base.get("launch"),
        )
        if not save:  # a prose answer changed nothing: the stored outcome stands as it is
            return report
        if report.status == "concluded":
            report.seen_before = self._seen_before(report)
        self.memory.save_report(report)
        if pending is not None:
            self.memory.set_status(sid, "awaiting_approval")
        return report

    def _seen_before(self, report: Report) -> list[str]:
        out = []
        # the label and the evidence's most distinctive words (the longest): every word of the
        # lines OR'ed cost the full-text index ~450 page lookups per conclusion, most of the
        # time an eval spent in SQLite, to rank rows that are then filtered by label anyway
        text = " ".join(e.line for e in report.evidence)[:300]
        words = sorted(set(_WORD.findall(text)), key=lambda w: (-len(w), w))[:_SEEN_WORDS]
        query = " ".join([report.root_cause or "", *words])
        for c in self.memory.search_conclusions(query, limit=10):
            if c.session_id != report.session_id and c.root_cause == report.root_cause:
                out.append(
                    f"seen before on host {c.host} on {c.created[:10]}: root cause {c.root_cause} ({c.summary[:120]})"
                )
        return list(dict.fromkeys(out))[:3]

    def close(self) -> None:
        for close in self._closers:
            close()
        self.memory.close()


#: words of an evidence line worth matching a past conclusion on, and how many of them
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]{5,}")
_SEEN_WORDS = 8


def investigate(
    host: Host,
    symptom: str,
    brain: str = "rulebook",
    settings: Settings | None = None,
    on_event: EventSink | None = None,
    approve: Callable[[ApprovalRequest], bool] | None = None,
    runner: Runner | None = None,
    logs: list[str] | None = None,
    configs: list[str] | None = None,
) -> Report:
    """One-shot run for evals and the loop: approvals go to `approve` (default: deny)."""
    r = runner or Runner(settings)
    try:
        report = r.start(host, symptom, brain=brain, on_event=on_event, logs=logs, configs=configs)
        while report.status == "awaiting_approval" and report.pending_approval is not None:
            ok = bool(approve(report.pending_approval)) if approve else False
            report = r.resume(
                host,
                report.session_id,
                Decision(approve=ok, reason="policy" if ok else "denied by policy"),
                on_event,
            )
        return report
    finally:
        if runner is None:
            r.close()
