"""Every tool the agent, CLI and service may call. Adding a tool = one file (plus its tests).

A tool is a module of this package that defines `SPEC = ToolSpec(...)` at top level; the
registry finds it by that line. A tool module that fails to import is a bug and stops the
process with its name: a silently missing tool would make every investigation weaker.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

from tools.base import ToolSpec

TOOLS: dict[str, ToolSpec] = {}
_SPEC_LINE = re.compile(r"^SPEC(?:\s*:\s*ToolSpec\S*)?\s*=", re.M)


class ToolLoadError(RuntimeError):
    """A tool module that does not import or defines no usable SPEC."""


def register(spec: ToolSpec) -> None:
    if spec.name in TOOLS and TOOLS[spec.name] is not spec:
        raise ToolLoadError(f"two tools are named {spec.name!r}")
    TOOLS[spec.name] = spec


def tool_modules(here: Path = Path(__file__).parent) -> list[str]:
    """The modules of a package directory (tools/) that define a SPEC, by file name."""
    return sorted(
        p.stem for p in here.glob("*.py") if _SPEC_LINE.search(p.read_text(encoding="utf-8"))
    )


def load(here: Path = Path(__file__).parent, package: str = "tools") -> list[ToolSpec]:
    """Import every tool module of `package` and register its SPEC; a broken one raises."""
    specs = []
    for mod in tool_modules(here):
        try:
            spec = importlib.import_module(f"{package}.{mod}").SPEC
        except Exception as exc:
            raise ToolLoadError(f"{package}/{mod}.py failed to import: {exc!r}") from exc
        if not isinstance(spec, ToolSpec):
            raise ToolLoadError(
                f"{package}/{mod}.py: SPEC is a {type(spec).__name__}, not a ToolSpec"
            )
        specs.append(spec)
    return specs


# -- what the agent asks the registry (each tool says it on its own spec) ---------------------
def first_sweep(container: bool = False) -> list[ToolSpec]:
    """Round 0's first wave, in the order the tools ask for; a container's own tools only when
    the investigation is of a container, the host-only ones (which container?) only when not."""
    return sorted((s for s in TOOLS.values() if _joins(s, container)), key=_sweep_place)


def _joins(spec: ToolSpec, container: bool) -> bool:
    if spec.first_sweep is None:
        return False
    return not spec.host_only if container else not spec.container_only


def inside_sweep() -> list[ToolSpec]:
    """The first wave again, inside a container the sweep found the server in: what reads the
    server (its processes, /dev/shm, ports, files) and the container's record and log, not what
    reads the machine (already read, the same from inside)."""
    return [s for s in first_sweep(True) if not s.reads_machine]


def _sweep_place(spec: ToolSpec) -> int:
    return spec.first_sweep if spec.first_sweep is not None else 1 << 30


def scanned() -> frozenset[str]:
    """Tools whose lines are scanned for failure signatures."""
    return frozenset(n for n, s in TOOLS.items() if s.scanned)


def launch_logs() -> frozenset[str]:
    """Tools whose lines are a launch's own log (read from its last launch on)."""
    return frozenset(n for n, s in TOOLS.items() if s.launch_log)


def verdict_needs() -> frozenset[str]:
    """Tools whose failed read leaves a hypothesis unknown rather than refuted."""
    return frozenset(n for n, s in TOOLS.items() if s.verdict_needs)


for _spec in load():
    register(_spec)
