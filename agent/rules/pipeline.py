"""A script's first failed step is the cause of the failures of the steps that read its output.

A deploy script without `set -e` (convert a checkpoint, build the engine, start the server) goes
on after a step fails: the build then finds no checkpoint, and the server no engine, and the
last error in the log is the server's, loud and wrong (Triton's "json parse_error" on an engine
config that was never written). The script's own trace (`+ cmd`, from `bash -x`) says which
step ran when; a step that writes a path (`--output_dir X`) and a later step whose command or
error names that path are linked: the later one read what the failed one never wrote. Then the
failed step's own error is the cause, proven by that link, and the later failures are its
consequences. Not when the steps share no path (two independent failures stay two), nor when
the first failing step is the last one. A log without the trace is read with the launch script
(a `.sh` the sweep read): its steps say who writes and who reads a path, and the log's runs (cut
where each program starts) say that an earlier one failed and the last one lacked that path.
"""

from __future__ import annotations

import re

from agent.evidence import LOG_TOOLS, launch_line, text_lines
from agent.rules import proof
from agent.rules.common import F
from agent.rules.passed import own_end
from agent.script_cmd import logical_lines
from agent.signatures import scan
from agent.state import Observation


def _steps(lines: list[str]) -> list[tuple[str, list[str]]]:
    """(command, its output lines) for each traced step of a script's log."""
    out: list[tuple[str, list[str]]] = []
    for ln in lines:
        cmd = proof.script_step(ln)
        if cmd is not None:
            out.append((cmd, []))
        elif out:
            out[-1][1].append(ln)
    return out


def starved_chain(
    lines: list[str],
) -> tuple[str, str, list[tuple[str, str, str]]] | None:
    """(the failed step's command, its fatal line, [(later command, its fatal line or "", the
    path it read)]) for the first traced step that failed and whose output a later step read."""
    steps = _steps(lines)
    for i, (cmd, body) in enumerate(steps):
        end = own_end(body)
        if end is None:
            continue
        missing = set(proof.output_paths(cmd))
        later: list[tuple[str, str, str]] = []
        for cmd2, body2 in steps[i + 1 :]:
            text = "\n".join([cmd2, *body2])
            read = next((p for p in sorted(missing) if p in text), None)
            if read is None:
                continue
            later.append((cmd2, own_end(body2) or "", read))
            missing |= set(proof.output_paths(cmd2))  # what it writes is missing in turn
        return (cmd, end, later) if later else None
    return None


_ASSIGN = re.compile(r"^(?:export\s+)?([A-Za-z_]\w*)=(['\"]?)([^\s'\"]*)\2\s*$")
_VAR = re.compile(r"\$\{([A-Za-z_]\w*)\}|\$([A-Za-z_]\w*)")


def script_commands(script: list[str]) -> list[str]:
    """A shell script's commands as it runs them: continued lines joined, comments dropped, and
    its own plain assignments (ENGINE=/x) put in for $ENGINE / ${ENGINE}."""
    values: dict[str, str] = {}
    out = []
    for ln in logical_lines(script):
        ln = " ".join(ln.split())
        if not ln or ln.startswith("#"):
            continue
        ln = _VAR.sub(lambda m: values.get(m.group(1) or m.group(2), m.group(0)), ln)
        a = _ASSIGN.match(ln)
        if a:
            values[a.group(1)] = a.group(3)
            continue
        out.append(ln)
    return out


def _runs(lines: list[str]) -> list[list[str]]:
    """The log cut where each program of the script starts (the engines' launch markers)."""
    out: list[list[str]] = [[]]
    for ln in lines:
        if launch_line(ln) and out[-1]:
            out.append([])
        out[-1].append(ln)
    return out


def _first_named(lines: list[str]) -> str | None:
    """The first line of a run that a signature names as fatal (the builder's own error above
    the assertion it raised), else the run's own end."""
    for ln in lines:
        if any(m.label and m.strength == "fatal" for m in scan([ln])):
            return ln
    return own_end(lines)


def script_chain(
    script: list[str], lines: list[str]
) -> tuple[str, str, list[tuple[str, str, str]]] | None:
    """The same chain where the log carries no trace of its steps: the launch script names a
    step that writes a path and a later one that reads it; the log's last run ended on an error
    naming that path, and an earlier run of the same log ended on an error of its own. Then the
    earlier run was the step that never wrote it."""
    cmds = script_commands(script)
    runs = _runs(lines)
    if len(runs) < 2:
        return None
    last_end = own_end(runs[-1])
    if last_end is None:
        return None
    for i, cmd in enumerate(cmds):
        for path in proof.output_paths(cmd):
            readers = [c for c in cmds[i + 1 :] if path in c]
            if not readers or path not in last_end:
                continue
            for run in reversed(runs[:-1]):
                fatal = _first_named(run) if own_end(run) is not None else None
                if fatal is not None:
                    return cmd, fatal, [(readers[0], last_end, path)]
    return None


def pipeline_rules(observations: list[Observation], add) -> None:  # type: ignore[no-untyped-def]
    scripts = [
        text_lines(o)
        for o in observations
        if o["ok"] and o["tool"] == "config_read" and str(o["args"].get("path", "")).endswith(".sh")
    ]
    for o in observations:
        if not (o["ok"] and o["tool"] in LOG_TOOLS):
            continue
        found = starved_chain(text_lines(o))
        for script in scripts if found is None else []:
            found = script_chain(script, text_lines(o))
            if found is not None:
                break
        if found is None:
            continue
        cmd, fatal, later = found
        named = [m for m in scan([fatal]) if m.label and m.strength in ("fatal", "strong")]
        label = named[0].label if named else proof.label_hint(fatal)
        if label is None:
            continue
        step = (
            cmd.split()[1]
            if cmd.split()[0].startswith("python") and len(cmd.split()) > 1
            else cmd.split()[0]
        )
        add(
            label,
            "cause",
            F.proves,
            o["id"],
            fatal,
            f"the script's first failed step ({step.rsplit('/', 1)[-1]}) ended here; "
            f"{len(later)} later step(s) read what it never wrote ({later[0][2]})",
        )
        # the later failure's labels: of its line alone, and of it read in its context (a
        # traceback's last line is named by the frames above it)
        in_context = scan(text_lines(o))
        for _cmd2, end2, path in later:
            named2 = [*scan([end2]), *(m for m in in_context if m.line == end2)] if end2 else []
            for m in named2:
                if m.label and m.label != label:
                    why = (
                        f"a consequence: this step read {path}, which the failed step above "
                        "never wrote"
                    )
                    add(m.label, "cause", F.refutes, o["id"], end2, why)
                    # the same, on the failed step's own line (where the later line already
                    # stands as the signature's evidence, the board keeps one entry per line)
                    add(
                        m.label,
                        "cause",
                        F.refutes,
                        o["id"],
                        fatal,
                        f"a consequence of this failure: the step after it read {path}, which "
                        "this step never wrote",
                    )
        return
