"""processes: ps parsed by its header (ps aux from cards, ps -eo live), servers, zombies, GPU pids."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from cards.replay import replay_name
from tests.cardkit import minimal_card as _card
from tools import engines
from tools.local_host import LocalHost
from tools.processes import SPEC, Result, identify, parse_ps, server_kind

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
    assert not r.ok and replay_name("t") in (r.error or "") and r.fix


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


@pytest.mark.parametrize(
    ("command", "engine", "role"),
    [
        ("python3 -m sglang.launch_server --model-path /m --port 30000", "sglang", "main"),
        ("sglang::scheduler_DP0_TP3_EP3", "sglang", "worker"),
        ("sglang::detokenizer", "sglang", "worker"),
        ("/usr/bin/tini -- vllm serve /m --port 8000", "vllm", "main"),
        ("python -m vllm.entrypoints.openai.api_server --model m", "vllm", "main"),
        ("VLLM::EngineCore", "vllm", "worker"),
        ("ray::RayWorkerWrapper", "vllm", "worker"),
        (
            "/bin/sh -c python3 -m vllm.entrypoints.openai.api_server --port 8080",
            "vllm",
            "launcher",
        ),
        ("numactl --cpunodebind=0 python -m sglang.launch_server --port 1", "sglang", "main"),
        ("env CUDA_VISIBLE_DEVICES=0 vllm serve m", "vllm", "main"),
        ("/usr/bin/python3 /usr/local/bin/trtllm-serve /engines/x", "trtllm", "main"),
        ("tritonserver --model-repository=/m", "trtllm", "main"),
        (
            "/usr/bin/python /usr/local/bin/torchrun --nproc_per_node 2 serve.py",
            "torch",
            "launcher",
        ),
        ("text-generation-launcher --model-id x", "tgi", "main"),
        ("/usr/local/bin/ollama serve", "ollama", "main"),
        ("llama-server -m /m.gguf --port 8080", "llama.cpp", "main"),
        ("python3 -m myserve.launch --model /models/llama-8b --port 30000", "custom", "main"),
        ("python3 serve_llama33.py", "custom", "main"),
        # mentions are not servers; nor are pivot, compilers, editors, shells, tooling
        ("bash -c sleep 600 # vllm", None, None),
        ("python3 -m http.server 8000", None, None),
        ("python3 -m mytool.report --input vllm.log", None, None),
        ("/usr/lib/gcc/x86_64-linux-gnu/12/cc1plus -quiet sglang/srt/x.cpp", None, None),
        ("g++ -c vllm/csrc/attention.cu -o x.o", None, None),
        ("ninja -C build sglang_kernels", None, None),
        ("python -m agent.cli investigate --log /l 'vllm serve died'", None, None),
        ("/opt/venv/bin/python /opt/venv/bin/pivot investigate --host h", None, None),
        ("vim vllm.yaml", None, None),
        ("tail -f /logs/sglang.launch_server.log", None, None),
        ("/usr/bin/python3 -m pytest -q tests/vllm", None, None),
        ("pip install vllm", None, None),
        ("sshd: root@pts/0", None, None),
        # a Ray cluster's daemons outlive any job on it; its actors are the job's workers
        (
            "/opt/venv/lib/python3.12/site-packages/ray/core/src/ray/raylet/raylet --port=0",
            None,
            None,
        ),
        ("/usr/lib/python3/dist-packages/ray/core/src/ray/gcs/gcs_server --log_dir=/t", None, None),
        ("ray::RayWorkerWrapper.execute_method", "vllm", "worker"),
        ("ray::ServeReplica:app:LLMServer", "ray", "worker"),
    ],
)
def test_registry_classifies_command_lines(
    command: str, engine: str | None, role: str | None
) -> None:
    m = engines.classify(command)
    assert (m.engine, m.role) == (engine, role)
    assert server_kind(command) == engine


def test_registry_loads_every_engine_with_its_patterns() -> None:
    reg = engines.registry()
    for name in ("sglang", "vllm", "trtllm", "torch", "tgi", "lmdeploy", "ollama", "llama.cpp"):
        assert name in reg.engines
    assert reg.engines["sglang"].config_prefixes == ["SGLANG_", "SGL_"]
    assert engines.log_ranks(["[2025 TP0] Load weight begin", "[2025 TP1] x"], "sglang") == {0, 1}
    assert engines.log_ranks(["[rank1]: NCCL error"], "torch") == {1}


EO_TREE = """\
    PID    PPID USER     STAT  ELAPSED %CPU   RSS COMMAND
      1       0 root     Ss       9000  0.0  1000 /sbin/init
    100       1 alice    Sl        300 50.0  9000 python3 run_model.py --port 30000
    101     100 alice    Rl        299 99.0  9000 python3 -c from multiprocessing.spawn import spawn_main
    102     100 alice    S         100  0.0  2000 /usr/bin/ninja -v
    200       1 bob      Sl       5000 80.0  9000 python3 -m vllm.entrypoints.openai.api_server --model m
    201     200 bob      Rl       5000 99.0  9000 VLLM::EngineCore
    300       1 alice    Sl      90000  0.0  9000 sglang::scheduler_TP0
    400       1 carol    Sl        100  0.0  1000 python3 -m http.server 8000
"""


def test_log_writer_and_its_children_are_the_server_other_launches_are_not() -> None:
    procs = parse_ps(EO_TREE).procs
    identify(procs, writers={100: "/logs/run.log"})
    by = {p.pid: p for p in procs}
    assert by[100].server == "unknown" and by[100].role == "main" and "writes" in by[100].why
    assert by[101].server == "unknown" and by[101].role == "worker" and by[101].launch == 100
    assert by[102].server is None  # the JIT's ninja is not a rank
    assert by[200].ours is False and by[201].ours is False and by[201].launch == 200
    assert by[300].ours is False and by[400].server is None
    assert by[100].ours is True and by[101].ours is True


def _ps_obs(text: str, **identify_kw) -> dict:  # type: ignore[no-untyped-def]
    procs = parse_ps(text).procs
    identify(procs, **identify_kw)
    res = Result(host="h", header="PID", processes=procs, total=len(procs))
    return {
        "id": "o1",
        "tool": "processes",
        "args": {},
        "ok": True,
        "lines": res.lines(),
        "data": res.model_dump(),
        "round": 0,
    }


def _gpu_obs(pids: list[int]) -> dict:  # type: ignore[type-arg]
    from tools import gpu_status

    res = gpu_status.Result(
        host="h",
        gpus=[gpu_status.Gpu(index=0, memory_used_mib=60000, memory_total_mib=81559)],
        processes=[gpu_status.GpuProcess(pid=p, used_mib=20000, name="python3") for p in pids],
    )
    return {
        "id": "o2",
        "tool": "gpu_status",
        "args": {},
        "ok": True,
        "lines": [],
        "data": res.model_dump(mode="json"),
        "round": 0,
    }


def test_facts_server_ranks_co_tenant_and_leftover() -> None:
    from agent.facts import derive

    f = derive([_ps_obs(EO_TREE, writers={100: "/logs/run.log"}), _gpu_obs([101, 201, 300])])
    assert f.server_alive and sorted(f.server_pids) == [100, 101]
    assert f.server_main_pids == [100] and f.server_user == "alice"
    assert sorted(f.other_launch_pids) == [200, 201, 300]
    assert 201 in f.co_tenant_pids and "bob" in f.co_tenant_pids[201]  # another user's job
    assert 300 in f.leftover_pids  # an orphaned scheduler of an earlier launch (ppid 1)
    assert 400 not in f.co_tenant_pids and 400 not in f.leftover_pids  # holds no GPU


def test_facts_from_a_card_ps_aux_without_tree() -> None:
    from agent.facts import derive

    f = derive([_ps_obs(SYNTH_PS)])
    assert sorted(f.server_pids) == [2001, 2003, 2004, 2005, 2006, 2007]
    assert f.server_engine == "sglang" and 2005 in f.server_worker_pids


def test_a_grep_whose_quoted_pattern_names_engines_is_not_a_server() -> None:
    """pivot's own log_search runs `sh -c grep ... '...torchrun|sglang...' | cut`: the shell's
    operators inside quotes do not split it into a torchrun command."""
    from tools.engines import classify

    grep = (
        "sh -c grep -a -b -E -e '(server_args=ServerArgs\\()|^\\$ (?:python|vllm|torchrun|sglang)'"
        " /tmp/x.log | cut -c1-400"
    )
    assert classify(grep).engine is None
    assert (
        classify("bash -c cd /srv && python -m sglang.launch_server --port 30000").engine
        == "sglang"
    )


def test_a_database_writing_server_log_is_never_the_inference_server() -> None:
    """A box's own services write logs called server.log and listen on ports too: PostgreSQL
    writing the log found newest, or nginx on the port, is no launch (it once had Pivot dump
    postgres' stacks and watch the GPUs for a minute on a box with no server at all)."""
    tree = (
        "    PID    PPID USER     STAT  ELAPSED %CPU   RSS COMMAND\n"
        "    500       1 pivot-pg Ss        60  0.4 32884 /usr/lib/postgresql/15/bin/postgres -D /tmp/pg/data\n"
        "    501     500 pivot-pg Ss        60  0.0  8000 postgres: checkpointer\n"
        "    600       1 www-data Ss        60  0.0  8000 nginx: master process /usr/sbin/nginx\n"
        "    700       1 alice    Sl        60 50.0  9000 python3 run.py --port 8000\n"
    )
    procs = parse_ps(tree).procs
    identify(procs, writers={500: "/tmp/pg/server.log"}, port_pids={600: 8000})
    by = {p.pid: p for p in procs}
    assert by[500].server is None and by[501].server is None and by[600].server is None
    # the control: a plain Python program writing the log asked about is the server
    procs = parse_ps(tree).procs
    identify(procs, writers={700: "/srv/serve.log"})
    assert {p.pid: p for p in procs}[700].server == "unknown"
