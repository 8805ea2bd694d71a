"""py_stacks: real py-spy dumps parsed and classified; fallbacks that say why and how to fix.

The fixtures under tests/fixtures/py_spy/ are real `py-spy dump` output (py-spy 0.4.3, CPython
3.11) of processes staged in a fake package tree: a thread blocked inside `all_reduce` of
`torch/distributed/distributed_c10d.py`, a spin in `torch.cuda.synchronize`, a read inside
`safetensors.torch.load_file` under `load_weights`, plus py-spy's own refusals (another user's
process, a process that is gone, a process that is not Python).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.cardkit import minimal_card
from tools.host import CommandResult
from tools.local_host import LocalHost
from tools.py_stacks import FIX_DENIED, SPEC, Frame, classify_frame, parse_py_spy
from tools.registry import TOOLS

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "py_spy"
ROOT = Path(__file__).resolve().parent.parent.parent


def _fx(name: str) -> str:
    return (FIX / name).read_text()


# -- the parser on real output --------------------------------------------------------------------
def test_real_collective_hang_threads_frames_and_verbatim_lines() -> None:
    p = parse_py_spy(_fx("collective_hang.txt"))
    assert p.process.startswith("Process 25829: ") and p.process.endswith("python3 hang.py")
    assert p.python.startswith("Python v3.11.7 ")
    assert [(t.tid, t.name, t.status, t.idle) for t in p.threads] == [
        (25829, "MainThread", "idle", True),
        (25871, "watchdog", "idle", True),
    ]
    main = p.threads[0]
    assert main.header == 'Thread 25829 (idle): "MainThread"'
    assert [(f.function, f.file, f.line) for f in main.frames][:4] == [
        ("Condition.wait", "threading.py", 331),
        ("Event.wait", "threading.py", 629),
        ("_wait_for_peers", "torch/distributed/distributed_c10d.py", 8),
        ("all_reduce", "torch/distributed/distributed_c10d.py", 12),
    ]
    assert main.frames[-1].function == "<module>" and not any(f.native for f in main.frames)
    assert p.waiting_in == "collective" and main.waiting_in == "collective"
    # the frame that names the collective, not the helper below it
    assert p.collective_frame == "    all_reduce (torch/distributed/distributed_c10d.py:12)"
    assert p.waiting_thread == main.header
    assert p.threads[1].waiting_in == "other"


def test_result_lines_hold_the_frames_verbatim(replay_host_factory) -> None:  # type: ignore[no-untyped-def]
    host = replay_host_factory(
        minimal_card({"commands": {"py-spy dump --pid 25829": _fx("collective_hang.txt")}})
    )
    r = SPEC.call(host, {"pid": 25829})
    lines = r.lines()
    assert r.ok and r.method == "py-spy" and r.command == "py-spy dump --pid 25829"
    for ln in _fx("collective_hang.txt").splitlines():
        if ln.strip():
            assert ln in lines
    assert 'Thread 25829 (idle): "MainThread"' in lines
    assert "    all_reduce (torch/distributed/distributed_c10d.py:12)" in lines
    assert "# collective frame: all_reduce (torch/distributed/distributed_c10d.py:12)" in lines
    assert r.collective_frame in lines  # what a rule cites occurs in the observation
    data = r.model_dump(mode="json")
    assert data["waiting_in"] == "collective" and data["collective_frame"] == r.collective_frame


def test_real_native_dump_marks_c_frames() -> None:
    p = parse_py_spy(_fx("collective_hang_native.txt"))
    main, dog = p.threads
    assert main.frames[0].native and main.frames[0].file == "libc.so.6"
    assert main.frames[2].function == "PyThread_acquire_lock_timed" and main.frames[2].native
    assert not main.frames[4].native and main.frames[4].function == "Condition.wait"
    assert p.collective_frame == "    all_reduce (torch/distributed/distributed_c10d.py:12)"
    # time.sleep is visible in native frames only
    assert dog.waiting_in == "sleep" and dog.waiting_frame == "    clock_nanosleep (libc.so.6)"


def test_real_cuda_sync_spin_is_active() -> None:
    p = parse_py_spy(_fx("cuda_sync_spin.txt"))
    (t,) = p.threads
    assert t.status == "active+gil" and not t.idle
    assert p.waiting_in == "cuda_sync" and p.collective_frame is None
    assert p.waiting_frame == "    synchronize (torch/cuda/__init__.py:8)"


def test_real_load_weights() -> None:
    p = parse_py_spy(_fx("load_weights.txt"))
    assert p.waiting_in == "load"
    assert p.waiting_frame == "    load_file (safetensors/torch.py:9)"


def test_real_multiline_command_line_is_not_a_frame() -> None:
    p = parse_py_spy(_fx("multiline_cmdline.txt"))
    assert p.process.startswith("Process 25960: ") and p.python.startswith("Python v3.11.7")
    (t,) = p.threads
    assert [f.function for f in t.frames][-1] == "<module>"
    assert t.frames[-1].file == "<string>" and t.frames[-1].line == 4
    assert p.waiting_in == "collective"


def test_parser_never_raises_on_junk() -> None:
    for text in ["", "\n\n", "Thread", "    x (y", "Thread 0x7F3B9C (active)\n    f (a.py:1)\n"]:
        p = parse_py_spy(text)
        assert p.waiting_in in ("unknown", "other")
    p = parse_py_spy("Thread 0x7F3B9C (active)\n    f (a.py:1)\n")
    assert p.threads[0].id == "0x7F3B9C" and p.threads[0].tid is None and p.threads[0].name is None


def _stack(*frames: str, status: str = "idle") -> str:
    body = "\n".join(f"    {f}" for f in frames)
    return f'Process 1: python3 x.py\nPython v3.11.7 (/usr/bin/python3)\n\nThread 1 ({status}): "MainThread"\n{body}\n'


@pytest.mark.parametrize(
    ("frames", "want"),
    [
        # collectives and rendezvous, as torch, vLLM, SGLang and NCCL name them
        (["wrapper (torch/distributed/c10d_logger.py:83)"], "collective"),
        (["barrier (torch/distributed/distributed_c10d.py:4159)"], "collective"),
        (["monitored_barrier (torch/distributed/distributed_c10d.py:4300)"], "collective"),
        (["_store_based_barrier (torch/distributed/distributed_c10d.py:1416)"], "collective"),
        (["init_process_group (torch/distributed/distributed_c10d.py:1177)"], "collective"),
        (["_create_c10d_store (torch/distributed/rendezvous.py:174)"], "collective"),
        (["__init__ (vllm/distributed/device_communicators/pynccl.py:99)"], "collective"),
        (["custom_all_reduce (sglang/srt/distributed/parallel_state.py:480)"], "collective"),
        (["all_reduce (vllm/distributed/parallel_state.py:352)"], "collective"),
        (["ncclCommInitRank (libnccl.so.2)", "f (x.py:1)"], "collective"),
        (["c10d::ProcessGroupNCCL::WorkNCCL::wait (libtorch_cuda.so)"], "collective"),
        (["recv (torch/distributed/distributed_c10d.py:2000)"], "collective"),
        # not collectives: a launcher waiting for workers, numpy's broadcast
        (["_invoke_run (torch/distributed/elastic/agent/server/api.py:835)"], "other"),
        (["broadcast_to (numpy/lib/stride_tricks.py:413)"], "other"),
        # GPU syncs and graph capture
        (["synchronize (torch/cuda/streams.py:224)"], "cuda_sync"),
        (["capture_end (torch/cuda/graphs.py:88)"], "cuda_sync"),
        (["capture (sglang/srt/model_executor/cuda_graph_runner.py:400)"], "cuda_sync"),
        (["cudaStreamSynchronize (libcudart.so.12)", "f (x.py:1)"], "cuda_sync"),
        # compiling
        (["compile_fx (torch/_inductor/compile_fx.py:1520)"], "compile"),
        (["_bench (triton/runtime/autotuner.py:140)"], "compile"),
        (["Popen.wait (subprocess.py:1264)", "build (deep_gemm/jit/compiler.py:150)"], "compile"),
        (
            ["Popen.wait (subprocess.py:1264)", "_jit_compile (torch/utils/cpp_extension.py:1746)"],
            "compile",
        ),
        # loading weights
        (["load (torch/serialization.py:1025)"], "load"),
        (["load_weights (sglang/srt/models/llama.py:500)"], "load"),
        (["hf_hub_download (huggingface_hub/file_download.py:862)"], "load"),
        # idle-ish
        (["select (selectors.py:468)", "_run_once (asyncio/base_events.py:1898)"], "io"),
        (["recv_pyobj (zmq/sugar/socket.py:1026)"], "io"),
        (["Condition.wait (threading.py:331)", "get (queue.py:171)"], "other"),
    ],
)
def test_classification(frames: list[str], want: str) -> None:
    p = parse_py_spy(_stack(*frames))
    assert p.waiting_in == want, p.threads[0].frames
    assert (p.collective_frame is not None) == (want == "collective")


def test_collective_beats_every_other_thread() -> None:
    text = (
        'Thread 1 (active+gil): "MainThread"\n    compile_fx (torch/_inductor/compile_fx.py:1)\n'
        'Thread 2 (idle): "Thread-1"\n    recv_pyobj (zmq/sugar/socket.py:1026)\n'
        'Thread 3 (idle): "Thread-2"\n    broadcast (torch/distributed/distributed_c10d.py:2)\n'
    )
    p = parse_py_spy(text)
    assert p.waiting_in == "collective" and p.waiting_thread == 'Thread 3 (idle): "Thread-2"'
    assert p.collective_frame == "    broadcast (torch/distributed/distributed_c10d.py:2)"


def test_classify_frame_native_io() -> None:
    assert classify_frame(Frame(function="epoll_wait", file="libc.so.6", native=True)) == "io"
    assert classify_frame(Frame(function="f", file="a.py")) is None


# -- replay --------------------------------------------------------------------------------------
def test_replay_answers_native_from_the_recorded_dump(replay_host_factory) -> None:  # type: ignore[no-untyped-def]
    host = replay_host_factory(
        minimal_card({"commands": {"py-spy dump --pid 4242": _fx("collective_hang.txt")}})
    )
    r = SPEC.call(host, {"pid": 4242, "native": True})
    assert r.method == "py-spy" and r.waiting_in == "collective"


def test_replay_without_a_dump_is_unknown_not_missing(replay_host_factory) -> None:  # type: ignore[no-untyped-def]
    r = SPEC.call(replay_host_factory(minimal_card({"commands": {"df -h": "x\n"}})), {"pid": 4242})
    assert not r.ok and r.method == "none" and not r.py_spy_missing and not r.denied
    assert "not recorded in this card" in (r.error or "")
    assert r.waiting_in == "unknown"


def test_replay_card_file_with_a_py_spy_key(tmp_path: Path, replay_host_factory) -> None:  # type: ignore[no-untyped-def]
    card = minimal_card(
        {
            "ps": "USER PID COMMAND\nroot 4242 python3 -m sglang.launch_server\n",
            "commands": {"py-spy dump --pid 4242": _fx("collective_hang.txt")},
        },
        card_id="py-spy-card",
        engine="sglang",
    )
    path = tmp_path / "py-spy-card.yaml"
    path.write_text(yaml.safe_dump(card, sort_keys=False))
    r = SPEC.call(replay_host_factory(path), {"pid": 4242})
    assert r.waiting_in == "collective"
    assert r.collective_frame == "    all_reduce (torch/distributed/distributed_c10d.py:12)"


# -- fallbacks: a host scripted with py-spy's real refusals --------------------------------------
class Scripted:
    """A Host whose answers are given per command prefix (py-spy's real stderr from fixtures)."""

    name = "scripted"

    def __init__(self, answers: dict[str, tuple[int, str, str]]) -> None:
        self.answers = answers
        self.commands: list[str] = []

    def run(self, command: str, timeout: float = 15.0, max_bytes: int = 1_000_000) -> CommandResult:
        self.commands.append(command)
        for prefix, (rc, out, err) in self.answers.items():
            if command.startswith(prefix):
                return CommandResult(host=self.name, command=command, rc=rc, stdout=out, stderr=err)
        return CommandResult(host=self.name, command=command, rc=127, stderr="sh: not found\n")


STATUS = "Name:\tpython3\nUmask:\t0022\nState:\tS (sleeping)\nThreads:\t2\nvoluntary_ctxt_switches:\t16\nnonvoluntary_ctxt_switches:\t11\n"


def test_ptrace_denied_falls_back_to_proc_and_says_how_to_fix() -> None:
    host = Scripted(
        {
            "py-spy dump": (1, "", _fx("permission_denied.stderr")),
            "cat /proc/4242/status": (0, STATUS, ""),
            "cat /proc/4242/wchan": (0, "futex_do_wait", ""),
            "cat /proc/4242/stack": (1, "", "cat: /proc/4242/stack: Permission denied\n"),
        }
    )
    r = SPEC.call(host, {"pid": 4242})
    assert r.ok and r.method == "proc" and r.denied and not r.py_spy_missing
    assert "ptrace is not permitted" in (r.py_spy_error or "")
    assert "Permission Denied" in (r.py_spy_error or "")
    assert r.fix == FIX_DENIED.format(pid=4242)
    for want in ("sudo py-spy dump --pid 4242", "--cap-add SYS_PTRACE", "ptrace_scope=0"):
        assert want in r.fix
    assert (
        r.state == "S (sleeping)" and r.voluntary_ctxt_switches == 16 and r.wchan == "futex_do_wait"
    )
    assert r.waiting_in == "unknown" and r.collective_frame is None
    lines = r.lines()
    assert lines[0].startswith("# Python stacks of pid 4242: UNKNOWN, py-spy was not used:")
    assert "State:\tS (sleeping)" in lines and "futex_do_wait" in lines
    assert any("stack not read" in ln and "root only" in ln for ln in lines)


def test_py_spy_missing_everywhere() -> None:
    host = Scripted(
        {
            "py-spy dump": (127, "", "sh: 1: py-spy: not found\n"),
            "for p in": (127, "", "py-spy: command not found\n"),
            "cat /proc/4242/status": (0, STATUS, ""),
            "cat /proc/4242/wchan": (0, "ep_poll", ""),
            "cat /proc/4242/stack": (
                0,
                "[<0>] ep_poll+0x2a5/0x2e0\n[<0>] do_epoll_wait+0x58/0xe0\n",
                "",
            ),
        }
    )
    r = SPEC.call(host, {"pid": 4242})
    assert r.method == "proc" and r.py_spy_missing and not r.denied
    assert "pip install py-spy" in (r.fix or "")
    assert r.waiting_in == "io" and r.kernel_stack[0] == "[<0>] ep_poll+0x2a5/0x2e0"
    assert any(c.startswith("for p in") for c in host.commands)  # it looked beyond PATH


def test_py_spy_found_beyond_path_is_named() -> None:
    host = Scripted(
        {
            "py-spy dump": (127, "", "sh: 1: py-spy: not found\n"),
            "for p in": (0, _fx("collective_hang.txt"), "pivot: py-spy at /opt/venv/bin/py-spy\n"),
        }
    )
    r = SPEC.call(host, {"pid": 25829})
    assert r.method == "py-spy" and r.command == "/opt/venv/bin/py-spy dump --pid 25829"
    assert r.waiting_in == "collective"


def test_locate_command_quotes_and_only_uses_the_pid() -> None:
    from tools.py_stacks import _locate_command

    cmd = _locate_command(77, ["/a b/py-spy"], native=True)
    assert "'/a b/py-spy'" in cmd and "dump --pid 77 --native" in cmd
    assert "/proc/77/exe" in cmd and "/proc/77/cmdline" in cmd


def test_args_are_typed() -> None:
    with pytest.raises(ValueError):
        SPEC.args.model_validate({"pid": "1; rm -rf /"})
    with pytest.raises(ValueError):
        SPEC.args.model_validate({"pid": 0})
    assert SPEC.args.model_validate({"pid": 5}).native is False


# -- real processes on this machine --------------------------------------------------------------
FAKE_C10D = """\
import threading


def _wait_for_peers(timeout):
    threading.Event().wait(timeout)


def all_reduce(tensor, group=None, async_op=False):
    _wait_for_peers(3600)
    return tensor
"""
HANG = """\
from torch.distributed.distributed_c10d import all_reduce

print("ready", flush=True)
all_reduce([1.0])
"""


@pytest.fixture
def hung(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    pkg = tmp_path / "torch" / "distributed"
    pkg.mkdir(parents=True)
    (tmp_path / "torch" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "distributed_c10d.py").write_text(FAKE_C10D)
    (tmp_path / "hang.py").write_text(HANG)
    proc = subprocess.Popen(
        [sys.executable, "hang.py"], cwd=tmp_path, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL
    )
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    yield proc
    proc.kill()
    proc.wait()


def test_local_host_dumps_a_real_hang(hung: subprocess.Popen[bytes]) -> None:
    assert shutil.which("py-spy") or (Path(sys.executable).parent / "py-spy").exists(), (
        "py-spy is pinned in requirements.lock: run scripts/install.sh"
    )
    r = SPEC.call(LocalHost(), {"pid": hung.pid})
    assert r.method == "py-spy", r.lines()
    assert r.waiting_in == "collective"
    assert r.collective_frame == "    all_reduce (torch/distributed/distributed_c10d.py:9)"
    assert f'Thread {hung.pid} (idle): "MainThread"' in r.lines()


def test_local_host_not_python_names_the_children() -> None:
    proc = subprocess.Popen(["/bin/sh", "-c", "sleep 30 & wait"], stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 5
        while not Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split():
            assert time.monotonic() < deadline
            time.sleep(0.02)
        r = SPEC.call(LocalHost(), {"pid": proc.pid})
        assert r.ok and r.method == "proc" and r.not_python and r.children
        assert f"a child of {proc.pid}" in (r.fix or "")
    finally:
        for kid in Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split():
            os.kill(int(kid), 9)
        proc.kill()
        proc.wait()


def test_local_host_gone_process() -> None:
    proc = subprocess.Popen(["/bin/true"])
    proc.wait()
    r = SPEC.call(LocalHost(), {"pid": proc.pid})
    assert not r.ok and r.alive is False and "not running" in (r.error or "")


# -- wiring ---------------------------------------------------------------------------------------
def test_registered_read_only_and_in_the_check_catalogue() -> None:
    assert TOOLS["py_stacks"] is SPEC and not SPEC.changing
    checks = yaml.safe_load((ROOT / "agent" / "knowledge" / "checks.yaml").read_text())
    (entry,) = [c for c in checks if isinstance(c, dict) and c.get("id") == "stacks"]
    assert entry["tool"] == "py_stacks" and entry["needs"] == "server_pid"
    assert "nccl_failure" in entry["separates"]


def test_py_spy_is_pinned() -> None:
    lock = (ROOT / "requirements.lock").read_text().splitlines()
    assert "py-spy==0.4.3" in lock
    assert '"py-spy==0.4.3",' in (ROOT / "pyproject.toml").read_text()


def test_fixture_is_real_py_spy_text() -> None:
    text = _fx("collective_hang.txt")
    assert text == textwrap.dedent(text)  # starts at column 0 like py-spy prints it
    assert text.splitlines()[3] == 'Thread 25829 (idle): "MainThread"'


def test_a_dump_of_another_pid_is_flagged(replay_host_factory) -> None:  # type: ignore[no-untyped-def]
    # py-spy asked for 777 answers with another process's stacks (a pid seen from outside a
    # container's pid namespace): the dump names pid 25829
    host = replay_host_factory(
        minimal_card({"commands": {"py-spy dump --pid 777": _fx("collective_hang.txt")}})
    )
    r = SPEC.call(host, {"pid": 777})
    assert "# note: these stacks are of pid 25829, not of the pid asked (777)" in r.lines()
