"""`service_logs`: the launch's log when it is not a file: a container's, a pod's, a unit's.

Many servers log to stdout under docker, Kubernetes or systemd, so there is no file to tail. This
tool finds the inference-server container / pod / unit (or takes its name) and reads the last
lines with the platform's own reader. Commands are a fixed allowlist with quoted names: never a
free shell. A reader that is not installed is skipped; none at all is a clear error.
"""

from __future__ import annotations

import re
import shlex
from typing import Literal

from pydantic import BaseModel, Field

from tools import engines
from tools.base import ToolResult, ToolSpec, bound_lines
from tools.host import Host
from tools.launch_env import STEERING, is_secret
from tools.log_window import Watched, cap_note, watch
from tools.textclean import clean_lines

Kind = Literal["docker", "kubectl", "oc", "journalctl"]
#: the Kubernetes readers: OpenShift's `oc` takes kubectl's verbs and flags, and a cluster's
#: bastion may have only one of them
KUBE: tuple[Kind, ...] = ("kubectl", "oc")
#: What an inference server's container, pod or unit tends to be called.
SERVER_NAME = engines.server_name_pattern()  # engine names + llm|serve|inference
#: journald's own remarks between a unit's lines ("-- No entries --", "-- Logs begin at ...",
#: "-- Boot 3f2a... --", "-- Reboot --"): never a line the server printed.
JOURNAL_META = re.compile(r"^-- (No entries|Logs begin|Journal begins|Boot |Reboot)")
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:@/-]{0,200}$")


#: a systemd unit file: its name is the unit whose journal holds the launch's log
_UNIT_FILE = re.compile(r"/systemd/(?:system|user)/([A-Za-z0-9][\w@.:-]*\.service)$")
#: "systemctl restart vllm-qwen", "systemctl --user status sglang.service" in what the operator says
_UNIT_SAID = re.compile(
    r"\bsystemctl\s+(?:--user\s+)?(?:re)?(?:start|stop|status|load|try-restart)\s+"
    r"([A-Za-z0-9][\w@.:-]*)"
)


#: a pod a cluster's own text names: an event's object (`pod/NAME` in `kubectl get events`) or
#: a record's `Name:` line (`kubectl describe pod`)
_POD_NAMED = re.compile(r"\bpod/([a-z0-9][a-z0-9.-]*)|^\s*Name:\s+([a-z0-9][a-z0-9.-]*)\s*$")


#: a pod record's restart count (`kubectl describe pod`: "    Restart Count:  4")
_RESTART_COUNT = re.compile(r"^\s*Restart Count:\s*[1-9]")


def pod_restarted(lines: list[str]) -> bool:
    """A pod record (`kubectl describe pod`'s kept lines) says its container restarted."""
    return any(_RESTART_COUNT.match(ln) for ln in lines)


def pod_named_in(line: str) -> str | None:
    """The pod a line of `kubectl get events` / `kubectl describe pod` is about, or None."""
    m = _POD_NAMED.search(line)
    return (m.group(1) or m.group(2)) if m else None


def unit_named(symptom: str, configs: list[str]) -> str | None:
    """The systemd unit the operator pointed at: a unit file given as the launch's config, or
    a unit a `systemctl` command in the symptom names. Its journal is the launch's log; a
    listing of every unit on a busy box would guess at it (or find nothing to read)."""
    for p in configs:
        m = _UNIT_FILE.search(p)
        if m:
            return m.group(1)
    m = _UNIT_SAID.search(symptom)
    if m:
        name = m.group(1).rstrip(".")
        return name if "." in name else f"{name}.service"
    return None


class Args(BaseModel):
    kind: Kind | Literal["auto"] = Field("auto", description="where the log lives; auto tries each")
    name: str | None = Field(None, description="container / pod / unit name; found when omitted")
    lines: int = Field(200, ge=1, le=2000)
    previous: bool = Field(False, description="kubectl: the previous (crashed) container's log")
    grep: str | None = Field(
        None,
        min_length=8,
        max_length=200,
        description="journalctl with no unit named: the text of an error (the one the operator "
        "quotes) to find in the system journal; the lines of the program that printed it are "
        "read (a supervisor that runs the server as its child logs there, not to a file)",
    )
    watch_s: float | None = Field(
        None,
        ge=0,
        le=600,
        description="liveness: read again over this window (longer for a progress bar) until "
        "the log grows; capped at PIVOT_LIVENESS_MAX_S (30 s by default). The result says "
        "whether it grew and how long was waited",
    )


class Result(ToolResult, Watched):
    kind: str = ""
    name: str = ""
    command: str = ""
    tail: list[str] = Field(default_factory=list)
    tried: list[str] = Field(default_factory=list)
    #: a pod's own record (`kubectl describe pod`): its state, last state, reason, message and
    #: exit code, read when its log is empty (the container never ran: a bad command, an image)
    describe: list[str] = Field(default_factory=list)
    #: the log of a container of the pod that keeps failing and is not the one read (an init
    #: container: the server's own container waits, "PodInitializing", and has no log at all)
    failing: dict[str, list[str]] = Field(default_factory=dict)

    def lines(self) -> list[str]:
        if self.error:
            return super().lines()
        out = [f"# {self.kind} log of {self.name} ($ {self.command})"]
        if self.watched:
            out.append(
                f"# watched it for {self.waited_s:.1f} s{cap_note(self.asked_s, self.window_s)}: "
                + ("new lines arrived" if self.grew else "no new line")
            )
        out += bound_lines(self.tail)
        for ctr, tail in self.failing.items():
            out += [f"# log of its failing container {ctr} ({self.kind} logs -c {ctr})"]
            out += bound_lines(tail)
        if self.describe:
            out += [f"# {self.kind} describe pod {self.name} (state and events)", *self.describe]
        return out


def pick(listing: str, column: int = 0) -> str | None:
    """The first listed name that looks like an inference server, else the first name."""
    names: list[str] = []
    for ln in listing.splitlines():
        parts = ln.split()
        if len(parts) > column and not ln.startswith(("CONTAINER", "NAME", "UNIT", " ")):
            names.append(parts[column].lstrip("●"))
    for n in names:
        if SERVER_NAME.search(n) and SAFE_NAME.match(n):
            return n
    return next((n for n in names if SAFE_NAME.match(n)), None)


#: `kubectl get pods` rows: READY is the first `n/m` column; a NAMESPACE column precedes NAME
#: when listed with -A (`ai  llama-0  0/1  CrashLoopBackOff  6 (2m ago)  8m`)
_READY = re.compile(r"^\d+/\d+$")
#: a pod status that is not serving
_FAILING = re.compile(r"(?i)BackOff|Error|OOMKilled|Crash|Pending|Failed|Init:|Evicted|Unknown")
#: the lines of `kubectl describe pod` worth keeping: how its container ended, and why
POD_KEEP = re.compile(
    r"^\s*(Name|Namespace|Start Time|Status|Reason|Exit Code|Restart Count|Started|Finished|Last State|State|"
    r"Message)\s*:|OOMKilled|Killing|Unhealthy|BackOff|Evicted|probe|FailedScheduling"
)


def pods(listing: str) -> list[tuple[str, str, bool]]:
    """(namespace or '', name, failing) for each row of `kubectl get pods [-A] --no-headers`."""
    out = []
    for ln in listing.splitlines():
        parts = ln.split()
        if not parts or parts[0] in ("NAME", "NAMESPACE"):
            continue
        at = next((i for i, p in enumerate(parts[:3]) if _READY.match(p)), None)
        if at not in (1, 2):
            continue
        ns, name = (parts[0], parts[1]) if at == 2 else ("", parts[0])
        ready = parts[at].split("/")
        status = parts[at + 1] if len(parts) > at + 1 else ""
        out.append((ns, name, bool(_FAILING.search(status)) or ready[0] != ready[1]))
    return out


def pick_pod(listing: str) -> str | None:
    """`namespace/name` (or `name`) of the pod to read: a failing inference server first, then
    any inference server, then any failing pod, then the first."""
    rows = pods(listing)
    ranked = sorted(
        rows, key=lambda r: (not SERVER_NAME.search(r[1]), not r[2])
    )  # stable: listing order within a rank
    for ns, name, _ in ranked:
        full = f"{ns}/{name}" if ns else name
        if SAFE_NAME.match(full):
            return full
    return None


def _discover(host: Host, kind: Kind) -> str | None:
    cmd = {
        "docker": "docker ps -a --format '{{.Names}} {{.Image}} {{.Status}}'",
        # every namespace: a server rarely runs in `default`
        "kubectl": "kubectl get pods -A --no-headers",
        "oc": "oc get pods -A --no-headers",
        "journalctl": "systemctl list-units --type=service --all --no-legend --no-pager",
    }[kind]
    res = host.run(cmd, timeout=15)
    if not res.ok or not res.stdout.strip():
        return None
    return pick_pod(res.stdout) if kind in KUBE else pick(res.stdout)


def _in_namespace(host: Host, kind: Kind, name: str) -> str:
    """A bare pod name as `namespace/name` when the cluster lists it in one namespace (a pod a
    harness's log names is rarely in the reader's current namespace)."""
    if kind not in KUBE or "/" in name:
        return name
    res = host.run(f"{kind} get pods -A --no-headers", timeout=15)
    found = [ns for ns, pod, _ in pods(res.stdout if res.ok else "") if pod == name and ns]
    return f"{found[0]}/{name}" if len(set(found)) == 1 else name


def _pod(name: str) -> tuple[str, str]:
    """`ns/pod` -> ("-n 'ns' ", "'pod'"); a bare pod name is in the current namespace."""
    ns, _, pod = name.rpartition("/")
    return (f"-n {shlex.quote(ns)} " if ns else ""), shlex.quote(pod)


def _read_cmd(kind: Kind, name: str, args: Args) -> str:
    q = shlex.quote(name)
    if kind == "docker":
        return f"docker logs --tail {args.lines} {q} 2>&1"
    if kind in KUBE:
        prev = " --previous" if args.previous else ""
        ns, pod = _pod(name)
        return f"{kind} {ns}logs --tail={args.lines}{prev} {pod}"
    return f"journalctl -u {q} -n {args.lines} --no-pager"


#: the kubelet's event for a container that keeps failing: "Back-off restarting failed
#: container storage-initializer in pod ..."
_FAILED_CTR = re.compile(r"restarting failed container ['\"]?([a-z0-9][a-z0-9-]{0,62})")
#: the most failing containers read besides the one asked for
FAILING_READ = 2


def _failing_logs(
    host: Host, kind: Kind, name: str, describe: list[str], args: Args
) -> dict[str, list[str]]:
    """The logs of the pod's containers its events name as failing: the cause of a pod whose
    server container never started is in the container that keeps failing before it."""
    ns, pod = _pod(name)
    out: dict[str, list[str]] = {}
    for ctr in dict.fromkeys(m.group(1) for ln in describe if (m := _FAILED_CTR.search(ln))):
        if len(out) >= FAILING_READ:
            break
        res = host.run(
            f"{kind} {ns}logs --tail={args.lines} {pod} -c {shlex.quote(ctr)}", timeout=20
        )
        tail = (
            [ln for ln in clean_lines(res.stdout).lines[-args.lines :] if ln.strip()]
            if res.ok
            else []
        )
        if tail:
            out[ctr] = tail
    return out


def _describe(host: Host, kind: Kind, name: str) -> list[str]:
    """The kept lines of `kubectl describe pod` (state, reason, message, exit code, events) and
    the launch-steering entries of its containers' Environment (a preset's or a chart's setting
    is the launch's own; secrets never)."""
    ns, pod = _pod(name)
    res = host.run(f"{kind} {ns}describe pod {pod}", timeout=20)
    if not res.ok:
        return []
    return [
        ln.rstrip()
        for ln in clean_lines(res.stdout).lines
        if POD_KEEP.search(ln) or _steering_env(ln)
    ][:80]


#: one entry of a container's Environment in `kubectl describe pod`: "      KEY:  value"
_POD_ENV = re.compile(r"^\s+([A-Za-z_][A-Za-z0-9_]*):\s+\S")


def _steering_env(line: str) -> bool:
    m = _POD_ENV.match(line)
    return bool(m and STEERING.match(m.group(1)) and not is_secret(m.group(1)))


def run(host: Host, args: Args) -> Result:
    """One read, or with watch_s a read polled over a window until the log grows (the window a
    file's or a container's watch gets: a pod loading shards every 30 s is alive). The polls
    read the log only: the pod's record and its failing containers' logs were read once."""
    res = read_once(host, args)
    if args.watch_s is None or not res.ok:
        return res
    same = args.model_copy(update={"name": res.name, "kind": res.kind})

    def again() -> Result:
        nxt = read_once(host, same, record=False)
        return nxt.model_copy(update={"describe": res.describe, "failing": res.failing})

    return watch(
        host, res, again, lambda r: r.tail[-3:], lambda r: r.tail, float(args.watch_s), heavy=True
    )


#: a journal line's sender in `journalctl -o short`: "Jul 25 14:27:21 box lemond[594237]: ..."
_SENDER = re.compile(r"^\w{3} [ \d]\d \d\d:\d\d:\d\d \S+ ([^\s\[:]+)(?:\[\d+\])?:")
#: how far back the journal is searched for the quoted text
JOURNAL_SEARCHED = 5000


def _sender(line: str) -> str | None:
    m = _SENDER.match(line)
    return m.group(1) if m else None


def _journal_grep(host: Host, args: Args) -> Result:
    """The system journal's lines of the program that printed `args.grep`: a supervisor (a
    model router, a wrapper service) that runs the server as its child logs its launches, its
    readiness waits and its kills to the journal, under its own name, whatever its unit is
    called. Only the journal's newest lines are searched: not finding the text there is said
    as such, never as "it did not happen"."""
    assert args.grep is not None
    cmd = f"journalctl --no-pager -o short -n {JOURNAL_SEARCHED}"
    res = host.run(cmd, timeout=20, max_bytes=4_000_000)
    if not res.ok:
        return Result(
            host=host.name,
            ok=False,
            tried=[f"{cmd}: rc {res.rc}"],
            error=res.error or f"{cmd!r} failed on {host.name}: {res.stderr.strip()[:200]}",
            fix=res.fix or "read the journal as a user in the systemd-journal group, or as root",
        )
    lines = [
        ln for ln in clean_lines(res.stdout).lines if ln.strip() and not JOURNAL_META.match(ln)
    ]
    hits = [ln for ln in lines if args.grep in ln]
    sender = next((s for s in map(_sender, reversed(hits)) if s), None)
    if sender is None:
        return Result(
            host=host.name,
            kind="journalctl",
            command=cmd,
            tried=[f"{cmd}: no line holds {args.grep!r}"],
            tail=[
                f"# none of the journal's newest {len(lines)} lines holds {args.grep!r} "
                "(older lines were not searched)"
                if lines
                else "# the journal gave no lines to search: "
                + ((res.stderr or res.stdout).strip().splitlines() or ["empty"])[0][:160]
            ],
        )
    tail = [ln for ln in lines if _sender(ln) == sender][-args.lines :]
    return Result(
        host=host.name,
        kind="journalctl",
        name=sender,
        command=f"{cmd} (the lines of {sender}, which printed {args.grep!r})",
        tail=tail,
        tried=[f"{cmd}: {len(hits)} lines hold it, printed by {sender}"],
    )


def read_once(host: Host, args: Args, record: bool = True) -> Result:
    """`record`: also read a pod's record and its failing containers' logs."""
    if args.grep and args.kind == "journalctl" and not args.name:
        return _journal_grep(host, args)
    if args.name is not None and not SAFE_NAME.match(args.name):
        return Result(
            host=host.name,
            ok=False,
            error=f"{args.name!r} is not a container/pod/unit name",
            fix="pass the name as docker ps / kubectl get pods / systemctl show it",
        )
    kinds: list[Kind] = (
        ["docker", "kubectl", "oc", "journalctl"] if args.kind == "auto" else [args.kind]
    )
    tried: list[str] = []
    for kind in kinds:
        name = _in_namespace(host, kind, args.name) if args.name else _discover(host, kind)
        if not name:
            tried.append(f"{kind}: nothing found")
            continue
        cmd = _read_cmd(kind, name, args)
        res = host.run(cmd, timeout=20)
        tried.append(f"{cmd}: rc {res.rc}")
        tail = clean_lines(res.stdout).lines[-args.lines :] if res.ok else []
        if kind == "journalctl":  # "-- No entries --", "-- Boot ... --": journald's, not the unit's
            tail = [ln for ln in tail if not JOURNAL_META.match(ln)]
        # a pod's record says how its container last ended (and, for one that never ran, is
        # all there is) and what its spec set in the environment
        describe = _describe(host, kind, name) if kind in KUBE and record else []
        failing = _failing_logs(host, kind, name, describe, args) if describe else {}
        if tail or describe:
            return Result(
                host=host.name,
                kind=kind,
                name=name,
                command=cmd,
                tail=[ln for ln in tail if ln.strip()],
                tried=tried,
                describe=describe,
                failing=failing,
            )
    return Result(
        host=host.name,
        ok=False,
        tried=tried,
        error=f"no container, pod or unit log found on {host.name} ({'; '.join(tried)})",
        fix="name the log file with --log, or the container/pod/unit with name=",
    )


SPEC = ToolSpec(
    name="service_logs",
    description=(
        "The server's log when it is not a file: `docker logs`, `kubectl logs` (or `oc logs`; "
        "optionally the previous, crashed container) or `journalctl -u`; the container/pod/unit "
        "is found when none is named."
    ),
    args=Args,
    result=Result,
    fn=run,
    scanned=True,
    launch_log=True,
    facts=("log_growth", "log_watch", "pod_running"),
)
