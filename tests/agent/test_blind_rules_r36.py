"""Rules and knowledge after blind round 36 (scored before any change), each with a control
that must not trigger it: a fix is a general form or fact, never an answer keyed to one card."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.rules import proof
from agent.rules.structure import raising_statement
from tests.agent.test_rules import GPU_CLEAN, PS_HEADER, PS_IDLE, _card, _run

VLLM = "(APIServer pid=1) INFO 06-09 17:58:41 [api_server.py:1898] vLLM API server version 0.18.0\n"
W = "(Worker pid=7181) ERROR 06-09 17:58:55 [multiproc_executor.py:852]"
TCPSTORE = (
    f"{W} WorkerProc failed to start.\n"
    f"{W} Traceback (most recent call last):\n"
    f'{W}   File "/usr/lib/python3/site-packages/torch/distributed/rendezvous.py", line 195, in '
    "_create_c10d_store\n"
    f"{W}     return TCPStore(\n"
    f"{W} torch.distributed.DistNetworkError: The server socket has failed to listen on any "
    "local network address. port: 47231, useIpv6: false, code: -98, name: EADDRINUSE, message: "
    "address already in use\n"
)


def test_torchs_lowercase_eaddrinuse_is_the_port_and_no_nccl_failure(tmp_path: Path) -> None:
    """torch >= 2.4 words the TCPStore's bind failure "name: EADDRINUSE, message: address already
    in use" (lowercase): the port, and the distributed failure it reads as is ruled out by it."""
    r = _run(_card({"/srv/run/train.log": VLLM + TCPSTORE}, PS_IDLE, GPU_CLEAN), tmp_path)
    assert r.root_cause == "port_in_use", (r.summary, r.hypotheses)
    nccl = next(h for h in r.hypotheses if h.label == "nccl_failure")
    assert nccl.status == "refuted", nccl


def test_control_a_distnetworkerror_of_a_peer_is_still_a_distributed_failure(
    tmp_path: Path,
) -> None:
    log = VLLM + TCPSTORE.replace(
        "The server socket has failed to listen on any local network address. port: 47231, "
        "useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use",
        "Connection reset by peer",
    )
    r = _run(_card({"/srv/run/train.log": log}, PS_IDLE, GPU_CLEAN), tmp_path)
    assert r.root_cause != "port_in_use", r.summary


E = "ERROR 10-28 03:03:39 [v1/executor/multiproc_executor.py:597]"
ASSERT_TB = [
    f"{E} WorkerProc failed to start.",
    f"{E} Traceback (most recent call last):",
    f'{E}   File "/usr/lib/python3/site-packages/lmcache/v1/memory_management.py", line 88, in '
    "__init__",
    f"{E}     assert size % align == 0",
    f"{E} AssertionError: Buffer size 5368709120 must be a multiple of align bytes 17989632 in "
    "paged memory allocator.",
]


def test_a_tracebacks_last_line_under_a_loggers_error_prefix_is_the_exception() -> None:
    kinds = dict(proof.fatal_lines(ASSERT_TB))
    assert kinds[4] == "exception" and kinds[0] == "error_level", kinds
    # control: an ERROR line with no traceback open above it keeps its kind
    assert dict(proof.fatal_lines([ASSERT_TB[0], ASSERT_TB[4]])) == {
        0: "error_level",
        1: "error_level",
    }


WAITS = "".join(
    f"(APIServer pid=1) DEBUG 10-28 03:{m:02d}:55 [v1/engine/utils.py:776] Waiting for 1 local, "
    "0 remote core engine proc(s) to start.\n"
    for m in range(4, 9)
)
SERVER_PS = PS_HEADER + (
    "root           1  0.6  0.1 14870216 1301220 ?    Ssl  03:02   0:19 /usr/bin/python3 "
    "/usr/local/bin/vllm serve deepseek-ai/DeepSeek-V3.1 --host 0.0.0.0\n"
)
LOADING = (
    "(EngineCore pid=9) INFO 10-28 03:{m:02d}:10 [default_loader.py:262] Loading safetensors "
    "checkpoint shards: {p}% Completed | {n}/160\n"
)


@pytest.mark.parametrize("after", ["waits", "loading"])
def test_an_own_exception_followed_only_by_waits_ended_the_start_up(
    tmp_path: Path, after: str
) -> None:
    """The API server lives on, printing "Waiting for ... core engine proc(s)" every ten seconds
    after its workers died of their own exception: nothing is starting any more. Control: the
    same exception followed by a loader that advances between the reads is no end of start-up."""
    head = VLLM + "\n".join(ASSERT_TB) + "\n"
    if after == "waits":
        snaps = [head + WAITS[: len(WAITS) // 2], head + WAITS]
    else:
        snaps = [
            head + LOADING.format(m=4, p=10, n=16),
            head + LOADING.format(m=4, p=10, n=16) + LOADING.format(m=5, p=40, n=64),
        ]
    r = _run(_card({"/srv/dsv31/server.log": snaps}, SERVER_PS, GPU_CLEAN), tmp_path)
    starting = next((h for h in r.hypotheses if h.label == "still_starting"), None)
    ended = (
        starting is not None
        and starting.status == "refuted"
        and any("AssertionError: Buffer size" in a.line for a in starting.against)
    )
    assert ended is (after == "waits"), (r.summary, starting)
    if after == "waits":
        assert r.root_cause == "bad_launch_argument", r.summary


TRT = (
    "[TensorRT-LLM] TensorRT-LLM version: 1.2.0rc5\n"
    "Loading weights concurrently:  99%|#########8| 2700/2737 [00:41<00:00, 64.21it/s]\n"
    "[12/11/2025-08:16:12] [TRT-LLM] [RANK 0] [E] Failed to initialize executor on rank 0: \n"
    "Traceback (most recent call last):\n"
    '  File "/usr/lib/python3/site-packages/tensorrt_llm/_torch/models/modeling_utils.py", '
    "line 946, in load_single_module\n"
    "    module.load_weights(weights=module_weights)\n"
    '  File "/usr/lib/python3/site-packages/tensorrt_llm/_torch/modules/linear.py", line 138, '
    "in load_weights_fused_qkv_helper\n"
    "    assert all('weight' in weights[i] for i in range(3))\n"
    "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
    "AssertionError\n"
    "\n"
    "Traceback (most recent call last):\n"
    '  File "/usr/lib/python3/site-packages/tensorrt_llm/executor/proxy.py", line 340, in '
    "_start_executor_workers\n"
    "    raise RuntimeError(\n"
    "RuntimeError: Executor worker returned error\n"
)


def test_a_bare_assert_under_a_proxys_see_above_is_weighed_and_its_statement_cited(
    tmp_path: Path,
) -> None:
    """TensorRT-LLM's proxy says only that a worker failed (a wrapper line): the worker's own
    bare AssertionError, raised in the weight loader, is weighed by its frame, the `assert`
    statement is cited as what it lacks in words, and the weight-loading phase markers say no
    GPU OOM happened (the log, read from its banner, prints none)."""
    r = _run(_card({"/srv/glm/serve.log": TRT}, PS_IDLE, GPU_CLEAN), tmp_path)
    assert r.root_cause == "model_load_error", (r.summary, r.hypotheses)
    assert any(e.line.strip().startswith("assert all(") for e in r.evidence), r.evidence
    oom = next(h for h in r.hypotheses if h.label == "gpu_oom_weights")
    assert oom.status == "refuted", oom


def test_raising_statement_only_for_a_bare_exception() -> None:
    lines = TRT.splitlines()
    bare = lines.index("AssertionError")
    assert (
        raising_statement(lines, bare) == "    assert all('weight' in weights[i] for i in range(3))"
    )
    # controls: an exception with its own message; a bare one right after a frame header
    msg = lines.index("RuntimeError: Executor worker returned error")
    assert raising_statement(lines, msg) is None
    assert raising_statement(['  File "x.py", line 1, in f', "ValueError"], 1) is None


ENOSPC = (
    "(APIServer pid=1) INFO 06-09 17:58:41 [api_server.py:1898] vLLM API server version 0.18.0\n"
    "Traceback (most recent call last):\n"
    '  File "/usr/lib/python3/site-packages/huggingface_hub/file_download.py", line 1717, in '
    "_chunk_iter\n"
    "OSError: [Errno 28] No space left on device\n"
)
DF_HEAD = "Filesystem      Size  Used Avail Use% Mounted on\n"
DATA_FULL = "/dev/sdb1       1.8T  1.8T  2.1G 100% /data\n"
SHM_OK = "shm             1.0G     0  1.0G   0% /dev/shm\n"
SHM_FULL = "shm              64M   64M     0 100% /dev/shm\n"


@pytest.mark.parametrize(("shm", "refuted"), [(SHM_OK, True), (SHM_FULL, False)])
def test_no_space_on_a_full_disk_rules_out_dev_shm_unless_that_is_full_too(
    tmp_path: Path, shm: str, refuted: bool
) -> None:
    """ "No space left on device" is a full disk's or a full /dev/shm's: with the disk the launch
    writes to full and /dev/shm not, the shortfall is the disk's. Control: /dev/shm full too."""
    card = _card(
        {"/data/logs/server.log": ENOSPC},
        PS_IDLE,
        GPU_CLEAN,
        commands={"df -hP": DF_HEAD + DATA_FULL + shm},
    )
    card.symptom = "The download died with no space left: is it the disk or shm?"
    r = _run(card, tmp_path)
    h = next((h for h in r.hypotheses if h.label == "shm_too_small"), None)
    by_disk = h is not None and any(a.line == DATA_FULL.strip() for a in h.against)
    assert by_disk is refuted, (r.summary, h)


@pytest.mark.parametrize("died", ["cuda_oom_runtime", "nccl_failure", None])
def test_ranks_waiting_in_a_collective_for_a_member_that_died_of_its_own_error(
    died: str | None,
) -> None:
    """Rank 3 died of a CUDA OOM while rank 0 waits in an allgather: the wait is the consequence
    of that death, so the OOM line rules nccl_failure out. Controls: a member's own NCCL error,
    or no member's error at all: the stacks in the collective support nccl_failure as before."""
    from agent.facts import Facts
    from agent.rules.hang import hang_rules
    from agent.signatures import Match
    from agent.state import Observation

    frame = "    _allgather (mpi4py/util/pkl5.py:654)"
    line = "[TRT-LLM] [RANK 3] [E] Failed to initialize executor on rank 3: CUDA out of memory."
    log = Observation(id="o3", tool="log_tail", args={"path": "/l"}, ok=True, lines=[line],
                      data={}, round=0)  # fmt: skip
    stacks = Observation(
        id="o9", tool="py_stacks", args={"pid": 7}, ok=True, lines=[frame],
        data={"waiting_in": "collective", "collective_frame": frame}, round=1,
    )  # fmt: skip
    hits = (
        [(log, Match(signature="x", label=died, strength="fatal", line=line, line_no=0))]
        if died
        else []
    )
    said: list[tuple[str, float, str]] = []
    hang_rules(Facts(), [log, stacks], hits, lambda lb, k, w, o, ln, n: said.append((lb, w, ln)))
    nccl = [(w, ln) for lb, w, ln in said if lb == "nccl_failure"]
    if died == "cuda_oom_runtime":
        assert nccl and all(w < 0 and ln == line for w, ln in nccl), said
    else:
        assert nccl and all(w > 0 and ln == frame for w, ln in nccl), said


def test_a_containers_disk_read_it_cannot_answer_is_the_machines_and_says_so() -> None:
    """A container whose image has no `df` (or, replayed, no recorded one): the machine's df
    answers the disk read, the observation says whose it is. Controls: a read that runs on the
    machine anyway (the container's log) carries no such note; a process table is never taken
    from the machine for the container."""
    from agent.observe import call
    from cards.model import IncidentCard
    from cards.replay import ReplayHost
    from tests.agent.test_blind_rules_r33 import INSPECT
    from tools.container_host import ContainerHost

    card = IncidentCard.model_validate(
        {
            "id": "ctr", "title": "t", "source": "test", "engine": "vllm", "symptom": "slow?",
            "host": {
                "ps": PS_HEADER, "commands": {"df -hP": DF_HEAD + DATA_FULL + SHM_OK},
                "containers": {"serving": {"inspect": INSPECT % "serving", "logs": VLLM}},
            },
        }
    )  # fmt: skip
    box = ContainerHost(ReplayHost(card), "serving")
    ok, lines, data = call(box, "disk", {})
    assert ok and lines[0].startswith("# read on ") and "could not run inside" in lines[0], lines
    assert data["host"] == box.outer.name and DATA_FULL.strip() in lines, lines
    ok, lines, _ = call(box, "container_logs", {})
    assert ok and not any("could not run inside" in ln for ln in lines), lines
    ok, lines, data = call(box, "processes", {})
    assert not any("could not run inside" in ln for ln in lines), lines


LMD_LOG = (
    "2024-07-05 10:31:03,992 - lmdeploy - INFO - Checking model.\n"
    "2024-07-05 10:31:09,337 - lmdeploy - ERROR - Rank[0] failed.\n"
    "Traceback (most recent call last):\n"
    '  File "/opt/conda/envs/lmd/lib/python3.10/site-packages/lmdeploy/pytorch/engine/'
    'model_agent.py", line 1113, in _start_tp_process\n'
    "    dist.init_process_group('nccl', rank=rank, world_size=world_size)\n"
    "RuntimeError: TP process Rank[0] failed with exit code 1.\n"
)
NEIGHBOUR_PS = PS_HEADER + (
    "wliu     1187735  0.1  0.0 1391720 98112 ?       Sl   08:12   0:11 /home/wliu/env/bin/python "
    "/home/wliu/env/bin/torchrun --nproc_per_node 4 train_sft.py --config c.yaml\n"
    "wliu     1187801  101  2.1 94211320 22812044 ?   Rl   08:12 141:08 /home/wliu/env/bin/python "
    "-u train_sft.py --config c.yaml\n"
)


@pytest.mark.parametrize("frames", ["lmdeploy", "two engines"])
def test_a_log_without_a_banner_is_its_tracebacks_engine_and_a_neighbours_job_is_not_it(
    tmp_path: Path, frames: str
) -> None:
    """LMDeploy prints no launch banner the registry knows; its traceback runs through
    `site-packages/lmdeploy/`: the launch is LMDeploy's, and another user's torchrun on the box
    is another launch, not this dead server "alive". Control: frames of two engines name none."""
    log = LMD_LOG
    if frames == "two engines":
        log = log.replace(
            "    dist.init_process_group",
            '  File "/usr/lib/python3/site-packages/vllm/distributed/parallel_state.py", line 9, '
            "in f\n    dist.init_process_group",
        )
    r = _run(_card({"/srv/qa-svc/logs/serve.log": log}, NEIGHBOUR_PS, GPU_CLEAN), tmp_path)
    gone = "1187735" not in r.summary and r.root_cause != "still_starting"
    if frames == "lmdeploy":
        assert gone and "torchrun" not in " ".join(e.line for e in r.evidence), r.summary
    from agent.facts import _log_engine

    lines = log.splitlines()
    assert _log_engine({"/l": [("o1", 1, lines)]}) == ("lmdeploy" if frames == "lmdeploy" else None)


def test_a_read_made_with_more_arguments_covers_the_offered_one() -> None:
    """A model session was offered py_stacks of a pid it had read with native frames, a 60 s GPU
    watch it had made as 60.0, and `packages {}` after reading them for the launch's python."""
    from agent.checks import covered
    from agent.state import Observation

    def obs(tool: str, args: dict[str, object], ok: bool = True) -> Observation:
        return Observation(id="o1", tool=tool, args=args, ok=ok, lines=[], data={}, round=1)

    made = [
        obs("py_stacks", {"pid": 7, "native": True}),
        obs("gpu_status", {"watch_s": 60.0}),
        obs("packages", {"python": "/opt/venv/bin/python"}),
    ]
    assert covered("py_stacks", {"pid": 7}, made) is not None
    assert covered("gpu_status", {"watch_s": 60}, made) is not None
    assert covered("packages", {}, made) is not None
    # controls: another pid, a watch where a plain read was made, another tool
    assert covered("py_stacks", {"pid": 8}, made) is None
    assert covered("gpu_status", {"watch_s": 30}, made) is None
    assert covered("process_io", {"pid": 7}, made) is None


def test_another_containers_record_read_for_comparison_is_not_the_launchs() -> None:
    """A model session inspected the old image's container beside the failed one (round 36):
    the board then cited the old one's "ExitCode": 0. The investigated container stays the one
    read first (or without a name); a second read of the same one still updates it."""
    from agent.facts import derive
    from agent.observe import call
    from agent.state import Observation
    from cards.model import IncidentCard
    from cards.replay import ReplayHost
    from tools.container_host import ContainerHost

    dead = (
        '[{"Id": "aa11", "Name": "/new", "State": {"Status": "exited", "Running": false, '
        '"OOMKilled": false, "Pid": 0, "ExitCode": 1}, "Image": "sglang:0.5.0rc1"}]'
    )
    old = (
        '[{"Id": "bb22", "Name": "/old", "State": {"Status": "running", "Running": true, '
        '"OOMKilled": false, "Pid": 4242, "ExitCode": 0}, "Image": "sglang:0.4.9"}]'
    )
    card = IncidentCard.model_validate(
        {
            "id": "c", "title": "t", "source": "test", "engine": "sglang", "symptom": "?",
            "host": {"ps": PS_HEADER, "containers": {
                "new": {"inspect": dead, "logs": "x"}, "old": {"inspect": old, "logs": "y"}}},
        }
    )  # fmt: skip
    box = ContainerHost(ReplayHost(card), "new")

    def obs(i: int, args: dict[str, str]) -> Observation:
        ok, lines, data = call(box, "container_inspect", args)
        assert ok, lines
        return Observation(id=f"o{i}", tool="container_inspect", args=args, ok=ok, lines=lines,
                           data=data, round=1)  # fmt: skip

    first, other, again = obs(1, {}), obs(2, {"name": "old"}), obs(3, {"name": "new"})
    f = derive([first, other])
    assert f.container is not None and f.container.name == "new" and f.container_obs == "o1"
    assert derive([first, other, again]).container_obs == "o3"
    # control: the only container read, named, is the investigated one
    assert derive([other]).container.name == "old"  # type: ignore[union-attr]


def test_control_a_serve_script_of_its_own_is_not_set_aside_by_the_tracebacks_engine() -> None:
    """`python3 serve_internlm2.py` runs LMDeploy as a library: its command names no engine,
    and a log whose frames are LMDeploy's may be its own (a public card broke on this)."""
    from agent.facts import Facts, _other_engines

    f = Facts()
    f.server_pids = [27731]
    f.server_main_pids = [27731]
    f._ps_recs = {27731: {"server": "custom", "role": "main", "command": "python3 serve_x.py"}}
    assert not _other_engines(f, {"/l": [("o1", 1, LMD_LOG.splitlines())]})
    f._ps_recs = {27731: {"server": "torch", "role": "launcher", "command": "torchrun t.py"}}
    assert _other_engines(f, {"/l": [("o1", 1, LMD_LOG.splitlines())]})


@pytest.mark.parametrize("xid", [True, False])
def test_a_gpu_fallen_off_the_bus_explains_nvidia_smis_failure(tmp_path: Path, xid: bool) -> None:
    """nvidia-smi's "Unable to determine the device handle ... Unknown Error" reads as a driver
    problem; the kernel's Xid 79 says the GPU fell off the bus, which is why NVML cannot reach
    it: the hardware fault explains it (torch's boilerplate, which used to tip such cards, now
    weighs for nothing). Control: without the Xid, the driver stays a suspect."""
    log = (
        "Traceback (most recent call last):\n"
        '  File "/srv/app/train.py", line 9, in <module>\n'
        "RuntimeError: CUDA error: unspecified launch failure\n"
    )
    dmesg = (
        "[Mon May 29 21:15:40 2023] NVRM: Xid (PCI:0000:01:00): 79, pid=16221, name=python3, "
        "GPU has fallen off the bus.\n"
        if xid
        else "[Mon May 29 21:15:40 2023] e1000e: eth0 NIC Link is Up\n"
    )
    smi = "Unable to determine the device handle for GPU0000:01:00.0: Unknown Error\n"
    card = _card({"/srv/app/train.log": log}, PS_IDLE, smi, dmesg=dmesg)
    r = _run(card, tmp_path)
    drv = next((h for h in r.hypotheses if h.label == "cuda_driver_mismatch"), None)
    if xid:
        assert r.root_cause == "gpu_hardware_fault", (r.summary, r.hypotheses)
        assert drv is None or drv.status == "refuted", drv
    else:
        assert r.root_cause != "gpu_hardware_fault" or r.status != "concluded", r.summary


def test_go_slogs_uppercase_level_error_is_an_error_line() -> None:
    """Ollama (Go's slog) writes `level=ERROR`: a model session's cited line of it was refused
    as "no fatal line" (logrus's lowercase `level=error` was the only form known). Control."""
    line = 'time=2025-02-19T05:58:51.702Z level=ERROR source=sched.go:455 msg="error loading"'
    assert proof.fatal_kind(line) == "error_level"
    assert proof.fatal_kind(line.replace("ERROR", "INFO")) is None
