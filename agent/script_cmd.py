"""The commands a launch script runs, and whether a live process is one of them.

A server no engine pattern knows (a new engine, an in-house wrapper: `ft serve --model ...`)
looked "gone" while its processes ran, because only engine patterns made a process the launch.
The script the operator pointed at says what it runs; a live process whose command line runs that
same program with the same leading arguments is that launch, whatever the engine.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from functools import lru_cache
from pathlib import Path

from tools import yamlio

#: where the shell's words live (agent/launch.py reads the rest of this file)
KNOWLEDGE = Path(__file__).with_name("knowledge") / "launch.yaml"


@lru_cache(maxsize=1)
def _shell_words() -> tuple[frozenset[str], frozenset[str]]:
    """(words that run the next word, programs that set the shell up) from launch.yaml."""
    raw = yamlio.safe_load(KNOWLEDGE.read_text(encoding="utf-8"))
    return frozenset(raw["script_prefixes"]), frozenset(raw["script_setup"])


_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
#: how many arguments after the program must agree (the model name is usually among them):
#: at least MIN_ARGS, up to MATCH_ARGS where the script gives them
MIN_ARGS = 2
MATCH_ARGS = 3


def logical_lines(lines: list[str]) -> list[str]:
    """A shell script's lines as the shell reads them: backslash continuations joined."""
    joined, buf = [], ""
    for ln in lines:
        s = ln.rstrip()
        if s.endswith("\\"):
            buf += s[:-1] + " "
            continue
        joined.append(buf + s)
        buf = ""
    if buf:
        joined.append(buf)
    return joined


def commands(lines: list[str]) -> list[list[str]]:
    """The workload commands of a shell script: each logical line (backslash continuations
    joined), cut at the first redirection, pipe or `;`/`&&`, prefixes and VAR=value dropped
    (the shell's words are knowledge/launch.yaml `script_prefixes`, `script_setup`)."""
    prefixes, setup = _shell_words()
    out: list[list[str]] = []
    for ln in logical_lines(lines):
        if ln.lstrip().startswith("#"):
            continue
        s = re.split(r"\s(?:\d?>>?|<|\|\|?|;|&&)\s*|\s&\s*$", " " + ln.strip())[0].strip()
        try:
            words = shlex.split(s)
        except ValueError:
            words = s.split()
        while words and (
            words[0] in prefixes or _ASSIGN.match(words[0]) or words[0].startswith("-")
        ):
            words = words[1:]
        if len(words) <= MIN_ARGS or words[0] in setup:
            continue
        if "$" in words[0]:
            continue
        out.append(words)
    return out


def runs(command: list[str], ps_command: str) -> bool:
    """Does this ps command line run `command` (its program by base name, then its first
    MATCH_ARGS arguments verbatim)? `ft serve --model X` matches
    `/srv/ft/.venv/bin/python /srv/ft/.venv/bin/ft serve --model X --tp 8`."""
    prog = posixpath.basename(command[0])
    want = command[1 : 1 + MATCH_ARGS]
    words = ps_command.split()
    for i, w in enumerate(words):
        if posixpath.basename(w) == prog and words[i + 1 : i + 1 + len(want)] == want:
            return True
    return False


def pattern(commands_: list[list[str]]) -> str:
    """A regex for the processes tool that finds any of these commands running (program by base
    name, then its first MATCH_ARGS arguments)."""
    alts = [
        r"(?:^|/)"
        + re.escape(" ".join([posixpath.basename(c[0]), *c[1 : 1 + MATCH_ARGS]]))
        + r"(?:\s|$)"
        for c in commands_[:4]
    ]
    return "|".join(alts)
