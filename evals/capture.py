"""`pivot capture`: freeze a live host into an incident-card draft, secrets taken out.

This is how a real incident becomes a regression card: what the machine said (nvidia-smi, ps,
dmesg, env, the named logs and configs, df, free, listening ports) is stored raw, exactly the
way `ReplayHost` will hand it back to the tools, so the agent meets the same text it would have
met live. Everything goes through the `Host` protocol, so SSH and local capture are one path.

The root cause is deliberately left out: the operator fills `expected` after reading the draft
(a header comment says how). `load_card` accepts a card without `expected`, so the draft
validates the moment it is written.
"""

from __future__ import annotations

import re
import shlex
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, Field

from cards.model import IncidentCard, card_text_bytes, load_card
from cards.replay import not_running
from cards.taxonomy import LABELS
from evals.redact import Redaction, Redactor
from tools import container_detect, dmesg, engines, host_facts
from tools.container_host import OUTSIDE, first_program
from tools.gpu_status import APPS_QUERY, APPS_QUERY_NARROW, CARD_QUERY
from tools.host import Host
from tools.local_host import LocalHost
from tools.logfile import _region_cmd, find_last_launch, grep_region, last_launch_in

LOG_TAIL_BYTES = 256_000
#: from the last launch marker on, the start of the run (server args, versions, env echo)
LAUNCH_BYTES = 64_000
#: lines matching FATAL anywhere since the launch, with context, at most this much
FATAL_BYTES = 256_000
FATAL_CONTEXT = 3
FATAL = (
    r"(?i)Traceback|Error:|Exception|out of memory|OutOfMemory|Killed|FATAL|fatal error|"
    r"Segmentation fault|core dumped|NCCL WARN|CUDA error|\[E\]|terminate called|Aborted"
)
CONFIG_BYTES = 512_000
#: the most kernel lines the dmesg tool may ask for (it reads the tail; replay applies its
#: `| tail -n N`), so a card holds every line a live read could have seen
DMESG_LINES = dmesg.MAX_TAIL
CMD_TIMEOUT = 20.0
ID_RE = re.compile(r"^[a-z0-9][a-z0-9-]*$")

#: (card key under `commands`, fallback) for each extra command the tools will ask for.
EXTRA_COMMANDS: list[tuple[str, str | None]] = [
    ("df -h", None),
    ("df -h /dev/shm", None),
    ("free -m", None),
    ("ss -ltnp", "cat /proc/net/tcp /proc/net/tcp6"),
]
#: host_facts' own reads (driver, ECC, ulimit, kernel, network, docker/kubectl), minus those
#: with a key of their own (env) or above
FACT_COMMANDS = [
    cmd
    for cmd, _ in host_facts.COMMANDS.values()
    if cmd != "env" and cmd not in dict(EXTRA_COMMANDS)
]
#: read inside a running container, besides its `ps`: what the sweep reads there
INSIDE_COMMANDS: list[tuple[str, str | None]] = [
    ("df -h /dev/shm", None),
    ("df -h", None),
    ("free -m", None),
    ("env", None),
    ("ss -ltnp", "cat /proc/net/tcp /proc/net/tcp6"),
    *[(cmd, None) for cmd in FACT_COMMANDS if first_program(cmd) not in OUTSIDE],
]


class CaptureOptions(BaseModel):
    logs: list[str] = Field(default_factory=list)
    configs: list[str] = Field(default_factory=list)
    #: the server's pid: env is read from /proc/PID/environ instead of the shell's
    pid: int | None = None
    redact_hosts: bool = False
    symptom: str | None = None
    engine: str | None = None
    log_bytes: int = LOG_TAIL_BYTES
    #: the server's Docker/Podman container: its record, log and inside view go to host.containers
    container: str | None = None


class CaptureResult(BaseModel):
    path: str
    card_id: str
    notes: list[str]
    redaction: Redaction
    files: list[str]


def card_text(data: bytes) -> str:
    r"""Host bytes as card text that `cards.model.card_text_bytes` turns back into the same bytes.

    UTF-8 stays readable; anything else (and UTF-8 whose characters all fit in latin-1, which
    `card_text_bytes` would read back as latin-1) is stored one character per byte, which YAML
    writes as \xNN escapes.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("latin-1")
    return text if card_text_bytes(text) == data else data.decode("latin-1")


def _tail_text(host: Host, path: str, max_bytes: int) -> tuple[str | None, str | None]:
    ft = host.read_tail(path, max_bytes=max_bytes)
    if not ft.exists or ft.error:
        return None, ft.error or f"{path}: not found on {host.name}"
    data = ft.data
    note = None
    if ft.size > ft.bytes_read:
        # Start at a line boundary so no half line (or half UTF-8 character) opens the text.
        nl = data.find(b"\n")
        data = data[nl + 1 :] if nl >= 0 else data
        note = f"{path}: kept the last {len(data)} of {ft.size} bytes"
    return card_text(data), note


def elided(n: int) -> bytes:
    """The one line that marks bytes left out of a captured log."""
    return f"# \u2026 {n:,} bytes not captured \u2026\n".encode()


def log_text(host: Host, path: str, tail_bytes: int) -> tuple[str | None, str | None]:
    """A log for a card: all of it when small; else the launch region (from the last launch
    marker), every fatal-looking line since the launch with a few lines of context, and the
    tail, each gap marked `# … N bytes not captured …`. Where the host cannot run the remote
    reads (no grep/tail), the tail alone, said in the note."""
    ft = host.read_tail(path, max_bytes=tail_bytes)
    if not ft.exists or ft.error:
        return None, ft.error or f"{path}: not found on {host.name}"
    if ft.size <= ft.bytes_read:
        return card_text(ft.data), None
    data = ft.data
    nl = data.find(b"\n")
    data = data[nl + 1 :] if nl >= 0 else data
    tail_from = ft.size - len(data)
    off, _ = last_launch_in(data, first_is_line_start=True)
    if off is not None:
        return card_text(data), f"{path}: kept the last {len(data)} of {ft.size} bytes"
    scan = find_last_launch(host, path, tail_from)
    if not scan.ok:
        return card_text(data), (
            f"{path}: kept the last {len(data)} of {ft.size} bytes (the host could not scan "
            f"for the launch: {scan.why_stopped})"
        )
    start = scan.offset if scan.found and scan.offset is not None else scan.scanned_from
    parts: list[bytes] = []
    pos = start
    if start > 0:
        parts.append(elided(start))
    head_len = min(LAUNCH_BYTES, tail_from - start)
    head = host.run(_region_cmd(path, start, head_len), timeout=CMD_TIMEOUT, max_bytes=head_len)
    if head.ok and head.stdout:
        hb = head.stdout.encode("utf-8", errors="surrogateescape")
        cut = hb.rfind(b"\n") + 1 if len(hb) >= head_len else len(hb)
        parts.append(hb[:cut] if cut else hb)
        pos = start + (cut or len(hb))
    fatal = grep_region(host, path, pos, tail_from - pos, FATAL, False, FATAL_CONTEXT, cap=200)
    kept = 0
    seen: set[str] = set()
    for group in fatal.groups if fatal.ok else []:
        lines = [gl for gl in group if gl.offset >= pos]
        shapes = {re.sub(r"\d+", "#", gl.text) for gl in lines if gl.match}
        if not lines or not shapes - seen:
            continue  # the same fatal line again (a dead engine rejecting every request)
        seen |= shapes
        chunk = b"".join(gl.text.encode("utf-8", errors="surrogateescape") + b"\n" for gl in lines)
        if kept + len(chunk) > FATAL_BYTES:
            break
        if lines[0].offset > pos:
            parts.append(elided(lines[0].offset - pos))
        parts.append(chunk)
        kept += len(chunk)
        last = lines[-1]
        pos = last.offset + len(last.text.encode("utf-8", errors="surrogateescape")) + 1
    if tail_from > pos:
        parts.append(elided(tail_from - pos))
    parts.append(data)
    note = (
        f"{path}: {ft.size} bytes; kept the launch region"
        f"{' (from byte ' + str(start) + ')' if start else ''}, "
        f"{sum(1 for g in fatal.groups for gl in g if gl.match) if fatal.ok else 0} fatal-looking "
        f"lines since the launch with context, and the last {len(data)} bytes"
    )
    if not scan.found:
        note += "; no launch marker found" + (
            f" in the last {ft.size - scan.scanned_from} bytes" if scan.scanned_from else ""
        )
    return card_text(b"".join(parts)), note


def _run(host: Host, command: str) -> tuple[str | None, str | None]:
    res = host.run(command, timeout=CMD_TIMEOUT)
    if res.ok:
        return res.stdout, None
    why = res.error or (
        "not installed" if res.missing_command else f"exit {res.rc}: {res.stderr.strip()[:160]}"
    )
    return None, f"{command}: {why}"


def _is_pid_line(line: str, pid: int) -> bool:
    """Does a `ps aux` line belong to this pid (its second column)?"""
    parts = line.split(None, 2)
    return len(parts) >= 2 and parts[1] == str(pid)


def _guess_engine(texts: list[str]) -> str:
    """The engine the capture names most often, by the registry's `names` (tools/engines.yaml)."""
    return engines.guess_engine(texts)


def collect(host: Host, options: CaptureOptions) -> tuple[dict[str, Any], list[str], Redaction]:
    """The card's `host` section (redacted), the capture notes, and what was redacted."""
    notes: list[str] = []
    names = [host.name] if host.name not in ("localhost", "") else []
    if options.redact_hosts:
        for cmd in ("hostname", "hostname -f"):
            out, _ = _run(host, cmd)
            names += [out.strip()] if out and out.strip() else []
    red = Redactor(hosts=options.redact_hosts, hostnames=names)

    snap: dict[str, Any] = {}

    def keep(key: str, command: str) -> None:
        out, note = _run(host, command)
        if out is None:
            notes.append(note or command)
        else:
            snap[key] = red(out)

    keep("nvidia_smi", CARD_QUERY)
    keep("nvidia_smi_full", "nvidia-smi")
    # ww: full command lines even when COLUMNS is set (ps would cut them at its width)
    keep("ps", "ps auxww")
    # The tail of `dmesg -T`, but with dmesg's own exit status (a pipe would report tail's).
    keep(
        "dmesg",
        f'out=$(dmesg -T 2>&1); rc=$?; printf "%s\\n" "$out" | tail -n {DMESG_LINES}; exit $rc',
    )
    if options.pid is not None:
        keep("env", f"tr '\\0' '\\n' < /proc/{int(options.pid)}/environ")
    else:
        keep("env", "env")

    files: dict[str, str] = {}
    for path, limit, is_log in [(p, options.log_bytes, True) for p in options.logs] + [
        (p, CONFIG_BYTES, False) for p in options.configs
    ]:
        text, note = log_text(host, path, limit) if is_log else _tail_text(host, path, limit)
        if note:
            notes.append(note)
        if text is not None:
            files[path] = red(text)
    if files:
        snap["files"] = files

    commands: dict[str, str] = {}
    for query in (APPS_QUERY, APPS_QUERY_NARROW):  # gpu_status asks the narrow one after
        apps, _ = _run(host, query)
        if apps is not None:
            commands[query] = red(apps)
            break
    _commands(host, EXTRA_COMMANDS + [(c, None) for c in FACT_COMMANDS], commands, red, notes)
    name, cli = options.container, None
    if name is None:
        # the read `container_detect` makes in a live run's first sweep, kept raw: on replay the
        # same tool parses it, so the card names the container only the way the host did
        name, cli = _detect(host, commands, red, notes)
    if commands:
        snap["commands"] = commands
    if name:
        snap["containers"] = {name: _container(host, name, red, notes, cli)}
    return snap, notes, red.report()


def _commands(
    host: Host,
    wanted: list[tuple[str, str | None]],
    commands: dict[str, str],
    red: Redactor,
    notes: list[str],
    where: str = "",
) -> None:
    """Each (command, fallback) into `commands`; what could not be read into `notes`."""
    for command, fallback in wanted:
        out, note = _run(host, command)
        if out is None and fallback:
            notes.append(f"{where}{note}; used {fallback!r} instead")
            command = fallback
            out, note = _run(host, fallback)
        if out is None:
            notes.append(where + (note or command))
        else:
            commands[command] = red(out)


def _detect(
    host: Host, commands: dict[str, str], red: Redactor, notes: list[str]
) -> tuple[str | None, str | None]:
    """Record the container-detection read; the container it names when the run would read
    inside one (every engine process in one container that docker or podman knows)."""
    command = container_detect.command(container_detect.runtimes().prefilter)
    res = host.run(command, timeout=CMD_TIMEOUT, max_bytes=2_000_000)
    if res.error or (res.rc not in (0, None) and not res.stdout):
        notes.append(f"container detection: {res.error or res.stderr.strip()[:160]}")
        return None, None
    # redacted like `ps` (command lines may hold keys); parsed as kept, so the card names only
    # the container that its own text shows
    commands[command] = text = red(res.stdout)
    found = container_detect.parse(text, host.name).container
    if found is None or not found.readable:
        return None, None
    notes.append(
        f"the server runs in {found.runtime} container {found.name} (detected from "
        f"/proc/{found.pid}/cgroup): recorded under host.containers"
    )
    return found.name, found.cli


def _container(
    host: Host, name: str, red: Redactor, notes: list[str], cli: str | None = None
) -> dict[str, Any]:
    """host.containers.NAME: the CLI that knows it, the record and the whole log (every
    instance, with timestamps) through it, and ps, df, free and env from inside while it runs."""
    from tools.container_host import ContainerHost

    inside = ContainerHost(getattr(host, "outer", host), name, cli=cli)
    down = inside.unavailable()
    if down is not None:
        notes.append(down.error or f"container {name} not found")
        return {}
    cli = inside.cli()
    out: dict[str, Any] = {"cli": cli}
    for key, command in (
        ("inspect", f"{cli} inspect {name}"),
        ("logs", f"{cli} logs --timestamps {name} 2>&1"),
    ):
        text, note = _run(inside.outer, command)
        if text is None:
            notes.append(note or command)
        else:
            out[key] = red(text)
    if not_running(out.get("inspect", "")):
        # exec fails on a stopped container; replay answers it as the CLI did, from the record
        notes.append(f"container {name} is not running: nothing read inside it")
        return out
    ps, note = _run(inside, "ps auxww")
    if ps is None:
        notes.append(f"inside {name}: {note}")
    else:
        out["ps"] = red(ps)
    commands: dict[str, str] = {}
    _commands(inside, INSIDE_COMMANDS, commands, red, notes, f"inside {name}: ")
    if commands:
        out["commands"] = commands
    return out


def draft_card(
    host: Host, card_id: str, options: CaptureOptions
) -> tuple[dict[str, Any], list[str], Redaction]:
    snap, notes, redaction = collect(host, options)
    when = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    where = host.name
    if options.redact_hosts and where not in ("localhost", ""):
        where = "a redacted host"
    texts = [snap.get("ps", ""), *snap.get("files", {}).values()]
    engine = options.engine
    if engine is None and options.pid:
        # the launch's own process line and files first: other jobs on a shared box (someone
        # else's SGLang) must not name this card's engine
        own_ps = [
            ln for ln in str(snap.get("ps", "")).splitlines() if _is_pid_line(ln, options.pid)
        ]
        own = _guess_engine(["\n".join(own_ps), *snap.get("files", {}).values()])
        engine = None if own == "other" else own
    card = {
        "id": card_id,
        "title": f"TODO: one line saying what happened (captured on {where} at {when})",
        "source": f"captured by pivot capture on {where} at {when}",
        "engine": engine or _guess_engine(texts),
        "symptom": options.symptom
        or f"The inference server launch on {where} failed or never became ready. Why?",
        "synthesized": [],
        **({"invocation": {"container": options.container}} if options.container else {}),
        "host": snap,
    }
    IncidentCard.model_validate(card)  # a bug here must not produce a file
    return card, notes, redaction


def _header(notes: list[str], redaction: Redaction) -> str:
    lines = [
        "Card draft written by `pivot capture`. Before it joins evals/incidents/:",
        "  1. Add the answer (left out on purpose; the harness reports a card without it):",
        "       expected:",
        "         root_cause: <one label>   # " + ", ".join(LABELS[:6]) + ",",
        "         #   " + ", ".join(LABELS[6:12]) + ",",
        "         #   " + ", ".join(LABELS[12:]),
        '         evidence: ["<a substring of a line below that proves it>"]',
        "         ruled_out: []   # labels the investigation checked and refuted",
        "         wrong: []       # conclusions that count as a failure outright",
        "  2. Rewrite `title` and `symptom` in the operator's words; list invented parts",
        "     under `synthesized`.",
        "  3. Read it once more for secrets the rules could not know about.",
        "Redacted: "
        + (
            ", ".join(f"{k} x{v}" for k, v in redaction.counts.items())
            if redaction.counts
            else "nothing matched"
        ),
    ]
    if notes:
        lines.append("Capture notes (what could not be read):")
        lines += [f"  - {n}" for n in notes]
    return "".join(f"# {ln}\n" if ln else "#\n" for ln in lines)


_PRINTABLE = re.compile(r"[^\t\n\x20-\x7e\xa0-\ud7ff\ue000-\ufffd]")


class _CardDumper(yaml.SafeDumper):
    """Multi-line text as literal blocks, so a captured log reads like the log.

    PyYAML refuses a literal block for text with trailing spaces on a line, which `ps aux` and
    dmesg are full of, and falls back to one long double-quoted string. A literal block keeps
    those spaces, so we allow it for any text without control characters; text with `\r`,
    ANSI escapes or raw bytes still goes double-quoted with escapes. `to_yaml` checks the
    round trip and falls back to plain PyYAML if this ever loses a byte.
    """

    def choose_scalar_style(self) -> str:
        ev = self.event
        if (
            getattr(ev, "style", None) == "|"
            and not self.flow_level
            and not self.simple_key_context
            and isinstance(ev.value, str)
            and not _PRINTABLE.search(ev.value)
        ):
            return "|"
        return super().choose_scalar_style()


def _str(dumper: yaml.SafeDumper, data: str) -> yaml.Node:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_CardDumper.add_representer(str, _str)


def to_yaml(card: dict[str, Any], header: str = "") -> str:
    kw: dict[str, Any] = dict(
        sort_keys=False, allow_unicode=True, width=100_000, default_flow_style=False
    )
    body = yaml.dump(card, Dumper=_CardDumper, **kw)
    if yaml.safe_load(body) != card:  # never trade a byte for readability
        body = yaml.dump(card, Dumper=yaml.SafeDumper, **kw)
    return header + body


def capture(host: Host, out: str | Path, options: CaptureOptions) -> CaptureResult:
    """Capture `host` into the card file `out` (its name is the card id) and validate it."""
    out = Path(out)
    if out.suffix != ".yaml":
        raise ValueError(f"{out}: a card file ends in .yaml")
    if not ID_RE.match(out.stem):
        raise ValueError(
            f"{out}: the file name is the card id and must be kebab-case "
            f"(lowercase letters, digits, '-'), e.g. sglang-tp8-nccl-hang.yaml"
        )
    if isinstance(host, LocalHost):
        # A relative path means the same file later, wherever the card is replayed.
        options = options.model_copy(
            update={
                "logs": [str(Path(p).resolve()) for p in options.logs],
                "configs": [str(Path(p).resolve()) for p in options.configs],
            }
        )
    card, notes, redaction = draft_card(host, out.stem, options)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(to_yaml(card, _header(notes, redaction)), encoding="utf-8")
    load_card(out)  # the draft must validate; a CardError here is a bug in this module
    return CaptureResult(
        path=str(out),
        card_id=out.stem,
        notes=notes,
        redaction=redaction,
        files=sorted(card["host"].get("files", {})),
    )


def describe(result: CaptureResult) -> str:
    """One paragraph for the terminal."""
    red = ", ".join(f"{k} x{v}" for k, v in result.redaction.counts.items()) or "nothing"
    lines = [
        f"wrote {result.path} (card id {result.card_id})",
        f"files: {', '.join(shlex.quote(f) for f in result.files) or 'none'}",
        f"redacted: {red}",
    ]
    lines += [f"note: {n}" for n in result.notes]
    lines.append("next: fill `expected:` (see the comment at the top), then pivot eval the card")
    return "\n".join(lines)
