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


_INET = re.compile(r"(?:^|\s)(?:inet\s+)?(\d{1,3}(?:\.\d{1,3}){3})/\d+")


def addresses(observations: list[Observation]) -> set[str]:
    """This host's IPv4 addresses from `ip -brief addr` / `ip addr` output."""
    out: set[str] = set()
    for o in observations:
        if o["tool"] != "host_facts" or not o["ok"]:
            continue
        for ln in text_lines(o):
            out.update(m.group(1) for m in _INET.finditer(ln))
    return out - {"127.0.0.1"}


def interfaces(observations: list[Observation]) -> set[str]:
    """Interface names from `ip -brief addr|link` (host_facts' network section)."""
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
    rendezvous_rules(observations, add)
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


#: The rendezvous address and this node's rank, as launch flags, env or SGLang's server_args.
_RDZV = re.compile(
    r"(?:--nccl-init(?:-addr)?|--dist-init-addr|dist_init_addr=|MASTER_ADDR=|--master[-_]addr[ =])"
    r"\s*'?(\d{1,3}(?:\.\d{1,3}){3})"
)
_RANK = re.compile(r"(?:--node-rank|--node_rank|node_rank=|NODE_RANK=)\s*'?(\d+)")


def rendezvous_self(observations: list[Observation]) -> tuple[str, str, str, int] | None:
    """(observation id, line, address, node rank) when a node of rank >= 1 was told to meet
    rank 0 at one of its own addresses: it waits for itself, rank 0 waits elsewhere."""
    mine = addresses(observations)
    if not mine:
        return None
    for o in observations:
        if not o["ok"]:
            continue
        for ln in text_lines(o):
            a, r = _RDZV.search(ln), _RANK.search(ln)
            if a and r and int(r.group(1)) >= 1 and a.group(1) in mine:
                return o["id"], ln, a.group(1), int(r.group(1))
    return None


def rendezvous_rules(observations: list[Observation], add) -> None:  # type: ignore[no-untyped-def]
    hit = rendezvous_self(observations)
    if hit is None:
        return
    oid, line, addr, rank = hit
    add(
        "bad_launch_argument",
        "cause",
        3.0,
        oid,
        line,
        f"node rank {rank} was told to meet rank 0 at {addr}, which is this host's own address: "
        "the rendezvous must name rank 0's node",
    )
