"""A helper at work for the launch: a busy process beside the server whose command line names
the file the launch's log names in its last lines (Triton's python backend unpacking the
EXECUTION_ENV_PATH archive it just logged). Shared by the liveness rules, the proof rule of
still_starting and the Launch view (it is the launch's work, not a bystander), so it sits below
all three.
"""

from __future__ import annotations

import re

from agent.evidence import LOG_TOOLS, latest_text_observations, text_lines
from agent.facts import Facts
from agent.state import Observation
from agent.thresholds import THRESHOLDS

#: an absolute path in a log line (quotes and trailing punctuation left out)
_PATH = re.compile(r"(/[\w.@%+=,-]+(?:/[\w.@%+=,-]+)+)")
_SCRIPTS = (".py", ".sh", ".pl", ".rb", ".js")


def working_on_logged_file(
    facts: Facts, observations: list[Observation]
) -> tuple[int, str, str] | None:
    """(pid, ps line, path) of a busy process, not the server itself, whose command line names a
    file the launch's log names in its last lines: Triton's python backend unpacking the
    EXECUTION_ENV_PATH archive it just logged, a converter reading the checkpoint the loader
    named. The server is quiet because it waits for that work, not because it is stuck."""
    logs = [o for o in latest_text_observations(observations) if o["tool"] in LOG_TOOLS]
    if not logs or not facts.ps_obs or not facts.server_pids:
        return None  # the server must be known: the worker is beside it, not the workload itself
    tail = [ln for ln in text_lines(logs[-1]) if ln.strip()][-5:]
    paths = {m.group(1).rstrip(".,:;") for ln in tail for m in _PATH.finditer(ln)}
    # a data file, not "/tmp", and not a script: the launch's own interpreter runs its script
    paths = {p for p in paths if p.count("/") >= 2 and not p.endswith(_SCRIPTS)}
    # a path on the server's own command line (its model, its checkpoint) is the launch's
    # argument: a process carrying it is one of its ranks, not a helper it waits for
    launched = " ".join(
        str(facts._ps_recs.get(p, {}).get("command") or "") for p in facts.server_pids
    )
    paths = {p for p in paths if p not in launched}
    if not paths:
        return None
    for pid, rec in facts._ps_recs.items():
        if pid in facts.server_pids or pid in facts.busy_unknown_pids or rec.get("zombie"):
            continue
        if float(rec.get("cpu_pct") or 0.0) < THRESHOLDS.hang.working_pct:
            continue
        cmd = str(rec.get("command") or "")
        hit = next((p for p in sorted(paths) if p in cmd), None)
        if hit is not None:
            return pid, facts.procs.get(pid, str(rec.get("raw") or cmd)), hit
    return None
