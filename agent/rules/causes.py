"""Cause over symptom: the setting behind a failing component, when the same evidence shows it.

An NCCL bootstrap error is the proximate failure; an NCCL_SOCKET_IFNAME naming an interface the
host does not have is why. The label stays the component's (the taxonomy scores it so), the
cause's line joins the evidence, and the next step fixes the cause, not the symptom.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel

from agent.evidence import LOG_READS, LOG_TOOLS, last_launch, text_lines
from agent.facts import launch_reads
from agent.rules import proof
from agent.rules.asserted import asserted_rules
from agent.rules.common import F
from agent.rules.pipeline import pipeline_rules
from agent.state import Observation
from agent.thresholds import THRESHOLDS
from tools import yamlio

_C = THRESHOLDS.cause  # agent/knowledge/thresholds.yaml

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
    observations = launch_reads(observations, facts)  # a setting is read from the launch's own
    rendezvous_rules(observations, add)
    rendezvous_disagree_rules(observations, add)
    loopback_rules(observations, add)
    misspelled_env_rules(observations, hits, add)
    driver_symbol_rules(observations, add)
    proxy_rules(facts, observations, hits, add)
    unresolvable_rules(observations, add)
    draftless_rules(observations, hits, add)
    hidden_gpus_rules(facts, observations, add)
    unset_devices_rules(observations, add)
    tiny_fraction_rules(observations, hits, add)
    arch_beyond_build_rules(facts, observations, add)
    gpus_unused_rules(facts, hits, add)
    conflict_rules(observations, add)
    import_chain_rules(observations, hits, add)
    pipeline_rules(observations, add)
    asserted_rules(observations, add)
    unknown_model_type_rules(hits, add)
    if not any(m.label == "nccl_failure" and m.strength in ("fatal", "strong") for _, m in hits):
        return
    miss = missing_interface(observations)
    if miss is None:
        return
    oid, line, var, value, ifaces = miss
    add(
        "nccl_failure",
        "cause",
        _C.behind_the_failure,
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
        _C.names_the_cause,
        oid,
        line,
        f"node rank {rank} was told to meet rank 0 at {addr}, which is this host's own address: "
        "the rendezvous must name rank 0's node",
    )


#: the whole rendezvous value (address and port) and the node count, for comparing nodes
_RDZV_FULL = re.compile(
    r"(?:--nccl-init(?:-addr)?|--dist-init-addr|dist_init_addr=|MASTER_ADDR=|--master[-_]addr[ =])"
    r"\s*'?(\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?)"
)


def rendezvous_disagree(
    observations: list[Observation],
) -> tuple[str, str, str, str, str] | None:
    """(observation id, line, other line, address, other address) when one launch script starts
    the nodes of one multi-node job (a node rank or --nnodes on each command) with different
    rendezvous addresses: every node must meet rank 0 at the same address, so each waits at its
    own and init never finishes. A script's settings only, never a log (which echoes one node)."""
    for o in observations:
        if not o["ok"] or o["tool"] != "config_read":
            continue
        commands: list[tuple[str, str]] = []  # (the physical line naming the address, the value)
        joined, first = "", ""
        for ln in [*text_lines(o), ""]:
            if not joined:
                first = ""
            joined += " " + ln.rstrip().removesuffix("\\")
            if _RDZV_FULL.search(ln) and not first:
                first = ln
            if ln.rstrip().endswith("\\"):
                continue
            m = _RDZV_FULL.search(joined)
            if m and first and (_RANK.search(joined) or _NNODES.search(joined)):
                commands.append((first, m.group(1)))
            joined = ""
        values = dict.fromkeys(v for _, v in commands)
        if len(values) >= 2:
            (a_line, a), (b_line, b) = (
                commands[0],
                next(c for c in commands if c[1] != commands[0][1]),
            )
            return o["id"], a_line, b_line, a, b
    return None


def rendezvous_disagree_rules(observations: list[Observation], add) -> None:  # type: ignore[no-untyped-def]
    hit = rendezvous_disagree(observations)
    if hit is None:
        return
    oid, a_line, b_line, a, b = hit
    why = (
        f"the nodes of one job were told to meet at different rendezvous addresses ({a} and "
        f"{b}): each waits at its own for the others, so distributed init never completes; "
        "every node must name rank 0's address"
    )
    add("bad_launch_argument", "cause", _C.names_the_cause, oid, a_line, why)
    add("bad_launch_argument", "cause", _C.setting_line, oid, b_line, why)


# -- NCCL on the loopback interface, across nodes --------------------------------------------------
#: NCCL's interface choice (bootstrap or the socket transport) and the ranks it serves.
_NCCL_LO = re.compile(
    r"NCCL INFO (?:NET\s*:\s*Using interface|NET/Socket\s*:\s*Using|Bootstrap\s*:\s*Using)"
    r"\s*(?:\[\d+\])?lo:127\."
)
_NCCL_HOST = re.compile(r"^(\S+?):\d+:\d+ \[\d+\] NCCL ")
_NRANKS = re.compile(r"(?i)\bn[Rr]anks[ =:]+(\d+)")
#: torch's Gloo groups (the CPU groups engines create beside NCCL) falling back to loopback:
#: they ignore NCCL_SOCKET_IFNAME and bind what the hostname resolves to, else 127.0.0.1
_GLOO_LO = re.compile(r"Using the loopback address as fallback|Gloo[^\n]{0,80}\blo:127\.")
#: how many nodes the launch spans, as the launch itself says it
_NNODES = re.compile(r"(?:--nnodes[ =]|\bnnodes=)'?(\d+)")


def loopback_across_nodes(observations: list[Observation]) -> tuple[str, str, str] | None:
    """(observation id, line, why) when NCCL put a job spanning several hosts on the loopback
    interface: each rank advertises 127.0.0.1 to the others, so the bootstrap waits forever.
    Several hosts are shown by the logs themselves (NCCL's host prefixes differ) or by more
    ranks than this host has GPUs."""
    hosts: set[str] = set()
    nranks = 0
    lo: tuple[str, str] | None = None
    logs = [o for o in observations if o["ok"] and o["tool"] in LOG_READS]
    for o in logs:
        for ln in text_lines(o):
            m = _NCCL_HOST.match(ln)
            if m:
                hosts.add(m.group(1))
            n = _NRANKS.search(ln)
            if n and "NCCL" in ln:
                nranks = max(nranks, int(n.group(1)))
            if lo is None and (_NCCL_LO.search(ln) or _GLOO_LO.search(ln)):
                lo = (o["id"], ln)
    if lo is None:
        return None
    nodes = 0
    for o in observations:  # the launch's own word: --nnodes 2 on its command line or args
        if o["ok"]:
            for ln in text_lines(o):
                for m in _NNODES.finditer(ln):
                    nodes = max(nodes, int(m.group(1)))
    if nodes >= 2:
        return lo[0], lo[1], f"{nodes} nodes (--nnodes {nodes})"
    gpus = 0
    for o in observations:
        if o["tool"] == "gpu_status" and o["ok"]:
            gpus = max(gpus, len(o["data"].get("gpus") or []))
    if len(hosts) >= 2:
        return lo[0], lo[1], f"ranks on {len(hosts)} hosts ({', '.join(sorted(hosts)[:3])})"
    if gpus and nranks > gpus:
        return lo[0], lo[1], f"{nranks} ranks on a host with {gpus} GPU(s)"
    return None


#: torch's rendezvous as the engine prints it for a rank: "distributed_init_method=tcp://127.0.0.1:35517"
_TORCH_LO = re.compile(r"\bdistributed_init_method=tcp://(?:127\.\d+\.\d+\.\d+|localhost):\d+")
#: a Ray actor's line from another node than the driver's: "(RayWorkerWrapper pid=N, ip=10.0.0.2)"
_RAY_REMOTE = re.compile(r"\(\w+ pid=\d+, ip=(\d{1,3}(?:\.\d{1,3}){3})\)")


def remote_rank_at_loopback(observations: list[Observation]) -> tuple[str, str, str] | None:
    """(observation id, line, node ip) when a rank on another node (Ray tags its lines with
    that node's ip) was told to rendezvous at 127.0.0.1: it meets nobody there, and the ranks
    on the driver's node wait for it. The launch's layout gave it the driver's loopback (a
    data-parallel group spread over Ray nodes without Ray's own backend), not an interface."""
    for o in observations:
        if not o["ok"] or o["tool"] not in LOG_READS:
            continue
        for ln in text_lines(o):
            m = _RAY_REMOTE.search(ln)
            if m and _TORCH_LO.search(ln):
                return o["id"], ln, m.group(1)
    return None


def _loopback_cause(observations: list[Observation]) -> tuple[str, str, str, bool] | None:
    """(obs id, line, why, by an interface setting) for a job whose ranks were sent to
    loopback: the transport chose lo across nodes (an interface setting let it), or a rank on
    another node was told to rendezvous at 127.0.0.1 (the layout's address did)."""
    hit = loopback_across_nodes(observations)
    if hit is not None:
        oid, line, why = hit
        return (
            oid,
            line,
            f"the ranks' transport (NCCL or Gloo) chose the loopback interface for a job with "
            f"{why}: they advertise 127.0.0.1 to each other and never meet; the interface "
            "setting is wrong",
            True,
        )
    remote = remote_rank_at_loopback(observations)
    if remote is not None:
        oid, line, ip = remote
        return (
            oid,
            line,
            f"a rank on another node ({ip}) was told to rendezvous at 127.0.0.1, its own "
            "loopback: it never meets the others; the launch's layout (its data-parallel "
            "backend or rendezvous address) must name a reachable address",
            False,
        )
    return None


def loopback_rules(observations: list[Observation], add) -> None:  # type: ignore[no-untyped-def]
    hit = _loopback_cause(observations)
    if hit is None:
        return
    oid, line, why, by_interface = hit
    add("bad_launch_argument", "cause", _C.names_the_cause, oid, line, why)
    if not by_interface:
        return
    # the setting behind it, where the evidence shows one (Gloo reads only its own variable)
    wanted = (
        ("GLOO_SOCKET_IFNAME",)
        if _GLOO_LO.search(line)
        else ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")
    )
    for o in observations:
        if not o["ok"]:
            continue
        for ln in text_lines(o):
            m = _SET.search(ln)
            if m and m.group(1) in wanted:
                add(
                    "bad_launch_argument",
                    "cause",
                    _C.setting_line,
                    o["id"],
                    ln,
                    f"{m.group(1)}={m.group(2)} let the transport pick lo: exclude lo too, or "
                    "name the interface the nodes share",
                )
                return


# -- a misspelled env var in the launch ------------------------------------------------------------
#: Env vars whose misspelling silently does nothing; a launch that meant one of them runs with
#: the default (every GPU visible, the default interface, ...).
KNOWN_ENV = (
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "NCCL_SOCKET_IFNAME",
    "NCCL_IB_DISABLE",
    "NCCL_P2P_DISABLE",
    "NCCL_DEBUG",
    "PYTORCH_CUDA_ALLOC_CONF",
    "TORCH_CUDA_ARCH_LIST",
    "VLLM_HOST_IP",
    "MASTER_ADDR",
    "MASTER_PORT",
    "HF_HOME",
)
_ASSIGN = re.compile(r"(?:^|[\s;&(]|export\s+)([A-Z][A-Z0-9_]{5,})=\S")


def _edit1(a: str, b: str) -> bool:
    """One insertion, deletion, substitution or adjacent swap apart (and not equal)."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        return len(diff) == 1 or (
            len(diff) == 2
            and diff[1] == diff[0] + 1
            and a[diff[0]] == b[diff[1]]
            and a[diff[1]] == b[diff[0]]
        )
    s, t = (a, b) if len(a) < len(b) else (b, a)
    i = next((k for k in range(len(s)) if s[k] != t[k]), len(s))
    return s[i:] == t[i + 1 :]


def misspelled_env(observations: list[Observation]) -> tuple[str, str, str, str] | None:
    """(observation id, line, written, meant) for an assignment whose name is one edit away from
    a known env var: the launch ran as if it were never set."""
    for o in observations:
        if not o["ok"] or o["tool"] in ("gpu_status", "dmesg", "disk", "ports"):
            continue
        for ln in text_lines(o):
            for m in _ASSIGN.finditer(ln):
                name = m.group(1)
                if name in KNOWN_ENV:
                    continue
                meant = next((k for k in KNOWN_ENV if _edit1(name, k)), None)
                if meant:
                    return o["id"], ln, name, meant
    return None


def misspelled_env_rules(observations: list[Observation], hits, add) -> None:  # type: ignore[no-untyped-def]
    hit = misspelled_env(observations)
    if hit is None:
        return
    oid, line, name, meant = hit
    # only a cause when something failed: a typo beside a healthy run is a remark, not a verdict
    fatal = next(((o, m) for o, m in hits if m.strength == "fatal"), None)
    if fatal is None:
        return
    add(
        "bad_launch_argument",
        "cause",
        _C.proven_setting,
        oid,
        line,
        f"{name} is a misspelling of {meant}: the launch ran as if {meant} were unset",
    )
    o, m = fatal  # the failure it explains, cited beside the cause
    add(
        "bad_launch_argument",
        "cause",
        _C.effect_cited,
        o["id"],
        m.line,
        f"the failure that follows from {meant} not being in effect",
    )


# -- a CUDA driver API symbol the installed driver lacks -------------------------------------------
_DRIVER_SYMBOL = re.compile(r"undefined symbol: (cu[A-Z]\w+)\b")


def driver_symbol_rules(observations: list[Observation], add) -> None:  # type: ignore[no-untyped-def]
    """`undefined symbol: cuKernelGetName` names a CUDA *driver* API function (libcuda's `cu*`,
    not a C++ mangled `_Z...` name): the installed driver is older than what the library was
    built for. A mangled symbol is a package ABI mismatch instead (dependency_error)."""
    for o in observations:
        if not o["ok"]:
            continue
        for ln in text_lines(o):
            m = _DRIVER_SYMBOL.search(ln)
            if m:
                add(
                    "cuda_driver_mismatch",
                    "cause",
                    _C.names_the_cause,
                    o["id"],
                    ln,
                    f"{m.group(1)} is a CUDA driver API function the installed driver "
                    "(libcuda) does not export: the driver is older than the library needs",
                )
                return


# -- the server's own requests sent through an HTTP proxy ------------------------------------------
#: A request line in absolute form ("GET http://host:port/path HTTP/1.1") is only ever sent to a
#: proxy (urllib3/requests log it so at debug level), with the status the proxy answered.
_PROXIED = re.compile(r'"(?:GET|POST|HEAD|PUT) https?://([^/:"\s]+)(?::(\d+))?/[^"]*" ([45]\d\d)\b')
_PROXY_ENV = re.compile(r"(?i)(?:^|\s|export\s+)(https?_proxy|all_proxy)=(\S+)")
_NO_PROXY = re.compile(r"(?i)(?:^|\s|export\s+)no_proxy=(\S*)")
_LOCAL = re.compile(r"^(?:0\.0\.0\.0|127\.\d+\.\d+\.\d+|localhost|\[?::1?\]?)$")


def _bypassed(host: str, no_proxy: str) -> bool:
    for entry in (e.strip() for e in no_proxy.split(",")):
        if entry == "*" or (entry and (host == entry or host.endswith("." + entry.lstrip(".")))):
            return True
    return False


def _proxy_scan(
    observations: list[Observation], rx: re.Pattern[str], keep: Callable[[str], bool]
) -> tuple[tuple[str, str] | None, str, tuple[str, str, str] | None]:
    """One pass over the reads: the proxy setting line, no_proxy, and the first line where `rx`
    matches with a host (its group 1) that `keep` accepts, as (obs, line, host)."""
    setting: tuple[str, str] | None = None
    no_proxy = ""
    found: tuple[str, str, str] | None = None
    for o in observations:
        if not o["ok"]:
            continue
        for ln in text_lines(o):
            if setting is None and _PROXY_ENV.search(ln):
                setting = (o["id"], ln)
            n = _NO_PROXY.search(ln)
            if n:
                no_proxy = n.group(1)
            m = rx.search(ln)
            if found is None and m and keep(m.group(1)):
                found = (o["id"], ln, m.group(1))
    return setting, no_proxy, found


def proxied_own_request(
    observations: list[Observation],
) -> tuple[tuple[str, str], tuple[str, str], str, str] | None:
    """((obs, request line), (obs, proxy setting line), host, no_proxy) when a request to this
    host's own address (0.0.0.0, loopback, one of its IPs) went out through the HTTP proxy the
    launch environment names and came back 4xx/5xx: the server's own warm-up or health check
    (or a client beside it) talks to a proxy, not to the server."""
    mine = addresses(observations) | {"0.0.0.0", "localhost"}
    setting, no_proxy, request = _proxy_scan(
        observations, _PROXIED, lambda h: bool(_LOCAL.match(h)) or h in mine
    )
    if setting is None or request is None or _bypassed(request[2], no_proxy):
        return None
    return (request[0], request[1]), setting, request[2], no_proxy


#: the address a server binds, as its launch flags or SGLang's / vLLM's argument dump say
_BIND_HOST = re.compile(r"(?:--host[ =]|\bhost=')(\d{1,3}(?:\.\d{1,3}){3}|localhost)\b")


def proxy_risk(observations: list[Observation]) -> tuple[str, str, str, str] | None:
    """(obs, proxy setting line, bind host, no_proxy) when the launch environment sends HTTP
    through a proxy whose no_proxy does not cover the address the server binds: its own
    start-up requests (SGLang's warm-up to http://HOST:PORT) and any local client will reach
    the proxy, not the server. A risk, not yet a failure."""
    setting, no_proxy, bind = _proxy_scan(observations, _BIND_HOST, lambda h: bool(_LOCAL.match(h)))
    if setting is None or bind is None or _bypassed(bind[2], no_proxy):
        return None
    return setting[0], setting[1], bind[2], no_proxy


#: a launch's own HTTP request answered by a proxy, not by the server: python-requests' repr of a
#: proxy's status (SGLang's warm-up asserts on it), a proxy's own page or header
_PROXY_ANSWER = re.compile(
    r"<Response \[(?:403|407|502|503|504)\]>|\bServer: squid\b|X-Squid-Error|ERR_ACCESS_DENIED|"
    r"Proxy Authentication Required"
)


def _refused_by_proxy(observations: list[Observation]) -> tuple[str, str] | None:
    """(obs, line) of the launch's own log where its request to itself got a proxy's answer."""
    for o in observations:
        if o["ok"] and o["tool"] in LOG_READS:
            for ln in text_lines(o):
                if _PROXY_ANSWER.search(ln):
                    return o["id"], ln
    return None


def proxy_rules(facts, observations: list[Observation], hits, add) -> None:  # type: ignore[no-untyped-def]
    hit = proxied_own_request(observations)
    if hit is None:
        risk = proxy_risk(observations)
        refused = _refused_by_proxy(observations) if risk is not None else None
        if risk is not None and refused is not None:
            # the launch's own request (a warm-up to itself) got a proxy's answer, and the
            # launch environment sends its bind address through that proxy: the cause
            oid, line, host, no_proxy = risk
            add(
                "bad_launch_argument",
                "cause",
                _C.names_the_cause,
                refused[0],
                refused[1],
                f"the launch's request to itself ({host}) was answered by an HTTP proxy's "
                "status, not by the server",
            )
            add(
                "bad_launch_argument",
                "cause",
                _C.setting_line,
                oid,
                line,
                f"the proxy is set for the launch and no_proxy ({no_proxy or 'unset'}) does not "
                f"cover {host}, the address the server binds",
            )
            return
        risk = risk if facts.server_alive else None
        if risk is not None and not any(m.strength == "fatal" for _, m in hits):
            oid, line, host, no_proxy = risk
            # a lead only (no failure yet): named when nothing else explains the symptom
            add(
                "bad_launch_argument",
                "cause",
                F.hints,
                oid,
                line,
                f"HTTP goes through this proxy and no_proxy ({no_proxy or 'unset'}) does not "
                f"cover {host}, the address the server binds: its own start-up requests (a "
                "warm-up) and local clients will reach the proxy, not the server",
            )
        return
    # a cause only when the launch failed: a proxied 403 beside a healthy server is a remark
    if facts.server_alive is not False and not any(m.strength == "fatal" for _, m in hits):
        return
    (roid, rline), (soid, sline), host, no_proxy = hit
    add(
        "bad_launch_argument",
        "cause",
        _C.names_the_cause,
        roid,
        rline,
        f"a request to the server's own address {host} went through the HTTP proxy and was "
        "refused there: the proxy settings of the launch environment catch local traffic",
    )
    add(
        "bad_launch_argument",
        "cause",
        _C.setting_line,
        soid,
        sline,
        f"the proxy is set for the launch and no_proxy ({no_proxy or 'unset'}) does not "
        f"cover {host}",
    )
    effect = _first_fatal(observations, hits)
    if effect is not None:  # the failure it explains, cited beside the cause
        add(
            "bad_launch_argument",
            "cause",
            _C.effect_cited,
            effect[0],
            effect[1],
            "the failure that follows: the server's own request was refused by the proxy",
        )


def _first_fatal(observations: list[Observation], hits) -> tuple[str, str] | None:  # type: ignore[no-untyped-def]
    """The first fatal line: a fatal signature's, else one fatal by structure (a traceback's
    last line, an ERROR line) in a launch log."""
    for o, m in hits:
        if m.strength == "fatal":
            return o["id"], m.line
    for o in observations:
        if o["ok"] and o["tool"] in LOG_READS:
            found = proof.fatal_lines(o["lines"])  # (index, kind) of each
            if found:
                return o["id"], o["lines"][found[0][0]]
    return None


# -- a rendezvous address that does not resolve ----------------------------------------------------
_RESOLVE_FAIL = re.compile(
    r"(?i)Name or service not known|Temporary failure in name resolution|nodename nor servname|"
    r"getaddrinfo (?:failed|ENOTFOUND)|Could not resolve host|"
    r"Name does not resolve|Unknown host"
)
#: the host a resolver error names: "addresses of (HOST, PORT)", "[HOST]:PORT", "host HOST"
_FAILED_HOST = re.compile(
    r"addresses of \(([\w.-]+), ?\d+\)|\[([\w.-]+)\]:\d+|\bhost[ =:]+'?([A-Za-z][\w.-]+)"
)
_NO_CONNECT = re.compile(r"(?i)fail(?:ed)? to connect|connect(?:ion)? (?:failed|refused|timed out)")
_RDZV_HOST = re.compile(
    r"(?:MASTER_ADDR=|--master[-_]addr[ =]|--dist-init-addr[ =]|dist_init_addr=|"
    r"--nccl-init-addr[ =]|--rdzv[-_]endpoint[ =]|--head-node-ip[ =])'?([A-Za-z][\w.-]*)"
)


def unresolvable_rendezvous(
    observations: list[Observation],
) -> tuple[tuple[str, str], tuple[str, str], str] | None:
    """((obs, resolver error), (obs, setting), host) when the rendezvous host the launch was
    given (MASTER_ADDR, --dist-init-addr, ...) is the name the resolver could not find: every
    rank retries the connect forever, and no error of the job's own is ever printed."""
    failed: dict[str, tuple[str, str]] = {}
    ipv6_only: dict[str, tuple[str, str]] = {}
    no_connect: set[str] = set()
    settings: dict[str, tuple[str, str]] = {}
    for o in observations:
        if not o["ok"]:
            continue
        for ln in text_lines(o):
            m = _FAILED_HOST.search(ln)
            host = next((g for g in m.groups() if g), "").lower() if m else ""
            if host and _RESOLVE_FAIL.search(ln):
                # torch tries IPv6 first: that lookup failing alone is a common, harmless warning
                target = ipv6_only if "IPv6" in ln else failed
                target.setdefault(host, (o["id"], ln))
            elif host and _NO_CONNECT.search(ln):
                no_connect.add(host)
            for s in _RDZV_HOST.finditer(ln):
                settings.setdefault(s.group(1).lower(), (o["id"], ln))
    for host, err in ipv6_only.items():
        if host in no_connect:  # ... unless the connect to the same name failed as well
            failed.setdefault(host, err)
    for host, err in failed.items():
        if host in settings:
            return err, settings[host], host
    return None


def unresolvable_rules(observations: list[Observation], add) -> None:  # type: ignore[no-untyped-def]
    hit = unresolvable_rendezvous(observations)
    if hit is None:
        return
    (eoid, eline), (soid, sline), host = hit
    add(
        "bad_launch_argument",
        "cause",
        _C.names_the_cause,
        eoid,
        eline,
        f"the rendezvous host {host} does not resolve here: the ranks retry the connect forever",
    )
    add(
        "bad_launch_argument",
        "cause",
        _C.setting_line,
        soid,
        sline,
        f"the launch names {host} as the rendezvous address",
    )


# -- speculative decoding switched on without the draft model it needs -----------------------------
#: EAGLE-style algorithms run a separate draft head; MTP/NEXTN reuse the target's own layers.
_SPEC_ALGO = re.compile(
    r"(?i)(?:speculative_algorithm=['\"]?|--speculative-algorithm[ =])(EAGLE3?|MEDUSA|STANDALONE)\b"
)
_NO_DRAFT = re.compile(r"speculative_draft_model_path=None\b")
_SPEC_FRAME = re.compile(r"/speculative/|draft_worker|draft_model_runner|spec_decode/")


def draftless(
    observations: list[Observation], hits
) -> tuple[tuple[str, str, str], tuple[str, str], tuple[str, str]] | None:  # type: ignore[no-untyped-def]
    """`--speculative-algorithm EAGLE3` with `speculative_draft_model_path=None` and a crash
    inside the speculative worker: (the algorithm's (obs id, line, name), the None setting's
    (obs id, text), the first fatal (obs id, line)), else None."""
    algo = none = None
    crash_in_spec = False
    for o in observations:
        if not o["ok"] or o["tool"] not in LOG_READS | {"config_read", "processes"}:
            continue
        lines = text_lines(o)
        for ln in lines:
            if algo is None and (m := _SPEC_ALGO.search(ln)):
                algo = (o["id"], ln, m.group(1).upper())
            if none is None and _NO_DRAFT.search(ln):
                none = (o["id"], _NO_DRAFT.search(ln).group(0))  # type: ignore[union-attr]
            if _SPEC_FRAME.search(ln):
                crash_in_spec = True
    fatal = _first_fatal(observations, hits)
    if algo is None or none is None or not crash_in_spec or fatal is None:
        return None
    return algo, none, fatal


def draftless_rules(observations: list[Observation], hits, add) -> None:  # type: ignore[no-untyped-def]
    """`--speculative-algorithm EAGLE3` with `speculative_draft_model_path=None`: the engine
    loads the target model itself as the draft head and fails inside the speculative worker
    (an AttributeError on the head's methods). The cause is the missing draft model flag."""
    found = draftless(observations, hits)
    if found is None:
        return
    algo, none, fatal = found
    add(
        "bad_launch_argument",
        "cause",
        _C.names_the_cause,
        none[0],
        none[1],
        f"speculative decoding ({algo[2]}) is on but no draft model was given: the engine "
        "used the target model as its draft head and failed in the speculative worker",
    )
    add(
        "bad_launch_argument",
        "cause",
        _C.setting_line,
        algo[0],
        algo[1],
        "the flag that turned it on",
    )
    add(
        "bad_launch_argument",
        "cause",
        _C.effect_cited,
        fatal[0],
        fatal[1],
        "the failure that follows",
    )


# -- the launch shown fewer GPUs than the host has -------------------------------------------------
#: how many GPUs the engine itself says it found (llama.cpp/ggml, Ollama, torch/vLLM wording)
_FOUND_GPUS = re.compile(
    r"found (\d+) CUDA devices?|detected GPUs\b.*?\bcount=(\d+)|"
    r"(?:Found|Detected) (\d+) (?:CUDA )?(?:GPUs?|devices?)\b|device_count\(\)\s*[=:]\s*(\d+)"
)
_VISIBLE = re.compile(r"\b(CUDA_VISIBLE_DEVICES|NVIDIA_VISIBLE_DEVICES)=\"?([0-9][0-9,\s]*)")


def hidden_gpus(
    facts,
    observations: list[Observation],  # type: ignore[no-untyped-def]
) -> tuple[tuple[str, str], tuple[str, str], int, int, str, str] | None:
    """((obs, setting line), (obs, found line), found, on host, variable, value) when the engine
    found fewer GPUs than nvidia-smi lists and the launch's visible-devices setting lists just
    as few: the setting hides the rest (a leftover pin in a unit file, a copied env)."""
    on_host = len(facts.gpus)
    if on_host < 2:
        return None
    setting = found = None
    for o in observations:
        if not o["ok"]:
            continue
        for ln in text_lines(o):
            if setting is None and (m := _VISIBLE.search(ln)):
                value = m.group(2).strip().rstrip(",")
                setting = (o["id"], ln, m.group(1), value)
            if found is None and (f := _FOUND_GPUS.search(ln)):
                n = int(next(g for g in f.groups() if g is not None))
                found = (o["id"], ln, n)
    if setting is None or found is None:
        return None
    listed = [x for x in re.split(r"[,\s]+", setting[3]) if x]
    if not (found[2] < on_host and len(listed) == found[2]):
        return None
    return (setting[0], setting[1]), (found[0], found[1]), found[2], on_host, setting[2], setting[3]


def hidden_gpus_rules(facts, observations: list[Observation], add) -> None:  # type: ignore[no-untyped-def]
    hit = hidden_gpus(facts, observations)
    if hit is None:
        return
    (soid, sline), (foid, fline), found, on_host, var, value = hit
    add(
        "bad_launch_argument",
        "cause",
        _C.names_the_cause,
        soid,
        sline,
        f"{var}={value} shows the server {found} of this host's {on_host} GPUs",
    )
    add(
        "bad_launch_argument",
        "cause",
        _C.effect_cited,
        foid,
        fline,
        f"the engine found only {found} GPU(s) while nvidia-smi lists {on_host}",
    )


# -- a live server computing without its GPUs -------------------------------------------------------
#: why an engine drops every GPU at discovery and falls back to the CPU
_GPU_DROPPED = ("cuda_driver_mismatch", "unsupported_gpu_arch")


def gpus_unused_rules(facts, hits, add) -> None:  # type: ignore[no-untyped-def]
    """The server is alive and at work, yet none of its processes holds GPU memory while the
    host's GPUs sit empty: it runs on the CPU. That is the effect of a discovery-time error
    (a driver too old for the bundled CUDA, a GPU its build cannot target); the error names
    the cause, the empty GPUs confirm nothing used them."""
    if not facts.server_alive or not facts.gpus or not facts.gpu_obs:
        return
    if any(p in facts.gpu_pids for p in facts.server_pids):
        return
    if any((g.used_mib or 0) >= 1024 for g in facts.gpus):
        return  # memory held by someone: not "no GPU in use"
    busy = [p for p in facts.server_pids if (facts._ps_recs.get(p, {}).get("cpu_pct") or 0) >= 100]
    if not busy:
        return  # an idle server holds no GPU memory yet either
    labels = {
        m.label for _, m in hits if m.label in _GPU_DROPPED and m.strength in ("fatal", "strong")
    }
    g = facts.gpus[0]
    for label in sorted(labels):
        add(
            label,
            "cause",
            _C.effect_cited,
            facts.gpu_obs,
            g.line,
            f"the server (pid {busy[0]}) computes on the CPU: no GPU holds any of its memory",
        )


# -- a GPU newer than the toolkit the binary was built with -----------------------------------------
_CC = re.compile(r"compute capability:?\s*(\d+)\.(\d)\b")
#: the toolkit a binary was built with, as its install path or its wheel tag says (never the
#: driver's "CUDA Version:" from nvidia-smi, which is what the driver supports)
_BUILD_CUDA = re.compile(r"(?:/cuda-|[/_-]cuda_?v?|\+cu)(\d{2})\.?(\d)\b(?!\.\d)")


@lru_cache(maxsize=1)
def _max_cc() -> list[tuple[float, float]]:
    raw = yamlio.safe_load(
        (Path(__file__).parents[1] / "knowledge" / "cuda_arch.yaml").read_text(encoding="utf-8")
    )
    return sorted((float(k), float(v)) for k, v in raw["max_compute_capability"].items())


def min_cuda_for(cc: float) -> float | None:
    """The oldest toolkit in the table that builds for this compute capability."""
    return next((ver for ver, top in _max_cc() if top >= cc - 1e-9), None)


def max_cc_for(cuda: float) -> float | None:
    table = [cc for ver, cc in _max_cc() if ver <= cuda + 1e-9]
    return table[-1] if table else None


def arch_beyond_build(
    facts,
    observations: list[Observation],  # type: ignore[no-untyped-def]
) -> tuple[tuple[str, str], tuple[str, str], float, float, float] | None:
    """((obs, the GPU's capability line), (obs, the build's toolkit line), capability, toolkit,
    the toolkit's newest capability) when a live, silent server runs on a GPU newer than its
    binary's toolkit can build for: the driver JIT-compiles every kernel from PTX (or cannot)."""
    if not facts.server_alive or any(facts.log_growth.values()):
        return None
    cc_hit = build = None
    for o in observations:
        if not o["ok"]:
            continue
        for ln in text_lines(o):
            if cc_hit is None and (m := _CC.search(ln)):
                cc_hit = (o["id"], ln, float(f"{m.group(1)}.{m.group(2)}"))
            if build is None and "CUDA Version:" not in ln and (b := _BUILD_CUDA.search(ln)):
                build = (o["id"], ln, float(f"{b.group(1)}.{b.group(2)}"))
    if cc_hit is None or build is None:
        return None
    top = max_cc_for(build[2])
    if top is None or cc_hit[2] <= top:
        return None
    return (cc_hit[0], cc_hit[1]), (build[0], build[1]), cc_hit[2], build[2], top


def arch_beyond_build_rules(facts, observations: list[Observation], add) -> None:  # type: ignore[no-untyped-def]
    hit = arch_beyond_build(facts, observations)
    if hit is None:
        return
    (coid, cline), (boid, bline), cc, cuda, top = hit
    add(
        "unsupported_gpu_arch",
        "cause",
        _C.names_the_cause,
        coid,
        cline,
        f"the GPU is compute capability {cc:.1f}; the binary's CUDA {cuda:.1f} builds for at "
        f"most {top:.1f}: every kernel is JIT-compiled from PTX at first use (or has no image)",
    )
    add(
        "unsupported_gpu_arch",
        "cause",
        _C.setting_line,
        boid,
        bline,
        f"built with CUDA {cuda:.1f}",
    )


# -- a device list that expands to nothing --------------------------------------------------------
_EXPANSION = re.compile(r"^\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?$")
_NO_GPUS = re.compile(
    r"No CUDA GPUs are available|no CUDA-capable device is detected|found 0 CUDA devices?|"
    r"(?:Found|Detected) 0 (?:CUDA )?(?:GPUs?|devices?)\b|device_count\(\)\s*[=:]\s*0\b"
)
_DEFINED = re.compile(r"^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=")


def unset_devices(observations: list[Observation]) -> tuple[str, str, str, str, str] | None:
    """(setting obs, setting line, found obs, found line, why) when the launch's own config sets
    the visible-devices list to a variable nothing defines (or to nothing) and the engine then
    found no GPU: the line that hid the GPUs, not only the error it caused."""
    defined: set[str] = set()
    candidates: list[tuple[str, str, str]] = []
    for o in observations:
        if not o["ok"]:
            continue
        if o["tool"] == "config_read":
            for st in o["data"].get("sources") or []:
                key, value = str(st.get("key") or ""), str(st.get("value") or "")
                defined.add(key)
                if key not in ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"):
                    continue
                m = _EXPANSION.match(value.strip("\"'"))
                if m:
                    candidates.append((o["id"], str(st.get("line") or ""), m.group(1)))
                elif not value.strip("\"' "):
                    candidates.append((o["id"], str(st.get("line") or ""), ""))
        elif o["tool"] in ("host_facts", "launch_env"):
            defined |= {m.group(1) for ln in o["lines"] if (m := _DEFINED.match(ln.strip()))}
    found = next(
        (
            (o["id"], ln)
            for o in observations
            if o["ok"] and o["tool"] in LOG_TOOLS
            for ln in text_lines(o)
            if _NO_GPUS.search(ln)
        ),
        None,
    )
    if found is None:
        return None
    for oid, line, var in candidates:
        if var and var in defined:
            continue
        why = f"${{{var}}} is set nowhere the launch reads" if var else "it is set to nothing"
        return oid, line, found[0], found[1], why
    return None


def unset_devices_rules(observations: list[Observation], add) -> None:  # type: ignore[no-untyped-def]
    hit = unset_devices(observations)
    if hit is None:
        return
    soid, sline, foid, fline, why = hit
    add(
        "bad_launch_argument",
        "cause",
        _C.names_the_cause,
        soid,
        sline,
        f"the launch's visible-devices list is empty: {why}",
    )
    add(
        "bad_launch_argument",
        "cause",
        _C.effect_cited,
        foid,
        fline,
        "the engine found no GPU: the empty device list hid them all",
    )


# -- a memory fraction too small to hold anything --------------------------------------------------
_FRACTION = re.compile(
    r"\b(mem_fraction_static|gpu_memory_utilization)=([0-9.]+)|"
    r"--(mem-fraction-static|gpu-memory-utilization)[= ]([0-9.]+)"
)


def tiny_fraction(observations: list[Observation], hits) -> tuple[str, str, str, float] | None:  # type: ignore[no-untyped-def]
    """(obs, line, setting, value) when the launch's last start-up set its memory fraction so
    low that nothing fits, and it then failed for room: the setting, not the GPU, is the cause."""
    if not any(m.strength == "fatal" and m.label == "kv_cache_no_room" for _, m in hits):
        return None
    for o in observations:
        if not o["ok"] or o["tool"] != "log_tail":
            continue
        lines = text_lines(o)
        for ln in lines[last_launch(lines) :][:200]:
            m = _FRACTION.search(ln)
            if m:
                key = m.group(1) or m.group(3)
                value = float(m.group(2) or m.group(4))
                if 0 < value < _C.tiny_memory_fraction:
                    return o["id"], ln, key, value
                break
    return None


def tiny_fraction_rules(observations: list[Observation], hits, add) -> None:  # type: ignore[no-untyped-def]
    hit = tiny_fraction(observations, hits)
    if hit is None:
        return
    oid, line, key, value = hit
    add(
        "bad_launch_argument",
        "cause",
        _C.proven_setting,
        oid,
        line,
        f"{key}={value} leaves almost no GPU memory to the engine: the setting is why nothing fit",
    )
    for o, m in hits:
        if m.strength == "fatal" and m.label == "kv_cache_no_room":
            add(
                "bad_launch_argument",
                "cause",
                _C.effect_cited,
                o["id"],
                m.line,
                "no room for the KV cache: what so small a fraction leads to",
            )
            break


# -- a model type no transformers release knows ----------------------------------------------------
_MODEL_TYPE = re.compile(r"has model type `([\w-]+)` but Transformers does not recognize")


@lru_cache(maxsize=1)
def known_model_types() -> frozenset[str]:
    """The model types the newest transformers release read knows (knowledge/hf_model_types.yaml)."""
    raw = yamlio.safe_load(
        (Path(__file__).parents[1] / "knowledge" / "hf_model_types.yaml").read_text(
            encoding="utf-8"
        )
    )
    return frozenset(raw["model_types"])


def unknown_model_type(hits) -> tuple[str, str, str] | None:  # type: ignore[no-untyped-def]
    """(observation id, line, model type) when transformers refused a checkpoint whose model
    type no release knows: its message says "an issue with the checkpoint, or your version is
    out of date", and only the first can be true."""
    for o, m in hits:
        if m.signature != "transformers-too-old-for-model":
            continue
        t = _MODEL_TYPE.search(m.line)
        if t and t.group(1) not in known_model_types():
            return o["id"], m.line, t.group(1)
    return None


def unknown_model_type_rules(hits, add) -> None:  # type: ignore[no-untyped-def]
    hit = unknown_model_type(hits)
    if hit is None:
        return
    oid, line, kind = hit
    why = (
        f"no transformers release knows model type {kind!r}: upgrading cannot help; the path "
        "given is not a transformers checkpoint of its own (a wrapper's root whose language model "
        "is in a subfolder, or a model that needs its own code: trust_remote_code)"
    )
    add("model_load_error", "fact", F.proves, oid, line, why)


# -- a setting known to break a component (knowledge/conflicts.yaml) -------------------------------
#: where a launch's settings are read: its environment, env files and configs, its container's
#: spec; never its own log (a log that echoes a variable is not where it was set)
_SETTING_TOOLS = ("host_facts", "launch_env", "config_read", "container_inspect")
#: service_logs' lines after this header are the pod's record (its spec's env), not its log
_POD_RECORD = "# kubectl describe pod "


class Conflict(BaseModel):
    """One known setting/component conflict (agent/knowledge/conflicts.yaml)."""

    id: str
    setting: re.Pattern[str]
    error: re.Pattern[str]
    why: str
    fix: str


@lru_cache(maxsize=1)
def _conflicts() -> list[Conflict]:
    raw = yamlio.safe_load(
        (Path(__file__).parents[1] / "knowledge" / "conflicts.yaml").read_text(encoding="utf-8")
    )
    return [Conflict.model_validate(c) for c in raw or []]


def _setting_lines(o: Observation) -> list[str]:
    if o["tool"] in _SETTING_TOOLS:
        return o["lines"]
    if o["tool"] == "service_logs":
        at = next((i for i, ln in enumerate(o["lines"]) if ln.startswith(_POD_RECORD)), None)
        return o["lines"][at + 1 :] if at is not None else []
    return []


def setting_conflict(
    observations: list[Observation],
) -> tuple[Conflict, str, str, str, str] | None:
    """(entry, setting obs, setting line, error obs, error line) for the first known conflict
    whose setting the launch's settings hold and whose error its log shows."""
    for c in _conflicts():
        setting = next(
            (
                (o["id"], ln)
                for o in observations
                if o["ok"]
                for ln in _setting_lines(o)
                if c.setting.search(ln)
            ),
            None,
        )
        if setting is None:
            continue
        error = next(
            (
                (o["id"], ln)
                for o in observations
                if o["ok"] and o["tool"] in LOG_TOOLS
                for ln in text_lines(o)
                if c.error.search(ln)
            ),
            None,
        )
        if error is not None:
            return c, setting[0], setting[1], error[0], error[1]
    return None


def conflict_rules(observations: list[Observation], add) -> None:  # type: ignore[no-untyped-def]
    hit = setting_conflict(observations)
    if hit is None:
        return
    c, soid, sline, eoid, eline = hit
    why = " ".join(c.why.split())
    add("bad_launch_argument", "cause", _C.names_the_cause, soid, sline, f"the cause: {why}")
    add(
        "bad_launch_argument",
        "cause",
        _C.effect_cited,
        eoid,
        eline,
        f"what the setting leads to; fix: {' '.join(c.fix.split())}",
    )


# -- an import that failed earlier, named again by the fatal error -----------------------------
#: a line saying an import failed (often only a warning: the engine goes on without the module)
_IMPORT_FAILED = re.compile(
    r"No module named|ModuleNotFoundError|ImportError|cannot import name|undefined symbol|"
    r"(?i:could not import|failed to import|import error)"
)
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_]{3,}")
#: words too common in error text to tie two lines together
_COMMON_WORDS = frozenset(
    [
        "error",
        "errors",
        "failed",
        "could",
        "import",
        "module",
        "named",
        "found",
        "model",
        "models",
        "when",
        "loading",
        "with",
        "from",
        "that",
        "this",
        "have",
        "none",
        "true",
        "false",
        "there",
        "which",
        "cannot",
        "your",
        "please",
        "warning",
        "info",
        "requires",
        "required",
        "supported",
        "support",
        "enabled",
    ]
)


def _words(line: str) -> set[str]:
    return {w.lower() for w in _WORD.findall(line)} - _COMMON_WORDS


def import_chain(observations: list[Observation], hits) -> tuple[str, str, str, str] | None:  # type: ignore[no-untyped-def]
    """(observation, import line, fatal line, shared words) when an import the log reported as
    failed (a warning the engine went on after) names what the launch's fatal error later says
    it needs: "Could not import Flash Attention enabled models: No module named
    'vllm_cache_ops'" before "Sharded Llama requires Flash Attention enabled models". The
    fatal line is the symptom; the failed import is its cause. Both must share two words that
    are not common error vocabulary (the feature's name), and the import must come first."""
    for o in observations:
        if not (o["ok"] and o["tool"] in LOG_TOOLS):
            continue
        lines = text_lines(o)
        tail = lines[last_launch(lines) :]
        fatal = [i for i, _k in proof.fatal_lines(tail)]
        for fi in fatal:
            target = tail[fi]
            if _IMPORT_FAILED.search(target):
                continue  # the fatal line is itself the import error: nothing to explain
            want = _words(target)
            for ln in tail[:fi]:
                if not _IMPORT_FAILED.search(ln) or proof.fatal_kind(ln):
                    continue
                shared = want & _words(ln.split("No module named")[0])
                if len(shared) >= 2:
                    return o["id"], ln, target, ", ".join(sorted(shared))
    return None


def import_chain_rules(observations: list[Observation], hits, add) -> None:  # type: ignore[no-untyped-def]
    found = import_chain(observations, hits)
    if found is None:
        return
    oid, imp, fatal, shared = found
    # what the import failed of says the label: a missing module is a dependency, "capability
    # 7 0 is not supported" the GPU's architecture; a reason that names nothing is not taken
    label = proof.label_hint(imp) or "dependency_error"
    if label == "bad_launch_argument":
        return
    add(
        label,
        "cause",
        _C.behind_the_failure,
        oid,
        imp,
        f"the cause: an import failed earlier ({imp.strip()[:100]!r}) and the fatal error asks "
        f"for what it would have provided ({shared})",
    )
    add(
        label,
        "cause",
        F.supports,
        oid,
        fatal,
        "the fatal error: the consequence of the failed import above it",
    )
