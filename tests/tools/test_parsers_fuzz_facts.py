"""Fuzz every host-fact parser: random text, binary decoded with errors=replace, truncated and
spliced real captures. Each must return its typed result and never raise.

PIVOT_FUZZ_EXAMPLES raises the example count (the reliability run uses 10,000 per parser).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from tools import disk, dmesg, gpu_status, host_facts, packages, ports, process_io, processes

FIX = Path(__file__).resolve().parent.parent / "fixtures"
EXAMPLES = int(os.environ.get("PIVOT_FUZZ_EXAMPLES", "200"))
CAPTURES = sorted(
    p.read_text(encoding="utf-8", errors="replace")
    for d in ("h200", "h200-device", "synthetic-facts")
    for p in (FIX / d).glob("*")
    if p.is_file() and p.suffix in (".txt", ".csv")
)


@st.composite
def truncated_capture(draw: st.DrawFn) -> str:
    text = draw(st.sampled_from(CAPTURES))
    a = draw(st.integers(0, len(text)))
    b = draw(st.integers(a, len(text)))
    noise = draw(st.text(max_size=20))
    return text[a:b] + noise + text[:a]


inputs = st.one_of(
    st.text(max_size=400),
    st.binary(max_size=400).map(lambda b: b.decode("utf-8", errors="replace")),
    truncated_capture(),
    st.lists(
        st.sampled_from(
            [
                ",",
                "|",
                " ",
                "\n",
                "MiB",
                "[N/A]",
                "0A",
                ":",
                "%",
                "ERR!",
                "PID",
                "LISTEN",
                "Mem:",
                "1",
            ]
        ),
        max_size=60,
    ).map("".join),
)


def _is(t: type | tuple[type, ...]) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, t)


PARSERS: dict[str, tuple[Callable[[str], Any], Callable[[Any], bool]]] = {
    "gpu.parse_query": (gpu_status.parse_query, _is(gpu_status.GpuParse)),
    "gpu.parse_table": (gpu_status.parse_table, _is(gpu_status.GpuParse)),
    "gpu.parse_compute_apps": (
        gpu_status.parse_compute_apps,
        lambda v: isinstance(v, list) and all(isinstance(p, gpu_status.GpuProcess) for p in v),
    ),
    "processes.parse_ps": (processes.parse_ps, _is(processes.PsParse)),
    "dmesg.parse_dmesg": (dmesg.parse_dmesg, _is(dmesg.DmesgParse)),
    "ports.parse_ss": (ports.parse_ss, _is(list)),
    "ports.parse_netstat": (ports.parse_netstat, _is(list)),
    "ports.parse_proc_net_tcp": (ports.parse_proc_net_tcp, _is(list)),
    "ports.parse_socket_fds": (ports.parse_socket_fds, _is(dict)),
    "disk.parse_df": (disk.parse_df, _is(list)),
    "disk.parse_free": (disk.parse_free, _is(disk.Memory)),
    "disk.human_bytes": (disk.human_bytes, _is((int, type(None)))),
    "packages.parse_probe": (packages.parse_probe, _is(packages.ProbeOutput)),
    "packages.parse_pip_list": (packages.parse_pip_list, _is(packages.ProbeOutput)),
    "packages.parse_driver_version": (packages.parse_driver_version, _is((str, type(None)))),
    "packages.parse_nvcc": (packages.parse_nvcc, _is((str, type(None)))),
    "host_facts.parse_ecc": (host_facts.parse_ecc, _is(host_facts.EccCounts)),
    "host_facts.parse_free": (host_facts.parse_free, _is((host_facts.HostMemory, type(None)))),
    "process_io.parse_io": (process_io.parse_io, _is((process_io.IoCounters, type(None)))),
}


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_parser_never_raises(name: str) -> None:
    parse, typed = PARSERS[name]

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(inputs)
    def check(text: str) -> None:
        out = parse(text)
        assert typed(out), f"{name} returned {type(out).__name__}"
        if isinstance(out, BaseModel):
            out.model_dump_json()  # serialisable: it crosses the tool boundary as JSON

    check()


def test_dmesg_pattern_fuzz() -> None:
    @settings(max_examples=EXAMPLES, deadline=None, database=None)
    @given(inputs, st.text(max_size=12))
    def check(text: str, pattern: str) -> None:
        assert isinstance(dmesg.parse_dmesg(text, pattern), dmesg.DmesgParse)

    check()
