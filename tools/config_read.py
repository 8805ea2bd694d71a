"""`config_read`: what a config file sets, key by key, with the line that sets it.

Launch failures often come from a setting nobody remembers making: an NCCL variable forced in
sitecustomize.py, a flag in a launch script, an env var in a k8s manifest. The parser reads
Python (os.environ[...] =, setdefault, putenv), .env and shell (export, `K=V cmd` prefixes,
docker -e), engine command lines (sglang, vllm, trtllm-serve, torchrun flags) and YAML/JSON
(flattened to dotted keys). It never executes anything: regexes, shlex and yaml.safe_load only.
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from typing import Any, Literal

import yaml
from pydantic import BaseModel, Field

from tools import engines
from tools.base import ToolResult, ToolSpec, bound_lines
from tools.host import Host
from tools.textclean import safe_decode

MAX_CONFIG_BYTES = 1_000_000
#: Keys worth flagging: every engine's config prefixes plus NCCL_, CUDA_, HF_ (tools/engines.yaml).
NOTABLE_PREFIXES = engines.registry().config_prefixes()
#: Words that make a shell line an engine or container launch whose flags matter.
_LAUNCH_MARKERS = engines.launch_line_pattern()
_ENV_KEY = r"[A-Za-z_][A-Za-z0-9_]*"
_PY_VALUE = r"""(?P<value>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|[^,)\s#]+)"""
_PY_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    (
        "assign",
        re.compile(
            rf"""(?:os\.)?environ\[\s*(?P<q>["'])(?P<key>{_ENV_KEY})(?P=q)\s*\]\s*=\s*{_PY_VALUE}"""
        ),
    ),
    (
        "setdefault",
        re.compile(
            rf"""(?:os\.)?environ\.setdefault\(\s*(?P<q>["'])(?P<key>{_ENV_KEY})(?P=q)\s*,\s*{_PY_VALUE}"""
        ),
    ),
    (
        "putenv",
        re.compile(
            rf"""(?:os\.)?putenv\(\s*(?P<q>["'])(?P<key>{_ENV_KEY})(?P=q)\s*,\s*{_PY_VALUE}"""
        ),
    ),
]
_ASSIGN = re.compile(rf"^(?P<key>{_ENV_KEY})=(?P<value>.*)$", re.S)

How = Literal[
    "assign", "setdefault", "putenv", "export", "env", "prefix", "docker-env", "flag", "key"
]


class Args(BaseModel):
    path: str = Field(description="absolute path of the config on the host")


class Setting(BaseModel):
    key: str = Field(description="env var as-is, engine flag as `--flag`, YAML/JSON dotted key")
    value: str
    line_no: int = Field(description="1-based line of the file; 0 when not known")
    line: str = Field(description="the source line, verbatim")
    how: How = Field(description="setdefault only applies when the variable is not set already")


class Result(ToolResult):
    path: str = ""
    size: int = 0
    format: Literal["python", "shell", "yaml", "json", "empty"] = "shell"
    settings: dict[str, str] = Field(default_factory=dict, description="key -> effective value")
    sources: list[Setting] = Field(default_factory=list)
    notable: list[str] = Field(default_factory=list, description="NCCL_*, CUDA_*, ... keys")
    text: list[str] = Field(default_factory=list, description="the file's lines, bounded")
    truncated: bool = False
    parse_error: str | None = None

    def lines(self) -> list[str]:
        if self.error:
            return super().lines()
        out = [
            f"# {self.path} on {self.host}: {self.format}, {self.size} bytes, "
            f"{len(self.settings)} settings"
            + (f"; notable: {', '.join(self.notable)}" if self.notable else "")
        ]
        if self.parse_error:
            out.append(f"# could not parse all of it: {self.parse_error}")
        if self.truncated:
            out.append(f"# only the last {MAX_CONFIG_BYTES} bytes were read")
        return out + bound_lines(self.text)


# -- parsers (pure) ----------------------------------------------------------------------------
def _unquote_py(raw: str) -> str:
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "\"'":
        return re.sub(r"\\(.)", r"\1", raw[1:-1])
    return raw


def parse_python(text: str) -> list[Setting]:
    out: list[Setting] = []
    for no, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("#"):
            continue
        for how, rx in _PY_PATTERNS:
            for m in rx.finditer(line):
                out.append(
                    Setting(
                        key=m["key"],
                        value=_unquote_py(m["value"]),
                        line_no=no,
                        line=line,
                        how=how,  # type: ignore[arg-type]
                    )
                )
    return out


def _logical_lines(text: str) -> list[tuple[int, str, list[str]]]:
    """Join backslash continuations: (first line number, joined text, physical lines)."""
    out: list[tuple[int, str, list[str]]] = []
    buf: list[str] = []
    start = 1
    for no, line in enumerate(text.splitlines(), 1):
        if not buf:
            start = no
        buf.append(line)
        if line.rstrip().endswith("\\"):
            continue
        out.append((start, " ".join(b.rstrip().rstrip("\\") for b in buf), buf))
        buf = []
    if buf:
        out.append((start, " ".join(b.rstrip().rstrip("\\") for b in buf), buf))
    return out


def _split(text: str) -> list[str]:
    try:
        return shlex.split(text, comments=True)
    except ValueError:  # an unbalanced quote: still read what we can
        return text.split("#", 1)[0].split()


def _source(token: str, start: int, physical: list[str]) -> tuple[int, str]:
    for i, line in enumerate(physical):
        if token.split("=", 1)[0] in line:
            return start + i, line
    return start, physical[0] if physical else ""


def parse_argv(
    tokens: list[str], start: int = 0, physical: list[str] | None = None
) -> list[Setting]:
    """Flags of a command line: `--flag v`, `--flag=v`, bare `--flag` (true), docker `-e K=V`."""
    physical = physical or [" ".join(tokens)]
    out: list[Setting] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok in ("-e", "--env") and i + 1 < len(tokens) and _ASSIGN.match(tokens[i + 1]):
            m = _ASSIGN.match(tokens[i + 1])
            assert m is not None
            no, line = _source(tokens[i + 1], start, physical)
            out.append(
                Setting(key=m["key"], value=m["value"], line_no=no, line=line, how="docker-env")
            )
            i += 2
            continue
        if tok.startswith("--") and len(tok) > 2:
            if "=" in tok:
                key, value = tok.split("=", 1)
                step = 1
            elif i + 1 < len(tokens) and (
                not tokens[i + 1].startswith("-") or re.fullmatch(r"-\d[\d.e+-]*", tokens[i + 1])
            ):
                key, value, step = tok, tokens[i + 1], 2
            else:
                key, value, step = tok, "true", 1
            no, line = _source(key, start, physical)
            out.append(Setting(key=key, value=value, line_no=no, line=line, how="flag"))
            i += step
            continue
        i += 1
    return out


def parse_shell(text: str) -> list[Setting]:
    """.env files, `export` lines, `K=V cmd` prefixes and engine/docker command-line flags."""
    out: list[Setting] = []
    for start, joined, physical in _logical_lines(text):
        tokens = _split(joined)
        if not tokens:
            continue
        i = 0
        if tokens[0] == "export":
            for tok in tokens[1:]:
                m = _ASSIGN.match(tok)
                if m:
                    no, line = _source(tok, start, physical)
                    out.append(
                        Setting(key=m["key"], value=m["value"], line_no=no, line=line, how="export")
                    )
            continue
        if tokens[0] == "env":
            i = 1
        # Leading K=V words: a .env line, a shell assignment, or a `K=V cmd` prefix.
        prefixed = i
        while i < len(tokens) and _ASSIGN.match(tokens[i]):
            i += 1
        how: How = "prefix" if i < len(tokens) else ("env" if prefixed == 0 else "prefix")
        for tok in tokens[prefixed:i]:
            m = _ASSIGN.match(tok)
            assert m is not None
            no, line = _source(tok, start, physical)
            out.append(Setting(key=m["key"], value=m["value"], line_no=no, line=line, how=how))
            if _LAUNCH_MARKERS.search(m["value"]):  # CMD="python -m vllm... --port 8000"
                out.extend(parse_argv(_split(m["value"]), start, physical))
        rest = tokens[i:]
        if rest and _LAUNCH_MARKERS.search(joined):
            out.extend(parse_argv(rest, start, physical))
            if len(rest) > 2 and rest[1] == "serve" and not rest[2].startswith("-"):
                no, line = _source(rest[2], start, physical)
                out.append(Setting(key="model", value=rest[2], line_no=no, line=line, how="flag"))
    return out


def _flatten(value: Any, prefix: str, out: list[tuple[str, Any]]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _flatten(v, f"{prefix}.{k}" if prefix else str(k), out)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _flatten(v, f"{prefix}.{i}" if prefix else str(i), out)
    else:
        out.append((prefix, value))


def _structured(data: Any, text: str) -> list[Setting]:
    lines = text.splitlines()

    def where(needle: str) -> tuple[int, str]:
        for no, line in enumerate(lines, 1):
            if needle and needle in line:
                return no, line
        return 0, ""

    out: list[Setting] = []
    flat: list[tuple[str, Any]] = []
    _flatten(data, "", flat)
    for key, value in flat:
        sval = "" if value is None else json.dumps(value) if isinstance(value, bool) else str(value)
        leaf = key.rsplit(".", 1)[-1]
        no, line = where(f"{leaf}:" if not leaf.isdigit() else sval) if sval or leaf else (0, "")
        if not line:
            no, line = where(f'"{leaf}"')
        out.append(Setting(key=key, value=sval, line_no=no, line=line, how="key"))
    # k8s-style env lists ({name, value}) and argv lists (args: ["--tp", "8"]) mean env and flags.
    for node in _walk(data):
        if isinstance(node, dict) and isinstance(node.get("name"), str) and "value" in node:
            no, line = where(str(node["name"]))
            out.append(
                Setting(
                    key=node["name"], value=str(node["value"]), line_no=no, line=line, how="env"
                )
            )
        if (
            isinstance(node, list)
            and all(isinstance(x, str) for x in node)
            and any(x.startswith("--") for x in node)
        ):
            for s in parse_argv(list(node)):
                no, line = where(s.key)
                out.append(s.model_copy(update={"line_no": no, "line": line}))
    return out


def _walk(node: Any) -> Any:
    yield node
    if isinstance(node, dict):
        for v in node.values():
            yield from _walk(v)
    elif isinstance(node, list):
        for v in node:
            yield from _walk(v)


def detect_format(path: str, text: str) -> Literal["python", "shell", "yaml", "json", "empty"]:
    if not text.strip():
        return "empty"
    ext = posixpath.splitext(path)[1].lower()
    if ext == ".py" or posixpath.basename(path).startswith(("sitecustomize", "usercustomize")):
        return "python"
    if ext in (".yaml", ".yml"):
        return "yaml"
    if ext == ".json":
        return "json"
    return "shell"


def parse_config(path: str, text: str) -> tuple[str, list[Setting], str | None]:
    """Pure: (format, settings in file order, parse error or None). Never raises on bad input."""
    fmt = detect_format(path, text)
    try:
        if fmt == "python":
            return fmt, parse_python(text), None
        if fmt in ("yaml", "json"):
            try:
                data = json.loads(text) if fmt == "json" else yaml.safe_load(text)
            except (ValueError, yaml.YAMLError) as exc:
                return fmt, parse_shell(text), f"not valid {fmt}: {str(exc).splitlines()[0]}"
            return fmt, _structured(data, text), None
        return fmt, parse_shell(text), None
    except RecursionError:
        return fmt, [], "nested too deeply to read"


def effective(settings: list[Setting]) -> dict[str, str]:
    """Later assignments win; a `setdefault` does not override a value already set."""
    out: dict[str, str] = {}
    for s in settings:
        if s.how == "setdefault" and s.key in out:
            continue
        out[s.key] = s.value
    return out


def run(host: Host, args: Args) -> Result:
    ft = host.read_tail(args.path, max_bytes=MAX_CONFIG_BYTES)
    if ft.error or not ft.exists:
        return Result(
            host=host.name,
            ok=False,
            path=args.path,
            error=ft.error or f"{args.path} does not exist on {host.name}",
            fix=ft.fix or "check the path; find_logs(kind='configs') lists config files",
        )
    text = safe_decode(ft.data)
    fmt, sources, err = parse_config(args.path, text)
    settings = effective(sources)
    return Result(
        host=host.name,
        path=args.path,
        size=ft.size,
        format=fmt,  # type: ignore[arg-type]
        settings=settings,
        sources=sources,
        notable=[k for k in settings if k.startswith(NOTABLE_PREFIXES)],
        text=text.splitlines(),
        truncated=ft.bytes_read < ft.size,
        parse_error=err,
    )


SPEC = ToolSpec(
    name="config_read",
    description=(
        "Read a config (sitecustomize.py, .env, shell exports, launch scripts with engine "
        "flags, docker -e, YAML/JSON) and list the settings it makes: env keys as-is, flags as "
        "--flag, each with its source line. Flags NCCL_*, CUDA_*, HF_* and every engine's own keys "
        "(VLLM_*, SGLANG_*, ...)."
    ),
    args=Args,
    result=Result,
    fn=run,
    facts=("script_commands",),
)
