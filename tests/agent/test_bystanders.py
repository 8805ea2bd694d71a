"""A kill line counts for the launch only when its victim is a member or it happened during the
launch's life (agent/kills.py); on a busy box, another job's old OOM kill decides nothing."""

from __future__ import annotations

import pytest

from agent import kills
from agent.state import Hypothesis, Observation
from tests.agent.test_rules import GPU_CLEAN, PS_IDLE, _card, _run

LOG = (
    "INFO 11-30 10:00:01 [api_server.py:1034] vLLM API server version 0.8.3\n"
    "INFO 11-30 10:00:05 [model_runner.py:1041] Starting to load model /models/llama-70b...\n"
    "INFO 11-30 10:01:40 [weight_utils.py:255] Using model weights format ['*.safetensors']\n"
)
OLD_KILL = (
    "[Sun Nov 30 09:10:22 2026] Memory cgroup out of memory: Killed process 88121 (python3) "
    "total-vm:9123456kB, anon-rss:8123456kB, file-rss:0kB, shmem-rss:0kB, UID:1003\n"
)
OUR_KILL = (
    "[Sun Nov 30 10:02:10 2026] Out of memory: Killed process 5120 (python3) "
    "total-vm:91234560kB, anon-rss:81234560kB, file-rss:0kB, shmem-rss:0kB, UID:0\n"
)


@pytest.mark.parametrize(
    ("dmesg", "ours"),
    [
        (OLD_KILL, False),  # 50 minutes before the launch's first line: another job's
        (OUR_KILL, True),  # during the launch, of a python process: counts
        (
            # during the launch, but no launch runs a browser: the victim was another job (the
            # launch that stopped was not ended by this kill; a neighbour's memhog on a busy box)
            "[Sun Nov 30 10:02:10 2026] Out of memory: Killed process 777 (chrome) total-vm:1kB\n",
            False,
        ),
        (
            # during the launch, a JIT's compiler: a child the launch runs (FlashInfer's build)
            "[Sun Nov 30 10:02:10 2026] Out of memory: Killed process 778 (cicc) total-vm:1kB\n",
            True,
        ),
        (
            "[Sun Nov 30 10:02:10 2026] Memory cgroup out of memory: Killed process 7256 (memhog) "
            "total-vm:79520kB, anon-rss:68096kB\n",
            False,
        ),
    ],
)
def test_kill_lines_belong_by_member_or_time(dmesg: str, ours: bool) -> None:
    obs = [
        {
            "id": "o1",
            "tool": "log_tail",
            "ok": True,
            "args": {"path": "/l"},
            "lines": LOG.splitlines(),
            "data": {},
        },
        {
            "id": "o2",
            "tool": "dmesg",
            "ok": True,
            "args": {},
            "lines": dmesg.splitlines(),
            "data": {},
        },
    ]
    foreign = kills.bystander_kills(obs)  # type: ignore[arg-type]
    assert (dmesg.strip() not in foreign) is ours, foreign


def test_a_victim_the_log_names_is_the_launchs_whatever_the_clock() -> None:
    log = ["[2023-10-30 14:13:02] Worker PID: 2584 Worker exit type: SYSTEM_ERROR"]
    kill = "[Mon Oct 30 06:14:35 2023] Out of memory: Killed process 2584 (ray::RayWorker) total-vm:1kB"
    obs = [
        {
            "id": "o1",
            "tool": "log_tail",
            "ok": True,
            "args": {"path": "/l"},
            "lines": log,
            "data": {},
        },
        {"id": "o2", "tool": "dmesg", "ok": True, "args": {}, "lines": [kill], "data": {}},
    ]
    assert kills.bystander_kills(obs) == {}  # type: ignore[arg-type]


def test_another_jobs_old_kill_does_not_make_a_dead_launch_host_oom(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The launch is gone with no error of its own; the only kill on the box is another user's
    container, 50 minutes before this launch began: not host_oom_killed."""
    card = _card({"/var/log/vllm/server.log": LOG}, PS_IDLE, GPU_CLEAN, dmesg=OLD_KILL)
    r = _run(card, tmp_path)
    assert r.root_cause != "host_oom_killed", r.summary
    assert not any("88121" in e.line for e in r.evidence)


def test_control_the_launchs_own_kill_is_host_oom(tmp_path) -> None:  # type: ignore[no-untyped-def]
    card = _card({"/var/log/vllm/server.log": LOG}, PS_IDLE, GPU_CLEAN, dmesg=OLD_KILL + OUR_KILL)
    r = _run(card, tmp_path)
    assert r.root_cause == "host_oom_killed", r.summary
    assert any("Killed process 5120" in e.line for e in r.evidence)
    assert not any("88121" in e.line for e in r.evidence)


@pytest.mark.parametrize(
    ("line", "kill"),
    [
        ('            "OOMKilled": false,', False),  # docker inspect of a container NOT killed
        ('            "OOMKilled": true,', True),
        ("      Reason:       OOMKilled", True),
    ],
)
def test_oomkilled_false_is_not_a_kill(line: str, kill: bool) -> None:
    from agent.rules import guardrails, proof

    assert bool(guardrails.OOM_KILL.search(line)) is kill
    assert (proof.fatal_kind(line) is not None) is kill


def test_a_cuda_images_own_env_passes_no_gpu_under_runc() -> None:
    """CUDA images set NVIDIA_VISIBLE_DEVICES=all in their Env; without the nvidia runtime or a
    device request the container sees no GPU (the commonest 'forgot --gpus')."""
    from tools.container_inspect import _gpu_devices

    env = {"NVIDIA_VISIBLE_DEVICES": "all"}
    assert _gpu_devices({"Runtime": "runc", "DeviceRequests": None}, env)[0] is False
    assert _gpu_devices({"Runtime": "nvidia"}, env)[0] is True
    req = {"Runtime": "runc", "DeviceRequests": [{"Driver": "nvidia", "Count": -1}]}
    assert _gpu_devices(req, {})[0] is True


def test_a_duplicate_instance_named_by_the_oom_is_the_cause_not_the_gpu_size(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A supervisor restarted the launch while the first instance (same command, same user, same
    log) still loaded and held 72 GiB; the new one died of a weights OOM whose own line names
    the first: torch names only OTHER processes there, so pid 530 is not the server itself."""
    cmd = "python3 -m vllm.entrypoints.openai.api_server --model /models/llama-70b --port 8000"
    ps = (
        "USER         PID %CPU %MEM    VSZ   RSS TTY      STAT START   TIME COMMAND\n"
        f"svc          530 99.0  3.1 9123456 4123456 ?      Rl   09:02   2:11 {cmd}\n"
        "svc          611  0.0  0.0   7232  3968 ?        Ss   09:01   0:00 /usr/bin/supervisord\n"
    )
    oom = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.75 GiB. GPU 0 has a "
        "total capacity of 79.10 GiB of which 1.02 GiB is free. Process 530 has 72.54 GiB "
        "memory in use. Including non-PyTorch memory, this process has 5.51 GiB memory in use."
    )
    log = (
        "INFO 11-30 09:02:01 [api_server.py:1034] vLLM API server version 0.8.3\n"
        "INFO 11-30 09:02:05 [model_runner.py:1041] Starting to load model /models/llama-70b...\n"
        "INFO 11-30 09:04:01 [api_server.py:1034] vLLM API server version 0.8.3\n"
        "INFO 11-30 09:04:05 [model_runner.py:1041] Starting to load model /models/llama-70b...\n"
        f"{oom}\n"
    )
    gpu = "0, NVIDIA H100 80GB HBM3, 74290 MiB, 6718 MiB, 81559 MiB, 100 %\n"
    card = _card({"/var/log/vllm/server.log": log}, ps, gpu, dmesg="")
    r = _run(card, tmp_path)
    assert r.root_cause == "stale_gpu_process", (r.root_cause, r.summary)
    assert "another instance" in r.next_step and "530" in r.next_step, r.next_step
    # the Launch view says the same: 530 is a duplicate, not a member (H200 run 13 showed both)
    launch = r.launch or {}
    assert 530 in launch["duplicates"], launch
    assert 530 not in [m["pid"] for m in launch["members"]], launch["members"]
    holders = [g["owner"] for g in launch["gpu"] if g["pid"] == 530]
    assert all(o == "another instance of the launch" for o in holders), launch["gpu"]


def test_control_one_launch_whose_oom_names_its_own_pid_is_an_ordinary_oom(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """In a container torch may list the dying process itself under "Process N has": with one
    launch in the log, the named live pid is the server, and the OOM is its own."""
    cmd = "python3 -m vllm.entrypoints.openai.api_server --model /models/llama-70b --port 8000"
    ps = (
        "USER         PID %CPU %MEM    VSZ   RSS TTY      STAT START   TIME COMMAND\n"
        f"svc          530 99.0  3.1 9123456 4123456 ?      Rl   09:02   2:11 {cmd}\n"
    )
    log = (
        "INFO 11-30 09:02:01 [api_server.py:1034] vLLM API server version 0.8.3\n"
        "INFO 11-30 09:02:05 [model_runner.py:1041] Starting to load model /models/llama-70b...\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.75 GiB. GPU 0 has a "
        "total capacity of 79.10 GiB of which 1.02 GiB is free. Process 530 has 78.04 GiB "
        "memory in use. Of the allocated memory 76.10 GiB is allocated by PyTorch.\n"
    )
    gpu = "0, NVIDIA H100 80GB HBM3, 79000 MiB, 2559 MiB, 81559 MiB, 100 %\n"
    r = _run(_card({"/var/log/vllm/server.log": log}, ps, gpu, dmesg=""), tmp_path)
    assert r.root_cause != "stale_gpu_process", r.summary


@pytest.mark.parametrize(("runner_start", "leftover"), [("Jul11", True), ("09:53", False)])
def test_a_worker_older_than_the_servers_entry_point_is_an_earlier_launchs(
    runner_start: str, leftover: bool
) -> None:
    """After a restart, a runner that started before the current `ollama serve` cannot be its
    child: it outlived the earlier launch and still holds its GPU memory (a leftover). A runner
    started after the entry point is the server's own (the control)."""
    from agent.facts import derive
    from agent.state import Observation
    from tools import processes

    runner = "/tmp/ollama31/runners/cuda_v11/ollama_llama_server --model /m/blobs/sha256-1e8f --port 40101"
    ps = (
        "USER         PID %CPU %MEM    VSZ   RSS TTY      STAT START   TIME COMMAND\n"
        f"ollama     44213  0.0 33.8 24815220 16710224 ?   Sl   {runner_start}   2:31 {runner}\n"
        "ollama     51702  0.9  1.1 2210334 571208 ?      Ssl  09:51   0:11 /usr/local/bin/ollama serve\n"
    )
    pp = processes.parse_ps(ps)
    res = processes.Result(host="h", header=pp.header, processes=pp.procs, total=len(pp.procs))
    obs = Observation(
        id="o2",
        tool="processes",
        args={},
        ok=True,
        lines=res.lines(),
        data=res.model_dump(mode="json"),
        round=0,
    )
    f = derive([obs])
    assert (44213 in f.leftover_pids) is leftover, (f.server_pids, f.leftover_pids)
    assert (44213 in f.server_pids) is not leftover


def test_a_search_that_found_nothing_does_not_hide_the_logs_span() -> None:
    """A kill a day before the launch's log began is a bystander's; a later search of the same
    log (no hits) must not replace the tail's read and make the launch's life unknown."""
    from agent.kills import bystander_kills

    def obs(i: int, tool: str, args: dict, lines: list[str]) -> dict:
        return {
            "id": f"o{i}",
            "tool": tool,
            "args": args,
            "ok": True,
            "lines": lines,
            "data": {},
            "round": 0,
        }

    kill = (
        "[Sun Apr 12 21:14:02 2026] Out of memory: Killed process 30117 (python3) "
        "total-vm:131200412kB, anon-rss:118211040kB, file-rss:2112kB, shmem-rss:0kB, UID:1000"
    )
    tail = [
        "(APIServer pid=1) INFO 04-13 22:03:48 [api_server.py:1896] vLLM API server version 0.18.1",
        "(APIServer pid=1) INFO 04-13 23:10:14 [loggers.py:127] Engine 000: Avg prompt throughput: 0.0 tokens/s",
    ]
    observations = [
        obs(1, "dmesg", {}, [kill]),
        obs(2, "container_logs", {}, tail),
        obs(
            3,
            "container_logs",
            {"pattern": "(?i)out of memory"},
            ["# the container printed nothing"],
        ),
    ]
    assert kill in bystander_kills(observations)  # type: ignore[arg-type]


def test_the_supervisor_check_reads_only_a_unit_that_is_the_servers() -> None:
    """A busy box lists its own units (podman.service, a database's): none is the launch's
    supervisor; a unit named like an inference server is."""
    from agent.checks import options

    def listing(*paths: str) -> list[Observation]:
        return [
            Observation(
                id="o1",
                tool="find_logs",
                args={},
                ok=True,
                lines=list(paths),
                data={"configs": [{"path": p} for p in paths]},
                round=0,
            )
        ]

    board = {
        "killed_externally": Hypothesis(
            label="killed_externally",
            statement="",
            status="open",
            score=1.0,
            evidence=[],
            against=[],
            check="",
        )
    }
    foreign = listing(
        "/etc/systemd/system/default.target.wants/podman.service",
        "/usr/lib/systemd/system/postgresql.service",
    )
    assert not [o for o in options(foreign, board, []) if o.id == "supervisor_log"]
    ours = listing("/etc/systemd/system/podman.service", "/etc/systemd/system/vllm-qwen.service")
    (opt,) = [o for o in options(ours, board, []) if o.id == "supervisor_log"]
    assert opt.args == {"kind": "journalctl", "name": "vllm-qwen.service"}


@pytest.mark.parametrize(
    ("born", "foreign"), [("2026-12-02 10:11:00", True), ("2026-12-02 10:05:00", False)]
)
def test_a_kill_before_an_unstamped_log_was_created_is_not_the_launchs(
    born: str, foreign: bool
) -> None:
    """A launch's log without time stamps still has a birth: a cgroup OOM kill of some python3
    four minutes before the file existed did not end its writer (it once made a live launch
    `host_oom_killed`). The control: the same kill after the file's birth still counts."""
    from agent.kills import bystander_kills

    kill = (
        "[Wed Dec  2 10:07:12 2026] Memory cgroup out of memory: Killed process 4121 (python3) "
        "total-vm:79520kB, anon-rss:68096kB, file-rss:5216kB, shmem-rss:0kB, UID:0"
    )
    observations = [
        Observation(id="o1", tool="dmesg", args={}, ok=True, lines=[kill], data={}, round=0),
        Observation(
            id="o2",
            tool="log_tail",
            args={"path": "/srv/launch.log"},
            ok=True,
            lines=["starting the server", "loading weights"],
            data={"modified": "2026-12-02 10:11:30", "born": born},
            round=0,
        ),
    ]
    assert (kill in bystander_kills(observations)) is foreign
