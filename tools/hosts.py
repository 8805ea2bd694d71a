"""Which machine a command talks to: `--host ALIAS | --local | --replay CARD.yaml`.

Every CLI command, the agent and the service resolve their host here, so an SSH alias means
the same thing everywhere (it is resolved like `ssh ALIAS`, through ~/.ssh/config) and a
process keeps ONE connection per alias: a second resolve of the same alias returns the same
`SSHHost`, whose connection is already warm.
"""

from __future__ import annotations

import atexit
import os
import threading
from pathlib import Path
from typing import Any

import paramiko

from cards.model import load_card
from cards.replay import ReplayHost
from tools.host import Host
from tools.local_host import LocalHost
from tools.ssh_host import SSHHost

_cache: dict[tuple[str, tuple[tuple[str, str], ...]], SSHHost] = {}
_cache_lock = threading.Lock()


def resolve_host(
    host: str | None = None, local: bool = False, replay: str | None = None, **opts: Any
) -> Host:
    """Exactly one of `host`, `local`, `replay`; `opts` go to `SSHHost` (e.g. known_hosts).

    Raises ValueError on a usage error (none or several given, unreadable card): that is the
    caller's mistake, and the CLI turns it into a usage message.
    """
    chosen = [
        name for name, on in (("--host", host), ("--local", local), ("--replay", replay)) if on
    ]
    if len(chosen) != 1:
        raise ValueError(
            "give exactly one of --host ALIAS, --local or --replay CARD.yaml"
            + (f" (got {' and '.join(chosen)})" if chosen else "")
        )
    if replay:
        return ReplayHost(load_card(replay))
    if local:
        return LocalHost()
    assert host is not None
    if os.environ.get("PIVOT_SSH_TRUST_ON_FIRST_USE") == "1":
        # explicit, logged opt-in (SSHHost logs the key it records); never the default
        opts.setdefault("trust_on_first_use", True)
    return ssh_host(host, **opts)


def ssh_host(alias: str, **opts: Any) -> SSHHost:
    """The process-wide `SSHHost` for `alias` (and these options), created once."""
    key = (alias, tuple(sorted((k, repr(v)) for k, v in opts.items())))
    with _cache_lock:
        found = _cache.get(key)
        if found is None:
            found = _cache[key] = SSHHost(alias, **opts)
        return found


def close_all() -> None:
    """Close every cached connection (process exit, tests)."""
    with _cache_lock:
        hosts = list(_cache.values())
        _cache.clear()
    for h in hosts:
        h.close()


atexit.register(close_all)


def configured_hosts(config_path: str | os.PathLike[str] | None = None) -> list[str]:
    """Concrete `Host` entries of ~/.ssh/config (no wildcards or negations), for pickers."""
    path = Path(config_path or Path.home() / ".ssh" / "config").expanduser()
    if not path.is_file():
        return []
    names = paramiko.SSHConfig.from_path(str(path)).get_hostnames()
    return sorted(n for n in names if not any(c in n for c in "*?!"))
