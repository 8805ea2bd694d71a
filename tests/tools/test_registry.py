"""The tool registry finds every tool by its file and fails loudly on a broken one.

A tool says its role on its own spec (first sweep, scanned for signatures, a launch's log, needed
for a verdict); the agent asks the registry. A tool module that does not import must stop the
process with its name, never vanish from the list (an investigation without `processes` would
still run and decide worse).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tools import registry
from tools.registry import TOOLS, ToolLoadError, load, tool_modules

TOOLS_DIR = Path(registry.__file__).parent


def test_every_module_with_a_spec_is_registered_under_its_spec_name() -> None:
    mods = tool_modules()
    assert len(mods) == len(TOOLS) >= 17
    assert {"gpu_status", "processes", "log_tail", "service_logs"} <= set(TOOLS)


def test_the_first_sweep_and_the_scanned_tools_are_what_the_specs_say() -> None:
    assert [s.name for s in registry.first_sweep()] == [
        "gpu_status",
        "processes",
        "dmesg",
        "disk",
        "ports",
        "host_facts",
        "find_logs",
        "container_detect",
    ]
    # a container's record and log join the sweep only when a container is investigated; which
    # container holds the server is asked only from the host
    inside = [s.name for s in registry.first_sweep(container=True)]
    assert inside[-2:] == ["container_inspect", "container_logs"]
    assert "container_detect" not in inside
    # a container found by the sweep is read again inside, all but the machine's own reads
    assert [s.name for s in registry.inside_sweep()] == [
        n for n in inside if n not in ("gpu_status", "dmesg")
    ]
    assert registry.launch_logs() == {"log_tail", "service_logs", "container_logs"}
    assert registry.launch_logs() <= registry.scanned()
    # no changing tool ever runs unasked
    assert not any(s.changing for s in registry.first_sweep())
    assert (
        TOOLS["find_logs"].first_sweep_args["max_depth"] == 6
    )  # project trees: /home/u/proj/run/logs/x.log; code, venvs and caches are pruned


def _package(tmp_path: Path, name: str, body: str) -> Path:
    pkg = tmp_path / name
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "broken_tool.py").write_text(body)
    (pkg / "helper.py").write_text("X = 1\n")  # no SPEC: not a tool, never imported
    return pkg


def test_a_tool_module_that_fails_to_import_stops_the_load_with_its_name(tmp_path: Path) -> None:
    pkg = _package(tmp_path, "pivot_broken_tools", "import no_such_module_xyz\nSPEC = None\n")
    sys.path.insert(0, str(tmp_path))
    try:
        assert tool_modules(pkg) == ["broken_tool"]
        with pytest.raises(ToolLoadError, match=r"pivot_broken_tools/broken_tool\.py failed"):
            load(pkg, "pivot_broken_tools")
    finally:
        sys.path.remove(str(tmp_path))


def test_a_spec_that_is_not_a_toolspec_is_refused(tmp_path: Path) -> None:
    pkg = _package(tmp_path, "pivot_bad_spec_tools", "SPEC = {'name': 'x'}\n")
    sys.path.insert(0, str(tmp_path))
    try:
        with pytest.raises(ToolLoadError, match="not a ToolSpec"):
            load(pkg, "pivot_bad_spec_tools")
    finally:
        sys.path.remove(str(tmp_path))
