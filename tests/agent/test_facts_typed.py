"""Facts are read from the tools' typed results: each observation's data goes back through its
tool's `Result` model (the registry's spec), and a dump whose shape drifted fails loudly."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from agent.facts import derive
from agent.observe import first_wave, run_many
from agent.state import Observation
from agent.typed_results import ResultShapeError, typed
from cards.model import load_card
from cards.replay import ReplayHost
from tools import disk, dmesg, gpu_status, log_tail, ports, processes
from tools.base import ToolResult

PUBLIC = Path(__file__).resolve().parents[2] / "evals" / "incidents"

PS = """\
    PID    PPID USER     STAT  ELAPSED %CPU   RSS COMMAND
    100       1 alice    Sl        300 50.0  9000 python3 -m sglang.launch_server --port 30000
    101     100 alice    Rl        299 99.0  9000 sglang::scheduler_TP0
    102     100 alice    Rl        299 99.0  9000 sglang::scheduler_TP1
"""
ROOT = "/dev/sda1 100G 97G 3G 97% /"
LISTEN = 'LISTEN 0 2048 0.0.0.0:30000 0.0.0.0:* users:(("python3",pid=100,fd=9))'


def _obs(oid: str, tool: str, res: ToolResult, args: dict[str, Any] | None = None) -> Observation:
    """An observation exactly as agent/observe.call makes it from a tool's result."""
    return Observation(
        id=oid,
        tool=tool,
        args=args or {},
        ok=res.ok,
        lines=res.lines(),
        data=res.model_dump(mode="json"),
        round=0,
    )


def _gpu() -> Observation:
    return _obs(
        "o1",
        "gpu_status",
        gpu_status.Result(
            host="h",
            gpus=[
                gpu_status.Gpu(
                    index=0, memory_used_mib=60000, memory_total_mib=81559, utilization_pct=97
                )
            ],
            processes=[
                gpu_status.GpuProcess(pid=101, name="python3", used_mib=40000),
                gpu_status.GpuProcess(pid=7, name="/usr/lib/xorg/Xorg", used_mib=12),
            ],
        ),
    )


def _ps() -> Observation:
    procs = processes.parse_ps(PS).procs
    processes.identify(procs)
    res = processes.Result(host="h", header="PID", processes=procs, total=len(procs))
    return _obs("o2", "processes", res)


def _everything() -> list[Observation]:
    mounts = [
        disk.Mount(
            filesystem="/dev/sda1",
            size="100G",
            used="97G",
            avail="3G",
            use_pct=97,
            mount="/",
            raw=ROOT,
        ),
        disk.Mount(
            filesystem="shm",
            size="64M",
            used="0",
            avail="64M",
            use_pct=0,
            mount="/dev/shm",
            raw="shm 64M 0 64M 0% /dev/shm",
        ),
    ]
    return [
        _gpu(),
        _ps(),
        _obs("o3", "dmesg", dmesg.Result(host="h", total_lines=3)),
        _obs("o4", "disk", disk.Result(host="h", mounts=mounts)),
        _obs(
            "o5",
            "ports",
            ports.Result(
                host="h",
                listeners=[ports.Listener(addr="0.0.0.0", port=30000, pid=100, raw=LISTEN)],
            ),
        ),
        _obs("o6", "log_tail", log_tail.Result(host="h", path="/l.log", size=10, tail=["step 1"])),
        _obs(
            "o7",
            "log_tail",
            log_tail.Result(
                host="h",
                path="/l.log",
                size=20,
                tail=["step 1", "Application startup complete."],
                grew=True,
            ),
        ),
    ]


def test_every_fact_family_is_read_from_the_typed_results() -> None:
    f = derive(_everything())
    assert f.gpu_available and f.gpus[0].used_mib == 60000.0 and f.gpus[0].util_pct == 97.0
    assert f.gpu_pids == {101: 40000.0} and f.graphics_mib == 12.0  # Xorg is nobody's leftover
    assert f.ps_available and sorted(f.server_pids) == [100, 101, 102]
    assert f.server_engine == "sglang" and f.server_user == "alice"
    assert f._ps_recs[101]["rank"] == 0 and f._ps_recs[101]["command"] == "sglang::scheduler_TP0"
    assert f.dmesg_available and "0 OOM kills" in f.dmesg_summary
    assert f.full_mounts == [("/", 97.0, ROOT)]
    assert f.shm_mib == 64.0 and f.shm_use_pct == 0.0
    assert f.listeners == {30000: LISTEN}
    assert f.log_watch == {"/l.log": True} and f.log_growth == {"/l.log": True}


@pytest.mark.parametrize(
    ("index", "edit", "where"),
    [
        # a GPU row's field renamed: pydantic alone would drop it and read "no memory used"
        (
            0,
            lambda d: d["gpus"][0].__setitem__("memory_used", d["gpus"][0].pop("memory_used_mib")),
            "gpus.0.memory_used",
        ),
        # a process record's field renamed: the server would look gone
        (
            1,
            lambda d: d["processes"][1].__setitem__("cmd", d["processes"][1].pop("command")),
            "processes.1.cmd",
        ),
        # the list itself renamed
        (1, lambda d: d.__setitem__("records", d.pop("processes")), "records"),
        # a wrong type
        (4, lambda d: d["listeners"][0].__setitem__("port", "http"), "listeners.0.port"),
        (5, lambda d: d.__setitem__("size", "big"), "size"),
    ],
    ids=["gpu-row", "ps-record", "ps-list", "port-type", "log-size"],
)
def test_a_result_whose_field_drifted_fails_loudly(index: int, edit: Any, where: str) -> None:
    obs = _everything()
    bad = copy.deepcopy(obs[index])
    edit(bad["data"])
    obs[index] = bad
    with pytest.raises(
        ResultShapeError, match=rf"observation {bad['id']} \({bad['tool']}\).*{where}"
    ):
        derive(obs)


def test_a_result_read_as_another_tools_model_is_refused() -> None:
    with pytest.raises(ResultShapeError, match="processes.Result"):
        typed(_gpu(), processes.Result)
    with pytest.raises(ResultShapeError, match="no tool"):
        typed({**_gpu(), "tool": "nvidia_smi"}, gpu_status.Result)  # type: ignore[typeddict-item]


def test_a_failed_gpu_read_keeps_its_error_and_a_crash_has_none() -> None:
    res = gpu_status.Result(host="h", ok=False, error="nvidia-smi is not installed", fix="install")
    f = derive([_obs("o1", "gpu_status", res)])
    assert f.gpu_error == "nvidia-smi is not installed" and f.gpu_obs == "o1"
    crash = Observation(
        id="o2", tool="gpu_status", args={}, ok=False, lines=["# error: boom"], data={}, round=0
    )
    f = derive([crash])
    assert f.gpu_error is None and f.gpu_obs == "o2" and not f.gpu_available


def test_every_public_cards_first_wave_reads_back_as_typed_results() -> None:
    """The replayed cards run the real tools: their dumps are the typed results, no other shape."""
    cards = sorted(PUBLIC.glob("*.yaml"))
    read = 0
    for path in cards:
        obs = run_many(ReplayHost(load_card(path)), first_wave([]), 1, 0)
        for o in obs:
            if o["data"]:
                typed(o, ToolResult)
        derive(obs)
        read += 1
    assert read == len(cards) and read > 100


def test_the_tools_that_declare_facts_are_the_ones_facts_reads() -> None:
    """A tool's spec says which facts it yields; facts has a reader for exactly those tools,
    and every fact a spec names is a field of Facts."""
    from agent.facts import READERS, Facts
    from tools.registry import TOOLS

    declared = {name for name, spec in TOOLS.items() if spec.facts}
    assert set(READERS) == declared
    for name in declared:
        unknown = set(TOOLS[name].facts) - set(Facts.model_fields)
        assert not unknown, f"{name} declares facts that Facts does not have: {unknown}"
