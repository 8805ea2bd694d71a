"""Node functions of the investigation graph. Wiring lives in graph.py; policy in brains/."""

from __future__ import annotations

import contextlib
import posixpath
import re
import time
from typing import Any

from langgraph.config import get_stream_writer
from langgraph.runtime import Runtime
from langgraph.types import interrupt

from agent import board as board_mod
from agent import detected
from agent.brains.base import BrainContext
from agent.checks import (
    ABS_PATH,
    catalogue,
    deciding_checks,
    known_good_of,
    listed_paths,
    options,
    split_paths,
)
from agent.context import RunContext
from agent.evidence import launch_line, text_lines
from agent.findings import compute
from agent.hits import earlier_runs_set_aside
from agent.launch import (
    NOT_THE_ENGINES_LOG,
    companion_logs,
    log_engines,
    log_port,
    not_this_log,
    said_ended,
    said_engine,
    said_port,
    script_log_targets,
    shared_dirs,
    sourced_files,
    without_bystanders,
    wrong_log_said,
)
from agent.launch import build as build_launch
from agent.observe import first_wave, inside_wave, run_many, since_earlier
from agent.rules.guardrails import INFERRED_CONFIDENCE as INFERRED_AT
from agent.rules.guardrails import check_conclusion, qualify
from agent.state import Action, Observation, State
from agent.thresholds import THRESHOLDS
from tools import registry as tool_registry
from tools import service_logs
from tools.container_host import container_of
from tools.host import Host
from tools.logfile import rotation_of
from tools.registry import TOOLS

MAX_LOGS, MAX_CONFIGS = 3, 4
#: logs read (at once, each a bounded tail) to find the one whose launch serves the port the
#: operator named: on a busy box the newest few are other jobs' growing outputs
PORT_SEARCH_LOGS = 12
MAX_REJECTIONS = 3
#: a conclusion at least this sure explains away suspects that nothing on the host supports
EXPLAINS_AWAY_AT = THRESHOLDS.nodes.explains_away_at


def _emit(kind: str, data: dict[str, Any]) -> None:
    with contextlib.suppress(RuntimeError):  # outside a graph run (a node's unit test)
        get_stream_writer()({"type": kind, "data": data})


def _obs_event(o: Observation) -> dict[str, Any]:
    return {
        "id": o["id"],
        "tool": o["tool"],
        "args": o["args"],
        "ok": o["ok"],
        "lines": o["lines"],
        "round": o["round"],
    }


# -- sweep ----------------------------------------------------------------------------------------
def sweep(state: State, runtime: Runtime[RunContext]) -> dict[str, Any]:
    """Round 0: everything cheap at once, then the logs and configs the first wave surfaced."""
    ctx = runtime.context
    host = ctx.host
    _emit(
        "message",
        {
            "role": "agent",
            "text": f"Sweeping {host.name}: GPUs, processes, kernel log, disk, ports, logs and configs.",
        },
    )
    # each tool says on its spec whether (and where, with which arguments) it joins wave 1
    wave1 = first_wave(list(ctx.extra_logs), container_of(host) is not None)
    early = ctx.prefetched.take(host, wave1) if ctx.prefetched is not None else None
    obs1 = early if early is not None else run_many(host, wave1, 1, 0)
    for o in obs1:
        _emit("observation", _obs_event(o))
    inside = detected.run_host(host, obs1)
    if inside is not host:
        obs1 = _read_inside(inside, obs1, list(ctx.extra_logs))
        host = inside
    paths = listed_paths(obs1)
    symptom_paths = ABS_PATH.findall(state.get("symptom", ""))
    logs, configs = split_paths(list(dict.fromkeys([*ctx.extra_logs, *symptom_paths, *paths])))
    configs = list(dict.fromkeys([*ctx.extra_configs, *configs]))
    # the operator named the log/config: that is the launch in question, not whatever else
    # happens to be on the box (other servers' logs, old runs)
    if ctx.extra_logs:
        # a --log that is an earlier rotation (server.log.1) leaves the newest launch in the
        # live file beside it (server.log): read that one too, or the last start is never seen
        newer = [b for g in ctx.extra_logs for b in paths if b != g and rotation_of(b, g)]
        # the runtime under the launch writes its own log (Ray's raylet.out): it is the launch's
        commands = [
            str(p.get("command") or "")
            for o in obs1
            if o["tool"] == "processes" and o["ok"]
            for p in o["data"].get("processes") or []
        ]
        logs = list(
            dict.fromkeys(
                [
                    *ctx.extra_logs,
                    *newer,
                    *(p for p in symptom_paths if p in logs),
                    *companion_logs(commands, logs),
                ]
            )
        )
    if ctx.extra_configs:
        named = set(ctx.extra_configs)
        configs = [p for p in configs if p in named or any(p.startswith(n) for n in named)]
    elif ctx.extra_logs:
        # the operator named the log: configs are the ones beside it (its directory or the one
        # above), never whatever else a tree walk finds (another checkout's YAML under /tmp)
        near = {posixpath.dirname(posixpath.dirname(p.rstrip("/"))) + "/" for p in ctx.extra_logs}
        near |= {posixpath.dirname(p) + "/" for p in ctx.extra_logs}
        configs = [
            p
            for p in configs
            if p in symptom_paths
            or any(p.startswith(d) for d in near if d != "/" and d not in shared_dirs())
        ]
    everything = [*paths, *ctx.extra_configs, *ctx.extra_logs]
    configs.sort(
        key=lambda p: (
            p not in ctx.extra_configs,
            known_good_of(p, everything) is None,
            "sitecustomize" not in p,
        )
    )
    wave2 = [("log_tail", {"path": p}) for p in logs[:MAX_LOGS]]
    if logs and not ctx.extra_logs and "processes" in TOOLS:
        # now that the logs are known, tie each to the process writing it (/proc/PID/fd)
        wave2.append(("processes", {"logs": logs[:MAX_LOGS]}))
    listed = _listed_pods(obs1) if "service_logs" in TOOLS else []
    # the pod the operator names (by its name or its Deployment's) is the server's, whatever it
    # is called ("llama31-8b-6d9f7c8b54-x2kq9" names no engine); else a pod named like a server.
    # With a log of their own given (a deploy pipeline's), only a pod they name is read beside it
    servers = [p for p in listed if service_logs.SERVER_NAME.search(p)]
    named = _pod_named(state.get("symptom", ""), servers) or _pod_named(
        state.get("symptom", ""), listed
    )
    pods = [named] if named else ([] if ctx.extra_logs else servers)
    if pods:
        # a cluster this host reaches runs an inference server's pod: its log is `kubectl logs`,
        # whatever files lie about (an operator's saved copy of an earlier pod's log is not it)
        wave2.append(("service_logs", {"kind": "kubectl", **({"name": named} if named else {})}))
    elif not logs and "service_logs" in TOOLS:
        # no log file: the server may log to docker/k8s/journald (the unit named, when it is)
        unit = service_logs.unit_named(state.get("symptom", ""), list(ctx.extra_configs))
        wave2.append(("service_logs", {"kind": "journalctl", "name": unit} if unit else {}))
    done: list[str] = []
    oom = next((c for c in catalogue() if c["id"] == "oom_search"), None)
    if logs and oom and "log_search" in TOOLS:
        # one grep of the whole primary log for a CUDA OOM: it confirms or rules out three labels
        args = {"path": logs[0], "pattern": oom["pattern"]}
        wave2.append(("log_search", args))
        done.append(f"oom_search:{sorted(args.items())}")
    wave2 += [("config_read", {"path": p}) for p in configs[:MAX_CONFIGS] if "config_read" in TOOLS]
    obs2 = run_many(host, wave2, len(obs1) + 1, 0) if wave2 else []
    prev = _previous_instances(obs2)
    if prev:
        # a pod whose container restarted: the instance that ended is the one asked about, and
        # its own last lines say whether it died of an error or was at work when stopped
        obs2 += run_many(host, prev, len(obs1) + len(obs2) + 1, 0)
    for o in obs2:
        _emit("observation", _obs_event(o))
    all_obs = obs1 + obs2
    # the operator's --log may be another launch's: the symptom names the launch's port, the log
    # serves another; then the log the launch in question wrote is found and read instead
    all_obs += _right_log(host, state.get("symptom", ""), all_obs, obs1, list(ctx.extra_logs))
    if not ctx.extra_logs:
        all_obs += _engine_log(host, state.get("symptom", ""), all_obs, obs1)
        all_obs += _container_pointed_logs(host, all_obs)
        all_obs += _quoted_error_journal(host, state.get("symptom", ""), all_obs)
    else:
        all_obs += _pointed_logs(host, all_obs, list(ctx.extra_logs))
    all_obs = _drop_wrong_logs(all_obs)
    # the log the launch's own script writes (`| tee logs/x.log`), when no --log was given and
    # the sweep's search did not reach it (a project tree deeper than it looks)
    if not ctx.extra_logs:
        all_obs += _script_logs(host, all_obs)
    # the files the launch's scripts source (an env file, a unit's EnvironmentFile=): a setting
    # there is the launch's own, so read them now rather than never
    wave3 = [("config_read", {"path": p}) for p in _sourced(all_obs)][:MAX_CONFIGS]
    if wave3 and "config_read" in TOOLS:
        obs3 = run_many(host, wave3, len(all_obs) + 1, 0)
        for o in obs3:
            _emit("observation", _obs_event(o))
        all_obs += obs3
    return {
        "observations": all_obs,
        "tool_calls": len(all_obs),
        "rounds": 0,
        "done_checks": done,
    }


def _listed_pods(obs1: list[Observation]) -> list[str]:
    """The pods the sweep's cluster view lists (host_facts' kubectl sections, read only where
    kubectl reaches a cluster)."""
    out: list[str] = []
    for o in obs1:
        if o["tool"] != "host_facts" or not o["ok"]:
            continue
        for sec in o["data"].get("sections") or []:
            if sec.get("name") not in ("kubectl", "pods") or not sec.get("ok"):
                continue
            for ln in sec.get("lines") or []:
                name = service_logs.pod_named_in(ln)
                if name:
                    out.append(name)
    return list(dict.fromkeys(out))


def _previous_instances(obs: list[Observation]) -> list[tuple[str, dict[str, Any]]]:
    """`--previous` reads of the pods whose log was read and whose record says the container
    restarted (the record's "Restart Count:")."""
    out: list[tuple[str, dict[str, Any]]] = []
    for o in obs:
        if o["tool"] != "service_logs" or not o["ok"] or o["args"].get("previous"):
            continue
        name = o["data"].get("name")
        restarted = service_logs.pod_restarted(o["data"].get("describe") or [])
        if name and restarted and o["data"].get("kind") in ("kubectl", "oc"):
            out.append(
                ("service_logs", {"kind": o["data"]["kind"], "name": name, "previous": True})
            )
    return out


def _pod_named(symptom: str, pods: list[str]) -> str | None:
    """The newest listed pod the operator named: by its name, or by its Deployment's or
    StatefulSet's (`deploy/vllm-llama70b` names `vllm-llama70b-6d9c8f7b5d-x2k4q`)."""
    words = set(re.findall(r"[a-z0-9][a-z0-9.-]{3,}", symptom.lower()))
    for pod in reversed(pods):  # events list oldest first
        stems = {pod, pod.rsplit("-", 1)[0], pod.rsplit("-", 2)[0]}
        if words & stems:
            return pod
    return None


def _read_inside(inside: Host, obs1: list[Observation], extra_logs: list[str]) -> list[Observation]:
    """The server was found in a container (agent/detected): read it again inside, as
    `--container` would have from the start; the host-side reads of the same tools are kept in
    place as superseded, so nothing is concluded from the host's view of a container's server."""
    box = container_of(inside)
    assert box is not None
    _emit(
        "message",
        {
            "role": "agent",
            "text": f"{detected.where(inside, obs1)} Reading the server inside {box.container}: "
            "processes, /dev/shm, ports, files, the container's record and log.",
        },
    )
    again = inside_wave(extra_logs)
    obs_in = run_many(inside, again, len(obs1) + 1, 0)
    for o in obs_in:
        _emit("observation", _obs_event(o))
    by_tool = {o["tool"]: o["id"] for o in obs_in}
    kept = [
        detected.supersede(o, box.container, by_tool[o["tool"]]) if o["tool"] in by_tool else o
        for o in obs1
    ]
    return kept + obs_in


# -- analyze --------------------------------------------------------------------------------------
def analyze(state: State, runtime: Runtime[RunContext]) -> dict[str, Any]:
    findings, _facts = compute(state.get("observations", []))
    old = state.get("hypotheses", {}) or {}
    new = board_mod.build(state.get("symptom", ""), findings, old, deciding_checks())
    if len(findings) != len(state.get("findings", []) or []):
        for f in findings[len(state.get("findings", []) or []) :]:
            _emit("finding", dict(f))
    for label, h in new.items():
        prev = old.get(label)
        if prev is None or prev["status"] != h["status"] or abs(prev["score"] - h["score"]) > 1e-6:
            _emit(
                "hypothesis",
                {k: h[k] for k in ("label", "statement", "status", "score", "evidence", "against")},
            )
    return {"findings": findings, "hypotheses": new}


def _budget_left(state: State, ctx: RunContext) -> dict[str, float]:
    b = ctx.settings.budget
    return {
        "rounds": b.max_rounds - state.get("rounds", 0),
        "tool_calls": b.max_tool_calls - state.get("tool_calls", 0),
        "seconds": b.max_seconds - (time.monotonic() - ctx.started),
        "tokens": b.max_tokens - ctx.brain.tokens_used(),
    }


def _changes_possible(state: State) -> list[Action]:
    """Reversible fixes the evidence makes obvious: a config that differs from its known-good copy."""
    if "config_apply" not in TOOLS:
        return []
    obs = state.get("observations", [])
    paths = listed_paths(obs)
    done = {(c["tool"], c["args"].get("path")) for c in state.get("changes", [])}
    out: list[Action] = []
    reads = {o["args"].get("path"): o for o in obs if o["tool"] == "config_read" and o["ok"]}
    for path, o in reads.items():
        good = known_good_of(str(path), paths)
        if not good or ("config_apply", path) in done:
            continue
        good_obs = reads.get(good)
        if good_obs is None:
            continue
        good_text = _whole_text(good_obs["data"])
        if good_text is not None and good_text == _whole_text(o["data"]):
            continue
        if good_obs["data"].get("sha256") and good_obs["data"].get("sha256") == o["data"].get(
            "sha256"
        ):
            continue
        out.append(
            Action(
                kind="change",
                tool="config_apply",
                # the known-good file's exact bytes (CRs, final newline), verified by sha256
                args={"path": path, "copy_from": good, "reason": f"restore {good}"},
                why=f"{path} differs from its known-good copy {good}; restoring it undoes the one change (reversible: the current file is snapshotted first)",
            )
        )
    return out


def _whole_text(data: dict[str, Any]) -> str | None:
    """The file's exact text from a config_read result, or None when it was cut (then we cannot
    restore it byte for byte and must not offer to)."""
    text = data.get("text")
    if not isinstance(text, list) or data.get("truncated"):
        return None
    body = "\n".join(text)
    size = int(data.get("size") or 0)
    for candidate in (body, body + "\n"):
        if len(candidate.encode("utf-8")) == size:
            return candidate
    return None


def decide(state: State, runtime: Runtime[RunContext]) -> dict[str, Any]:
    ctx = runtime.context
    left = _budget_left(state, ctx)
    if min(left.values()) <= 0:
        spent = min(left, key=lambda k: left[k])
        return {"action": Action(kind="budget", why=f"budget exhausted: {spent}")}
    findings, facts = compute(state.get("observations", []))
    opts = options(
        state.get("observations", []), state.get("hypotheses", {}), state.get("done_checks", [])
    )
    bctx = BrainContext(
        options=opts, facts=facts, changes_possible=_changes_possible(state), budget_left=left
    )
    action = ctx.brain.decide(state, bctx)
    todo = [f"{o.tool} {o.args}: {o.says}" for o in opts if o.key != _key(action)][:5]
    if action.get("kind") in ("check", "change") and action.get("tool") not in TOOLS:
        return {
            "action": None,
            "rejections": [f"[tool] no tool named {action.get('tool')!r}; use the typed tools"],
        }
    if action.get("kind") == "check" and TOOLS[action["tool"]].changing:
        action = Action(**{**action, "kind": "change"})
    _emit("message", {"role": "agent", "text": _say(action)})
    if action.get("kind") == "change":
        _emit(
            "approval_request",
            {
                "tool": action.get("tool"),
                "args": action.get("args", {}),
                "reason": action.get("why", ""),
            },
        )
    return {"action": action, "todo": todo}


def _key(a: Action) -> str:
    return f"{a.get('label') or a.get('tool')}:{sorted(a.get('args', {}).items())}"


def _say(a: Action) -> str:
    kind = a.get("kind")
    if kind == "check":
        return f"Next check: {a.get('tool')} {a.get('args')} because {a.get('why', '')}"
    if kind == "change":
        return f"Proposing a change (needs approval): {a.get('tool')} on {a.get('args', {}).get('path', '')}: {a.get('why', '')}"
    if kind == "conclude":
        return f"Concluding {a.get('label')} (confidence {a.get('confidence')})."
    return f"Stopping: {a.get('why', kind)}"


# -- approval and acting ------------------------------------------------------------------------
def approval(state: State, runtime: Runtime[RunContext]) -> dict[str, Any]:
    """Its own node: on resume interrupt() re-runs the node from the top, so nothing else is here."""
    a = state["action"] or Action()
    request = {"tool": a.get("tool"), "args": a.get("args", {}), "reason": a.get("why", "")}
    decision = interrupt(request)  # the approval_request event was sent by decide (runs once)
    approved = bool(isinstance(decision, dict) and decision.get("approve"))
    reason = str(decision.get("reason", "")) if isinstance(decision, dict) else ""
    _emit("approval", {**request, "approved": approved, "reason": reason})
    change = {
        "tool": a.get("tool"),
        "args": {k: v for k, v in a.get("args", {}).items() if k != "content"},
        "approved": approved,
        "reason": reason,
    }
    return {"changes": [change], "action": a if approved else None}


def act(state: State, runtime: Runtime[RunContext]) -> dict[str, Any]:
    ctx = runtime.context
    queued = list(state.get("queue") or [])
    a = state.get("action")
    todo = queued or ([a] if a else [])
    if not todo:
        return {}
    obs = state.get("observations", [])
    rnd = state.get("rounds", 0) + 1
    host = detected.run_host(ctx.host, obs)  # inside the container the sweep found, if any
    new = run_many(host, [(x["tool"], x.get("args", {})) for x in todo], len(obs) + 1, rnd)
    new = since_earlier(new, obs)
    for o in new:
        _emit("observation", _obs_event(o))
    keys = [f"{x.get('label') or x['tool']}:{sorted(x.get('args', {}).items())}" for x in todo]
    return {
        "observations": new,
        "tool_calls": state.get("tool_calls", 0) + len(new),
        "rounds": rnd,
        "done_checks": keys,
        "queue": [],
        "action": None,
    }


def follow_up(state: State, runtime: Runtime[RunContext]) -> dict[str, Any]:
    ctx = runtime.context
    text = (state.get("messages") or [""])[-1]
    findings, facts = compute(state.get("observations", []))
    bctx = BrainContext(options=[], facts=facts, budget_left=_budget_left(state, ctx))
    reply, actions = ctx.brain.follow_up(state, text, bctx)
    _emit("message", {"role": "agent", "text": reply})
    actions = [x for x in actions if x.get("tool") in TOOLS and not TOOLS[x["tool"]].changing]
    return {"queue": actions, "status": "running"}


# -- conclusion -----------------------------------------------------------------------------------
def conclude(state: State, runtime: Runtime[RunContext]) -> dict[str, Any]:
    a = state.get("action") or Action(kind="insufficient")
    obs = state.get("observations", [])
    _, facts = compute(obs)
    kind = a.get("kind")
    if kind == "conclude":
        # a verbatim line cited under the wrong observation id (the numbering shifted, or the
        # model misread it) is pointed at where it occurs; the line itself is still checked
        a = Action(**{**a, "evidence": _fix_obs_ids(a.get("evidence") or [], obs)})
        problems = check_conclusion(a, obs, facts)
        if problems:
            for p in problems:
                _emit("error", {"guardrail": p})
            if len(state.get("rejections", [])) + len(problems) <= MAX_REJECTIONS:
                return {"rejections": problems, "action": None, "status": "rejected"}
            a = Action(
                kind="insufficient",
                why="guardrails refused every conclusion: " + "; ".join(problems),
            )
            kind = "insufficient"
        else:
            proposed = a.get("confidence")
            a = qualify(a, obs, facts)
            if a.get("confidence") != proposed:
                # the trace said "Concluding X (confidence c)"; the report must not disagree
                _emit(
                    "message",
                    {
                        "role": "agent",
                        "text": f"Confidence of {a.get('label')} lowered to "
                        f"{a.get('confidence')}: {a.get('summary', '')}",
                    },
                )
    board = state.get("hypotheses", {})
    status = {"conclude": "concluded", "budget": "budget_exhausted"}.get(
        kind or "", "insufficient_evidence"
    )
    if status == "concluded":
        label = a["label"]
        if label in board:
            board = {**board, label: {**board[label], "status": "confirmed"}}
            _emit(
                "hypothesis",
                {
                    k: board[label][k]
                    for k in ("label", "statement", "status", "score", "evidence", "against")
                },
            )
    ctx = runtime.context
    launch = build_launch(
        obs,
        facts,
        list(ctx.extra_logs),
        list(ctx.extra_configs),
        _container_name(ctx.host),
    )
    evidence = _fix_obs_ids(a.get("evidence") or [], obs) if status == "concluded" else []
    evidence = without_bystanders(evidence, launch)
    if status == "concluded" and a.get("label") == "healthy":
        status = "healthy"  # up and answering: a status a script can tell from "could not tell"
    if (
        status in ("concluded", "healthy")
        and evidence
        and float(a.get("confidence") or 0) >= EXPLAINS_AWAY_AT
    ):
        # a proven cause explains the failure, and a proven healthy launch (alive, its own
        # ready line, no error since) explains the worry: suspects nothing pointed at are out
        board = _explained_away(board, a["label"], evidence[0])
    if status in ("concluded", "healthy"):
        board = refute_rivals(board, a, obs)
    changes = state.get("changes", [])
    next_step = a.get("next_step") or ""
    next_step += _changes_said(changes, obs)
    next_step = (
        wrong_log_said(obs) + _rotation_said(obs) + _older_rotation_said(ctx, obs) + next_step
    )
    if status != "concluded" or float(a.get("confidence") or 0) <= INFERRED_AT:
        next_step = _stacks_fix(obs) + next_step
    report = {
        "status": status,
        "root_cause": a.get("label") if status in ("concluded", "healthy") else None,
        "confidence": a.get("confidence", 0.0) if status in ("concluded", "healthy") else 0.0,
        "summary": a.get("summary") or a.get("why", ""),
        "evidence": evidence,
        "ruled_out": [h["label"] for h in board.values() if h["status"] == "refuted"],
        "hypotheses": [
            {
                "label": h["label"],
                "statement": h["statement"],
                "status": h["status"],
                "score": round(h["score"], 2),
                "evidence": [
                    {"observation": e["observation"], "line": e["line"]} for e in h["evidence"][:5]
                ],
                "against": [
                    {"observation": e["observation"], "line": e["line"]} for e in h["against"][:3]
                ],
                "check": h.get("check", ""),
            }
            for h in board.values()
        ],
        "tool_calls": state.get("tool_calls", 0),
        "rounds": state.get("rounds", 0),
        "next_step": next_step.strip(),
        "unknowns": unknowns(obs),
        "launch": launch.model_dump(mode="json"),
        "where": detected.where(detected.run_host(runtime.context.host, obs), obs),
    }
    _emit("conclusion", report)
    # The diagnosis stands on its own; a reversible fix it makes obvious (restore the known-good
    # config) is offered afterwards, behind approval, so a paused run still carries its answer.
    fix = _changes_possible(state) if status == "concluded" else []
    if fix:
        _emit(
            "approval_request",
            {
                "tool": fix[0].get("tool"),
                "args": fix[0].get("args", {}),
                "reason": fix[0].get("why", ""),
            },
        )
    return {
        "report": report,
        "status": status,
        "hypotheses": board,
        "action": fix[0] if fix else None,
    }


#: Reads whose failure leaves a hypothesis unknown (not refuted): say so, with the fix.
_UNKNOWN_MATTERS = tool_registry.verdict_needs()


def _read_other_logs(
    host: Host, obs: list[Observation], obs1: list[Observation], read: dict[str, Observation]
) -> list[Observation]:
    """The newest logs the sweep found and did not read, read at once (each a bounded tail): on
    a busy box the newest few are other jobs' growing outputs, so up to PORT_SEARCH_LOGS."""
    candidates = [p for p in split_paths(listed_paths(obs1))[0] if p not in read]
    candidates = candidates[:PORT_SEARCH_LOGS]
    if not candidates:
        return []
    return run_many(host, [("log_tail", {"path": p}) for p in candidates], len(obs) + 1, 0)


def _adopt_log(host: Host, match: Observation, obs: list[Observation]) -> list[Observation]:
    """Keep one candidate's read as the launch's log, with the process listing tied to it. The
    read kept takes the next id: the other candidates' reads are dropped and their ids reused."""
    out: list[Observation] = [{**match, "id": f"o{len(obs) + 1}"}]
    if "processes" in TOOLS:
        logs = [str(match["args"]["path"])]
        out += run_many(host, [("processes", {"logs": logs})], len(obs) + len(out) + 1, 0)
    for o in out:
        _emit("observation", _obs_event(o))
    return out


def _right_log(
    host: Host, symptom: str, obs: list[Observation], obs1: list[Observation], given: list[str]
) -> list[Observation]:
    """When every log the operator named serves another port than the one they name, read the
    other logs the sweep found and keep the one whose launch serves that port (with its writers)."""
    port = said_port(symptom)
    read = {str(o["args"].get("path")): o for o in obs if o["tool"] == "log_tail" and o["ok"]}
    if port is None or not given or not read:
        return []
    theirs = {p: log_port(text_lines(o)) for p, o in read.items() if p in given}
    if not theirs or any(v is None or v == port for v in theirs.values()):
        return []
    if any(_shows_the_failure(symptom, text_lines(read[p])) for p in theirs):
        # "my server on 8000 is fine, but the new launch dies with '...'": the port is the
        # neighbour's, the log the operator named printed the failure they quote
        return []
    cand_obs = _read_other_logs(host, obs, obs1, read)
    match = next((o for o in cand_obs if o["ok"] and log_port(text_lines(o)) == port), None)
    if match is None:
        return []  # not found: the operator's log stands, and nothing was made up
    out = _adopt_log(host, match, obs)
    actual = str(out[0]["args"]["path"])
    marks = [
        not_this_log(o, port, theirs.get(str(o["args"].get("path")), 0) or 0, actual)
        for o in obs
        if o["tool"] in ("log_tail", "log_search") and str(o["args"].get("path")) in theirs
    ]
    return [*marks, *out]


def _engine_log(
    host: Host, symptom: str, obs: list[Observation], obs1: list[Observation]
) -> list[Observation]:
    """No --log, and the operator names the engine ("sglang died"): on a busy box the newest
    logs are other jobs' growing outputs (a neighbour's vLLM, a test run). When none of the logs
    read prints a launch of that engine (or, when the operator says it died, none that ended in
    an error), the newest logs found are read for one that does; the reads of logs of another
    engine's launch, of none, or of another launch of it that ended in no error are then set
    aside (with the process listing tied to them), and the writers of the launch's own log are
    read instead."""
    engine = said_engine(symptom)
    read = {str(o["args"].get("path")): o for o in obs if o["tool"] == "log_tail" and o["ok"]}
    if engine is None or not read:
        return []
    ended = said_ended(symptom)
    if any(
        engine in log_engines(text_lines(o)) and (not ended or _ends_fatal(text_lines(o)))
        for o in read.values()
    ):
        return []  # a log of that engine read (one that ended in an error, when it "died")
    cand_obs = _read_other_logs(host, obs, obs1, read)
    theirs = [o for o in cand_obs if o["ok"] and engine in log_engines(text_lines(o))]
    if not theirs:
        return []  # not found: what was read stands, and nothing was made up
    # "sglang died": of several logs of that engine (another run's loader beside it), the newest
    # whose last launch ended in a fatal line is the one asked about; else the newest
    fatal = [o for o in theirs if ended and _ends_fatal(text_lines(o))]
    if ended and not fatal and any(engine in log_engines(text_lines(o)) for o in read.values()):
        return []  # no other log of it ended in an error: the one read stands
    out = _adopt_log(host, (fatal or theirs)[0], obs)
    actual = str(out[0]["args"]["path"])
    marks: list[Observation] = []
    for o in obs:
        if o["tool"] not in ("log_tail", "log_search") or not o["ok"]:
            continue
        path = str(o["args"].get("path"))
        if path not in read:
            continue
        printed = sorted(log_engines(text_lines(read[path])))
        what = f"a {', '.join(printed)} launch" if printed else "no launch of an inference engine"
        if engine in printed:
            what = f"another {engine} launch, which ended in no error"
        line = NOT_THE_ENGINES_LOG.format(path=path, what=what, engine=engine, actual=actual)
        marks.append({**o, "ok": False, "lines": [line], "data": {}})
    return [*marks, *out]


#: a log file's absolute path named in a line ("launched sglang pid=39021, log=/runs/x.log")
_LOG_PATH = re.compile(r"(?<![\w/.~-])(/[\w.@+-]+(?:/[\w.@+-]+)*\.(?:log|out|err|txt))\b")
#: how many logs a wrapper's log may point to that are read
POINTED_READ = 2
#: a shell's trace of a command it runs (`set -x`): "+ python3 -m sglang.launch_server ..."
_XTRACE = re.compile(r"^\s*\++ ")


def _read_named_logs(host: Host, obs: list[Observation], named: list[str]) -> list[Observation]:
    """The first logs another log names, read; only the reads that worked are kept, numbered
    on from the observations before them."""
    wave = [("log_tail", {"path": p}) for p in named[:POINTED_READ]]
    out = [o for o in run_many(host, wave, len(obs) + 1, 0) if o["ok"]] if wave else []
    for i, o in enumerate(out):
        o["id"] = f"o{len(obs) + 1 + i}"
        _emit("observation", _obs_event(o))
    return out


def _container_pointed_logs(host: Host, obs: list[Observation]) -> list[Observation]:
    """A container whose own log prints no launch but names the file the server logs to
    ("logging to /srv/omni/logs/omni-speech.log"): the server's story is in that file, so it
    is read, as a wrapper's log that names one is."""
    read = {str(o["args"].get("path")) for o in obs if o["tool"] == "log_tail"}
    named: list[str] = []
    for o in obs:
        if o["tool"] != "container_logs" or not o["ok"] or o["args"].get("pattern"):
            continue
        lines = [ln for ln in text_lines(o) if not _XTRACE.match(ln)]
        if log_engines(lines) or any(launch_line(ln) for ln in lines):
            continue
        for ln in reversed(lines):
            named += [p for p in _LOG_PATH.findall(ln) if p not in read and p not in named]
    return _read_named_logs(host, obs, named)


def _pointed_logs(host: Host, obs: list[Observation], given: list[str]) -> list[Observation]:
    """The operator named a wrapper's log (a test harness, a CI job, a launcher script) that
    prints no engine launch of its own (a shell's `+ python3 -m ...` trace is the script's, not
    the server's) but names the log the server writes ("launched sglang pid=N, log=PATH"), or
    whose launch script redirects the servers to their logs: those hold the launch's story, so
    they are read too, the newest named first. A log that prints a launch itself is the
    launch's log, and nothing else is read."""
    read = {str(o["args"].get("path")): o for o in obs if o["tool"] == "log_tail" and o["ok"]}
    named: list[str] = []
    wrappers = 0
    for path in given:
        o = read.get(path)
        if o is None:
            continue
        lines = text_lines(o)
        own = [ln for ln in lines if not _XTRACE.match(ln)]  # a script's trace of its commands
        if log_engines(own) or any(launch_line(ln) for ln in own):
            return []
        wrappers += 1
        for ln in reversed(lines):
            named += [p for p in _LOG_PATH.findall(ln) if p not in read and p not in named]
    if not wrappers:
        return []
    out = _read_named_logs(host, obs, named)
    if not out:
        # it names none: the logs its launch script redirects the servers to (`> x.log`)
        out = _script_logs(host, obs)
    return out


#: a phrase the operator quotes ("dies with "CUDA error: ..."")
_CURLY = re.compile(r"\u201c([^\u201d]{12,})\u201d")


def _quotes(symptom: str) -> list[str]:
    """What the operator quotes ("...", \u201c...\u201d, `...`), paired in order: the text
    between a quote mark and the next one, never between one quote's end and the next's start."""
    out = [q for mark in ('"', "`") for q in symptom.split(mark)[1::2] if len(q) >= 12]
    return [q.strip().rstrip(".") for q in [*out, *_CURLY.findall(symptom)]]


def _shows_the_failure(symptom: str, lines: list[str]) -> bool:
    """The log's newest launch holds an error the operator quotes, word for word: that log is
    the one they are asking about, whatever port their words also name."""
    from agent.evidence import last_launch

    quotes = _quotes(symptom)
    tail = lines[last_launch(lines) :]
    return any(len(q) >= 12 and any(q in ln for ln in tail) for q in quotes)


#: words that make a quoted phrase an error message rather than a name or a command
_ERRORISH = re.compile(
    r"(?i)fail|error|time ?out|timed out|cannot|can't|unable|refused|denied|not found|killed|"
    r"exception|abort|invalid|no such"
)


def _quoted_error_journal(host: Any, symptom: str, obs: list[Observation]) -> list[Observation]:
    """The error the operator quotes, found in none of the reads so far: the log that holds it
    was not found, so the logs read may be another launch's (a test run's, last week's). A
    supervisor that runs the server as its child (a model router, a wrapper service) logs to
    the system journal: search it for the quote, and read the lines of whoever printed it."""
    if "service_logs" not in TOOLS or any(o["tool"] == "service_logs" and o["ok"] for o in obs):
        return []
    quotes = [
        q for q in _quotes(symptom) if _ERRORISH.search(q) and not q.startswith(("/", "~", "--"))
    ]
    texts = [ln for o in obs if o["ok"] for ln in o["lines"]]
    missing = [q for q in quotes if len(q) >= 12 and not any(q in ln for ln in texts)]
    if not missing:
        return []
    call = ("service_logs", {"kind": "journalctl", "grep": missing[0][:200]})
    out = run_many(host, [call], len(obs) + 1, 0)
    for o in out:
        _emit("observation", _obs_event(o))
    if not (out and out[0]["ok"] and out[0]["data"].get("name")):
        return out
    # the supervisor's lines say which port the child it gave up on was to serve: a log the
    # sweep found that serves another is another launch's (a run by hand, last week's test)
    lines = text_lines(out[0])
    first = next((i for i, ln in enumerate(lines) if missing[0][:200] in ln), len(lines))
    port = next(
        (int(m.group(1)) for ln in reversed(lines[:first]) if (m := _CHILD_PORT.search(ln))),
        None,
    )
    if port is None:
        return out
    other = {
        str(o["args"].get("path")): theirs
        for o in obs
        if o["tool"] == "log_tail"
        and o["ok"]
        and (theirs := log_port(text_lines(o))) is not None
        and theirs != port
    }
    journal = f"the journal of {out[0]['data']['name']}"
    marks = [
        not_this_log(o, port, other[str(o["args"].get("path"))], journal)
        for o in obs
        if o["tool"] in ("log_tail", "log_search") and str(o["args"].get("path")) in other
    ]
    return [*marks, *out]


#: a supervisor starting its child server: "Starting vllm-server on port 8001...", "launching
#: llama-server --port 8002"
_CHILD_PORT = re.compile(
    r"(?i)\b(?:start|launch|spawn)\w*\b.{0,60}?(?:\bon port |--port[ =])(\d{2,5})\b"
)


def _ends_fatal(lines: list[str]) -> bool:
    """The newest launch in a log holds a line fatal by its shape."""
    from agent.evidence import last_launch
    from agent.rules.proof import fatal_lines

    return bool(fatal_lines(lines[last_launch(lines) :]))


def _drop_wrong_logs(obs: list[Observation]) -> list[Observation]:
    """Replace reads of a log found to be another launch's by their marks (same ids), and the
    earlier process listing tied to that log by the new one."""
    marks = {
        o["id"]: o
        for o in obs
        if not o["ok"] and o["lines"][:1] and o["lines"][0].startswith("# not this launch's log:")
    }
    if not marks:
        return obs
    out: list[Observation] = []
    seen: set[str] = set()
    procs = [o for o in obs if o["tool"] == "processes" and o["ok"]]
    for o in obs:
        if o["id"] in seen:
            continue
        seen.add(o["id"])
        if o["id"] in marks:
            out.append(marks[o["id"]])
        elif o["tool"] == "processes" and len(procs) > 1 and o is not procs[-1]:
            out.append(
                {
                    **o,
                    "ok": False,
                    "lines": ["# superseded by the listing tied to the launch's own log"],
                    "data": {},
                }
            )
        else:
            out.append(o)
    return out


def _script_logs(host: Host, obs: list[Observation]) -> list[Observation]:
    """Read the logs that the launch scripts read so far say they write, where they exist."""
    read = {str(o["args"].get("path")) for o in obs if o["tool"] == "log_tail"}
    wanted: dict[str, list[str]] = {}
    for o in obs:
        if o["tool"] == "config_read" and o["ok"]:
            text = "\n".join(o["data"].get("text") or [])
            for name, dirs in script_log_targets(text, str(o["args"].get("path") or "")):
                wanted.setdefault(name, [])
                wanted[name] += [d for d in dirs if d not in wanted[name]]
    if not wanted or "find_logs" not in TOOLS or "log_tail" not in TOOLS:
        return []
    roots = list(dict.fromkeys(d for ds in wanted.values() for d in ds))[:12]
    found = run_many(
        host, [("find_logs", {"roots": roots, "max_depth": 1, "kind": "logs"})], len(obs) + 1, 0
    )
    paths = [p for p in listed_paths(found) if posixpath.basename(p) in wanted and p not in read][
        :MAX_LOGS
    ]
    if not paths:
        return found
    tails = run_many(host, [("log_tail", {"path": p}) for p in paths], len(obs) + len(found) + 1, 0)
    for o in [*found, *tails]:
        _emit("observation", _obs_event(o))
    return [*found, *tails]


def _sourced(obs: list[Observation]) -> list[str]:
    """Files the configs read so far source and nobody has read yet."""
    read = {str(o["args"].get("path") or "") for o in obs if o["tool"] == "config_read"}
    out: list[str] = []
    for o in obs:
        if o["tool"] == "config_read" and o["ok"]:
            path = str(o["args"].get("path") or "")
            text = "\n".join(o["data"].get("text") or [])
            out += [p for p in sourced_files(text, posixpath.dirname(path)) if p not in read]
    return list(dict.fromkeys(out))


def _container_name(host: Any) -> str | None:
    box = container_of(host)
    return str(getattr(box, "container", "") or "") or None if box is not None else None


def unknowns(observations: list[Observation]) -> list[str]:
    """What could not be read, once per tool (the newest failure), with how to read it. A replayed
    card's missing keys say "not recorded"; a live host's refusals say why and how."""
    out: dict[str, str] = {}
    ok_tools = {(o["tool"], str(o["args"].get("path", ""))) for o in observations if o["ok"]}
    for o in observations:
        key = (o["tool"], str(o["args"].get("path", "")))
        if o["ok"] or o["tool"] not in _UNKNOWN_MATTERS or key in ok_tools:
            continue
        d = o["data"]
        err = str(d.get("error") or "").strip()
        if not err:
            continue
        fix = str(d.get("fix") or "").strip()
        what = o["tool"] + (f" {key[1]}" if key[1] else "")
        out[what] = f"{what}: {err}" + (f" (to read it: {fix})" if fix else "")
    for o in observations:
        # a read that fell back (py-spy missing or not permitted, /proc read instead) answered
        # only in part: the stacks that would tell a hang from slow work are still unknown
        d = o["data"] if o["ok"] else {}
        if d.get("py_spy_missing") or d.get("denied"):
            why = str(d.get("py_spy_error") or "py-spy could not read the stacks")
            fix = str(d.get("fix") or "").strip()
            out[f"stacks {d.get('pid')}"] = f"py_stacks: Python stacks not read: {why}" + (
                f" (to read them: {fix})" if fix else ""
            )
    return list(out.values())[:6]


def refute_rivals(board: dict[str, Any], action: Action, obs: list[Observation]) -> dict[str, Any]:
    """The brain's reasons against its rivals, each checked like evidence: a verbatim line of a
    named observation that is not itself a sign of that rival. Accepted ones refute on the board
    (and so count as ruled out); the rest change nothing."""
    from agent.rules.common import PHASE_PREFIX
    from agent.rules.proof import column_header, fatal_kind, quote_problem
    from cards.taxonomy import LABELS

    by_id = {o["id"]: o for o in obs}
    hits = None
    out = dict(board)
    for r in action.get("refutations") or []:
        label, oid, line = (
            str(r.get("label", "")),
            str(r.get("observation", "")),
            str(r.get("line", "")),
        )
        o = by_id.get(oid)
        if label not in LABELS or label == action.get("label") or o is None:
            continue
        if quote_problem(line, o["lines"]) is not None or column_header(line):
            continue  # not in the read, or a table's header row, which holds no state
        if hits is None:
            from agent.hits import signature_hits

            hits = signature_hits(obs)
        # a line that is itself a sign of the rival, or an error line at all, cannot refute it:
        # refutations are facts of state (GPU free, no kill in the kernel log), not failures. A
        # phase marker is not such a sign: "Graph capturing finished" says where the launch got
        # to (past the capture whose OOM its label names), which is what refutes that OOM
        if fatal_kind(line) is not None or any(
            m.label == label and not m.signature.startswith(PHASE_PREFIX) and line.strip() in m.line
            for _, m in hits
        ):
            continue
        h = out.get(label) or {
            "label": label,
            "statement": "",
            "status": "open",
            "score": 0.0,
            "evidence": [],
            "against": [],
            "check": "",
        }
        note = str(r.get("why") or "ruled out by the concluding brain")[:200]
        out[label] = {
            **h,
            "status": "refuted",
            "against": [{"observation": oid, "line": line, "note": note}, *h.get("against", [])],
        }
    return out


def _stacks_fix(obs: list[Observation]) -> str:
    """An unsure verdict whose stacks could not be read says how to read them first: the one
    read that would tell a hang from slow work."""
    for o in reversed(obs):
        d = o["data"] if o["tool"] == "py_stacks" else {}
        if d.get("py_spy_missing") or d.get("denied"):
            return f"First read the stacks ({d.get('py_spy_error')}): {d.get('fix')}. "
    return ""


def _older_rotation_said(ctx: RunContext, obs: list[Observation]) -> str:
    """The operator named an earlier rotation of the log: say which file holds the newest start."""
    read = {str(o["args"].get("path")) for o in obs if o["tool"] == "log_tail" and o["ok"]}
    for g in ctx.extra_logs:
        base = next((b for b in read if b != g and rotation_of(b, g)), None)
        if base is not None:
            return f"Note: {g} is an earlier rotation of {base}, where the newest start is logged. "
    return ""


def _rotation_said(obs: list[Observation]) -> str:
    """The operator's --log is not the file the server writes: say so first, or every line
    read from it answers the wrong question."""
    for o in obs:
        if o["tool"] == "processes" and o["ok"]:
            for asked, actual in (o["data"].get("rotated") or {}).items():
                return (
                    f"Note: {asked} is not the file the server writes: it was rotated, and the "
                    f"server writes {actual}. "
                )
    aside = sorted(earlier_runs_set_aside(obs))
    if aside:
        return (
            f"Note: {', '.join(aside)} ended before the log named began: an earlier run's, none "
            "of it this launch's evidence. "
        )
    # the server is gone (nobody's fd to follow), yet its rotation was read: say which file
    # held its start-up and its end
    reads = [str(o["args"].get("path")) for o in obs if o["tool"] == "log_tail" and o["ok"]]
    # a log that logs a launch of its own start holds its start-up: its rotation is an earlier run
    starts = {
        str(o["args"].get("path"))
        for o in obs
        if o["tool"] == "log_tail" and o["ok"] and any(launch_line(ln) for ln in text_lines(o))
    }
    for asked in reads:
        rotated = next((r for r in reads if r != asked and rotation_of(asked, r)), None)
        if rotated is not None and asked in starts:
            return f"Note: {rotated} is an earlier run's log (rotated); {asked} holds this launch. "
        if rotated is not None and reads.index(asked) < reads.index(rotated):
            return (
                f"Note: {asked} holds only what came after a rotation; the launch's start-up and "
                f"its end are in {rotated}. "
            )
    return ""


def _changes_said(changes: list[dict[str, Any]], obs: list[Observation]) -> str:
    """What each approved change did, read from its own result: "applied and verified" only
    when the tool says so (sha256 checked), else the error and its fix."""
    parts: list[str] = []
    for c in changes:
        if not c.get("approved"):
            continue
        path = c["args"].get("path", "")
        done = [o for o in obs if o["tool"] == c["tool"] and o["args"].get("path") == path]
        if not done:
            parts.append(f" Approved but not run yet: {c['tool']} {path}.")
            continue
        last = done[-1]
        d = last["data"]
        if last["ok"] and d.get("verified", True):
            sha = f" (sha256 {str(d['new_sha256'])[:12]} verified)" if d.get("new_sha256") else ""
            parts.append(f" Applied with approval: {c['tool']} {path}{sha}.")
        else:
            err = d.get("error") or "the tool reported a failure"
            fix = f" Fix: {d['fix']}" if d.get("fix") else ""
            parts.append(f" Approved, but {c['tool']} {path} FAILED: {err}.{fix}")
    return "".join(parts)


def _explained_away(board: dict[str, Any], winner: str, line: dict[str, str]) -> dict[str, Any]:
    """Suspects nothing on the host pointed at are ruled out once a proven cause explains the
    failure: the report says so, quoting the line that explains it."""
    out = dict(board)
    for label, h in board.items():
        if label == winner or h["status"] != "open" or h["evidence"] or h["score"] > 0:
            continue
        out[label] = {
            **h,
            "status": "refuted",
            "against": [
                *h["against"],
                {**line, "note": f"explained by {winner}; nothing points at {label}"},
            ],
        }
        _emit(
            "hypothesis",
            {
                k: out[label][k]
                for k in ("label", "statement", "status", "score", "evidence", "against")
            },
        )
    return out


def _fix_obs_ids(evidence: list[dict[str, str]], obs: list[Observation]) -> list[dict[str, str]]:
    """An LLM may cite the right line under the wrong id; point it at where it really occurs."""
    out = []
    for ev in evidence:
        line = ev.get("line", "")
        where = next(
            (
                o["id"]
                for o in obs
                if o["id"] == ev.get("observation") and any(line in ln for ln in o["lines"])
            ),
            None,
        )
        where = where or next(
            (o["id"] for o in obs if any(line in ln for ln in o["lines"])),
            ev.get("observation", ""),
        )
        tool = next((o["tool"] for o in obs if o["id"] == where), "")
        out.append({"observation": where, "line": line, "tool": tool})
    return out


# -- routers (tiny, returning names) ----------------------------------------------------------------
def route_start(state: State) -> str:
    return "follow_up" if state.get("observations") else "sweep"


def route_decision(state: State) -> str:
    a = state.get("action")
    if a is None:
        return "decide"
    return {"check": "act", "change": "approval"}.get(a.get("kind", ""), "conclude")


def route_approval(state: State) -> str:
    return "act" if state.get("action") else "analyze"


def route_conclusion(state: State) -> str:
    if state.get("status") == "rejected":
        return "decide"
    a = state.get("action")
    return "approval" if a and a.get("kind") == "change" else "end"


def route_follow_up(state: State) -> str:
    return "act" if state.get("queue") else "analyze"
