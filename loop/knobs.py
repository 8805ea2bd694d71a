"""Knobs: the one thing an experiment changes, and how a change is written into text.

A knob is an engine flag (`flag:--cuda-graph-max-bs`) or an environment variable set in a
config file the server reads (`env:NCCL_BUFFSIZE`). Edits keep the file's own style
(sitecustomize `os.environ.setdefault(...)`, `export K=V`, or `.env` `K=V`) so the diff a
person reads in the morning is one line per knob.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

Value = str | int | float | bool | None


def knob_id(kind: str, name: str) -> str:
    return f"{kind}:{name}"


def render(value: Value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


_ENV_LINE = re.compile(
    r"""^(?P<pre>\s*(?:export\s+)?)(?P<key>[A-Za-z_][A-Za-z0-9_]*)\s*=\s*(?P<val>.*?)\s*$"""
)
_PY_SETDEFAULT = re.compile(
    r"""os\.environ\.setdefault\(\s*(?P<q>["'])(?P<key>\w+)(?P=q)\s*,\s*(?P<q2>["'])(?P<val>[^"']*)(?P=q2)\s*\)"""
)
_PY_ASSIGN = re.compile(
    r"""os\.environ\[\s*(?P<q>["'])(?P<key>\w+)(?P=q)\s*\]\s*=\s*(?P<q2>["'])(?P<val>[^"']*)(?P=q2)"""
)


def read_env(text: str) -> dict[str, str]:
    """KEY -> value as the file sets it (the last assignment wins)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            continue
        for pat in (_PY_SETDEFAULT, _PY_ASSIGN):
            m = pat.search(line)
            if m:
                out[m["key"]] = m["val"]
                break
        else:
            m = _ENV_LINE.match(line)
            if m and "(" not in line:
                out[m["key"]] = m["val"].strip("\"'")
    return out


def setdefault_only(text: str, key: str) -> bool:
    """Whether `text` sets `key` only through `os.environ.setdefault` (a value already in the
    process environment wins), never by an assignment that overrides it."""
    found = False
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            continue
        m = _PY_SETDEFAULT.search(line)
        if m and m["key"] == key:
            found = True
            continue
        a = _PY_ASSIGN.search(line)
        e = _ENV_LINE.match(line) if "(" not in line else None
        if (a and a["key"] == key) or (e and e["key"] == key):
            return False
    return found


def set_env(text: str, key: str, value: Value) -> str:
    """`text` with `key` set to `value` (None removes it), in the file's own style."""
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    done = False
    for line in lines:
        hit = None
        if not line.lstrip().startswith("#"):
            for pat in (_PY_SETDEFAULT, _PY_ASSIGN):
                m = pat.search(line)
                if m and m["key"] == key:
                    hit = (pat, m)
                    break
            if hit is None:
                m = _ENV_LINE.match(line)
                if m and m["key"] == key and "(" not in line:
                    hit = (_ENV_LINE, m)
        if hit is None:
            out.append(line)
            continue
        if value is None or done:
            continue  # removed, or a duplicate assignment of a knob already set
        pat, m = hit
        start, end = m.span("val")
        if pat is _ENV_LINE:
            raw = m["val"]
            quote = raw[0] if raw[:1] in ("'", '"') else ""
            out.append(line[:start] + f"{quote}{render(value)}{quote}" + line[end:])
        else:
            out.append(line[:start] + render(value) + line[end:])
        done = True
    if not done and value is not None:
        if out and not out[-1].endswith("\n"):
            out[-1] += "\n"
        if "os.environ" in text:
            out.append(f'os.environ.setdefault("{key}", "{render(value)}")\n')
        elif re.search(r"^\s*export\s", text, re.M):
            out.append(f"export {key}={shlex.quote(render(value))}\n")
        else:
            out.append(f"{key}={render(value)}\n")
    return "".join(out)


#: Flags that never take a value, so the word after one is a positional argument (the model
#: in `vllm serve --enforce-eager MODEL`): switch-like prefixes, and named switches of the
#: engines (vLLM, SGLang, TensorRT-LLM) and the emulator.
SWITCH_PREFIXES = ("--enable-", "--disable-", "--no-", "--use-", "--skip-")
SWITCHES = frozenset(
    {
        "--enforce-eager", "--trust-remote-code", "--headless", "--api-server-only",
        "--spawn-orphan", "--gpu", "--emulate-hang", "--hang-generate", "--bench-client",
        "--log-requests", "--disable-log-requests", "--enable-torch-compile",
    }
)  # fmt: skip


def is_switch(flag: str) -> bool:
    return flag in SWITCHES or flag.startswith(SWITCH_PREFIXES)


def _takes(argv: list[str], i: int) -> bool:
    """Whether argv[i] (a bare `--flag`) takes argv[i + 1] as its value."""
    return i + 1 < len(argv) and not argv[i + 1].startswith("--") and not is_switch(argv[i])


def read_flags(command: str) -> dict[str, str | bool]:
    """Flags of a launch command: `--x v` -> "v", a bare `--x` -> True."""
    argv = shlex.split(command)
    out: dict[str, str | bool] = {}
    i = 0
    while i < len(argv):
        tok = argv[i]
        if tok.startswith("--"):
            if "=" in tok:
                k, v = tok.split("=", 1)
                out[k] = v
            elif _takes(argv, i):
                out[tok] = argv[i + 1]
                i += 1
            else:
                out[tok] = True
        i += 1
    return out


def set_flag(command: str, flag: str, value: Value) -> str:
    """`command` with `flag` set: True -> bare flag, False/None -> removed, else `flag value`."""
    argv = shlex.split(command)
    out: list[str] = []
    i = 0
    while i < len(argv):
        tok = argv[i]
        if tok == flag or tok.startswith(flag + "="):
            if "=" not in tok and _takes(argv, i):
                i += 1  # skip its value (never a positional after a switch)
            i += 1
            continue
        out.append(tok)
        i += 1
    if value is True:
        out.append(flag)
    elif value is not None and value is not False:
        out += [flag, render(value)]
    return shlex.join(out)


def describe(change: dict[str, Any]) -> str:
    return ", ".join(f"{k.split(':', 1)[1]}={render(v)}" for k, v in change.items()) or "baseline"
