"""Does an experiment change anything the server sees? A proof before a launch is spent on it.

Why: in the issue's night `NCCL_MAX_NCHANNELS=16` was already in the server's environment, the
experiment wrote `os.environ.setdefault("NCCL_MAX_NCHANNELS", "8")` into sitecustomize.py, the
setdefault did nothing, and the night reported "discarded at 1031 vs 1030" as if 8 channels
had been measured. A change is provably void when its launch line means the same as the
baseline's and every env key it writes is either already that value in the config file, or
only `setdefault` there while the server's own environment (the plan's env, or a variable the
allow-list takes from the loop's shell) already sets it. Such an experiment is reported
`no_effect` with the reason, never ranked.
"""

from __future__ import annotations

import shlex
from typing import Any

from loop.experiment import env_change, launch_command
from loop.knobs import read_env, read_flags, render, set_env, setdefault_only
from loop.plan import Plan
from tools.host import Host


def same_launch(a: str, b: str) -> bool:
    """Two launch lines that mean the same: equal, or the same flags and values and the same
    positional words in the same order (a flag re-set to its value moves to the end)."""
    if a == b:
        return True
    return read_flags(a) == read_flags(b) and _positionals(a) == _positionals(b)


def _positionals(command: str) -> list[str]:
    flags = read_flags(command)
    argv = shlex.split(command)
    out, i = [], 0
    while i < len(argv):
        tok = argv[i]
        if tok.startswith("--"):
            i += 2 if "=" not in tok and flags.get(tok) not in (True, None) else 1
            continue
        out.append(tok)
        i += 1
    return out


def server_env(plan: Plan, host: Host, keys: list[str]) -> dict[str, str]:
    """What the server's environment holds for `keys` before its config file runs: the plan's
    env, else the allow-listed variables as the host's own shell has them."""
    b = plan.baseline
    out = {k: b.env[k] for k in keys if k in b.env}
    for k in keys:
        if k in out or k not in b.inherit_env:
            continue
        res = host.run(f"printenv {shlex.quote(k)}", timeout=10)
        if res.rc == 0:
            out[k] = res.stdout.rstrip("\n")
    return out


def no_effect(
    plan: Plan, change: dict[str, Any], baseline_files: dict[str, bytes], host: Host
) -> str | None:
    """Why `change` provably changes nothing the server sees, in words; None if it may."""
    if not same_launch(launch_command(plan, change), plan.baseline.launch):
        return None
    env = env_change(change)
    path = plan.baseline.config_file
    if env and (path is None or path not in baseline_files):
        return None  # nowhere to read the baseline from: no proof
    text = baseline_files[path].decode("utf-8", errors="surrogateescape") if path else ""
    inherited = server_env(plan, host, list(env))
    why: list[str] = []
    for key, value in env.items():
        want = None if value is None else render(value)
        new = set_env(text, key, value)
        if new == text or read_env(text).get(key) == want and read_env(new) == read_env(text):
            why.append(f"{key} is already {'unset' if want is None else repr(want)} in {path}")
            continue
        if key in inherited and setdefault_only(new, key):
            src = "the plan's env" if key in plan.baseline.env else "the loop's env (allow-list)"
            why.append(
                f"{key}={inherited[key]!r} is already in the server's environment ({src}); "
                f"{path} only setdefaults it, so {key}={want!r} never reaches the server"
            )
            continue
        return None  # this key does reach the server
    flags = [k for k in change if k.startswith("flag:")]
    if flags:
        why.append(f"the launch line with {', '.join(f[5:] for f in flags)} is the baseline's")
    return "no effective change: " + "; ".join(why)
