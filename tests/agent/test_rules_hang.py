"""Hang rules on facts: busy compilers, spinning GPUs of a multi-rank launch, a rank gone."""

from __future__ import annotations

from typing import Any

from agent.facts import Facts, GpuFact, RankFact
from agent.rules.hang import hang_rules
from agent.state import Observation

LOG = "/var/log/server.log"


def _run(facts: Facts, obs: list[Observation] | None = None) -> list[tuple[str, float, str]]:
    out: list[tuple[str, float, str]] = []

    def add(label: str, kind: str, w: float, oid: Any, line: str, note: str) -> None:
        out.append((label, w, note))

    hang_rules(facts, obs or [], [], add)
    return out


def _alive_silent(**kw: Any) -> Facts:
    f = Facts(ps_available=True, ps_obs="o2", server_pids=[10, 11, 12], **kw)
    f.log_growth = {LOG: False}
    f.log_growth_obs = {LOG: "o9"}
    f.gpu_obs = "o1"
    return f


def test_two_gpus_one_pinned_one_idle_behind_a_silent_log_is_a_stuck_collective() -> None:
    f = _alive_silent(
        gpus=[
            GpuFact(index=0, used_mib=70000, util_pct=100, line="0, H200, 70000 MiB, 100 %"),
            GpuFact(index=1, used_mib=70000, util_pct=0, line="1, H200, 70000 MiB, 0 %"),
        ]
    )
    got = _run(f)
    assert any(lbl == "nccl_failure" and w >= 2.0 and "peer sits idle" in n for lbl, w, n in got)


def test_one_gpu_pinned_on_a_single_rank_launch_is_not_a_collective() -> None:
    f = _alive_silent(gpus=[GpuFact(index=0, used_mib=20000, util_pct=97, line="0, L4, 97 %")])
    f.server_pids = [1]
    assert not any(lbl == "nccl_failure" for lbl, _, _ in _run(f))


def test_a_compiler_run_by_the_server_is_work_not_a_hang() -> None:
    f = _alive_silent(gpus=[GpuFact(index=0, used_mib=70000, util_pct=100, line="0, H100, 100 %")])
    f.building_pids = {633: "root 633 96.4 ... /usr/local/cuda/bin/nvcc -gencode=arch=compute_90a"}
    got = _run(f)
    assert any(lbl == "still_starting" and w > 0 for lbl, w, _ in got)
    assert not any(lbl == "nccl_failure" for lbl, _, _ in got)


def test_a_rank_gone_while_the_other_waits_points_at_what_ended_it() -> None:
    f = _alive_silent()
    f.ranks = [
        RankFact(rank=0, pid=11, state="alive", line="root 11 ... sglang::scheduler_TP0"),
        RankFact(rank=1, state="gone"),
    ]
    f.ranks_gone = [1]
    got = _run(f)
    assert any(lbl == "killed_externally" and "rank 1 is gone" in n for lbl, _, n in got)


def test_stacks_in_a_collective_prove_the_hang() -> None:
    frame = "    all_reduce (torch/distributed/distributed_c10d.py:2501)"
    o = Observation(
        id="o12",
        tool="py_stacks",
        args={"pid": 11},
        ok=True,
        lines=['Thread 11 (active): "MainThread"', frame],
        data={"waiting_in": "collective", "collective_frame": frame},
        round=1,
    )
    got = _run(_alive_silent(), [o])
    assert any(lbl == "nccl_failure" and w >= 4.0 for lbl, w, _ in got)


def test_autotune_error_lines_on_a_live_progressing_server_are_noise() -> None:
    from agent.findings import compute

    ps = Observation(
        id="o2",
        tool="processes",
        args={},
        ok=True,
        lines=[
            "USER PID %CPU %MEM VSZ RSS TTY STAT START TIME COMMAND",
            "root 4242 99 1 1 1 ? Rl 10:00 1:00 python3 -m sglang.launch_server --port 30000",
        ],
        data={  # a processes result, as agent/facts reads it back (agent/typed_results.py)
            "host": "h",
            "processes": [
                {
                    "pid": 4242,
                    "stat": "Rl",
                    "command": "python3 -m sglang.launch_server --port 30000",
                    "server": "sglang",
                    "role": "main",
                }
            ],
        },
        round=0,
    )
    noise = "ERROR 12-01 [select_algorithm.py:1] OutOfMemoryError: out of resource: triton_mm Required: 262144"
    lines = [
        noise,
        noise,
        "Capturing batches (bs=8 avail_mem=20.1 GB):  64%|██████▍   | 9/14 [00:05<00:03]",
    ]
    log = Observation(
        id="o8",
        tool="log_tail",
        args={"path": LOG},
        ok=True,
        lines=lines,
        data={"host": "h", "size": 10},
        round=0,
    )
    log2 = Observation(
        id="o9",
        tool="log_tail",
        args={"path": LOG},
        ok=True,
        lines=[
            *lines,
            "Capturing batches (bs=16 avail_mem=19 GB):  78%|███████▊  | 11/14 [00:07<00:02]",
        ],
        data={"host": "h", "size": 20},
        round=1,
    )
    findings, facts = compute([ps, log, log2])
    assert facts.server_alive
    oom = sum(f["strength"] for f in findings if f["label"] == "cuda_oom_runtime")
    assert oom <= 0, [f for f in findings if f["label"] == "cuda_oom_runtime"]
    assert sum(f["strength"] for f in findings if f["label"] == "still_starting") > 0
