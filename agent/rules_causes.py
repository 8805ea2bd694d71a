"""Cause over symptom: the setting behind a failing component, when the same evidence shows it.

An NCCL bootstrap error is the proximate failure; an NCCL_SOCKET_IFNAME naming an interface the
host does not have is why. The label stays the component's (the taxonomy scores it so), the
cause's line joins the evidence, and the next step fixes the cause, not the symptom.
"""

from __future__ import annotations

import re

from agent.evidence import text_lines
from agent.state import Observation

#: Env vars that name network interfaces for a collective library (prefix lists; ^ excludes).
IFACE_ENV = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "UCX_NET_DEVICES")
_SET = re.compile(r"\b(" + "|".join(IFACE_ENV) + r")(?:=| set by environment to )\s*([^\s'\"]+)")
_IFACE_LINE = re.compile(r"^([A-Za-z0-9_.:-]+?)(?:@\S+)?\s+(?:UP|DOWN|UNKNOWN|LOWERLAYERDOWN)\b")


def interfaces(observations: list[Observation]) -> set[str]:
    """Interface names from `ip -brief link` (host_facts' network section)."""
    out: set[str] = set()
    for o in observations:
        if o["tool"] != "host_facts" or not o["ok"]:
            continue
        for ln in text_lines(o):
            m = _IFACE_LINE.match(ln.strip())
            if m:
                out.add(m.group(1))
    return out


def _matches(spec: str, ifaces: set[str]) -> bool:
    """NCCL's rules: a comma list of prefixes, `=` for exact names, a leading `^` excludes."""
    if spec.startswith("^"):
        return True  # an exclusion list never names a missing interface
    exact = spec.startswith("=")
    names = [n for n in spec.lstrip("=").split(",") if n]
    names = [n.split(":")[0] for n in names]  # UCX_NET_DEVICES=mlx5_0:1
    return any((i == n) if exact else i.startswith(n) for n in names for i in ifaces)


def missing_interface(
    observations: list[Observation],
) -> tuple[str, str, str, str, set[str]] | None:
    """(observation id, line, env var, value, the host's interfaces) when an env var names an
    interface this host does not have, or None."""
    ifaces = interfaces(observations) - {"lo"}
    if not ifaces:
        return None
    for o in observations:
        if not o["ok"]:
            continue
        for ln in text_lines(o):
            m = _SET.search(ln)
            if m and m.group(1) != "UCX_NET_DEVICES" and not _matches(m.group(2), ifaces):
                return o["id"], ln, m.group(1), m.group(2), ifaces
    return None


def cause_rules(facts, observations: list[Observation], hits, add) -> None:  # type: ignore[no-untyped-def]
    if not any(m.label == "nccl_failure" and m.strength in ("fatal", "strong") for _, m in hits):
        return
    miss = missing_interface(observations)
    if miss is None:
        return
    oid, line, var, value, ifaces = miss
    add(
        "nccl_failure",
        "cause",
        1.5,
        oid,
        line,
        f"the cause: {var}={value} names an interface this host does not have "
        f"(it has {', '.join(sorted(ifaces))})",
    )
