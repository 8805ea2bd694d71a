"""Every read-only tool in the registry, on every kind of host: SSH, local and replay.

The list of tools comes from `tools.registry.TOOLS` at collection time, so a tool added
tomorrow is tested here without editing this file. Each host is prepared with the same state:
a log with a carriage-return progress bar and a real CUDA OOM line, a launch config, the
replaying fake `nvidia-smi` (busy: pid 471 holds 100 GiB) and the real `ps aux` capture (replay).
A tool must return its own typed result, for the right host, that is either ok or a clear error
with a fix, with bounded observation lines. A required argument this file cannot fill is a
failure that names the field, so a new tool gets a hint added here, never a silent skip.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.sshd import Sshd
from tools.base import MAX_LINE_CHARS, MAX_LINES, ToolResult, ToolSpec
from tools.host import Host
from tools.registry import TOOLS

FIX = Path(__file__).resolve().parent / "fixtures" / "h200"
READ_ONLY = sorted(name for name, spec in TOOLS.items() if not spec.changing)
KINDS = ["ssh", "local", "replay"]

OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 80.00 GiB. GPU 0 has a total "
    "capacity of 139.80 GiB of which 38.77 GiB is free. Process 471 has 100.51 GiB memory in use."
)
LOG = (
    "[2026-11-29 08:16:20] server_args=ServerArgs(model_path='/models/llama', tp_size=1)\n"
    + "".join(f"\rLoading safetensors shards: {p}% | {p}/100" for p in range(0, 101, 5))
    + "\n[2026-11-29 08:16:31] Traceback (most recent call last):\n"
    + OOM
    + "\n"
)
CONFIG = (
    "export NCCL_ALGO=Ring\nexport NCCL_MIN_NCHANNELS=2\npython3 -m sglang.launch_server --tp 1\n"
)

#: What each tool must show when its host holds the prepared state (others: ok or clear error).
MUST_SEE = {
    "gpu_status": "102927",
    "log_tail": "CUDA out of memory",
    "log_search": "CUDA out of memory",
    "config_read": "NCCL_MIN_NCHANNELS",
}


@dataclass
class Prepared:
    kind: str
    host: Host
    log: str
    config: str
    dir: str


#: How to fill a REQUIRED argument, by field name. Add a line when a new tool needs one.
ARG_HINTS: dict[str, Callable[[Prepared, str], Any]] = {
    "path": lambda p, tool: p.config if "config" in tool else p.log,
    "paths": lambda p, tool: [p.log],
    "file": lambda p, tool: p.log,
    "pattern": lambda p, tool: "CUDA out of memory|Error",
    "regex": lambda p, tool: "CUDA out of memory|Error",
    "query": lambda p, tool: "CUDA out of memory",
    "dir": lambda p, tool: p.dir,
    "directory": lambda p, tool: p.dir,
    "root": lambda p, tool: p.dir,
    "roots": lambda p, tool: [p.dir],
    "pid": lambda p, tool: 1,
    "port": lambda p, tool: 30000,
    "name": lambda p, tool: "python3",
    "model": lambda p, tool: "org/some-model",
}


def required_args(spec: ToolSpec, prepared: Prepared) -> dict[str, Any]:
    args: dict[str, Any] = {}
    for field, info in spec.args.model_fields.items():
        if not info.is_required():
            continue
        hint = ARG_HINTS.get(field)
        if hint is None:
            pytest.fail(
                f"tool {spec.name!r} requires argument {field!r}, which "
                "tests/test_tools_everywhere.py cannot fill: add it to ARG_HINTS"
            )
        args[field] = hint(prepared, spec.name)
    return args


def _replay_card(root: str) -> dict[str, Any]:
    return {
        "id": "tools-everywhere",
        "title": "prepared host state for every tool",
        "source": "test",
        "engine": "sglang",
        "symptom": "the server died while loading",
        "host": {
            "nvidia_smi": (FIX / "query-gpu.busy.csv").read_text(),
            "nvidia_smi_full": (FIX / "nvidia-smi.busy.txt").read_text(),
            "ps": (FIX / "ps-aux.busy.txt").read_text(),
            "dmesg": "[Sun Nov 29 08:16:31 2026] python3 invoked oom-killer\n",
            "env": "NCCL_ALGO=Ring\nCUDA_VISIBLE_DEVICES=0\n",
            "files": {f"{root}/server.log": LOG, f"{root}/launch.sh": CONFIG},
            "commands": {"df -h /dev/shm": (FIX / "df-dev-shm.txt").read_text()},
        },
    }


@pytest.fixture(params=KINDS)
def prepared(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    replay_host_factory,
) -> Iterator[Prepared]:
    kind = request.param
    if kind == "replay":
        root = "/var/log/pivot-test"
        yield Prepared(
            kind,
            replay_host_factory(_replay_card(root)),
            f"{root}/server.log",
            f"{root}/launch.sh",
            root,
        )
        return
    if kind == "ssh":
        sshd: Sshd = request.getfixturevalue("sshd")
        host = request.getfixturevalue("ssh_host")
        base = sshd.scratch / f"state-{request.node.name.replace('/', '_')}"
        base.mkdir(mode=0o755, exist_ok=True)
        sshd.set_gpu_state("busy")
        request.addfinalizer(lambda: sshd.set_gpu_state("idle"))
    else:
        host = request.getfixturevalue("local_host")
        request.getfixturevalue("fake_gpu_path")
        monkeypatch.setenv("PIVOT_FAKE_GPU_STATE", "busy")
        base = tmp_path / "state"
        base.mkdir()
    (base / "server.log").write_text(LOG)
    (base / "launch.sh").write_text(CONFIG)
    for f in base.iterdir():
        f.chmod(0o644)
    yield Prepared(kind, host, str(base / "server.log"), str(base / "launch.sh"), str(base))


def test_the_registry_has_read_only_tools() -> None:
    assert READ_ONLY, "tools.registry.TOOLS lists no read-only tool: did every import fail?"


@pytest.mark.parametrize("tool", READ_ONLY)
def test_tool_on_every_host(tool: str, prepared: Prepared) -> None:
    spec = TOOLS[tool]
    args = required_args(spec, prepared)
    t0 = time.monotonic()
    result = spec.call(prepared.host, args)
    elapsed = time.monotonic() - t0
    assert isinstance(result, spec.result) and isinstance(result, ToolResult)
    assert result.host == prepared.host.name
    if result.ok:
        assert result.error is None
    else:
        assert result.error and result.error.strip(), f"{tool} failed without saying why"
        assert result.fix and result.fix.strip(), f"{tool} failed without a fix: {result.error}"
    lines = result.lines()
    assert isinstance(lines, list) and all(isinstance(x, str) for x in lines)
    assert len(lines) <= MAX_LINES + 5, f"{tool} handed back {len(lines)} lines"
    assert all(len(x) <= MAX_LINE_CHARS + 20 for x in lines)
    assert elapsed < 20, f"{tool} took {elapsed:.1f}s on {prepared.kind}"
    if tool in MUST_SEE:
        assert result.ok, f"{tool} on {prepared.kind}: {result.error} / {result.fix}"
        assert MUST_SEE[tool] in "\n".join(lines), f"{tool} on {prepared.kind} missed it"
    result.model_dump_json()  # every result crosses the API boundary as JSON
