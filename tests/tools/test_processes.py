"""processes: ps parsed by its header (ps aux from cards, ps -eo live), servers, zombies, GPU pids."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cardkit import minimal_card as _card
from tools.local_host import LocalHost
from tools.processes import SPEC, parse_ps, server_kind

FIX = Path(__file__).resolve().parent.parent / "fixtures"

SYNTH_PS = """\
USER         PID %CPU %MEM    VSZ   RSS TTY      STAT START   TIME COMMAND
root           1  0.0  0.0   4628  3712 ?        Ss   02:51   0:00 /sbin/init
root        2001  2.1  1.2 9231316 905320 ?      Sl   02:52   1:01 python3 -m sglang.launch_server --model-path /m --port 30000
root        2002  0.0  0.0      0     0 ?        Z    02:52   0:00 [python3] <defunct>
root        2003  0.0  0.8 1523100 60012 ?       D    02:53   0:02 vllm serve /models/llama --port 8000
root        2004  0.0  0.1 102300 10012 ?        Sl   02:53   0:00 torchrun --nproc-per-node 8 train.py
root        2005  0.0  0.1 102300 10012 ?        Sl   02:53   0:00 ray::RayWorkerWrapper
root        2006  0.0  0.1 102300 10012 ?        Sl   02:53   0:00 tritonserver --model-repository=/models
root        2007  0.0  0.1 102300 10012 ?        Sl   02:53   0:00 trtllm-serve /engines/llama
root        2099  0.0  0.0   7064  1588 pts/0    R+   03:07   0:00 ps aux
"""


def test_ps_aux_real_busy_capture() -> None:
    p = parse_ps((FIX / "h200" / "ps-aux.busy.txt").read_text())
    assert p.header.split()[:3] == ["USER", "PID", "%CPU"]
    by_pid = {x.pid: x for x in p.procs}
    assert by_pid[471].command == "python3 /tmp/hold.py 100"
    assert by_pid[471].rss_kb == 621600 and by_pid[471].stat == "Sl"
    assert by_pid[1].command == "/sbin/init" and by_pid[2].server is None  # kthread
    assert len(p.procs) == 178


def test_ps_eo_real_device_capture() -> None:
    p = parse_ps((FIX / "h200-device" / "ps-eo.busy.txt").read_text())
    by_pid = {x.pid: x for x in p.procs}
    assert by_pid[702].ppid == 609 and by_pid[702].rss_kb == 632540
    assert by_pid[702].command.startswith("python3 -c import torch")
    assert by_pid[701].server is None  # python3 -m http.server is nobody's inference server
    assert by_pid[702].elapsed_s == 4


def test_marks_servers_zombies_dstate() -> None:
    p = {x.pid: x for x in parse_ps(SYNTH_PS).procs}
    assert p[2001].server == "sglang" and p[2003].server == "vllm"
    assert p[2004].server == "torch" and p[2004].role == "launcher"
    assert p[2005].server == "vllm" and p[2005].role == "worker"  # vLLM's Ray worker
    assert p[2006].server == "trtllm" and p[2007].server == "trtllm"
    assert p[2001].role == "main" and p[2001].ppid is None  # ps aux: no tree
    assert p[2002].zombie and not p[2001].zombie
    assert p[2003].d_state
    assert server_kind("/usr/bin/python3 -m pytest -q") is None
    assert server_kind("text-generation-launcher --model-id x") == "tgi"


def test_header_only_means_nothing_runs() -> None:
    p = parse_ps("USER PID %CPU %MEM VSZ RSS TTY STAT START TIME COMMAND\n")
    assert p.header and p.procs == []


def test_replay_links_gpu_pid_to_command(replay_host_factory) -> None:  # type: ignore[no-untyped-def]
    h = replay_host_factory(
        _card(
            {
                "ps": (FIX / "h200" / "ps-aux.busy.txt").read_text(),
                "nvidia_smi": (FIX / "h200" / "query-gpu.busy.csv").read_text(),
                "commands": {
                    "nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv": (
                        FIX / "h200" / "query-compute-apps.busy.csv"
                    ).read_text()
                },
            }
        )
    )
    r = SPEC.call(h)
    assert r.ok and r.total == 177  # the `ps aux` line itself is left out
    held = [p for p in r.processes if p.on_gpu]
    assert [(p.pid, p.command, p.gpu_mib) for p in held] == [
        (471, "python3 /tmp/hold.py 100", 102918)
    ]
    lines = r.lines()
    assert any("471" in ln and "python3 /tmp/hold.py 100" in ln for ln in lines)
    assert "# pid 471: holds GPU memory (102918 MiB)" in lines
    assert "# no inference-server process is running" in lines


def test_replay_pattern_and_servers(replay_host_factory) -> None:  # type: ignore[no-untyped-def]
    h = replay_host_factory(_card({"ps": SYNTH_PS}))
    r = SPEC.call(h, {"pattern": "init", "link_gpu": False})
    pids = [p.pid for p in r.processes]
    assert 1 in pids and 2099 not in pids
    assert r.servers == [2001, 2003, 2004, 2005, 2006, 2007]
    assert r.zombies == [2002] and r.d_state == [2003]
    r2 = SPEC.call(h, {"gpu_pids": [2001, 99999], "link_gpu": False})
    assert r2.gpu_pids_missing == [99999]


def test_replay_without_ps_is_clear_error(replay_host_factory) -> None:  # type: ignore[no-untyped-def]
    r = SPEC.call(replay_host_factory(_card({})), {"link_gpu": False})
    assert not r.ok and "replay:t" in (r.error or "") and r.fix


def test_local_python_module_is_not_a_server_but_its_log_writer_is(
    fake_gpu_path: Path, local_host: LocalHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PIVOT_FAKE_GPU_STATE", "busy")
    proc = subprocess.Popen(
        [sys.executable, "-m", "http.server", "0", "--bind", "127.0.0.1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        time.sleep(0.2)
        r = SPEC.call(local_host, {"pattern": "http.server"})
        mine = [p for p in r.processes if p.pid == proc.pid]
        assert mine and mine[0].server is None and mine[0].ppid is not None
        assert proc.pid not in r.servers
        # the fake GPU says pid 471 holds memory; no such process here
        assert 471 in r.gpu_pids_missing or any(p.pid == 471 for p in r.processes)
    finally:
        proc.kill()
        proc.wait()
