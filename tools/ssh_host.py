"""`SSHHost`: the Host protocol over one reused SSH connection (paramiko).

Why it looks the way it does:
- ONE connection per host, and every command on its own channel (`open_session` +
  `exec_command`): a channel costs ~2 ms, a new connection ~64 ms. `SSHClient.exec_command` from
  several threads drops the connection (paramiko #1705), so it is never used.
- Our own socket with TCP_NODELAY: paramiko leaves Nagle on, which adds ~40 ms per channel.
- Commands run through `sh -c` under sshd's non-login exec, so no rc file is read, and under
  `timeout -s KILL` so a command that hangs dies on the host too, not only in our wait.
- The host key is checked against known_hosts; unknown or changed keys are refused unless the
  caller explicitly opts in to trust on first use.
- Every expected failure (unreachable, auth, host key, timeout, dropped connection, output
  flood) comes back as a `CommandResult` / `FileTail` naming host, command and fix.
"""

from __future__ import annotations

import base64
import contextlib
import getpass
import hashlib
import logging
import os
import re
import select
import shlex
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import paramiko
from paramiko.common import cMSG_CHANNEL_REQUEST

from tools.host import (
    DEFAULT_MAX_BYTES,
    DEFAULT_TIMEOUT_S,
    STAT_HEAD,
    CommandResult,
    FileTail,
    decode,
    failure,
    parse_stat_head,
)

log = logging.getLogger("pivot.ssh")

#: sshd's default MaxSessions is 10; the 11th simultaneous channel is refused.
MAX_CHANNELS = 8
#: The remote `timeout` fires this long after our own deadline, so we see our timeout first.
REMOTE_KILL_GRACE_S = 0.5
DEFAULT_CONNECT_TIMEOUT_S = 10.0
_UNSET = object()


class ConnectError(Exception):
    """An expected failure to reach or log in to a host; carries the words for the agent."""

    def __init__(self, error: str, fix: str) -> None:
        super().__init__(error)
        self.error = error
        self.fix = fix


class UnknownHostKeyError(paramiko.SSHException):
    def __init__(self, hostname: str, key: paramiko.PKey) -> None:
        super().__init__(f"unknown host key for {hostname}")
        self.hostname = hostname
        self.key = key


@dataclass
class SSHTarget:
    """Where an alias really points, after ~/.ssh/config and explicit overrides."""

    alias: str
    hostname: str
    port: int = 22
    user: str = field(default_factory=getpass.getuser)
    identity_files: list[str] = field(default_factory=list)
    proxy_jump: str | None = None
    known_hosts_files: list[str] = field(default_factory=list)

    @property
    def hostkey_name(self) -> str:
        return self.hostname if self.port == 22 else f"[{self.hostname}]:{self.port}"


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH-style SHA256 fingerprint, so users can compare with `ssh-keygen -lf`."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def _split_spec(spec: str) -> tuple[str | None, str, int | None]:
    """`[user@]host[:port]` as ProxyJump and `--host` accept it."""
    user = None
    if "@" in spec:
        user, spec = spec.rsplit("@", 1)
    port = None
    m = re.fullmatch(r"\[(.+)\]:(\d+)|([^:]+):(\d+)", spec)
    if m:
        spec = m.group(1) or m.group(3)
        port = int(m.group(2) or m.group(4))
    return user, spec, port


def resolve_target(
    alias: str,
    *,
    ssh_config_path: str | os.PathLike[str] | None = None,
    hostname: str | None = None,
    port: int | None = None,
    user: str | None = None,
    key_filename: str | list[str] | None = None,
    proxy_jump: object = _UNSET,
    known_hosts: str | os.PathLike[str] | None = None,
) -> SSHTarget:
    """Resolve an alias the way `ssh ALIAS` would: config first, explicit arguments win."""
    spec_user, spec_host, spec_port = _split_spec(alias)
    cfg_path = Path(ssh_config_path or Path.home() / ".ssh" / "config").expanduser()
    cfg: dict[str, object] = {}
    if cfg_path.is_file():
        cfg = dict(paramiko.SSHConfig.from_path(str(cfg_path)).lookup(spec_host))
    keys = (
        key_filename if isinstance(key_filename, list) else [key_filename] if key_filename else []
    )
    if not keys:
        keys = [
            str(Path(k).expanduser())
            for k in cfg.get("identityfile", [])  # type: ignore[union-attr]
            if Path(k).expanduser().is_file()
        ]
    jump = cfg.get("proxyjump") if proxy_jump is _UNSET else proxy_jump
    if isinstance(jump, str) and jump.strip().lower() == "none":
        jump = None
    kh: list[str] = [str(Path.home() / ".ssh" / "known_hosts")]
    for extra in str(cfg.get("userknownhostsfile", "")).split():
        kh.append(str(Path(extra).expanduser()))
    if known_hosts:
        kh.append(str(Path(known_hosts).expanduser()))
    return SSHTarget(
        alias=alias,
        hostname=hostname or str(cfg.get("hostname") or spec_host),
        port=int(port or spec_port or cfg.get("port") or 22),  # type: ignore[arg-type]
        user=user or spec_user or str(cfg.get("user") or getpass.getuser()),
        identity_files=keys,
        proxy_jump=str(jump) if jump else None,
        known_hosts_files=list(dict.fromkeys(kh)),
    )


class _HostKeyPolicy(paramiko.MissingHostKeyPolicy):
    """Refuse unknown keys, or (explicit opt-in) trust, log and record them."""

    def __init__(self, trust_on_first_use: bool, record_to: str) -> None:
        self.tofu = trust_on_first_use
        self.record_to = record_to

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey):
        if not self.tofu:
            raise UnknownHostKeyError(hostname, key)
        log.warning(
            "trusting %s host key %s of %s on first use and recording it in %s",
            key.get_name(),
            fingerprint(key),
            hostname,
            self.record_to,
        )
        client.get_host_keys().add(hostname, key.get_name(), key)
        path = Path(self.record_to)
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with path.open("a", encoding="ascii") as fh:
            fh.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")


@dataclass
class _Outcome:
    out: bytes = b""
    err: bytes = b""
    rc: int | None = None
    timed_out: bool = False
    truncated: bool = False
    dropped: bool = False
    error: str | None = None
    fix: str | None = None


def _wrap(command: str, timeout: float, stdin: bool = False) -> str:
    """`sh -c` (never a login shell) under `timeout -s KILL`, so the host ends what we give up on.

    GNU timeout puts the command in its own process group and kills the whole group. The outer
    `exec sh -c` makes this work whatever the user's login shell is. A command given no input
    reads /dev/null: we then never send EOF on its channel, which for a command that already
    ended races sshd's close ("ieof packet referred to nonexistent channel" ends the whole
    connection, and every read sharing it).
    """
    inner = shlex.quote(command if stdin else f"{{ {command}\n}} </dev/null")
    limit = f"{timeout + REMOTE_KILL_GRACE_S:.1f}"
    script = (
        f"if command -v timeout >/dev/null 2>&1; then exec timeout -s KILL {limit} sh -c {inner}; "
        f"else exec sh -c {inner}; fi"
    )
    return "exec sh -c " + shlex.quote(script)


def _close_quietly(chan: paramiko.Channel, *, signal_first: bool) -> None:
    """Close a channel whose result is already read.

    Closing sends a message; when the transport died under a flood (sshd drops a peer that
    stops reading), that send raises. The output and the verdict are already in hand, and the
    next command reconnects, so a failed close must not turn a good answer into an exception.
    """
    try:
        if signal_first:
            _signal(chan, "TERM")
        chan.close()
    except (paramiko.SSHException, EOFError, OSError) as exc:
        log.info("closing a channel failed (%s); the transport is dropped on next use", exc)


def _signal(chan: paramiko.Channel, name: str) -> None:
    """Send an SSH "signal" request (RFC 4254 6.9); OpenSSH delivers it to the command.

    `timeout` (our wrapper) forwards TERM to its whole process group, so the command ends now
    and sshd frees the session at once, instead of at the `timeout -s KILL` backstop. paramiko
    has no public call for this request, hence the private send.
    """
    m = paramiko.Message()
    m.add_byte(cMSG_CHANNEL_REQUEST)
    m.add_int(chan.remote_chanid)
    m.add_string("signal")
    m.add_boolean(False)
    m.add_string(name)
    # If the connection is gone, so is the command's session.
    with contextlib.suppress(paramiko.SSHException, EOFError, OSError, AttributeError):
        chan.transport._send_user_message(m)  # type: ignore[union-attr]


class _QuietChannelRefusals(logging.Filter):
    """paramiko logs every refused channel open at ERROR; SSHHost retries those itself."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "open FAILED" not in record.getMessage()


logging.getLogger("paramiko.transport").addFilter(_QuietChannelRefusals())


class SSHHost:
    """A remote machine over one reused, host-key-verified SSH connection."""

    def __init__(
        self,
        alias: str,
        *,
        hostname: str | None = None,
        port: int | None = None,
        user: str | None = None,
        key_filename: str | list[str] | None = None,
        known_hosts: str | os.PathLike[str] | None = None,
        trust_on_first_use: bool = False,
        ssh_config_path: str | os.PathLike[str] | None = None,
        proxy_jump: object = _UNSET,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S,
        allow_agent: bool = True,
        max_channels: int = MAX_CHANNELS,
    ) -> None:
        self.name = alias
        self.target = resolve_target(
            alias,
            ssh_config_path=ssh_config_path,
            hostname=hostname,
            port=port,
            user=user,
            key_filename=key_filename,
            proxy_jump=proxy_jump,
            known_hosts=known_hosts,
        )
        self.trust_on_first_use = trust_on_first_use
        self.connect_timeout = connect_timeout
        self.allow_agent = allow_agent
        self._ssh_config_path = ssh_config_path
        self._known_hosts = known_hosts
        self._lock = threading.Lock()
        self._channels = threading.BoundedSemaphore(max_channels)
        self._client: paramiko.SSHClient | None = None
        self._jump: SSHHost | None = None
        #: How many connections this host has opened; tests and benchmarks read it.
        self.connects = 0

    # -- connection ----------------------------------------------------------------------------
    def transport(self, timeout: float | None = None) -> paramiko.Transport:
        """The live transport, connecting (or reconnecting) if needed; raises ConnectError."""
        with self._lock:
            if self._client is not None:
                t = self._client.get_transport()
                if t is not None and t.is_active():
                    return t
                self._client.close()
                self._client = None
            self._client = self._connect(min(timeout or self.connect_timeout, self.connect_timeout))
            self.connects += 1
            t = self._client.get_transport()
            assert t is not None
            return t

    def _open_socket(self, timeout: float) -> socket.socket | paramiko.Channel:
        t = self.target
        if t.proxy_jump:
            hops = [h.strip() for h in t.proxy_jump.split(",") if h.strip()]
            if self._jump is None:
                self._jump = SSHHost(
                    hops[-1],
                    known_hosts=self._known_hosts,
                    trust_on_first_use=self.trust_on_first_use,
                    ssh_config_path=self._ssh_config_path,
                    proxy_jump=",".join(hops[:-1]) or _UNSET,
                    connect_timeout=self.connect_timeout,
                    allow_agent=self.allow_agent,
                )
            jump_t = self._jump.transport(timeout)
            try:
                return jump_t.open_channel(
                    "direct-tcpip", (t.hostname, t.port), ("127.0.0.1", 0), timeout=timeout
                )
            except (paramiko.SSHException, OSError, EOFError) as exc:
                raise ConnectError(
                    f"jump host {self._jump.name} could not open a tunnel to "
                    f"{t.hostname}:{t.port} for {self.name}: {exc}",
                    f"check that {t.hostname}:{t.port} is reachable from {self._jump.name} "
                    "and that its sshd allows TCP forwarding (AllowTcpForwarding)",
                ) from exc
        try:
            sock = socket.create_connection((t.hostname, t.port), timeout=timeout)
        except socket.gaierror as exc:
            raise ConnectError(
                f"cannot resolve {t.hostname!r} (host {self.name}): {exc}",
                f"check the HostName for {self.name} in ~/.ssh/config or DNS",
            ) from exc
        except TimeoutError as exc:
            raise ConnectError(
                f"no answer from {t.hostname}:{t.port} (host {self.name}) within {timeout:.0f}s",
                f"check that {self.name} is up and reachable (VPN, firewall, Port in ~/.ssh/config)",
            ) from exc
        except OSError as exc:
            raise ConnectError(
                f"cannot connect to {t.hostname}:{t.port} (host {self.name}): {exc.strerror or exc}",
                f"check that sshd runs on {self.name} and listens on port {t.port} "
                f"(try: ssh -p {t.port} {t.user}@{t.hostname} true)",
            ) from exc
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def _connect(self, timeout: float) -> paramiko.SSHClient:
        t = self.target
        client = paramiko.SSHClient()
        for path in t.known_hosts_files:
            # a file that vanishes or turns unreadable between the check and the read is one
            # that is not there (as if is_file() had said so), never an exception out of run()
            with contextlib.suppress(OSError):
                if Path(path).is_file():
                    client.get_host_keys().load(path)
        record_to = str(self._known_hosts or t.known_hosts_files[0])
        client.set_missing_host_key_policy(_HostKeyPolicy(self.trust_on_first_use, record_to))
        sock = self._open_socket(timeout)
        kh = self._known_hosts or "~/.ssh/known_hosts"
        try:
            client.connect(
                t.hostname,
                port=t.port,
                username=t.user,
                key_filename=t.identity_files or None,
                look_for_keys=not t.identity_files,
                allow_agent=self.allow_agent,
                sock=sock,
                timeout=timeout,
                banner_timeout=timeout,
                auth_timeout=timeout,
                channel_timeout=timeout,
            )
        except UnknownHostKeyError as exc:
            client.close()
            raise ConnectError(
                f"refused to connect to {self.name}: its host key ({exc.key.get_name()} "
                f"{fingerprint(exc.key)}) is not in {kh}, so the host cannot be verified",
                f"verify the fingerprint with the host's admin, then run "
                f"`ssh-keyscan -p {t.port} {t.hostname} >> {kh}`, or opt in explicitly with "
                "trust_on_first_use=True (--trust-on-first-use)",
            ) from exc
        except paramiko.BadHostKeyException as exc:
            client.close()
            raise ConnectError(
                f"refused to connect to {self.name}: its host key CHANGED (now "
                f"{exc.key.get_name()} {fingerprint(exc.key)}, known_hosts has "
                f"{fingerprint(exc.expected_key)}); this is what a man-in-the-middle looks like",
                "if the host was reinstalled on purpose, remove the old key with "
                f"`ssh-keygen -R '{t.hostkey_name}' -f {kh}` and add the new one with "
                f"`ssh-keyscan -p {t.port} {t.hostname} >> {kh}`; otherwise stop and investigate",
            ) from exc
        except paramiko.AuthenticationException as exc:
            client.close()
            tried = ", ".join(t.identity_files) or "default keys in ~/.ssh"
            raise ConnectError(
                f"{t.user}@{self.name} refused our authentication ({exc}); tried {tried}"
                + (" and the ssh-agent" if self.allow_agent else ""),
                f"check User and IdentityFile for {self.name} in ~/.ssh/config, load the key into "
                f"the agent (ssh-add), or add the public key to ~{t.user}/.ssh/authorized_keys "
                f"on {self.name}",
            ) from exc
        except (paramiko.SSHException, EOFError, OSError) as exc:
            client.close()
            raise ConnectError(
                f"SSH handshake with {self.name} ({t.hostname}:{t.port}) failed within "
                f"{timeout:.0f}s: {exc or type(exc).__name__}",
                f"check that port {t.port} on {self.name} is an sshd that answers "
                f"(try: ssh -v -p {t.port} {t.user}@{t.hostname} true)",
            ) from exc
        transport = client.get_transport()
        assert transport is not None
        transport.set_keepalive(15)
        return client

    def _drop(self, transport: paramiko.Transport) -> None:
        with self._lock:
            if self._client is not None and self._client.get_transport() is transport:
                self._client.close()
                self._client = None

    # -- Host protocol -------------------------------------------------------------------------
    def run(
        self,
        command: str,
        timeout: float = DEFAULT_TIMEOUT_S,
        max_bytes: int = DEFAULT_MAX_BYTES,
        readonly: bool = True,
    ) -> CommandResult:
        """Run `command` on its own channel; read-only commands survive one dropped connection."""
        start = time.monotonic()
        o = self._exec(command, timeout, max_bytes, readonly=readonly)
        out, err = o.out[:max_bytes], o.err[:max_bytes]
        return CommandResult(
            host=self.name,
            command=command,
            rc=o.rc,
            stdout=decode(out),
            stderr=decode(err),
            duration_s=time.monotonic() - start,
            timed_out=o.timed_out,
            truncated=o.truncated,
            error=o.error,
            fix=o.fix,
        )

    def run_batch(
        self, commands: list[str], timeout: float = DEFAULT_TIMEOUT_S, max_bytes: int = 200_000
    ) -> list[CommandResult]:
        """Cheap read-only commands over one channel, one result each (tools/batch.py): one
        fork of sshd and one shell instead of one per command."""
        from tools import batch

        nonce = batch.new_nonce()
        whole = self.run(
            batch.compose(commands, nonce), timeout=timeout, max_bytes=max_bytes * len(commands)
        )
        return batch.results(self.name, commands, whole, nonce)

    def read_tail(self, path: str, max_bytes: int = 256_000) -> FileTail:
        """`stat` + `tail -c` in one command: one round trip, cost independent of file size."""
        q = shlex.quote(path)
        n = max(0, int(max_bytes))
        cmd = f"stat -L -c '{STAT_HEAD}' -- {q} && tail -c {n} -- {q}"
        o = self._exec(
            cmd, DEFAULT_TIMEOUT_S, n + 160, readonly=True
        )  # the stat line, at most ~120 bytes
        if o.error and o.rc is None:
            return FileTail(host=self.name, path=path, exists=False, error=o.error, fix=o.fix)
        if o.rc != 0:
            msg = decode(o.err).strip() or f"exit {o.rc}"
            missing = "No such file" in msg or "Not a directory" in msg
            return FileTail(
                host=self.name,
                path=path,
                exists=not missing,
                error=f"{path} does not exist on {self.name}"
                if missing
                else f"cannot read {path} on {self.name}: {msg}",
                fix="check the path, or list the log directory to find the current log"
                if missing
                else f"check permissions on {path} for user {self.target.user}",
            )
        head, _, data = o.out.partition(b"\n")
        parsed = parse_stat_head(head)
        if parsed is None:
            return FileTail(
                host=self.name,
                path=path,
                error=f"reading {path} on {self.name}: `stat -c %s` printed {head[:80]!r}",
                fix="the host needs GNU coreutils stat/tail; read the file with another tool",
            )
        # `%y` is the host's local wall time ("2026-12-01 23:30:01.123456789 +0000")
        return FileTail(
            host=self.name,
            path=path,
            data=data,
            size=parsed.size,
            bytes_read=len(data),
            modified=parsed.modified,
            owner=parsed.owner,
            born=parsed.born,
        )

    def write_file(self, path: str, data: bytes, mode: int | None = None) -> CommandResult:
        """Atomic replace: temp file in the same directory, fsync, `mv -f`; never retried."""
        q = shlex.quote(path)
        chmod = (
            f'chmod {mode:o} "$t"'
            if mode is not None
            else 'if [ -e "$p" ]; then chmod --reference="$p" "$t" 2>/dev/null || true; '
            'chown --reference="$p" "$t" 2>/dev/null || true; else chmod 644 "$t"; fi'
        )
        script = (
            f'set -e; p={q}; d=$(dirname -- "$p"); t=$(mktemp "$d/.pivot-XXXXXX"); '
            'trap \'rm -f -- "$t"\' EXIT; cat > "$t"; '
            f'{chmod}; sync -- "$t" 2>/dev/null || sync; mv -f -- "$t" "$p"; trap - EXIT; '
            'sync -- "$d" 2>/dev/null || true'
        )
        cmd = f"write {path}"
        o = self._exec(
            script, DEFAULT_TIMEOUT_S + len(data) / 1e6, 64_000, stdin=data, readonly=False
        )
        if o.error:
            return failure(self.name, cmd, o.error.replace(repr(script), repr(cmd)), o.fix or "")
        if o.rc != 0:
            return failure(
                self.name,
                cmd,
                f"cannot write {path} on {self.name}: {decode(o.err).strip() or f'exit {o.rc}'}",
                f"check that the directory exists and is writable by {self.target.user}",
                rc=o.rc,
            )
        return CommandResult(host=self.name, command=cmd, rc=0)

    def clock(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None
        if self._jump is not None:
            self._jump.close()

    # -- one command on one channel ------------------------------------------------------------
    def _exec(
        self,
        command: str,
        timeout: float,
        max_bytes: int,
        *,
        stdin: bytes | None = None,
        readonly: bool = True,
    ) -> _Outcome:
        deadline = time.monotonic() + timeout
        wrapped = _wrap(command, timeout, stdin=stdin is not None)
        drop_note = ""
        for attempt in (0, 1):
            try:
                transport = self.transport(max(0.1, deadline - time.monotonic()))
            except ConnectError as exc:
                return _Outcome(
                    error=f"cannot run {command!r} on {self.name}: {drop_note}{exc.error}",
                    fix=exc.fix,
                )
            if not self._channels.acquire(timeout=max(0.0, deadline - time.monotonic())):
                return _Outcome(
                    timed_out=True,
                    error=f"{command!r} on {self.name} waited {timeout:.0f}s for a free channel",
                    fix="fewer concurrent reads, or raise the timeout",
                )
            try:
                o = self._on_channel(
                    transport, command, wrapped, timeout, deadline, max_bytes, stdin
                )
            finally:
                self._channels.release()
            if not o.dropped:
                return o
            self._drop(transport)
            if readonly and attempt == 0 and time.monotonic() < deadline:
                log.info("connection to %s dropped; reconnecting once for %r", self.name, command)
                drop_note = "the connection dropped and reconnecting failed: "
                continue
            fix = "check that sshd on the host is alive (a reboot, OOM, or network cut); " + (
                "it was not re-run because it may change the host: check its effect first"
                if not readonly
                else "retry once the host answers"
            )
            o.error = f"the connection to {self.name} dropped while running {command!r}"
            o.fix = fix
            return o
        raise AssertionError("unreachable")

    def _on_channel(
        self,
        transport: paramiko.Transport,
        command: str,
        wrapped: str,
        timeout: float,
        deadline: float,
        max_bytes: int,
        stdin: bytes | None,
    ) -> _Outcome:
        chan = None
        backoff = 0.01
        while chan is None:
            try:
                chan = transport.open_session(timeout=max(0.1, deadline - time.monotonic()))
            except paramiko.ChannelException as exc:
                # sshd counts a session until it has processed our CLOSE, so right after a
                # burst it may still refuse (MaxSessions); other clients may hold sessions too.
                if transport.is_active() and time.monotonic() + backoff < deadline:
                    time.sleep(backoff)
                    backoff = min(backoff * 2, 0.2)
                    continue
                if not transport.is_active():
                    return _Outcome(dropped=True)
                return _Outcome(
                    error=f"sshd on {self.name} refused a channel for {command!r}: {exc}",
                    fix="too many sessions at once (sshd MaxSessions); retry with fewer reads",
                )
            except (paramiko.SSHException, EOFError, OSError):
                # "Timeout opening channel" on a live transport is a busy sshd (or a busy us),
                # not a dropped connection: wait and ask again on the same connection
                if transport.is_active() and time.monotonic() + backoff < deadline:
                    time.sleep(backoff)
                    backoff = min(backoff * 2, 0.2)
                    continue
                return _Outcome(dropped=True)
        o = _Outcome()
        out, err = bytearray(), bytearray()
        try:
            chan.exec_command(wrapped)
            if stdin is not None:
                chan.settimeout(max(0.1, deadline - time.monotonic()))
                chan.sendall(stdin)
                chan.shutdown_write()  # the writer waits for EOF: it cannot have ended yet
            fd = chan.fileno()
            while True:
                while chan.recv_ready() and len(out) <= max_bytes:
                    out += chan.recv(65536)
                while chan.recv_stderr_ready() and len(err) <= max_bytes:
                    err += chan.recv_stderr(65536)
                if len(out) > max_bytes or len(err) > max_bytes:
                    o.truncated = True
                    o.error = (
                        f"{command!r} on {self.name} printed more than {max_bytes} bytes; "
                        "stopped reading and ended it"
                    )
                    o.fix = "narrow the command (grep, tail, head) or raise max_bytes"
                    break
                if chan.eof_received and not chan.recv_ready() and not chan.recv_stderr_ready():
                    break
                if chan.closed and not chan.recv_ready() and not chan.recv_stderr_ready():
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    o.timed_out = True
                    break
                if not transport.is_active():
                    return _Outcome(dropped=True)
                select.select([fd], [], [], min(left, 0.25))
            if not o.timed_out and not o.truncated:
                left = max(0.0, deadline - time.monotonic())
                if not chan.status_event.wait(left):
                    o.timed_out = True
                elif not transport.is_active() and not chan.eof_received:
                    return _Outcome(dropped=True)
                else:
                    o.rc = chan.exit_status if chan.exit_status >= 0 else None
                    if o.rc is None:
                        o.error = f"{command!r} on {self.name} ended without an exit status"
                        o.fix = "it was killed by a signal (OOM killer?); check dmesg on the host"
        except (paramiko.SSHException, EOFError, OSError):
            if not transport.is_active():
                return _Outcome(dropped=True)
            raise
        finally:
            _close_quietly(chan, signal_first=(o.timed_out or o.truncated) and not chan.closed)
        if o.timed_out:
            o.error = (
                f"{command!r} on {self.name} ran past its {timeout:g}s timeout; "
                "it was stopped and is killed on the host"
            )
            o.fix = "raise the timeout or check why the command hangs (a stuck driver, NFS, ...)"
        o.out, o.err = bytes(out), bytes(err)
        return o
