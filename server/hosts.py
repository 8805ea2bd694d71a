"""Which hosts the service can investigate: SSH aliases, the local machine, and replay cards.

Shipped incident cards appear as `replay:<card-id>` so a fresh install has something to try.
The SSH side (tools.hosts) is optional at import time: without it the list simply has no SSH
hosts. Reachability is a bounded TCP connect, never a login.
"""

from __future__ import annotations

import importlib
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from server.config import ServeConfig
from tools.cards import CardError, IncidentCard, load_card
from tools.host import Host

REPLAY = "replay:"
LOCAL = "local"


class HostInfo(BaseModel):
    name: str
    kind: Literal["replay", "ssh", "local"]
    title: str = ""
    address: str = ""  # an SSH alias's HostName, so the page's picker can search by it
    reachable: bool | None = None
    detail: str = ""


class UnknownHost(Exception):
    pass


def _ssh_entries(ssh_config: Path | None = None) -> list[Any]:
    """SSH aliases: tools.hosts.configured_hosts() where it exists, else ~/.ssh/config read here."""
    try:
        mod = importlib.import_module("tools.hosts")
    except ModuleNotFoundError:
        mod = None
    fn = getattr(mod, "configured_hosts", None)
    try:
        if fn is not None and ssh_config is None:  # it names aliases only: add their addresses
            found = {e["alias"]: e for e in _from_ssh_config(Path.home() / ".ssh" / "config")}
            return [found.get(e, {"alias": e}) if isinstance(e, str) else e for e in fn()]
        return _from_ssh_config(ssh_config or Path.home() / ".ssh" / "config")
    except Exception:  # a broken ~/.ssh/config must not take the host list down
        return []


def _from_ssh_config(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    import paramiko

    cfg = paramiko.SSHConfig.from_path(str(path))
    out = []
    for alias in sorted(cfg.get_hostnames()):
        if any(c in alias for c in "*?!") or alias == "*":
            continue
        d = cfg.lookup(alias)
        out.append(
            {"alias": alias, "hostname": d.get("hostname", alias), "port": d.get("port", 22)}
        )
    return out


def _field(entry: Any, *names: str) -> Any:
    for n in names:
        v = entry.get(n) if isinstance(entry, dict) else getattr(entry, n, None)
        if v:
            return v
    return None


def _tcp_reachable(hostname: str, port: int, timeout: float) -> tuple[bool, str]:
    start = time.monotonic()
    try:
        with socket.create_connection((hostname, port), timeout=timeout):
            pass
    except OSError as exc:
        return False, f"{hostname}:{port}: {exc.strerror or exc}"
    return True, f"{hostname}:{port} answered in {1000 * (time.monotonic() - start):.0f} ms"


class HostCatalog:
    def __init__(self, config: ServeConfig) -> None:
        self._config = config
        self._cards: dict[Path, tuple[float, IncidentCard]] = {}

    def load(self, path: Path) -> IncidentCard:
        """Parse a card once per change of its file; ReplayHost copies what it uses."""
        mtime = path.stat().st_mtime
        hit = self._cards.get(path)
        if hit is None or hit[0] != mtime:
            hit = (mtime, load_card(path))
            self._cards[path] = hit
        return hit[1]

    def cards(self) -> dict[str, Path]:
        """Card id -> file, first directory wins (shipped cards before extra ones)."""
        found: dict[str, Path] = {}
        for d in self._config.card_dirs:
            if not d.is_dir():
                continue
            for path in sorted(d.glob("*.yaml")):
                found.setdefault(path.stem, path)
        return found

    def list(self, check: bool = True) -> list[HostInfo]:
        out: list[HostInfo] = []
        if self._config.local_host:
            out.append(HostInfo(name=LOCAL, kind="local", reachable=True, detail="this machine"))
        entries = _ssh_entries(self._config.ssh_config)
        infos = []
        for e in entries:
            name = _field(e, "alias", "name", "host")
            if not name:
                continue
            hostname = _field(e, "hostname", "host_name", "address") or name
            port = int(_field(e, "port") or 22)
            infos.append((str(name), str(hostname), port))
        if check and infos:
            t = self._config.reach_timeout_s
            with ThreadPoolExecutor(max_workers=min(16, len(infos))) as pool:
                results = list(pool.map(lambda i: _tcp_reachable(i[1], i[2], t), infos))
        else:
            results = [(None, "not checked")] * len(infos)
        for (name, hostname, _), (ok, detail) in zip(infos, results, strict=True):
            out.append(
                HostInfo(name=name, kind="ssh", address=hostname, reachable=ok, detail=detail)
            )
        for cid, path in self.cards().items():
            try:
                title = self.load(path).title
            except CardError as exc:
                out.append(
                    HostInfo(name=REPLAY + cid, kind="replay", reachable=False, detail=str(exc))
                )
                continue
            out.append(HostInfo(name=REPLAY + cid, kind="replay", title=title, reachable=True))
        return out

    def known(self, name: str) -> bool:
        if name.startswith(REPLAY):
            return name[len(REPLAY) :] in self.cards()
        if name == LOCAL:
            return self._config.local_host
        return any(
            _field(e, "alias", "name", "host") == name
            for e in _ssh_entries(self._config.ssh_config)
        )

    def alias_for(self, address: str) -> str | None:
        """The host an address names: a known host name itself, else the SSH alias whose
        HostName it is (Prometheus's `instance` label carries the scrape address, not the alias)."""
        if self.known(address):
            return address
        try:
            entries = _from_ssh_config(self._config.ssh_config or Path.home() / ".ssh" / "config")
        except Exception:  # a broken ~/.ssh/config names nothing
            return None
        return next((e["alias"] for e in entries if e["hostname"] == address), None)

    def open(self, name: str) -> Host:
        """A fresh Host for `name`; each session gets its own (replay cursors, SSH channels)."""
        if name.startswith(REPLAY):
            from cards.replay import ReplayHost

            path = self.cards().get(name[len(REPLAY) :])
            if path is None:
                raise UnknownHost(f"no card for {name}")
            try:
                return ReplayHost(self.load(path), name=name)
            except CardError as exc:
                raise UnknownHost(str(exc)) from exc
        if name == LOCAL and self._config.local_host:
            from tools.local_host import LocalHost

            return LocalHost(name=LOCAL)
        if not self.known(name):
            raise UnknownHost(f"{name} is not a configured host")
        try:
            opener = importlib.import_module("tools.hosts").open_host
        except (ModuleNotFoundError, AttributeError):
            from tools.ssh_host import SSHHost

            return SSHHost(name, ssh_config_path=self._config.ssh_config)
        return opener(name)

    def roots(self, name: str) -> list[str]:
        return self._config.roots_for(name)

    def card_path(self, path: str) -> Path:
        """A card path from a request, allowed only inside the card directories."""
        p = Path(path)
        if ".." in p.parts:
            raise ValueError(f"{path!r} contains '..'")
        for d in self._config.card_dirs:
            try:
                cand = (p if p.is_absolute() else d / p).resolve()
                if cand.is_relative_to(d.resolve()) and cand.suffix == ".yaml" and cand.is_file():
                    return cand
            except OSError:  # name too long and the like: simply not a card
                continue
        raise FileNotFoundError(
            f"{path} is not a card under {[str(d) for d in self._config.card_dirs]}"
        )
