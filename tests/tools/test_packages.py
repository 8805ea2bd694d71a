"""packages: the metadata probe on this host's Python, real H200 probe output, pip fallbacks."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.cardkit import minimal_card as _card
from tools.local_host import LocalHost
from tools.packages import (
    SPEC,
    parse_driver_version,
    parse_nvcc,
    parse_pip_list,
    parse_probe,
    probe_command,
)

FIX = Path(__file__).resolve().parent.parent / "fixtures"


def test_real_h200_probe_outputs() -> None:
    fast = parse_probe((FIX / "h200-device" / "packages-probe.txt").read_text())
    assert fast.versions["torch"] == "2.11.0" and fast.versions["nccl"] == "2.28.9"
    assert fast.torch_cuda == "13.0" and fast.python == "3.12.3" and fast.nccl_runtime is None
    deep = parse_probe((FIX / "h200-device" / "packages-probe.torch.txt").read_text())
    assert deep.nccl_runtime == "2.28.9" and deep.compute_cap == "9.0"
    assert deep.cuda_available is True and "sm_90" in deep.arch_list


def test_driver_and_nvcc() -> None:
    assert parse_driver_version((FIX / "h200" / "proc-driver-nvidia-version.txt").read_text()) == (
        "580.159.04"
    )
    old = (
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  510.85.02  Tue Jul 12 16:51:23 UTC 2022\n"
    )
    assert parse_driver_version(old) == "510.85.02"
    assert parse_nvcc((FIX / "h200" / "nvcc-version.txt").read_text()) == "13.0"


def test_pip_freeze_and_show() -> None:
    p = parse_pip_list("torch==2.4.0+cu124\nvllm==0.6.3\nflashinfer-python==0.2.0\nfoo==1\n")
    assert p.versions == {"torch": "2.4.0+cu124", "vllm": "0.6.3", "flashinfer": "0.2.0"}
    assert p.torch_cuda == "12.4"
    s = parse_pip_list("Name: vllm\nVersion: 0.5.0.post1\n")
    assert s.versions == {"vllm": "0.5.0.post1"}
    real = parse_pip_list((FIX / "h200-device" / "pip-freeze.txt").read_text())
    assert real.versions == {}  # the H200's `pip` was another Python's


def test_local_probe_runs_this_python(local_host: LocalHost) -> None:
    r = SPEC.call(local_host, {"python": sys.executable})
    assert r.ok and r.source == "probe"
    assert r.python == ".".join(map(str, sys.version_info[:3]))
    # pydantic is not probed; the probe's JSON line is quoted verbatim
    assert json.loads(r.raw_lines[0])["python"] == r.python


def test_probe_command_is_one_quoted_argument() -> None:
    cmd = probe_command("/opt/venv/bin/python", import_torch=True)
    assert cmd.startswith("/opt/venv/bin/python -c '") and "True and" in cmd


def test_replay_falls_back_to_pip_show(replay_host_factory) -> None:  # type: ignore[no-untyped-def]
    h = replay_host_factory(
        _card(
            {
                "commands": {
                    "pip show vllm | head -2": "Name: vllm\nVersion: 0.5.0.post1\n",
                    "cat /proc/driver/nvidia/version": (
                        FIX / "h200" / "proc-driver-nvidia-version.txt"
                    ).read_text(),
                }
            }
        )
    )
    r = SPEC.call(h)
    assert r.ok and r.source == "pip" and r.versions == {"vllm": "0.5.0.post1"}
    assert r.driver_version == "580.159.04"
    assert "vllm==0.5.0.post1" in r.lines()


def test_replay_nothing_is_clear_error(replay_host_factory) -> None:  # type: ignore[no-untyped-def]
    r = SPEC.call(replay_host_factory(_card({})))
    assert not r.ok and "python=" in (r.fix or "") and r.source == "none"
