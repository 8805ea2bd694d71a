"""The engine registry (`tools/engines.yaml`), loaded and validated, and what it says of a process.

`classify(command)` answers "is this command line an inference server, and which part of one?"
from the registry alone: an engine's entry point (the main process), a launcher of ranks
(torchrun, or a shell whose `-c` script runs the entry point), a worker (scheduler, TP rank,
EngineCore, Ray actor), or nothing. A command line that merely *mentions* an engine (`grep vllm`,
`bash -c 'sleep 600 # vllm'`, a g++ compile of a file under `sglang/`) is nothing; so is every
program in the registry's `never` list (pivot itself, compilers, editors, shells, pip, pytest,
Jupyter), whatever it mentions.

Tools may not import `agent/`, which is why the registry lives here; the agent reads it too.
"""

from __future__ import annotations

import posixpath
import re
from functools import cache, lru_cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tools import yamlio

REGISTRY = Path(__file__).with_name("engines.yaml")

Role = Literal["main", "launcher", "worker"]
Pattern = re.Pattern[str]


class Engine(BaseModel):
    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    name: str = ""
    title: str
    entry_points: list[Pattern] = Field(default_factory=list)
    launchers: list[Pattern] = Field(default_factory=list)
    workers: list[Pattern] = Field(default_factory=list)
    core_workers: list[Pattern] = Field(
        default_factory=list,
        description="the workers that do the engine's work (schedulers, engine cores): with the "
        "front end alive and none of these, requests are accepted and never served",
    )
    core_log: Pattern | None = Field(
        None, description="a log line only a core worker writes: this launch had one"
    )
    rank: Pattern | None = None
    log_rank: Pattern | None = None
    launch_markers: list[Pattern] = Field(default_factory=list)
    ready_markers: list[Pattern] = Field(default_factory=list)
    phases: dict[str, Pattern] = Field(default_factory=dict)
    config_prefixes: list[str] = Field(default_factory=list)
    names: list[str] = Field(default_factory=list, description="words naming it (any case)")
    source_dirs: list[str] = Field(default_factory=list, description="its source in a stack")
    generic: bool = Field(False, description="a catch-all: no signatures are its own")
    embeds: list[str] = Field(
        default_factory=list,
        description="engines it runs inside itself (Ollama's runner is llama.cpp): their "
        "signatures are its own too",
    )

    @field_validator("names", "source_dirs")
    @classmethod
    def _compiles(cls, v: list[str]) -> list[str]:
        for p in v:
            re.compile(p)
        return v

    @field_validator(
        "entry_points",
        "launchers",
        "workers",
        "core_workers",
        "launch_markers",
        "ready_markers",
        mode="before",
    )
    @classmethod
    def _pats(cls, v: list[str] | None) -> list[Pattern]:
        return [re.compile(p) for p in v or []]

    @field_validator("core_log", mode="before")
    @classmethod
    def _one(cls, v: str | None) -> Pattern | None:
        return re.compile(v) if v else None

    @field_validator("rank", "log_rank", mode="before")
    @classmethod
    def _pat(cls, v: str | None) -> Pattern | None:
        if v is None:
            return None
        pat = re.compile(v)
        if pat.groups < 1:
            raise ValueError(f"{v!r} needs a group that captures the rank number")
        return pat

    @field_validator("phases", mode="before")
    @classmethod
    def _phases(cls, v: dict[str, str] | None) -> dict[str, Pattern]:
        return {k: re.compile(p) for k, p in (v or {}).items()}


class Never(BaseModel):
    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    programs: Pattern
    modules: Pattern

    @field_validator("programs", "modules", mode="before")
    @classmethod
    def _alt(cls, v: list[str]) -> Pattern:
        return re.compile("(?:" + "|".join(f"(?:{p})" for p in v) + r")\Z")


class Common(BaseModel):
    """What every engine shares (see the `common:` section of engines.yaml)."""

    model_config = ConfigDict(extra="forbid")

    underlying: list[str]
    server_words: list[str]
    launch_words: list[str]
    launch_markers: list[str]
    config_prefixes: list[str]
    worker_words: str
    workload_programs: str
    timestamps: list[str]
    builders: list[str]
    runtime_daemons: list[str] = []

    @field_validator(
        "server_words",
        "launch_words",
        "launch_markers",
        "timestamps",
        "builders",
        "runtime_daemons",
    )
    @classmethod
    def _compiles(cls, v: list[str]) -> list[str]:
        for p in v:
            re.compile(p)
        return v


class Registry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    engines: dict[str, Engine]
    common: Common
    never: Never

    def model_post_init(self, _: object) -> None:
        for name, e in self.engines.items():
            e.name = name

    def config_prefixes(self) -> tuple[str, ...]:
        """Every engine's prefixes, then the common ones (NCCL_, CUDA_, HF_)."""
        own = [p for e in self.engines.values() for p in e.config_prefixes]
        return tuple(dict.fromkeys([*own, *self.common.config_prefixes]))


@cache
def registry(path: str | None = None) -> Registry:
    """The registry, validated once per process (a bad pattern fails loudly, naming it)."""
    data = yamlio.safe_load(Path(path or REGISTRY).read_text(encoding="utf-8"))
    return Registry.model_validate(data)


# -- command lines -> invocations ------------------------------------------------------------

#: Wrappers that run another command: name -> how many non-option operands come first.
_WRAPPERS = {
    "tini": 0,
    "dumb-init": 0,
    "nohup": 0,
    "setsid": 0,
    "stdbuf": 0,
    "numactl": 0,
    "nice": 0,
    "ionice": 0,
    "chrt": 1,
    "taskset": 1,
    "time": 0,
    "env": 0,
    "exec": 0,
    "catchsegv": 0,
    "xvfb-run": 0,
}
_OPT_WITH_VALUE = {"nice": {"-n"}, "ionice": {"-c", "-n"}, "env": {"-u", "-C", "-S"}}
_PYTHON = re.compile(r"(?:python|pypy)[\d.]*(?:-dbg)?\Z")
_PY_OPT_VALUE = {"-X", "-W", "-Q"}
_SHELLS = re.compile(r"-?(?:ba|da|z|k|fi)?sh\Z")
_SPLIT = re.compile(r"\s*(?:;|&&|\|\||&|\|)\s*")
_ENV_ASSIGN = re.compile(r"[A-Za-z_]\w*=")


class Invocation(BaseModel):
    """One command a process runs: its program (script base name or `python -m` module) and args."""

    program: str
    args: list[str] = Field(default_factory=list)
    module: bool = False
    via_shell: bool = False

    @property
    def text(self) -> str:
        return " ".join([self.program, *self.args])


def _base(tok: str) -> str:
    # a process title such as `ray::ServeReplica:App:org/model` is not a path
    return tok if "::" in tok else posixpath.basename(tok)


def _strip_wrappers(toks: list[str]) -> list[str]:
    while toks:
        name = _base(toks[0])
        if toks[0] == "--" or _ENV_ASSIGN.match(toks[0]):
            toks = toks[1:]
            continue
        if name not in _WRAPPERS:
            return toks
        operands = _WRAPPERS[name]
        i = 1
        while i < len(toks):
            t = toks[i]
            if t == "--":
                i += 1
                break
            if t in _OPT_WITH_VALUE.get(name, set()):
                i += 2
            elif t.startswith("-") or (name == "env" and _ENV_ASSIGN.match(t)):
                i += 1
            elif operands:
                operands -= 1
                i += 1
            else:
                break
        toks = toks[i:]
    return toks


_OPERATORS = {";", "&&", "||", "|", "&", "(", ")"}


def _commands(script: str) -> list[str]:
    """The commands of a shell script, split on ; && || | & OUTSIDE quotes, comments dropped: a
    grep whose quoted pattern names `torchrun|sglang` runs grep, not torchrun."""
    import shlex

    lex = shlex.shlex(script, posix=True, punctuation_chars=";&|()")
    lex.whitespace_split = True
    lex.commenters = "#"
    parts: list[list[str]] = [[]]
    try:
        for tok in lex:
            if tok in _OPERATORS:
                parts.append([])
            else:
                parts[-1].append(tok)
    except ValueError:  # unbalanced quotes (a cut command line): fall back to a plain split
        return [p for p in _SPLIT.split(re.sub(r"(?:^|\s)#.*", "", script)) if p.strip()]
    return [" ".join(shlex.quote(t) if " " in t else t for t in p) for p in parts if p]


def invocations(command: str, _depth: int = 0) -> list[Invocation]:
    """What a ps command line runs, wrappers and interpreter taken off; a shell `-c` script gives
    one invocation per command in it (comments dropped). Kernel threads give none."""
    cmd = command.strip()
    if not cmd or (cmd.startswith("[") and cmd.endswith("]")):
        return []
    toks = _strip_wrappers(cmd.split())
    if not toks:
        return []
    prog = _base(toks[0])
    rest = toks[1:]
    if _PYTHON.match(prog):
        i = 0
        while i < len(rest) and rest[i].startswith("-") and rest[i] not in ("-m", "-c", "-"):
            i += 2 if rest[i] in _PY_OPT_VALUE else 1
        rest = rest[i:]
        if rest[:1] == ["-m"] and len(rest) > 1:
            return [Invocation(program=rest[1], args=rest[2:], module=True)]
        if not rest or rest[0] in ("-c", "-"):
            return [Invocation(program=prog, args=rest)]
        return [Invocation(program=_base(rest[0]), args=rest[1:])]
    if _SHELLS.match(prog) and _depth < 3:
        at = next(
            (
                i + 1
                for i, t in enumerate(rest)
                if t.startswith("-") and not t.startswith("--") and "c" in t[1:]
            ),
            None,
        )
        if at is not None:
            script = " ".join(t for t in rest[at:] if t != "--")
            out: list[Invocation] = []
            for part in _commands(script):
                for inv in invocations(part, _depth + 1):
                    out.append(inv.model_copy(update={"via_shell": True}))
            return out
    return [Invocation(program=prog, args=rest)]


class Match(BaseModel):
    """What the registry says of one command line (frozen: `classify` hands out one per line)."""

    model_config = ConfigDict(frozen=True)

    engine: str | None = None
    role: Role | None = None
    rank: int | None = None
    never: bool = Field(False, description="pivot itself, a compiler, an editor, a shell, ...")
    via_shell: bool = Field(False, description="a shell whose -c script runs the entry point")


def is_never(inv: Invocation) -> bool:
    n = registry().never
    if inv.module:
        return bool(n.modules.match(inv.program))
    # a daemon's own title names it with a colon ("postgres: checkpointer", "nginx: worker")
    return bool(n.programs.match(inv.program) or n.programs.match(inv.program.removesuffix(":")))


@lru_cache(maxsize=8192)
def classify(command: str) -> Match:
    """The engine and role of a ps command line, from the registry only. Cached: the registry is
    read once per process, and one sweep classifies the same rows twice (`processes`,
    `container_detect`), every watch again; tokenizing a shell line is most of their parse."""
    invs = invocations(command)
    if not invs:
        return Match()
    if not invs[0].via_shell and is_never(invs[0]):
        return Match(never=True)
    usable = [inv for inv in invs if not is_never(inv)]
    for e in registry().engines.values():  # registry order: the engine before its runtime
        for inv in usable:
            text = inv.text
            role: Role | None = None
            if any(p.match(text) for p in e.workers):
                role = "worker"
            elif any(p.match(text) for p in e.entry_points):
                # a shell whose script runs the entry point started the server: its launcher
                role = "launcher" if inv.via_shell else "main"
            elif any(p.match(text) for p in e.launchers):
                role = "launcher"
            if role is None:
                continue
            rank = None
            if e.rank is not None and (m := e.rank.match(text)):
                rank = int(m.group(1))
            return Match(engine=e.name, role=role, rank=rank, via_shell=inv.via_shell)
    # a shell whose script runs no engine is a shell
    return Match(never=invs[0].via_shell)


def engine_names() -> list[str]:
    return list(registry().engines)


def core_log_line(lines: list[str], engine: str) -> str | None:
    """The first log line that only the engine's core workers write, if any."""
    e = registry().engines.get(engine)
    if e is None or e.core_log is None:
        return None
    return next((ln for ln in lines if e.core_log.search(ln)), None)


def is_core_worker(command: str, engine: str) -> bool:
    """Whether a ps command line is one of the engine's core workers (its scheduler, engine
    core): the processes without which a live front end serves nothing."""
    e = registry().engines.get(engine)
    if e is None or not e.core_workers:
        return False
    return any(p.match(inv.text) for inv in invocations(command) for p in e.core_workers)


def log_ranks(lines: list[str], engine: str | None = None) -> set[int]:
    """Rank numbers an engine's log lines name (`TP1`, `[rank1]`), by one engine or by all."""
    reg = registry()
    chosen = [reg.engines[engine]] if engine in reg.engines else list(reg.engines.values())
    out: set[int] = set()
    for e in chosen:
        if e.log_rank is None:
            continue
        for ln in lines:
            out |= {int(m.group(1)) for m in e.log_rank.finditer(ln)}
    return out


def _union(parts: list[str], flags: int = 0) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{p})" for p in parts) or r"(?!)", flags)


@cache
def name_pattern() -> Pattern:
    """Any engine's name (case-insensitive), as a unit, container, script or log says it."""
    return _union([n for e in registry().engines.values() for n in e.names], re.I)


@cache
def server_name_pattern() -> Pattern:
    """A container / pod / unit name that looks like an inference server's."""
    reg = registry()
    return _union(
        [n for e in reg.engines.values() for n in e.names] + reg.common.server_words, re.I
    )


@cache
def launch_line_pattern() -> Pattern:
    """A script line that launches an engine or a container: its flags and env matter."""
    reg = registry()
    names = [n for e in reg.engines.values() for n in e.names]
    return re.compile("|".join([*names, *reg.common.launch_words]))


def launch_patterns() -> tuple[str, ...]:
    """Log lines that start a launch: every engine's markers, then the common ones."""
    reg = registry()
    own = [p.pattern for e in reg.engines.values() for p in e.launch_markers]
    return tuple(dict.fromkeys([*own, *reg.common.launch_markers]))


@cache
def builder_pattern() -> Pattern:
    """A process that builds kernels for a launch (compilers, torch.compile's workers)."""
    return re.compile("|".join(f"(?:{p})" for p in registry().common.builders))


@cache
def runtime_daemon_pattern() -> Pattern:
    """A runtime's daemon a launch may run on (Ray's raylet): listed, never the server."""
    return re.compile("|".join(f"(?:{p})" for p in registry().common.runtime_daemons) or "(?!)")


@cache
def worker_pattern() -> Pattern:
    """A process title that is part of a server (a rank, a scheduler), never its main process."""
    return re.compile(registry().common.worker_words)


@cache
def workload_pattern() -> Pattern:
    """A command that may run a workload no engine knows (python, MPI, a launcher, a benchmark)."""
    progs = registry().common.workload_programs
    return re.compile(rf"(?i)(?:^|/|\s)(?:{progs})(?:\s|$)")


@cache
def collective_dirs() -> str:
    """Engine source directories (a regex alternation) whose `distributed/` holds collectives."""
    return "|".join(d for e in registry().engines.values() for d in e.source_dirs)


def underlying() -> set[str]:
    """Engines every launch runs on: a signature for one of them applies to any launch."""
    return set(registry().common.underlying)


def embedded(engine: str | None) -> set[str]:
    """The engines `engine` runs inside itself (their log lines are its own)."""
    e = registry().engines.get(engine or "")
    return set(e.embeds) if e is not None else set()


def signature_engine(engine: str | None) -> str | None:
    """The engine whose signatures a launch's log speaks, or None (unknown, or a catch-all)."""
    e = registry().engines.get(engine or "")
    return None if e is None or e.generic else e.name


def card_engines() -> tuple[str, ...]:
    """What a card's `engine` may say: a registry engine or `other`."""
    return (*(n for n, e in registry().engines.items() if not e.generic), "other")


def guess_engine(texts: list[str]) -> str:
    """The engine a host capture names most often (for a card draft), or `other`."""
    blob = "\n".join(texts)
    counts = {
        name: sum(len(re.findall(n, blob, re.I)) for n in e.names)
        for name, e in registry().engines.items()
        if not e.generic
    }
    best = max(counts, key=lambda k: counts[k], default="other")
    return best if counts.get(best) else "other"
