"""Every tool the agent, CLI and service may call. Adding a tool = one file + one line here."""

from __future__ import annotations

from tools.base import ToolSpec

TOOLS: dict[str, ToolSpec] = {}


def register(spec: ToolSpec) -> None:
    TOOLS[spec.name] = spec


def _load() -> None:
    import importlib

    for mod in _MODULES:
        try:
            register(importlib.import_module(f"tools.{mod}").SPEC)
        except ModuleNotFoundError as exc:  # a tool still being written must not break the rest
            if exc.name != f"tools.{mod}":
                raise


_MODULES: list[str] = [
    "gpu_status",
    "processes",
    "log_tail",
    "log_search",
    "find_logs",
    "config_read",
    "config_apply",
    "config_revert",
    "dmesg",
    "ports",
    "disk",
    "packages",
    "host_facts",
    "service_logs",
    "launch",
    "benchmark",
    "py_stacks",
]

_load()
