"""A script's first failed step is the cause of the failures of the steps that read its output.

A deploy script without `set -e` (convert a checkpoint, build the engine, start the server) goes
on after a step fails: the build then finds no checkpoint, and the server no engine, and the
last error in the log is the server's, loud and wrong (Triton's "json parse_error" on an engine
config that was never written). The script's own trace (`+ cmd`, from `bash -x`) says which
step ran when; a step that writes a path (`--output_dir X`) and a later step whose command or
error names that path are linked: the later one read what the failed one never wrote. Then the
failed step's own error is the cause, proven by that link, and the later failures are its
consequences. Not when the steps share no path (two independent failures stay two), nor when
the first failing step is the last one.
"""

from __future__ import annotations

from agent.evidence import LOG_TOOLS, text_lines
from agent.rules import proof
from agent.rules.common import F
from agent.rules.passed import own_end
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


def pipeline_rules(observations: list[Observation], add) -> None:  # type: ignore[no-untyped-def]
    for o in observations:
        if not (o["ok"] and o["tool"] in LOG_TOOLS):
            continue
        found = starved_chain(text_lines(o))
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
        for _cmd2, end2, path in later:
            for m in scan([end2]) if end2 else []:
                if m.label and m.label != label:
                    add(
                        m.label,
                        "cause",
                        F.refutes,
                        o["id"],
                        end2,
                        f"a consequence: this step read {path}, which the failed step above "
                        "never wrote",
                    )
        return
