"""The fleet inventory: which hosts `--hosts GROUP|a,b,c` names.

Hosts are `~/.ssh/config` aliases (read with paramiko's SSHConfig, as `ssh ALIAS` and
`tools.hosts` read them), so a fleet needs no second list of addresses, ports or keys.
Groups come from a small YAML file (`$PIVOT_HOME/fleet.yaml`), validated on load:

    groups:
      h200: [node-1, node-2]
      all-gpu: [h200, a100-1]     # a group may name other groups
      vllm: [node-1:vllm-0, node-2:vllm-0]   # ALIAS:CONTAINER: the server runs in that container

`ALIAS:CONTAINER` (in a group or in `--hosts`) investigates the Docker/Podman container of that
name on that host (tools/container_host.py); a colon never occurs in an SSH alias. An unknown
alias or group is refused with the names that are known, before anything connects.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from tools.hosts import configured_hosts

#: what `docker run --name` accepts (tools/container_host.SAFE_NAME says the same)
CONTAINER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,200}$")


def split_target(target: str) -> tuple[str, str | None]:
    """`alias` or `alias:container` -> (alias, container or None)."""
    alias, _, container = target.partition(":")
    return alias, container or None


class InventoryError(ValueError):
    """A usage error in `--hosts` or in fleet.yaml; the message says what is known instead."""


class FleetFile(BaseModel):
    """The schema of fleet.yaml."""

    model_config = ConfigDict(extra="forbid")

    groups: dict[str, list[str]] = Field(default_factory=dict)

    @field_validator("groups")
    @classmethod
    def _names_are_plain(cls, groups: dict[str, list[str]]) -> dict[str, list[str]]:
        for name, members in groups.items():
            if not name or "," in name or ":" in name or any(c.isspace() for c in name):
                raise ValueError(f"group name {name!r} must be one word without commas or colons")
            if not members:
                raise ValueError(f"group {name!r} is empty")
        return groups


class Inventory(BaseModel):
    """SSH aliases plus named groups; `expand()` turns a `--hosts` value into aliases."""

    aliases: list[str]
    groups: dict[str, list[str]] = Field(default_factory=dict)
    source: str = ""

    def expand(self, spec: str) -> list[str]:
        """`GROUP` or `a,b,c` (groups and aliases may mix) -> aliases, in order, once each."""
        names = [n.strip() for n in spec.split(",") if n.strip()]
        if not names:
            raise InventoryError("--hosts needs a group or a comma-separated list of SSH aliases")
        out: list[str] = []
        for name in names:
            out += self._expand_one(name, ())
        return list(dict.fromkeys(out))

    def _expand_one(self, name: str, seen: tuple[str, ...]) -> list[str]:
        alias, colon, container = name.partition(":")
        if colon:
            if not container or not CONTAINER_NAME.match(container):
                raise InventoryError(
                    f"{name!r}: after the colon comes a container name (ALIAS:CONTAINER)"
                )
            members = self._expand_one(alias, seen)
            if any(":" in m for m in members):
                raise InventoryError(f"{name!r}: group {alias!r} already names its containers")
            return [f"{m}:{container}" for m in members]
        if name in seen:
            raise InventoryError(f"group {name!r} includes itself ({' -> '.join(seen + (name,))})")
        if name in self.groups:
            return [a for m in self.groups[name] for a in self._expand_one(m, seen + (name,))]
        if name in self.aliases:
            return [name]
        where = f" (in group {seen[-1]!r} of {self.source})" if seen else ""
        raise InventoryError(
            f"unknown host or group {name!r}{where}. "
            f"Groups: {', '.join(sorted(self.groups)) or 'none'}; "
            f"SSH aliases: {', '.join(self.aliases) or 'none'}. "
            "Add a `Host` entry to ~/.ssh/config or the group to "
            f"{self.source or 'fleet.yaml'}"
        )


def load_inventory(
    fleet_file: str | os.PathLike[str] | None, ssh_config: str | os.PathLike[str] | None = None
) -> Inventory:
    """Read both sources; a missing fleet.yaml means no groups, a broken one is an error."""
    aliases = configured_hosts(ssh_config)
    groups: dict[str, list[str]] = {}
    source = str(fleet_file or "")
    if fleet_file and Path(fleet_file).is_file():
        try:
            raw = yaml.safe_load(Path(fleet_file).read_text(encoding="utf-8")) or {}
            groups = FleetFile.model_validate(raw).groups
        except (yaml.YAMLError, ValidationError) as exc:
            raise InventoryError(f"{fleet_file} is not a valid fleet file: {exc}") from exc
        clash = sorted(set(groups) & set(aliases))
        if clash:
            raise InventoryError(
                f"{fleet_file}: {', '.join(clash)} is both a group and an SSH alias; rename one"
            )
    return Inventory(aliases=aliases, groups=groups, source=source)
