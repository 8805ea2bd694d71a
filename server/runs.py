"""Runs investigations in worker threads and fans their events out to live SSE subscribers.

The Runner is synchronous (it may take seconds and block on I/O), so each start / resume /
follow-up runs in a thread pool. Its `on_event` callback, called in that thread, stores the
event in memory first (memory assigns `seq`) and only then hands it to the event loop with
`call_soon_threadsafe`, so a subscriber that replays from memory and then listens live never
misses an event (it drops duplicates by seq). A sentinel follows the last event of a run that
ended for good; a run paused for approval keeps its streams open.

With a team PostgreSQL (server/cluster.py) the hub is one of several replicas: it holds a run
lease for every session it runs, lists and decides approvals from the database (a claim on the
session's status makes one replica win), relays events of sessions run elsewhere to its own
streams, and continues sessions whose replica died.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from agent.brains import make_brain
from server.hosts import HostCatalog, UnknownHost
from server.inflight import Inflight
from store.records import ApprovalRequest, Decision, Event, Report
from tools.host import Host

if TYPE_CHECKING:
    from server.cluster import Cluster

log = logging.getLogger("pivot.server")

#: Put in a subscriber's queue after the last event of a run that will not continue by itself.
END = object()

Phase = Literal["queued", "running", "awaiting_approval", "done"]


class Busy(Exception):
    """The session is already running; a second graph invocation on it would race the first."""


class NotFound(Exception):
    pass


class BrainFailed(Exception):
    """The brain could not start (an LLM with no endpoint): the session is recorded as failed."""

    def __init__(self, session_id: str, error: str) -> None:
        super().__init__(error)
        self.session_id = session_id
        self.error = error


@dataclass
class SessionState:
    session_id: str
    host_name: str
    brain: str
    host: Host | None = None
    #: the Docker/Podman container on `host_name` the server runs in, read inside (or None)
    container: str | None = None
    phase: Phase = "queued"
    report: Report | None = None
    error: str | None = None
    subscribers: set[asyncio.Queue[Any]] = field(default_factory=set)
    #: answers to questions asked while the run went on, not yet said: streams stay open for them
    answering: int = 0


#: Between the catalog host and the container in a stored host spec (as the CLI writes it).
CONTAINER_SEP = "|container="

#: Event types after which a session run elsewhere may send nothing more by itself.
LAST_TYPES = ("conclusion", "error")

#: How long a relayed last event waits for the runner to store the session's final status.
SETTLE_S = 10.0


class RunHub:
    def __init__(
        self,
        memory: Any,
        runner: Any,
        catalog: HostCatalog,
        workers: int = 8,
        cluster: Cluster | None = None,
        inflight: Inflight | None = None,
    ) -> None:
        self.memory = memory
        self.inflight = inflight
        self.runner = runner
        self.catalog = catalog
        self.cluster = cluster
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="pivot-run")
        self._sessions: dict[str, SessionState] = {}
        self._count = threading.Lock()  # SessionState.answering: routers' threads and the loop
        self._pending: dict[str, ApprovalRequest] = {}
        #: live streams of sessions this replica does not run (another replica does)
        self._remote: dict[str, set[asyncio.Queue[Any]]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- lifecycle -------------------------------------------------------------------------------
    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def restore(self) -> int:
        """Re-list approvals that sessions of an earlier process still wait on (checkpointed);
        end as failed the runs that process lost when it was killed mid-run (alone: with a
        cluster there is no in-flight file, and a live replica continues those runs)."""
        if self.inflight is not None:
            for sid in sorted(self.inflight.load()):
                row = self.memory.get_session(sid)
                if row is None or row.status not in ("running", "queued"):
                    continue
                why = (
                    "interrupted: the service stopped while this run was going; "
                    "ask a follow-up to continue, or start the investigation again"
                )
                self.memory.append_event(Event(session_id=sid, type="error", data={"error": why}))
                self.memory.set_status(sid, "error")
            self.inflight.reset()
        found = 0
        for row in self.memory.list_sessions(limit=500):
            if row.status != "awaiting_approval":
                continue
            req = self.runner.pending(row.id)
            if req is None:
                continue
            host_name, container = self._where(row.id, row.host)
            self._sessions[row.id] = SessionState(
                session_id=row.id,
                host_name=host_name,
                container=container,
                brain=row.brain,
                phase="awaiting_approval",
            )
            self._pending[req.id] = req
            found += 1
        return found

    def shutdown(self) -> None:
        """Queued runs are dropped (their sessions stay resumable); running ones finish."""
        self._pool.shutdown(wait=True, cancel_futures=True)
        for st in self._sessions.values():
            if st.host is not None:
                try:
                    st.host.close()
                except Exception:
                    log.exception("closing host %s", st.host_name)

    # -- what the routers ask ------------------------------------------------------------------
    def state(self, session_id: str) -> SessionState | None:
        return self._fresh(self._sessions.get(session_id))

    def phase(self, session_id: str) -> Phase | None:
        st = self.state(session_id)
        return st.phase if st else None

    def _fresh(self, st: SessionState | None) -> SessionState | None:
        """A pause this replica remembers may have been decided (and finished) on another
        replica: the database's status wins, or A would show a finished session as waiting."""
        if st is None or self.cluster is None or st.phase != "awaiting_approval":
            return st
        row = self.memory.get_session(st.session_id)
        if row is not None and row.status != "awaiting_approval":
            st.phase = "done"
            for aid in [k for k, v in self._pending.items() if v.session_id == st.session_id]:
                del self._pending[aid]
        return st

    def location(self, session_id: str) -> tuple[str, str | None]:
        """(catalog host, container) the session reads: from this replica's run of it, or from
        the database when another replica ran or paused it (never a guess like "*")."""
        st = self._sessions.get(session_id)
        if st is not None:
            return st.host_name, st.container
        row = self.memory.get_session(session_id)
        if row is None:
            raise NotFound(f"no session {session_id}")
        return self._where(session_id, row.host)

    def open_for(self, session_id: str) -> Host:
        """A fresh view of the session's host (inside its container when it has one), for a
        read beside the run such as an approval's diff; the caller closes it."""
        return self._open(*self.location(session_id))

    def pending(self) -> list[ApprovalRequest]:
        if self.cluster is not None:  # any replica may have paused it: the database knows
            self._pending = self._pending_from_store()
        return sorted(self._pending.values(), key=lambda a: a.created)

    def _pending_from_store(self) -> dict[str, ApprovalRequest]:
        out: dict[str, ApprovalRequest] = {}
        for row in self.memory.list_sessions(limit=500):
            if row.status == "awaiting_approval":
                req = self.runner.pending(row.id)
                if req is not None:
                    out[req.id] = req
        return out

    def followable(self, session_id: str) -> bool:
        """True while another replica runs the session or it waits for anyone's approval."""
        if self.cluster is None or self.active(session_id):
            return False
        row = self.memory.get_session(session_id)
        return row is not None and row.status in ("running", "awaiting_approval")

    def active(self, session_id: str) -> bool:
        """True while more events may come without anyone asking (queued or running, or an
        answer to a question asked mid-run still on its way)."""
        st = self._sessions.get(session_id)
        return st is not None and (st.phase in ("queued", "running") or st.answering > 0)

    def waiting(self, session_id: str) -> bool:
        return self.phase(session_id) == "awaiting_approval"

    # -- starting work ---------------------------------------------------------------------------
    def start(
        self,
        host_name: str,
        symptom: str,
        brain: str,
        container: str | None = None,
        logs: list[str] | None = None,
    ) -> str:
        """`logs`: log files to read besides those the host's processes name (an alert's)."""
        host = self._open(host_name, container)  # UnknownHost propagates to the edge as 404
        session_id = uuid.uuid4().hex[:12]
        if self.cluster is not None:
            self.cluster.hold(session_id)  # before the row says running: nobody adopts it
        session_id = self.memory.create_session(host.name, symptom, brain, session_id)
        if container:  # how to reach it again: another process or replica resumes it
            self.memory.set_host_spec(session_id, f"{host_name}{CONTAINER_SEP}{container}")
        st = SessionState(
            session_id=session_id,
            host_name=host_name,
            brain=brain,
            host=host,
            container=container,
        )
        self._sessions[session_id] = st
        try:  # before any thread: a brain that cannot start ends the session now, by name
            make_brain(brain, self.runner.settings)
        except Exception as exc:
            st.error = f"the {brain} brain could not start: {exc}"
            st.phase = "done"
            host.close()
            st.host = None
            self.memory.append_event(
                Event(session_id=session_id, type="error", data={"error": st.error})
            )
            self.memory.set_status(session_id, "error")
            self._release(session_id)
            raise BrainFailed(session_id, st.error) from exc

        def work(on_event: Callable[[Event], None]) -> Report:
            return self.runner.start(
                host, symptom, session_id=session_id, brain=brain, on_event=on_event, logs=logs
            )

        self._submit(st, work)
        return session_id

    def decide(self, approval_id: str, decision: Decision) -> ApprovalRequest:
        req = self._pending.get(approval_id)
        if req is None:
            raise NotFound(f"no pending approval {approval_id}")
        st = self._session_for(req.session_id)
        if st.phase in ("queued", "running"):
            raise Busy(f"session {req.session_id} is running")
        if self.cluster is not None:
            self._claim(req.session_id)
        del self._pending[approval_id]
        host = self._host(st)

        def work(on_event: Callable[[Event], None]) -> Report:
            return self.runner.resume(host, req.session_id, decision, on_event=on_event)

        self._submit(st, work)
        return req

    def message(self, session_id: str, text: str) -> None:
        """A question is answered in prose from the board, even while the run goes on; a request
        for another read resumes the graph, so it waits until the run pauses or ends."""
        st = self._session_for(session_id)
        question = self.runner.is_question(session_id, text)
        if question and st.phase in ("queued", "running"):
            # read-only: the latest checkpoint answers; the run's phase and stream go on as they are
            with self._count:
                st.answering += 1
            self._pool.submit(self._answer_live, st, text)
            return
        if st.phase in ("queued", "running"):
            raise Busy(f"session {session_id} is still running; send the message when it pauses")
        host = self._host(st)

        def work(on_event: Callable[[Event], None]) -> Report:
            return self.runner.message(host, session_id, text, on_event=on_event)

        # an answer is not a new outcome: no conclusion is repeated after it
        self._submit(st, work, conclude=not question)

    def _answer_live(self, st: SessionState, text: str) -> None:
        def on_event(ev: Event) -> None:
            self._call(self._fanout, st.session_id, self._store(st.session_id, ev))

        try:
            self.runner.answer(st.session_id, text, on_event, running=True)
        except Exception as exc:  # the run itself goes on; say why this answer is missing
            log.exception("answer in session %s failed", st.session_id)
            on_event(
                Event(
                    session_id=st.session_id,
                    type="error",
                    data={"error": f"{type(exc).__name__}: {exc}"},
                )
            )
        finally:
            self._call(self._answered, st)

    def _claim(self, session_id: str) -> None:
        """Lease first, then the status: a replica that scans in between sees no free lease."""
        assert self.cluster is not None
        if not self.cluster.hold(session_id):
            raise Busy(f"session {session_id} is running on another replica")
        if not self.memory.claim_status(session_id, "awaiting_approval", "running"):
            self.cluster.release(session_id)
            raise NotFound(f"session {session_id} was decided already")

    def _session_for(self, session_id: str) -> SessionState:
        st = self._sessions.get(session_id)
        if st is not None:
            return st
        row = self.memory.get_session(session_id)  # a session from an earlier process or the CLI
        if row is None:
            raise NotFound(f"no session {session_id}")
        host_name, container = self._where(session_id, row.host)
        st = SessionState(
            session_id=session_id,
            host_name=host_name,
            container=container,
            brain=getattr(row, "brain", None) or "rulebook",
            phase="done",
        )
        st.subscribers |= self._remote.pop(session_id, set())
        self._sessions[session_id] = st
        return st

    # -- other replicas --------------------------------------------------------------------------
    def adopt(self, session_id: str) -> None:
        """Continue a session whose replica died (called by the lease scanner, any thread)."""
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._adopt, session_id)

    def _adopt(self, session_id: str) -> None:
        try:
            st = self._session_for(session_id)
        except NotFound:
            if self.cluster is not None:
                self.cluster.release(session_id)
            return

        def work(on_event: Callable[[Event], None]) -> Report:
            return self.runner.continue_run(self._host(st), session_id, on_event=on_event)

        self._submit(st, work)

    def wants(self, session_id: str) -> bool:
        """Whether a relayed event of this session has anyone here to go to."""
        st = self._sessions.get(session_id)
        if st is not None:
            return bool(st.subscribers) and st.phase not in ("queued", "running")
        return bool(self._remote.get(session_id))

    def relay(self, session_id: str, seq: int) -> None:
        """Called by the cluster's LISTEN thread for every event stored by any replica."""
        if not self.wants(session_id):
            return
        events = self.memory.events(session_id, after_seq=seq - 1)
        if not events:
            return
        self._call(self._fanout_remote, session_id, events)
        if events[-1].type in LAST_TYPES:
            threading.Thread(
                target=self._settle, args=(session_id, events[-1].seq), daemon=True
            ).start()

    def _settle(self, session_id: str, seq: int) -> None:
        """A conclusion is not always the end: a run that offers a fix pauses for approval just
        after it (conclusion, then approval_request). Ending the relayed streams at the
        conclusion made a page following on another replica miss the approval; so wait until
        the stored status leaves `running`, and end them only if the run ended for good and
        nothing came after."""
        deadline = time.monotonic() + SETTLE_S
        while True:
            row = self.memory.get_session(session_id)
            status = row.status if row is not None else "error"
            if status not in ("running", "queued"):
                break
            if time.monotonic() > deadline:
                return  # still running (an answer mid-run failed): later events will come
            time.sleep(0.05)
        if status == "awaiting_approval" or self.memory.events(session_id, after_seq=seq):
            return  # paused, or more came: the relay of those decides
        self._call(self._end_remote, session_id)

    def _fanout_remote(self, session_id: str, events: list[Event]) -> None:
        st = self._sessions.get(session_id)
        if st is not None and st.phase in ("queued", "running"):
            return  # this replica runs it now: its own fan-out is the one in order
        queues = set(st.subscribers) if st is not None else set()
        queues |= self._remote.get(session_id, set())
        for ev in events:
            for q in queues:
                q.put_nowait(ev)

    def _end_remote(self, session_id: str) -> None:
        st = self._sessions.get(session_id)
        if st is not None and st.phase in ("queued", "running"):
            return  # this replica took it up again meanwhile: its own _finish ends the streams
        if st is not None:
            st.phase = "done"
        queues = set(st.subscribers) if st is not None else set()
        for q in queues | self._remote.get(session_id, set()):
            q.put_nowait(END)

    def _host(self, st: SessionState) -> Host:
        if st.host is None:
            st.host = self._open(st.host_name, st.container)
        return st.host

    def _open(self, host_name: str, container: str | None) -> Host:
        """The catalog's host, or a view inside one of its containers (the same ContainerHost
        `pivot investigate --container` reads through); a container no CLI there knows is an
        unknown host, said with what to do."""
        host = self.catalog.open(host_name)
        if not container:
            return host
        from tools.container_host import ContainerHost

        try:
            box = ContainerHost(host, container, own_outer=True)
        except ValueError as exc:
            host.close()
            raise UnknownHost(str(exc)) from exc
        down = box.unavailable()
        if down is not None:
            host.close()
            raise UnknownHost(f"{down.error}; {down.fix}")
        return box

    def _where(self, session_id: str, row_host: str) -> tuple[str, str | None]:
        """(catalog host, container) of a stored session: its host spec names the container."""
        spec = self.memory.host_spec(session_id) or ""
        if CONTAINER_SEP in spec:
            host_name, _, container = spec.partition(CONTAINER_SEP)
            return host_name, container
        return row_host, None

    # -- the worker side -------------------------------------------------------------------------
    def _submit(
        self,
        st: SessionState,
        work: Callable[[Callable[[Event], None]], Report],
        conclude: bool = True,
    ) -> None:
        assert self._loop is not None, "RunHub.bind(loop) is called in the app's lifespan"
        st.phase = "queued"
        st.error = None
        if self.inflight is not None:
            self.inflight.add(st.session_id)
        self._pool.submit(self._run, st, work, conclude)

    def _run(
        self,
        st: SessionState,
        work: Callable[[Callable[[Event], None]], Report],
        conclude: bool = True,
    ) -> None:
        concluded = failed = False
        self._call(self._set_phase, st, "running")

        def on_event(ev: Event) -> None:
            nonlocal concluded, failed
            stored = self._store(st.session_id, ev)
            concluded = concluded or stored.type == "conclusion"
            failed = failed or (stored.type == "error" and "error" in stored.data)
            self._call(self._fanout, st.session_id, stored)

        try:
            report = work(on_event)
        except Exception as exc:  # a bug in the agent must end the stream, not hang it
            log.exception("run of session %s failed", st.session_id)
            st.error = f"{type(exc).__name__}: {exc}"
            self.memory.set_status(st.session_id, "error")  # never "running" forever
            if not failed:
                on_event(Event(session_id=st.session_id, type="error", data={"error": st.error}))
            self._release(st.session_id)
            self._call(self._finish, st, None)
            return
        if conclude and report.status != "awaiting_approval" and not concluded:
            on_event(
                Event(
                    session_id=st.session_id,
                    type="conclusion",
                    data=report.model_dump(mode="json"),
                )
            )
        self._release(st.session_id)
        self._call(self._finish, st, report)

    def _release(self, session_id: str) -> None:
        if self.cluster is not None:
            self.cluster.release(session_id)

    def _store(self, session_id: str, ev: Event) -> Event:
        """Events the Runner already stored carry their seq; only the hub's own get stored here."""
        if ev.session_id != session_id:  # isolation: a run only ever speaks for its session
            ev = ev.model_copy(update={"session_id": session_id, "seq": 0})
        if ev.seq > 0:
            return ev
        return self.memory.append_event(ev)

    def _call(self, fn: Callable[..., None], *args: Any) -> None:
        assert self._loop is not None
        self._loop.call_soon_threadsafe(fn, *args)

    # -- on the event loop -----------------------------------------------------------------------
    def _set_phase(self, st: SessionState, phase: Phase) -> None:
        st.phase = phase

    def _fanout(self, session_id: str, ev: Event) -> None:
        st = self._sessions.get(session_id)
        if st is None:
            return
        for q in st.subscribers:
            q.put_nowait(ev)

    def _finish(self, st: SessionState, report: Report | None) -> None:
        st.report = report
        if self.inflight is not None:
            self.inflight.discard(st.session_id)
        if report is not None and report.status == "awaiting_approval":
            st.phase = "awaiting_approval"
            if report.pending_approval is not None:
                self._pending[report.pending_approval.id] = report.pending_approval
            return
        st.phase = "done"
        if st.answering == 0:  # else the last answer's _answered ends the streams
            for q in st.subscribers:
                q.put_nowait(END)

    def _answered(self, st: SessionState) -> None:
        with self._count:
            st.answering -= 1
            last = st.answering == 0
        if last and st.phase == "done":
            for q in st.subscribers:
                q.put_nowait(END)

    def subscribe(self, session_id: str) -> asyncio.Queue[Any]:
        q: asyncio.Queue[Any] = asyncio.Queue()
        st = self._sessions.get(session_id)
        if st is not None:
            st.subscribers.add(q)
        elif self.cluster is not None:
            self._remote.setdefault(session_id, set()).add(q)
        return q

    def unsubscribe(self, session_id: str, q: asyncio.Queue[Any]) -> None:
        st = self._sessions.get(session_id)
        if st is not None:
            st.subscribers.discard(q)
        remote = self._remote.get(session_id)
        if remote is not None:
            remote.discard(q)
            if not remote:
                del self._remote[session_id]
