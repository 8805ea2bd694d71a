"""`ReplayHost`: answers from an incident card's `host` section and from nothing else.

It stands in for a live machine in evals and demos. Canonical reads (nvidia-smi, ps, dmesg, env,
files) map to the card's keys; any other command is looked up in `host.commands` (exact, then the
closest command of the same program). What the card does not hold was NOT RECORDED: it answers
as a read that could not be made ("not recorded in this card: ...", rc None, a fix), never as a
missing program (rc 127) and never as an empty output, so no tool mistakes it for a host fact.
A key given with an empty or header-only value is a real "nothing there".

A list value is either read-ordered snapshots (each read sees the next, the last repeats) or
timed ones (`{at, text}`: a read at time t sees the latest with `at <= t`). Time runs on a
virtual clock that starts at the first read and only `sleep` advances, so an eval never waits.
Writes land in an in-memory overlay so approved changes can be replayed without touching disk.
"""

from __future__ import annotations

import fnmatch
import hashlib
import posixpath
import re
import shlex
import threading
import time
from dataclasses import dataclass
from functools import lru_cache

from cards.model import (
    HostSnapshot,
    IncidentCard,
    Snapshots,
    TimedSnapshot,
    card_text_bytes,
    snapshot_texts,
)
from tools.host import (
    DEFAULT_MAX_BYTES,
    DEFAULT_TIMEOUT_S,
    CommandResult,
    FileTail,
    clip,
    decode,
    missing_file,
)

#: How every unanswered read begins: a tool (and the agent) must read it as unknown.
NOT_RECORDED = "not recorded in this card"
NOT_RECORDED_FIX = (
    "read it on the live host: the card did not record it, so it is unknown here (not absent)"
)


@dataclass(frozen=True)
class _Unrecorded:
    """The card holds no answer to this read; `what` names the key or command it lacks."""

    what: str


@dataclass(frozen=True)
class _Absent:
    """The card shows the file is not there (a recorded listing lacks it)."""

    why: str


def latest_at(value: list[TimedSnapshot], t: float) -> str:
    """The latest snapshot taken at or before `t`; before the first one, the first one."""
    chosen = value[0]
    for snap in value:
        if snap.at > t:
            break
        chosen = snap
    return chosen.text


class _Cursor:
    """One read pointer per key, so each read of a read-ordered list sees the next snapshot;
    timed lists are looked up by the clock instead."""

    def __init__(self) -> None:
        self._pos: dict[str, int] = {}
        self._lock = threading.Lock()

    def read(self, key: str, value: Snapshots, t: float = 0.0) -> str:
        if isinstance(value, str):
            return value
        if not value:
            return ""
        if isinstance(value[0], TimedSnapshot):
            return latest_at(value, t)  # type: ignore[arg-type]
        with self._lock:
            i = self._pos.get(key, 0)
            self._pos[key] = i + 1
        return value[min(i, len(value) - 1)]  # type: ignore[return-value]

    def peek(self, key: str, value: Snapshots, t: float = 0.0) -> str:
        if isinstance(value, str):
            return value
        if not value:
            return ""
        if isinstance(value[0], TimedSnapshot):
            return latest_at(value, t)  # type: ignore[arg-type]
        i = self._pos.get(key, 0)
        return value[min(max(i - 1, 0), len(value) - 1)]  # type: ignore[return-value]


#: a shell's NAME=value prefix of a command
_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


@lru_cache(maxsize=4096)
def _tokens_cached(command: str) -> tuple[str, ...]:
    return tuple(_split(command))


def _tokens(command: str) -> list[str]:
    """The first pipeline stage's words, without sudo/command/exec (memoised: cards are reread)."""
    return list(_tokens_cached(command))


def _split(command: str) -> list[str]:
    first = command.split("|", 1)[0].strip()
    try:
        toks = shlex.split(first)
    except ValueError:
        toks = first.split()
    # sudo/command/exec and the shell's NAME=value prefixes (`LC_ALL=C find ...`) name no program
    while toks and (toks[0] in ("sudo", "command", "exec") or _ASSIGN.match(toks[0])):
        toks = toks[1:]
    return toks


def _find_roots(args: list[str]) -> list[str]:
    roots: list[str] = []
    for a in args:
        if a.startswith(("-", "(", "!", "\\(")):
            break
        roots.append(a)
    return roots or ["."]


def _under(path: str, root: str) -> bool:
    if root == "/":
        return True
    if any(c in root for c in "*?["):
        parts = root.count("/")
        prefix = "/".join(path.split("/")[: parts + 1])
        return fnmatch.fnmatchcase(prefix, root) and len(path) > len(prefix)
    return path.startswith(root + "/")


def _paths(args: list[str]) -> set[str]:
    return {posixpath.normpath(a) for a in args if a.startswith("/")}


#: options that take the next word as their value (`kubectl -n ai describe pod x`): that value
#: is neither the sub-command nor a name
_VALUE_FLAGS = {
    "-n",
    "--namespace",
    "-l",
    "--selector",
    "-o",
    "--output",
    "-c",
    "--container",
    "--context",
    "--since",
    "--tail",
    "-u",
    "--unit",
}


def _plain(args: list[str]) -> list[str]:
    out: list[str] = []
    skip = False
    for a in args:
        if skip:
            skip = False
            continue
        if a in _VALUE_FLAGS:
            skip = True
            continue
        if not a.startswith(("-", "/", "'", '"')) and "=" not in a:
            out.append(a)
    return out


def _verb(args: list[str]) -> str:
    """The sub-command (`logs`, `describe`, `show`), singular, or '' when there is none."""
    words = _plain(args)
    return words[0].rstrip("s") if words else ""


def _words(args: list[str]) -> set[str]:
    """Sub-commands and names (not flags, not paths): `logs`, `get`, a container name."""
    return set(_plain(args))


#: `kubectl logs deployment/NAME`: a workload's log is the log of one of its pods
_WORKLOAD = re.compile(
    r"^(?:deployments?|deploy|statefulsets?|sts|daemonsets?|ds|jobs?|pods?)/(.+)$"
)


def _workload_pod(word: str, ours: set[str]) -> str:
    """A recorded `deployment/NAME` (`pod/NAME`) read as the pod of ours it stands for: the live
    cluster answers `kubectl logs POD` of a Deployment's pod (NAME-<hash>-<hash>) with what the
    card recorded for the Deployment."""
    m = _WORKLOAD.match(word)
    if m is None:
        return word
    name = m.group(1)
    return next((w for w in ours if w == name or w.startswith(name + "-")), word)


def _names(args: list[str]) -> set[str]:
    """The words a command names (sub-commands, pods, pids), plural or not. A recorded command
    answers ours when one's names are among the other's (`pip show vllm` answers part of our
    `pip show torch vllm`; `ip addr show` answers `ip addr`), never when each names something
    the other does not (another pod, another pid)."""
    return {w[:-1] if len(w) > 3 and w.endswith("s") else w for w in _plain(args)}


def _flags(args: list[str]) -> set[str]:
    """`-hP` and `-h -P` are the same flags; long options compare by name."""
    out: set[str] = set()
    for a in args:
        if a.startswith("--"):
            out.add(a.split("=", 1)[0])
        elif a.startswith("-") and len(a) > 1:
            out.update(f"-{c}" for c in a[1:])
        elif not a.startswith("/"):
            out.add(a)
    return out


#: a pod's STATUS in `kubectl get pods` when none of its containers runs
_WAITING = re.compile(r"\s(?:CrashLoopBackOff|Error|OOMKilled|Completed|Init:CrashLoopBackOff)\s")


def _previous(args: list[str]) -> bool:
    """`kubectl logs --previous` (`-p`): the container instance before the running one."""
    return any(a in ("--previous", "-p") or a.startswith("--previous=t") for a in args)


#: Pivot's own state on a host (the config snapshot store): it starts empty on replay.
_PIVOT_STATE = re.compile(r"(^|/)\.pivot(/|$)")
_KERNEL_JOURNAL = {"-k", "--dmesg"}


def _listening(args: list[str]) -> bool:
    """Does this `ss`/`netstat` list listening sockets (-l, --listening, `state listening`)?"""
    flags = _flags(args)
    return bool({"-l", "--listening", "listening"} & flags)


def _query_kind(args: list[str]) -> str | None:
    """Which nvidia-smi query a command asks (`--query-gpu`, `--query-compute-apps`, `-q`)."""
    for a in args:
        if a.startswith("--query-") or a in ("-q", "--query"):
            return a.split("=", 1)[0]
    return None


def replay_name(card_id: str) -> str:
    """The host name a replayed card gets: stable per card, saying nothing about it."""
    return "replay-" + hashlib.sha256(card_id.encode()).hexdigest()[:8]


class ReplayHost:
    def __init__(self, card: IncidentCard, name: str | None = None) -> None:
        # Keep only the host snapshot: expected answers and transcripts never reach a tool.
        self._snap: HostSnapshot = card.host.model_copy(deep=True)
        # an opaque name: the card's id often names its answer, and every tool line carries the
        # host name into what a brain sees
        self.name = name or replay_name(card.id)
        self._cursor = _Cursor()
        self._overlay: dict[str, bytes] = {}
        self._now = 0.0  # the investigation's virtual clock: waits advance it, never sleep
        self._t0: float | None = None  # the clock at the first read: time 0 of timed snapshots
        self._inside: dict[str, ReplayHost] = {}  # a view inside each recorded container

    def clock(self) -> float:
        return self._now

    def sleep(self, seconds: float) -> None:
        self._now += max(0.0, seconds)

    def elapsed(self) -> float:
        """Seconds since the first read on the virtual clock (0 before and at the first read)."""
        return 0.0 if self._t0 is None else self._now - self._t0

    def _reading(self) -> float:
        if self._t0 is None:
            self._t0 = self._now
        return self._now - self._t0

    # -- Host protocol -------------------------------------------------------------------------
    def run(
        self, command: str, timeout: float = DEFAULT_TIMEOUT_S, max_bytes: int = DEFAULT_MAX_BYTES
    ) -> CommandResult:
        start = time.monotonic()
        t = self._reading()
        out = self._answer(command, t)
        if isinstance(out, _Unrecorded):
            return CommandResult(
                host=self.name,
                command=command,
                rc=None,
                error=f"{NOT_RECORDED}: {out.what}",
                fix=NOT_RECORDED_FIX,
                duration_s=time.monotonic() - start,
            )
        if isinstance(out, _Absent):
            return CommandResult(
                host=self.name,
                command=command,
                rc=1,
                stderr=out.why,
                duration_s=time.monotonic() - start,
            )
        data, truncated = clip(out.encode("utf-8", errors="surrogateescape"), max_bytes)
        return CommandResult(
            host=self.name,
            command=command,
            rc=0,
            stdout=decode(data),
            truncated=truncated,
            duration_s=time.monotonic() - start,
        )

    def read_tail(self, path: str, max_bytes: int = 256_000) -> FileTail:
        data = self._file_bytes(path, advance=True, t=self._reading())
        if isinstance(data, _Absent):
            return missing_file(self.name, path)
        if isinstance(data, _Unrecorded):
            return FileTail(
                host=self.name,
                path=path,
                exists=False,  # not shown to exist; `error` says it is unknown, not absent
                error=f"{NOT_RECORDED}: {data.what}",
                fix=NOT_RECORDED_FIX,
            )
        tail = data[-max_bytes:] if max_bytes > 0 else b""
        return FileTail(host=self.name, path=path, data=tail, size=len(data), bytes_read=len(tail))

    def write_file(self, path: str, data: bytes, mode: int | None = None) -> CommandResult:
        self._overlay[posixpath.normpath(path)] = bytes(data)
        return CommandResult(host=self.name, command=f"write {path}", rc=0)

    def close(self) -> None:
        return None

    # -- what the card can answer --------------------------------------------------------------
    def file_paths(self) -> list[str]:
        return sorted(set(self._snap.files) | set(self._overlay))

    def _file_bytes(self, path: str, advance: bool, t: float) -> bytes | _Unrecorded | _Absent:
        path = posixpath.normpath(path)
        if path in self._overlay:
            return self._overlay[path]
        value = self._snap.files.get(path)
        if value is None:
            return self._no_file(path)
        key = f"file:{path}"
        text = self._cursor.read(key, value, t) if advance else self._cursor.peek(key, value, t)
        return card_text_bytes(text)

    def _no_file(self, path: str) -> _Unrecorded | _Absent:
        """A path the card has no text for: absent only where the card shows it is not there."""
        gone = f"{path}: No such file or directory\n"
        if _PIVOT_STATE.search(path):
            return _Absent(gone)  # Pivot's own store, empty until Pivot writes to it on replay
        if self._listing_lacks(path):
            return _Absent(gone)
        return _Unrecorded(f"{path} (not in host.files)")

    def _listing_lacks(self, path: str) -> bool:
        """A recorded `ls` of the file's directory that does not name it, or an `ls` of the
        path itself that says it does not exist."""
        parent, base = posixpath.split(path)
        for key, value in self._snap.commands.items():
            toks = _tokens(key)
            if not toks or posixpath.basename(toks[0]) != "ls" or "|" in key:
                continue
            operands = {posixpath.normpath(a) for a in toks[1:] if a.startswith("/")}
            text = "\n".join(self._texts(value))
            if path in operands and re.search(
                rf"{re.escape(path)}'?:? No such file or directory", text
            ):
                return True
            if operands == {parent} and "No such file" not in text and "denied" not in text:
                names = {w for ln in text.splitlines() for w in ln.split()}
                names |= {w.rstrip("/*@=|") for w in names}
                if base not in names:
                    return True
        return False

    @staticmethod
    def _texts(value: Snapshots) -> list[str]:
        if isinstance(value, str):
            return [value]
        return [v.text if isinstance(v, TimedSnapshot) else v for v in value]

    def _key(self, key: str, t: float, what: str) -> str | _Unrecorded:
        value = getattr(self._snap, key)
        if value is None:
            return _Unrecorded(f"host.{key} is absent ({what})")
        return self._cursor.read(key, value, t)

    def _container_answer(
        self, cli: str, args: list[str], t: float
    ) -> str | _Unrecorded | _Absent | None:
        """`docker|podman inspect|logs|exec NAME ...` from host.containers; None: not one. A
        container the card says another CLI knew is unknown to this one, as on the live host."""
        stages = _stages(args)
        args = stages[0]
        verb = next((a for a in args if not a.startswith("-")), "")
        rest = args[args.index(verb) + 1 :] if verb else []
        names = [a for a in rest if not a.startswith(("-", "{{", "2>", ">")) and not a.isdigit()]
        if verb not in ("inspect", "logs", "exec") or not names:
            return None
        # `logs --tail 300 NAME`: the name is last; `exec NAME sh -c ...`: first
        name = names[0] if verb == "exec" else names[-1]
        snap = self._snap.containers.get(name)
        if snap is not None and snap.cli not in (None, cli):
            snap = None  # `docker inspect X` where the card's X was podman's
        if snap is None:
            if not self._snap.containers:
                return _Unrecorded(f"host.containers is absent (container {name})")
            return _Absent(f"Error: no such container {name}\n")
        if verb == "inspect":
            if snap.inspect is None and any("{{.Id}}" in a for a in args):
                # the CLI probe asks only whether the container exists: the card records it (its
                # log, its processes), so it does, as a live `inspect --format` would say; its
                # record stays unknown
                return name + "\n"
            if snap.inspect is None:
                return _Unrecorded(f"host.containers.{name}.inspect is absent")
            text = self._cursor.read(f"ctr:{name}:inspect", snap.inspect, t)
            if any("{{.Id}}" in a for a in args):  # the CLI probe: one line, the id
                return (re.search(r'"Id":\s*"([0-9a-f]+)"', text) or ["", name])[1] + "\n"
            return text
        if verb == "logs":
            if snap.logs is None:
                return _Unrecorded(f"host.containers.{name}.logs is absent")
            text = self._cursor.read(f"ctr:{name}:logs", snap.logs, t)
            # the CLI's own --tail, then the pipeline's grep and tail, as the live host runs them
            text = _tail(text, _option(rest, "--tail", "-n"))
            return _filtered(text, stages[1:])
        if snap.inspect is not None:
            record = self._cursor.peek(f"ctr:{name}:inspect", snap.inspect, t)
            if not_running(record):
                return _Absent(_EXEC_STOPPED[cli].format(name=name))
        inner = rest[rest.index(name) + 1 :]
        command = inner[2] if inner[:2] == ["sh", "-c"] and len(inner) > 2 else shlex.join(inner)
        view = HostSnapshot(ps=snap.ps, files=snap.files, commands=snap.commands)
        sub = self._inside.get(name)
        if sub is None:
            sub = self._inside[name] = ReplayHost(
                IncidentCard.model_construct(id=self.name + "-" + name, host=view), self.name
            )
        sub._now = self._now
        res = sub.run(command)
        if res.error:
            return _Unrecorded(f"host.containers.{name}: {res.error.split(': ', 1)[-1]}")
        if res.rc != 0:
            return _Absent(res.stderr)
        return res.stdout

    def _answer(self, command: str, t: float) -> str | _Unrecorded | _Absent:
        exact = self._snap.commands.get(command)
        if exact is not None:
            return self._cursor.read(f"cmd:{command}", exact, t)
        toks = _tokens(command)
        unrecorded = _Unrecorded(f"`{command}` (not in host.commands)")
        if not toks:
            return unrecorded
        prog = posixpath.basename(toks[0])
        args = toks[1:]
        if prog in ("docker", "podman"):
            # the full command: `exec NAME sh -c 'a | b'` keeps its inner pipeline
            try:
                full = shlex.split(command)
            except ValueError:
                full = toks
            inside = self._container_answer(prog, full[1:], t)
            if inside is not None:
                return inside
        if prog == "nvidia-smi":
            joined = " ".join(args)
            if "--query-gpu" in joined:
                return self._key("nvidia_smi", t, "the nvidia-smi GPU query")
            if not args:
                return self._key("nvidia_smi_full", t, "the plain nvidia-smi table")
        elif prog == "ps":
            return self._key("ps", t, "the process table")
        elif prog == "dmesg":
            out = self._key("dmesg", t, "the kernel log")
            if not isinstance(out, _Unrecorded):
                return _filtered(out, _stages(_whole(command))[1:])  # `dmesg -T | tail -n 500`
            closest = self._closest_command(prog, args, t)
            return out if closest is None else closest
        elif prog == "journalctl" and _KERNEL_JOURNAL & set(args):
            # the kernel log: the card's dmesg, or a recorded kernel journal; never a unit's log
            if self._snap.dmesg is not None:
                return self._key("dmesg", t, "the kernel log")
            kernel = {
                k: v
                for k, v in self._snap.commands.items()
                if _KERNEL_JOURNAL & set(_tokens(k)[1:])
            }
            closest = self._closest_command(prog, args, t, kernel)
            return (
                _Unrecorded("host.dmesg is absent (the kernel log)") if closest is None else closest
            )
        elif prog in ("env", "printenv"):
            return self._key("env", t, "the launch environment")
        elif prog in ("cat", "head", "tail") and args:
            path = args[-1]
            if path.startswith("/proc/") and path.endswith("/environ"):
                env = self._key("env", t, "the launch environment")
                return env if isinstance(env, _Unrecorded) else env.replace("\n", "\0")
            data = self._file_bytes(path, advance=True, t=t)
            if isinstance(data, bytes):
                return data.decode("utf-8", errors="surrogateescape")
            closest = self._closest_command(prog, args, t)
            if closest is not None:
                return closest
            if isinstance(data, _Absent):
                return _Absent(f"{prog}: {data.why}")
            return data
        elif prog == "stat" and args:
            data = self._file_bytes(args[-1], advance=False, t=t)
            if isinstance(data, bytes):
                return f"{len(data)} {int(time.time())}\n"
        elif prog == "find" and args:
            # Every leading operand is a root (find A B -maxdepth ...); globs match as the
            # shell would have expanded them.
            roots = [a.rstrip("/") or "/" for a in _find_roots(args)]
            depth = _find_maxdepth(args)
            # -maxdepth as find applies it: a file directly under a root is at depth 1; a card
            # must not find deeper than the live host would (a replay easier than live is a bug)
            hits = [
                p
                for p in self.file_paths()
                if any(_under(p, r) and (depth is None or _depth(p, r) <= depth) for r in roots)
            ]
            return "".join(f"{p}\n" for p in hits)
        closest = self._closest_command(prog, args, t)
        return unrecorded if closest is None else closest

    def _crash_looping(self, names: set[str]) -> bool:
        """A pod these names include is listed (`kubectl get pods`) waiting to restart or ended:
        no container of it runs."""
        for key, value in self._snap.commands.items():
            toks = _tokens(key)
            if (
                not toks
                or posixpath.basename(toks[0]) not in ("kubectl", "oc")
                or "get" not in toks
            ):
                continue
            for text in snapshot_texts(value):
                for row in text.splitlines():
                    cols = row.split()
                    if cols and cols[0] in names and _WAITING.search(row):
                        return True
        return False

    def _closest_command(
        self,
        prog: str,
        args: list[str],
        t: float,
        commands: dict[str, Snapshots] | None = None,
    ) -> str | None:
        """A card records the command its author typed; ours may differ in flags or pipes."""
        commands = self._snap.commands if commands is None else commands
        want = _option(args, "--tail")
        best: tuple[tuple[bool, int], str] | None = None
        for key in commands:
            ktoks = _tokens(key)
            if not ktoks or posixpath.basename(ktoks[0]) != prog:
                continue
            kargs = ktoks[1:]
            ours, theirs = _paths(args), _paths(kargs)
            if ours and theirs and not ours & theirs:
                continue  # `cat /proc/net/tcp` is not `cat /proc/driver/nvidia/version`
            score = len(_flags(args) & _flags(kargs)) + len(ours & theirs)
            mine, its = (
                (_container_opt(args), _container_opt(kargs)) if prog == "kubectl" else (None, None)
            )
            if mine is not None and mine != its:
                continue  # `kubectl logs POD -c init` is not another container's log
            if its is not None and mine is None:
                score -= 1  # the pod's default container may be the one the card names
            # `kubectl logs POD` is the running container's log, not `--previous`'s; a pod
            # waiting in a crash loop runs none, and the kubelet serves the last one's
            if (
                prog in ("kubectl", "oc")
                and _previous(args) != _previous(kargs)
                and not (_previous(kargs) and self._crash_looping(_names(args)))
            ):
                continue
            if prog in _SUBCOMMAND_PROGS and _verb(args) and _verb(kargs) != _verb(args):
                continue  # `kubectl logs POD` is not `kubectl get pod POD -o jsonpath=...`
            mine_n, its_n = _names(args), _names(kargs)
            if prog in ("kubectl", "oc"):
                its_n = {_workload_pod(w, mine_n) for w in its_n}
            if not (mine_n <= its_n or its_n <= mine_n):
                continue  # `kubectl logs vllm-1-1` is not `vllm-1`'s; `--pid 1` is not `--pid 153`
            if _verb(args) and _verb(args) == _verb(kargs):
                score += 2  # `kubectl describe ...` answers `kubectl describe ...` before `get`
            if prog == "nvidia-smi" and score == 0:
                continue  # `-q -d ECC` and `--query-compute-apps` answer different questions
            if prog in ("ss", "netstat") and _listening(args) != _listening(kargs):
                continue  # `ss -tnp state established` lists no listeners: not `ss -ltnp`'s answer
            if prog == "nvidia-smi" and _query_kind(args) != _query_kind(kargs):
                continue  # a GPU query's rows (index, name, 8.6) are no compute-apps rows
            if score == 0 and (_words(args) or _words(kargs)):
                continue  # `docker ps` is not `docker logs X`
            # a recording of fewer last lines than ours (`--tail=20` for our `--tail=200`) holds
            # less than the live host would print: any fuller recording answers first
            have = _option(kargs, "--tail")
            rank = (want is None or have is None or have >= want, score)
            if best is None or rank > best[0]:
                best = (rank, key)
        if best is None:
            return None
        text = self._cursor.read(f"cmd:{best[1]}", commands[best[1]], t)
        if want is not None:
            text = _tail(text, want)  # a whole log recorded answers our `--tail=N` with N lines
        if prog == "free":
            # the card's `free -g` answers our `free -m` in our unit, as the live host would:
            # 1007 GiB served as "1007" under a MiB reading told a model the box had 1 GiB
            return rescale_free(text, _free_unit(_tokens(best[1])[1:]), _free_unit(args))
        return text


#: `free`'s unit flags and the bytes each counts in (no flag: KiB; -h prints its own suffixes)
_FREE_UNITS = {
    "-b": 1,
    "--bytes": 1,
    "-k": 1 << 10,
    "--kibi": 1 << 10,
    "-m": 1 << 20,
    "--mebi": 1 << 20,
    "-g": 1 << 30,
    "--gibi": 1 << 30,
    "-t": 1 << 40,
    "--tebi": 1 << 40,
    "--kilo": 10**3,
    "--mega": 10**6,
    "--giga": 10**9,
    "--tera": 10**12,
}


def _free_unit(args: list[str]) -> int | None:
    """Bytes per printed number of `free ARGS`; None for -h (its numbers carry their unit)."""
    unit: int | None = 1 << 10
    for a in args:
        if a in ("-h", "--human"):
            return None
        flags = [a] if a.startswith("--") else [f"-{c}" for c in a[1:]] if a.startswith("-") else []
        for f in flags:
            if f in _FREE_UNITS:
                unit = _FREE_UNITS[f]
    return unit


def rescale_free(text: str, have: int | None, want: int | None) -> str:
    """`free`'s Mem:/Swap: numbers from the unit they were printed in to the one asked for.

    Why: a card records the command its author typed (`free -g`); the tools run `free -m`. Served
    as is, GiB read as MiB. The scaled numbers are what the live host would print, to within its
    rounding (the card kept no finer figure)."""
    if have is None or want is None or have == want:
        return text
    out = []
    for line in text.splitlines(keepends=True):
        if line.split()[:1] in (["Mem:"], ["Swap:"], ["Low:"], ["High:"], ["Total:"]):
            line = re.sub(r"(?<=\s)\d+(?=\s|$)", lambda m: str(int(m.group()) * have // want), line)
        out.append(line)
    return "".join(out)


#: programs whose first word is a sub-command that asks its own question: a recorded
#: `kubectl get pod X` never answers our `kubectl logs X` (a shared pod name is not enough)
_SUBCOMMAND_PROGS = {"kubectl", "docker", "podman", "nerdctl", "crictl", "systemctl", "helm", "ray"}


def _container_opt(args: list[str]) -> str | None:
    """The value of `-c NAME` / `--container NAME` / `--container=NAME` (kubectl's container)."""
    for i, a in enumerate(args):
        if a in ("-c", "--container") and i + 1 < len(args):
            return args[i + 1].strip("'\"")
        if a.startswith("--container="):
            return a.split("=", 1)[1].strip("'\"")
    return None


def _find_maxdepth(args: list[str]) -> int | None:
    """find's -maxdepth N, if given."""
    for i, a in enumerate(args[:-1]):
        if a == "-maxdepth" and args[i + 1].isdigit():
            return int(args[i + 1])
    return None


def _depth(path: str, root: str) -> int:
    """How far below `root` find would meet `path` (its direct children are at depth 1)."""
    return len([c for c in path.split("/") if c]) - len([c for c in root.split("/") if c])


#: What each CLI says to `exec` into a container that is not running.
_EXEC_STOPPED = {
    "podman": "Error: can only create exec sessions on running containers: container state "
    "improper\n",
    "docker": "Error response from daemon: container {name} is not running\n",
}


def not_running(inspect_text: str) -> bool:
    """Whether a recorded `inspect` says the container was not running (exec would fail)."""
    m = re.search(r'"Running":\s*(true|false)', inspect_text)
    return bool(m and m.group(1) == "false")


def _whole(command: str) -> list[str]:
    try:
        return shlex.split(command)
    except ValueError:
        return command.split()


def _stages(tokens: list[str]) -> list[list[str]]:
    """Words split at the top-level pipes (a quoted `sh -c 'a | b'` stays one word)."""
    out: list[list[str]] = [[]]
    for tok in tokens:
        if tok == "|":
            out.append([])
        else:
            out[-1].append(tok)
    return out


def _option(args: list[str], *names: str) -> int | None:
    """The integer value of `--tail 300` / `--tail=300` / `-n 300`, if given."""
    for i, a in enumerate(args):
        for n in names:
            if a == n and i + 1 < len(args) and args[i + 1].isdigit():
                return int(args[i + 1])
            if a.startswith(n + "=") and a[len(n) + 1 :].isdigit():
                return int(a[len(n) + 1 :])
    return None


def _tail(text: str, n: int | None) -> str:
    if n is None:
        return text
    lines = text.splitlines(keepends=True)
    return "".join(lines[-n:]) if n > 0 else ""


def _filtered(text: str, stages: list[list[str]]) -> str:
    """Apply a pipeline's `grep [-E] [-i] [-v] [-e] PATTERN` and `tail -n N` stages to a recorded
    answer, as the live shell would; any other stage leaves the text whole (as before)."""
    for stage in stages:
        prog = posixpath.basename(stage[0]) if stage else ""
        if prog == "tail":
            n = _option(stage, "-n")
            if n is None:
                return text
            text = _tail(text, n)
        elif prog == "grep":
            flags = {a for a in stage[1:] if a.startswith("-") and a != "-e"}
            pats = [stage[i + 1] for i, a in enumerate(stage[:-1]) if a == "-e"]
            pats = pats or [a for a in stage[1:] if not a.startswith("-")][:1]
            if not pats or flags - {"-E", "-i", "-v", "-a"}:
                return text
            if "-E" in flags and any("(?" in p or "\\d" in p for p in pats):
                return ""  # GNU grep -E rejects Python-only syntax: nothing reaches stdout
            try:
                rx = re.compile("|".join(pats), re.I if "-i" in flags else 0)
            except re.error:
                return text
            keep = "-v" not in flags
            text = "".join(
                ln for ln in text.splitlines(keepends=True) if bool(rx.search(ln)) == keep
            )
        else:
            return text
    return text
