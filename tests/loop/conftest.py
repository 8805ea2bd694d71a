"""Shared pieces for the loop tests: a short plan around the real engine emulator."""

from __future__ import annotations

import socket
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from loop.cli import KNOWN_GOOD_SITECUSTOMIZE
from loop.plan import Plan

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def emulator_cmd(port: int, load_s: float = 0.2, extra: str = "") -> str:
    return f"{PY} -m loop.emulator --port {port} --load-seconds {load_s} --mem-fraction-static 0.55 {extra}".strip()


def bench_cmd(port: int, tokens: int = 40) -> str:
    return f"{PY} -m loop.emulator --bench-client --port {port} --requests 2 --tokens {tokens}"


def make_plan(
    state: Path,
    experiments: list[dict[str, Any]],
    load_s: float = 0.2,
    tokens: int = 40,
    **over: Any,
) -> Plan:
    site = state / "site"
    site.mkdir(parents=True, exist_ok=True)
    (site / "sitecustomize.py").write_text(KNOWN_GOOD_SITECUSTOMIZE, encoding="utf-8")
    port = free_port()
    data: dict[str, Any] = {
        "name": "t-" + uuid.uuid4().hex[:8],
        "hosts": ["local"],
        "baseline": {
            "launch": emulator_cmd(port, load_s, "--spawn-orphan"),
            "workdir": str(REPO),
            "env": {"PYTHONPATH": f"{site}:{REPO}", "EMULATOR_GPU_ARCH": "sm120"},
            "config_file": str(site / "sitecustomize.py"),
            "port": port,
            "ready_url": f"http://127.0.0.1:{port}/health",
            "benchmark": {
                "command": bench_cmd(port, tokens),
                "metric_json_key": "output_throughput",
                "repeat": 2,
            },
            "noise_runs": 3,
            # the tests of other features judge by the pooled A/B/A rule, whose rows they
            # list; the interleaved judge (the default) has its own: test_interleaved.py,
            # test_stats.py, and bench/aa_night.py
            "interleave": False,
            "timeouts": {"ready_s": 20, "stall_s": 1.5, "benchmark_s": 20, "experiment_s": 40},
        },
        "experiments": experiments,
        "policy": {"kill_leftovers": True, "stop_grace_s": 1},
        "budget": {"night_s": 300, "final_slot": False},
    }
    for k, v in over.items():
        data[k] = v
    return Plan.model_validate(data)


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return tmp_path / "state"
