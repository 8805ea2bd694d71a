"""`RulebookBrain`: the deterministic, offline policy.

It weighs the board built from findings and picks the check whose outcome would move the most
belief. It concludes when one hypothesis leads clearly with verbatim evidence, and says
"insufficient evidence" rather than guess. Nothing here knows any particular incident.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from agent.board import alluded, ranked
from agent.brains.base import BrainContext
from agent.checks import CheckOption
from agent.followup import Answer, Known
from agent.signatures import load_signatures
from agent.state import Action, State
from agent.thresholds import THRESHOLDS
from tools import yamlio

_R = THRESHOLDS.rulebook  # agent/knowledge/thresholds.yaml
MIN_CHECK_VALUE = _R.min_check_value
DECISIVE_SCORE, DECISIVE_MARGIN = _R.decisive_score, _R.decisive_margin
CONCLUDE_SCORE, CONCLUDE_MARGIN = _R.conclude_score, _R.conclude_margin


@lru_cache(maxsize=1)
def _followups() -> dict[str, str]:
    return yamlio.safe_load(
        (Path(__file__).parents[1] / "knowledge" / "followups.yaml").read_text()
    )


def next_step_for(state: State) -> str:
    """What the facts say to do (the real port, pid, arch, ETA), else the next step that the
    strongest evidence's signature recommends, with its placeholders filled in."""
    from agent.facts import derive
    from agent.next_steps import fill, from_facts

    sigs = {s.id: s for s in load_signatures()}
    board = state.get("hypotheses", {})
    top = ranked(board)[0] if board else None
    parts: list[str] = []
    obs = state.get("observations", [])
    facts = derive(obs) if top else None
    if top and facts is not None:
        specific = from_facts(top["label"], facts, obs, top["evidence"])
        if specific:
            return specific
    if top:
        for ev in top["evidence"]:
            note = ev.get("note", "")
            if note.startswith("signature "):
                sig = sigs.get(note.split(" ", 1)[1])
                if sig and sig.next_step:
                    assert facts is not None
                    parts.append(fill(sig.next_step.strip(), facts, obs, top["evidence"]))
                    break
        if not parts:
            parts.append(_fact_next_step(top["label"], top["evidence"]))
    return " ".join(p for p in parts if p)


def _fact_next_step(label: str, evidence: list[dict[str, str]]) -> str:
    note = evidence[0].get("note", "") if evidence else ""
    return {
        "stale_gpu_process": f"Stop the process that holds the GPU ({note}); check nvidia-smi shows the memory free; relaunch.",
        "still_starting": "Nothing failed: wait, and give the readiness probe a budget that fits the load time.",
        "killed_externally": "Find who stopped it: supervisor/k8s events, timeouts, shell history; relaunch with a longer startup budget.",
        "host_oom_killed": "Host RAM ran out: lower loader parallelism or CPU offload, add swap/RAM, and relaunch.",
        "disk_full": "Free space on the full filesystem (or move caches to a bigger one) and relaunch.",
        "shm_too_small": "Give the container a larger /dev/shm (--shm-size=16g or --ipc=host) and relaunch.",
    }.get(label, "Fix the cause the evidence names, then relaunch the known-good configuration.")


class RulebookBrain:
    name = "rulebook"

    def tokens_used(self) -> int:
        return 0

    def decide(self, state: State, ctx: BrainContext) -> Action:
        board = state.get("hypotheses", {})
        order = [h for h in ranked(board) if h["status"] != "refuted"]
        rejected = set(_rejected_labels(state))
        order = [h for h in order if h["label"] not in rejected]
        top = order[0] if order else None
        second = order[1]["score"] if len(order) > 1 else 0.0
        margin = (top["score"] - max(second, 0.0)) if top else 0.0
        decisive = bool(top) and top["score"] >= DECISIVE_SCORE and margin >= DECISIVE_MARGIN
        # a `last` check (the patient watch) is a long wait: never in the ranking, only the read
        # taken before giving up
        ranked_options = [o for o in ctx.options if not o.last]
        best = next((o for o in ranked_options if o.value >= MIN_CHECK_VALUE), None)
        if decisive and top is not None:
            # the leader is clear; still rule out the rivals nobody has checked yet
            rivals = {
                h["label"] for h in order if h["status"] == "open" and h["label"] != top["label"]
            }
            best = next((o for o in ranked_options if set(o.separates) & rivals), None)
            decisive = best is None
        if best is not None and not decisive:
            return _check(best)
        if top and top["score"] >= CONCLUDE_SCORE and margin >= CONCLUDE_MARGIN:
            return self._conclude(state, top, min(0.99, 0.5 + 0.08 * top["score"] + 0.05 * margin))
        if top and top["score"] >= _R.lean_score and margin >= _R.lean_margin:
            return self._conclude(state, top, 0.5)
        ready_hit = (
            _ready_line(state) if ctx.facts.server_alive and "healthy" not in rejected else None
        )
        ready = ready_hit[1] if ready_hit else None
        patient = next((o for o in ctx.options if o.last), None)
        if patient is not None and not ready:
            # nothing proven and no short read left: wait for a sign of work (or the death)
            # before saying "not sure"
            return _check(patient)
        if ready:
            risk = order[0] if order and order[0]["score"] > 0 and order[0]["evidence"] else None
            if risk is not None and risk["evidence"][0].get("kind") != "cause":
                risk = None  # only a setting a rule names as a cause is a risk worth saying
            if risk is not None:  # up now, with a cause already in place for what comes next
                note = risk["evidence"][0].get("note", "")
                return Action(
                    kind="insufficient",
                    why=f"nothing failed yet: the server is alive and reported ready ({ready!r}); "
                    f"the leading risk is {risk['label']}: {note}",
                    next_step=(
                        f"Not failed yet; the leading risk is {risk['label']} ({note}). Check it "
                        "before the next request or restart; investigate again if the server "
                        "fails, with the log from the first failing request on."
                    ),
                )
            return _healthy(state, ctx)
        generic = (
            "Read the full server log from the launch on (pivot tools log_search), and check the "
            "launch command and environment; then investigate again."
        )
        lead = order[0] if order and order[0]["score"] > 0 and order[0]["evidence"] else None
        refused = ""
        if lead is None:
            # the leader may be one whose conclusion the proof rules refused: it still leads,
            # and what it lacks is exactly what would settle it
            board_order = [h for h in ranked(board) if h["status"] != "refuted"]
            top_any = board_order[0] if board_order else None
            if top_any and top_any["score"] > 0 and top_any["evidence"]:
                lead = top_any
                refused = next(
                    (
                        r.split("] ", 1)[-1]
                        for r in reversed(state.get("rejections", []))
                        if r.startswith(f"[{lead['label']}]")
                    ),
                    "",
                )
        if lead is None:
            clue = _best_clue(state)
            if clue is None:
                return Action(
                    kind="insufficient",
                    why="no hypothesis leads with verbatim evidence",
                    next_step=generic,
                )
            oid, line, why_not = clue
            said = f" ({why_not})" if why_not else ""
            return Action(
                kind="insufficient",
                why=f"no hypothesis leads with proof; the best clue is {oid}: {line[:160]!r}{said}",
                next_step=(
                    f"Not proven: {oid} shows {line[:160]!r}{said}, and what it "
                    f"follows from is not read. {generic}"
                ),
            )
        note = lead["evidence"][0].get("note", "")
        check = f" What would settle it: {lead['check']}" if lead.get("check") else ""
        if refused:
            check = f" Not concluded: it {refused}.{check}"
        return Action(
            kind="insufficient",
            why=f"{lead['label']} leads but is not proven: {note}",
            next_step=(
                f"Not proven yet; the leading explanation is {lead['label']} ({note}).{check} "
                "Investigate again once it can be read (or sooner if it changes)."
            ),
        )

    def _conclude(self, state: State, top, confidence: float) -> Action:  # type: ignore[no-untyped-def]
        board = state.get("hypotheses", {})
        evidence = _diverse(_quotable(state, top["evidence"]))
        ruled_out = [h["label"] for h in board.values() if h["status"] == "refuted"]
        return Action(
            kind="conclude",
            label=top["label"],
            confidence=round(confidence, 2),
            evidence=evidence,
            ruled_out=ruled_out,
            next_step=next_step_for(state),
            summary=f"{top['label']}: {top['evidence'][0].get('note', '') if top['evidence'] else ''}",
        )

    def explain(self, question: str, answer: Answer, known: Known) -> str:
        """The rulebook's answer is already prose over the board: it stands as written."""
        return answer.text

    def follow_up(self, state: State, text: str, ctx: BrainContext) -> tuple[str, list[Action]]:
        board = state.get("hypotheses", {})
        asked = [lbl for lbl in board if re.search(lbl.replace("_", "[ _-]?"), text, re.I)]
        asked += [
            lbl
            for lbl in alluded(text)
            if lbl in board and lbl not in asked and "why" in text.lower()
        ]
        words = {w.lower() for w in re.findall(r"[A-Za-z]+", text)}
        asked += [
            lbl
            for lbl in board
            if lbl not in asked and any(p in words for p in lbl.split("_") if len(p) > 3)
        ]
        replies = []
        for lbl in asked[:3]:
            h = board[lbl]
            if h["status"] == "refuted":
                why = h["against"][0] if h["against"] else None
                replies.append(
                    f'{lbl} is refuted: {why["note"]}: "{why["line"]}"'
                    if why
                    else f"{lbl} is refuted."
                )
            elif h["evidence"]:
                replies.append(
                    f'{lbl} is {h["status"]} (score {h["score"]:.1f}): "{h["evidence"][0]["line"]}"'
                )
            else:
                replies.append(f"{lbl} is {h['status']}: nothing on this host points at it yet.")
        actions: list[Action] = []
        for pattern, tool in _followups().items():
            if re.search(pattern, text):
                args = _default_args(tool, state)
                if args is not None:
                    actions.append(
                        Action(kind="check", tool=tool, args=args, why=f"asked: {text[:80]}")
                    )
        if actions:
            replies.append("Running: " + ", ".join(a["tool"] for a in actions) + ".")
        if not replies:
            replies.append(
                "I can check dmesg, GPUs, processes, ports, disk, versions, the log or a config; "
                "or ask why a hypothesis was ruled out."
            )
        return " ".join(replies), actions[:3]


def _check(option: CheckOption) -> Action:
    return Action(
        kind="check",
        tool=option.tool,
        args=option.args,
        why=f"{option.says} (separates {', '.join(option.separates[:4])})",
        label=option.id,
    )


def _default_args(tool: str, state: State) -> dict | None:
    from agent.checks import primary_log

    if tool in ("log_tail", "config_read"):
        obs = state.get("observations", [])
        if tool == "log_tail":
            path, _ = primary_log(obs)
            return {"path": path} if path else None
        paths = [o["args"].get("path") for o in obs if o["tool"] == "config_read"]
        return {"path": paths[0]} if paths else None
    return {}


def _healthy(state: State, ctx: BrainContext) -> Action:
    """Up and fine, said as a finding: the launch's own ready line and its live process. The
    proof rule (guardrails `_healthy`) checks both, and that no error came after."""
    f = ctx.facts
    hits = _ready_lines(state)
    assert hits
    # the first ready line says it came up, the last that it still says so; a request the
    # engine served says most
    evidence = [
        {"observation": o, "line": ln}
        for o, ln in dict.fromkeys([_came_up(state, hits), hits[-1], *_served(state, hits[0])])
    ]
    pid = (f.server_main_pids or f.server_pids or [None])[0]
    if pid is not None and f.ps_obs and f.procs.get(pid):
        evidence.append({"observation": f.ps_obs, "line": f.procs[pid]})
    port = next((p for p, holder in f.listener_pids.items() if holder in f.server_pids), None)
    if port is not None and f.ports_obs:
        evidence.append({"observation": f.ports_obs, "line": f.listeners[port]})
    board = state.get("hypotheses", {})
    where = f" and listens on :{port}" if port is not None else ""
    return Action(
        kind="conclude",
        label="healthy",
        confidence=0.8,
        evidence=evidence,
        ruled_out=[h["label"] for h in board.values() if h["status"] == "refuted"],
        summary=f"healthy: the launch is alive, reported ready{where}, and logged no error since",
        next_step=(
            "Nothing failed at launch. If requests fail or hang, probe the endpoint (/health, a "
            "small generate) and investigate again with the log from the first failing request."
        ),
    )


#: ready lines this close after the first belong to one start-up announcement
_READY_GROUP = 5


def _came_up(state: State, hits: list[tuple[str, str]]) -> tuple[str, str]:
    """Of the first start-up announcement (ready lines close after the first), the last that
    names the address it serves on: uvicorn's "Started server process", "Application startup
    complete", then "Uvicorn running on http://0.0.0.0:8000"; vLLM's "Starting vLLM API server
    0 on http://...". Without an address in it, the first ready line."""
    from agent.evidence import text_lines

    first_obs, first = hits[0]
    obs = next((o for o in state.get("observations", []) if o["id"] == first_obs), None)
    if obs is None or first not in (lines := text_lines(obs)):
        return hits[0]
    at = lines.index(first)
    ready = {ln for o, ln in hits if o == first_obs}
    near = [ln for ln in lines[at : at + _READY_GROUP + 1] if ln in ready and _ADDRESS.search(ln)]
    return (first_obs, near[-1]) if near else hits[0]


#: an address a server says it serves on
_ADDRESS = re.compile(r"https?://[\w.\[\]:-]+:\d+")


def _served(state: State, after: tuple[str, str]) -> list[tuple[str, str]]:
    """The last generation request the launch answered with 200, after its ready line, from
    the same log read: the engine did real work since it came up."""
    from agent.evidence import text_lines
    from agent.rules.proof import served_request

    obs = next((o for o in state.get("observations", []) if o["id"] == after[0]), None)
    if obs is None:
        return []
    lines = text_lines(obs)
    start = lines.index(after[1]) if after[1] in lines else 0
    served = [ln for ln in lines[start:] if served_request(ln)]
    return [(after[0], served[-1])] if served else []


def _ready_line(state: State) -> tuple[str, str] | None:
    """(observation id, line) of the last 'server is up' line of the newest log reads."""
    hits = _ready_lines(state)
    return hits[-1] if hits else None


def _ready_lines(state: State) -> list[tuple[str, str]]:
    """(observation id, line) of every 'server is up' line of the newest log reads, in order."""
    from agent.hits import signature_hits
    from agent.rules.liveness import launch_after
    from agent.rules.proof import frontend_only

    hits = [
        (o, m) for o, m in signature_hits(state.get("observations", [])) if m.strength == "ready"
    ]
    # a /health 200 is the front end answering, not the engine saying it is up; a ready line
    # an engine's launch came after is not the engine's
    own = [(o, m) for o, m in hits if not frontend_only(m.line) and not launch_after(o, m.line_no)]
    return [(o["id"], m.line) for o, m in own]


def _diverse(evidence: list[dict[str, str]], most: int = 5) -> list[dict[str, str]]:
    """Strongest first, then round-robin over observations: the log line and the host fact that
    backs it convince more than five lines of one traceback."""
    by_obs: dict[str, list[dict[str, str]]] = {}
    for e in evidence:
        by_obs.setdefault(e["observation"], []).append(e)
    out: list[dict[str, str]] = []
    while len(out) < most and any(by_obs.values()):
        for queue in list(by_obs.values()):
            if queue and len(out) < most:
                e = queue.pop(0)
                if all(e["line"] != x["line"] for x in out):
                    out.append({"observation": e["observation"], "line": e["line"]})
    return out


def _quotable(state: State, evidence: list[dict[str, str]]) -> list[dict[str, str]]:
    """Only findings whose line is a verbatim quote of their observation (the proof gate's
    citation rule); a finding built from a tool's summary is reasoning, not a quote."""
    from agent.rules.proof import quote_problem

    by_id = {o["id"]: o for o in state.get("observations", [])}
    return [
        e
        for e in evidence
        if e["observation"] in by_id
        and quote_problem(e["line"], by_id[e["observation"]]["lines"]) is None
    ] or evidence


def _rejected_labels(state: State) -> list[str]:
    out = []
    for r in state.get("rejections", []):
        m = re.match(r"^\[(\w+)\]", r)
        if m:
            out.append(m.group(1))
    return out


def _best_clue(state: State) -> tuple[str, str, str] | None:
    """(observation, line, why its labels were set aside) of the first fatal-shaped line of the
    launch's log since its last launch, else its newest unexplained error-shaped line: what an
    engineer would quote when nothing is proven (wrong is worse than unsure, silent is worse
    than either)."""
    from agent.evidence import LOG_TOOLS, last_launch, text_lines
    from agent.kills import own_crash
    from agent.rules import proof

    # the kernel saw the launch's own process die of a fault: that is what ended it, before any
    # line a surviving peer printed about it (an EOFError from a rank that lost its peer)
    crash = own_crash(state.get("observations", []))  # type: ignore[arg-type]
    if crash is not None:
        return (
            crash[0],
            crash[1],
            "the kernel saw the launch's process crash; what made it is not read",
        )
    # the engine waits for replies its workers here have given: the member that owes it is
    # elsewhere, and its state and log are the read that settles it
    from agent.rules.hang import awaited_elsewhere

    elsewhere = awaited_elsewhere(state.get("observations", []))  # type: ignore[arg-type]
    if elsewhere is not None:
        return (
            elsewhere[0],
            elsewhere[1],
            "the engine waits for its workers' replies while those on this host idle: a member "
            "not on this host (another node's workers, or a rank that died) owes it; read that "
            "member's state and log",
        )
    # a wait for GPUs this host has: the cluster does not register them (not a wrong layout)
    from agent.facts import derive
    from agent.rules.hang import gpus_here_cover, resource_wait

    obs = state.get("observations", [])
    wait = resource_wait(obs)  # type: ignore[arg-type]
    if wait is not None:
        facts = derive(obs)  # type: ignore[arg-type]
        if gpus_here_cover(facts, wait[1]):
            return (
                wait[0],
                wait[1],
                f"the engine waits for GPUs that this host has ({len(facts.gpus)} listed by "
                "nvidia-smi) but its cluster does not register: read the cluster's resources "
                "(`ray status`) and how its node was started (--num-gpus, CUDA_VISIBLE_DEVICES, "
                "accelerator detection)",
            )
    newest: dict[str, dict] = {}  # type: ignore[type-arg]
    for o in state.get("observations", []):
        if o["ok"] and o["tool"] in LOG_TOOLS and not o["args"].get("pattern"):
            newest[str(o["args"].get("path") or o["args"].get("name") or o["tool"])] = o
    notes = {
        (e.get("observation"), e.get("line")): e.get("note", "")
        for h in state.get("hypotheses", {}).values()
        for e in h.get("against", [])
    }
    for o in newest.values():
        lines = text_lines(o)  # type: ignore[arg-type]
        tail = lines[last_launch(lines) :]
        # read in order, so a traceback's last line under a logger's ERROR prefix is the
        # exception it is (`fatal_lines`)
        fatal = [(tail[i], k) for i, k in proof.fatal_lines(tail) if not proof.is_wrapper(tail[i])]
        # the first exception is what failed: the exits, signals and "failed to start, see the
        # stack trace" after it are what it took down
        line = (
            next((ln for ln, k in fatal if k == "exception"), None)
            or next((ln for ln, k in fatal if k != "error_level"), None)
            or next((ln for ln, _k in fatal), None)
            or proof.unexplained_error(tail)
        )
        if line is not None:
            why = next((n for (oid, ln), n in notes.items() if oid == o["id"] and n), "")
            return o["id"], line, why
    return None
