"""Stage failing inference servers for real, beside unrelated jobs, and drive `pivot investigate`.

Used by tests/live/test_verdicts_live.py and bench/live_investigate.py. Everything here is real:
the "server" is a Python process started as the SSH user (`python3 -m sglang.launch_server ...`
from a temporary package tree) writing its own log; the bystanders are a `python3 -m
http.server`, a `bash -c 'sleep 600 # vllm'` and a `cc1plus` stand-in (a Python sleeping under
the compiler's name, its arguments mentioning sglang); and `pivot investigate` is a subprocess of
the real CLI reaching the host through an ssh config alias, over the real test sshd. Every staged
process is ended by its pid at cleanup, never by name.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.sshd import Sshd

ROOT = Path(__file__).resolve().parents[2]
#: The staged servers run under the system interpreter (as on a GPU box), not the test venv.
PY = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
#: The pivot CLI runs from the repository's venv, as an operator's install would.
PIVOT_PY = str(ROOT / ".venv" / "bin" / "python") if (ROOT / ".venv").exists() else sys.executable

#: The fake `python -m sglang.launch_server`: prints the lines of `--script` (a JSON list of
#: steps) as a real server would, then exits, sleeps, or blocks. Steps:
#:   ["out", text]  write text to stdout (flushed)
#:   ["sleep", s]   sleep s seconds
#:   ["bind", port] really bind 0.0.0.0:port; on EADDRINUSE print uvicorn's error and exit 1
#:   ["exit", rc]   exit with rc
#:   ["ranks", n]   start n scheduler children titled sglang::scheduler_TP<r>, dying with us
#:   ["ranks_in_init", n]  like "ranks", each blocked inside a torch.distributed-shaped
#:                  init_process_group (a temp package tree), as ranks whose peer never joins
#:                  NCCL's init are: what py-spy shows of a real init hang
#:   ["titled", t] start one child titled t (sglang::detokenizer), dying with us
#:   ["workers", n] start n untitled children, as a custom launcher's spawned ranks look in ps
#:                  (`python -c from multiprocessing.spawn import spawn_main ...`)
#:   ["resolve", host, port, every_s, n]  resolve host for real n times, every every_s seconds,
#:                  printing c10d's warnings with the resolver's real error for each failure
#:   ["loop", text, every_s, n]  every every_s seconds write text.format(i=, n=, pct=, el=, eta=)
#:                  for i = 1..n (a tqdm bar: pct done, elapsed and remaining as mm:ss)
LAUNCHER = r"""
import json, os, socket, subprocess, sys, time
script = json.loads(os.environ["FAKE_SERVER_SCRIPT"])
# (a rank whose parent died before it read its ppid sees init's: it must not wait on forever)
child = ("import os,time;p=os.getppid();"
         "[time.sleep(0.05) for _ in iter(lambda: p != 1 and os.getppid()==p, False)]")
kids = []
for step in script:
    op = step[0]
    if op == "out":
        sys.stdout.write(step[1]); sys.stdout.flush()
    elif op == "sleep":
        time.sleep(step[1])
    elif op == "ranks":
        kids += [subprocess.Popen(["sglang::scheduler_TP%d" % r, "-c", child],
                                  executable=sys.executable) for r in range(step[1])]
    elif op == "ranks_in_init":
        import tempfile
        tree = tempfile.mkdtemp(prefix="pivot-fake-torch-")
        os.makedirs(os.path.join(tree, "torch", "distributed"))
        for pkg in ("torch", os.path.join("torch", "distributed")):
            open(os.path.join(tree, pkg, "__init__.py"), "w").close()
        with open(os.path.join(tree, "torch", "distributed", "distributed_c10d.py"), "w") as fh:
            fh.write("import os, threading, time\n"
                     "def _wait_for_peers():\n"
                     "    p = os.getppid()\n"
                     "    while p != 1 and os.getppid() == p:\n"
                     "        threading.Event().wait(0.05)\n"
                     "def init_process_group(backend='nccl'):\n"
                     "    _wait_for_peers()\n")
        code = ("import sys; sys.path.insert(0, %r); "
                "from torch.distributed.distributed_c10d import init_process_group; "
                "init_process_group()" % tree)
        kids += [subprocess.Popen(["sglang::scheduler_TP%d" % r, "-c", code],
                                  executable=sys.executable) for r in range(step[1])]
    elif op == "titled":
        kids.append(subprocess.Popen([step[1], "-c", child], executable=sys.executable))
    elif op == "workers":
        spawn = "from multiprocessing.spawn import spawn_main; " + child
        kids += [subprocess.Popen([sys.executable, "-c", spawn, "--multiprocessing-fork"])
                 for r in range(step[1])]
    elif op == "bind":
        s = socket.socket()
        try:
            s.bind(("0.0.0.0", step[1])); s.listen()
        except OSError as exc:
            sys.stdout.write("ERROR:    [Errno %d] error while attempting to bind on address "
                             "('0.0.0.0', %d): %s\n" % (exc.errno, step[1], exc.strerror.lower()))
            sys.stdout.flush()
            sys.exit(1)
    elif op == "loop":
        every, n = step[2], step[3]
        mmss = lambda s: "%02d:%02d" % divmod(int(s), 60)
        for i in range(1, n + 1):
            sys.stdout.write(step[1].format(i=i, n=n, pct=i * 100 // n, el=mmss(i * every),
                                            eta=mmss((n - i) * every)))
            sys.stdout.flush()
            time.sleep(every)
    elif op == "resolve":
        # a rendezvous client: resolve HOST for real each time, and print what c10d prints
        host, port, every = step[1], step[2], step[3]
        for _ in range(step[4]):
            try:
                socket.getaddrinfo(host, port, socket.AF_INET6, socket.SOCK_STREAM)
            except socket.gaierror as exc:
                t = time.strftime("W%m%d %H:%M:%S.000000000")
                sys.stdout.write("[%s socket.cpp:767] [c10d] The IPv6 network addresses of (%s, %d) "
                                 "cannot be retrieved (gai error: %d - %s).\n"
                                 % (t, host, port, exc.errno, exc.strerror))
                sys.stdout.write("[%s socket.cpp:767] [c10d] The client socket has failed to "
                                 "connect to [%s]:%d (errno: 22 - Invalid argument).\n"
                                 % (t, host, port))
                sys.stdout.flush()
            time.sleep(every)
    elif op == "exit":
        sys.exit(step[1])
while True:
    time.sleep(1)
"""

#: Holds a TCP port as a plain Python socket server would (accepts and closes).
#: Forks a grandchild that execs itself under argv[1] as its title, binds argv[2] and prints
#: its pid once listening; the child exits, so the grandchild is re-parented to init.
ORPHAN = r"""
import os, socket, sys, time
r, w = os.pipe()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.close(r)
        os.dup2(w, 3)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)  # the starter's pipes must close when the starter exits
        hold = ("import os,socket,sys;s=socket.socket();"
                "s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);"
                "s.bind(('0.0.0.0',int(sys.argv[1])));s.listen();"
                "os.write(3,b'%d ' % os.getpid());os.close(3)\n"
                "while True: s.accept()[0].close()")
        os.execv(sys.executable, [sys.argv[1], "-c", hold, sys.argv[2]])
    os._exit(0)
os.close(w)
os.wait()
print(os.read(r, 64).decode().strip(), flush=True)
"""


#: Another user's model server: binds its own --port and keeps writing its own log (engine
#: metrics, access lines), as a neighbour's server on a shared box does.
OTHER_SERVER = r"""
import socket, sys, time
port = int(sys.argv[sys.argv.index("--port") + 1])
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", port)); s.listen()
print("INFO 12-02 09:00:00 [api_server.py:1043] vLLM API server version 0.8.5", flush=True)
print("INFO 12-02 09:00:00 [api_server.py:1044] args: Namespace(subparser='serve', "
      "model_tag='/models/Qwen2.5-7B', host='127.0.0.1', port=%d, tensor_parallel_size=1)" % port,
      flush=True)
print("INFO:     Uvicorn running on http://127.0.0.1:%d (Press CTRL+C to quit)" % port, flush=True)
i = 0
while True:
    i += 1
    print("INFO 12-02 09:%02d:%02d [loggers.py:116] Engine 000: Avg prompt throughput: 812.4 "
          "tokens/s, Avg generation throughput: 95.1 tokens/s, Running: 3 reqs, Waiting: 0 reqs"
          % (i // 60 % 60, i % 60), flush=True)
    time.sleep(0.3)
"""
#: A test run printing progress into its output file (a growing file that is not a server log).
TEST_RUNNER = r"""
import time
i = 0
while True:
    i += 1
    print("tests/test_tokenizer.py::test_roundtrip[%d] PASSED  [%3d%%]" % (i, i % 100), flush=True)
    time.sleep(0.3)
"""


#: A compiler at work: `nvcc` (python3 under that name, through a symlink) running a duty cycle
#: of ~10% CPU, so ps sees it running now and then, as a build's compiler is.
SPIN = r"""
import time
while True:
    t = time.monotonic()
    while time.monotonic() - t < 0.01:
        pass
    time.sleep(0.09)
"""
#: A `make -j2` of CUDA kernels whose paths mention sglang, as a user rebuilding sgl-kernel does.
MAKEFILE = """\
NVCC := $(CURDIR)/bin/nvcc
all: batch_prefill_sm90.o fused_moe_sm90.o
%.o:
\t$(NVCC) -c 'import spin' -gencode=arch=compute_90a,code=sm_90a -O3 \\
\t  -I/src/sglang/sgl-kernel/include -c /src/sglang/sgl-kernel/csrc/$*.cu -o $@
"""
#: Another user's training job holding GPU memory (the nvidia-smi stand-in lists its pid).
GPU_JOB_MIB = 20480


def _ppid(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


PORT_HOLDER = r"""
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1])))
s.listen()
print("listening", flush=True)
while True:
    c, _ = s.accept()
    c.close()
"""


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = Path(f"/proc/{entry}/stat").read_text()
                if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(entry))
    return out


def wait_for(cond: Callable[[], object], timeout: float = 10.0, what: str = "staging") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def gone(pid: int) -> bool:
    """The pid no longer exists (or is a zombie nobody reaped yet)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in ("Z", "X")


@dataclass
class Stage:
    """A staged "remote" box for one scenario: files, the server, the bystanders."""

    sshd: Sshd
    root: Path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    #: processes re-parented to init (no Popen of ours to wait on): killed at cleanup
    orphans: list[int] = field(default_factory=list)
    #: start_server also starts a second copy of the same command first (start_duplicate); on
    #: in every verdict test
    duplicate_each_launch: bool = False

    @property
    def user(self) -> str:
        return self.sshd.user

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    def _ids(self) -> tuple[int, int]:
        pw = pwd.getpwnam(self.user)
        return pw.pw_uid, pw.pw_gid

    def chown(self, path: Path) -> None:
        uid, gid = self._ids()
        os.chown(path, uid, gid)

    def file(self, rel: str, data: bytes, mode: int = 0o644) -> Path:
        """A file owned by the SSH user (the operator's own config or log)."""
        p = self.root / rel
        for d in reversed(p.relative_to(self.root).parents[:-1]):
            (self.root / d).mkdir(mode=0o755, exist_ok=True)
            self.chown(self.root / d)
        p.write_bytes(data)
        p.chmod(mode)
        self.chown(p)
        return p

    def env(self, **extra: str) -> dict[str, str]:
        return {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(self.root), "HOME": "/tmp", **extra}

    def start_server(
        self,
        script: list[list[Any]],
        log: Path,
        args: list[str] | None = None,
        *,
        name: str = "server",
        module: str = "sglang.launch_server",
    ) -> subprocess.Popen[bytes]:
        """`python3 -m MODULE ARGS` as the SSH user, stdout+stderr to `log`: SGLang's
        launch_server, or vLLM's `vllm.entrypoints.openai.api_server` (the same fake)."""
        argv = args or ["--model-path", "/models/Llama-3.1-8B-Instruct", "--port", "30000"]
        if self.duplicate_each_launch and name == "server" and "duplicate" not in self.procs:
            self.start_duplicate(argv)
        uid, gid = self._ids()
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as fh:
            proc = subprocess.Popen(
                [PY, "-m", module, *argv],
                cwd=self.root,
                env=self.env(FAKE_SERVER_SCRIPT=json.dumps(script)),
                stdout=fh,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                user=uid,
                group=gid,
            )
        log.chmod(0o644)
        self.chown(log)
        self.procs[name] = proc
        return proc

    def start_port_holder(self, port: int, *, as_user: bool = True) -> subprocess.Popen[bytes]:
        """A plain Python socket server on 0.0.0.0:port (someone's leftover job)."""
        kw: dict[str, Any] = {}
        if as_user:
            uid, gid = self._ids()
            kw = {"user": uid, "group": gid}
        proc = subprocess.Popen(
            [PY, "-c", PORT_HOLDER, str(port)],
            cwd="/tmp",
            env=self.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            **kw,
        )
        self.procs[f"port-holder:{port}"] = proc
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert b"listening" in line, f"port {port} could not be held: {line!r}"
        return proc

    def start_orphan(self, title: str, port: int) -> int:
        """A process titled `title` (sglang::scheduler_TP0) holding 0.0.0.0:port, whose parent
        has exited: re-parented to init, as a scheduler that outlived its launch. Its pid."""
        uid, gid = self._ids()
        starter = subprocess.run(
            [PY, "-c", ORPHAN, title, str(port)],
            cwd="/tmp",
            env=self.env(),
            capture_output=True,
            timeout=20,
            user=uid,
            group=gid,
        )
        pid = int(starter.stdout.split()[0])
        self.orphans.append(pid)
        wait_for(lambda: _ppid(pid) == 1, 10, "the orphan re-parented to init")
        return pid

    def _quiet(self) -> dict[str, Any]:
        """Popen options for a background job that prints nowhere, in its own session."""
        return {
            "stdout": subprocess.DEVNULL,
            "stderr": subprocess.DEVNULL,
            "stdin": subprocess.DEVNULL,
            "cwd": "/tmp",
            "env": self.env(),
            "start_new_session": True,
        }

    def start_bystanders(self) -> None:
        """Unrelated jobs that must never count as the server: an http.server, a sleep whose
        command line says vllm, and a C++ compile whose arguments mention sglang (the test's own
        pytest runs too). The http.server and the sleep run as the SSH user (readable /proc, the
        hardest case for telling jobs apart), the compiler as root."""
        uid, gid = self._ids()
        quiet = self._quiet()
        self.procs["http.server"] = subprocess.Popen(
            [PY, "-m", "http.server", "0", "--bind", "127.0.0.1"], user=uid, group=gid, **quiet
        )
        self.procs["sleep # vllm"] = subprocess.Popen(
            ["bash", "-c", "sleep 600 # vllm"], user=uid, group=gid, **quiet
        )
        # another user's (root's) vLLM server on its own port, with a growing log of its own
        other = self.root / "other"
        other.mkdir(mode=0o755)
        pkg = other / "vllm" / "entrypoints" / "openai"
        pkg.mkdir(parents=True)
        for d in (other / "vllm", other / "vllm" / "entrypoints", pkg):
            (d / "__init__.py").write_text("")
        (pkg / "api_server.py").write_text(OTHER_SERVER)
        port = _free_port()
        with (other / "vllm-neighbour.log").open("ab") as fh:
            self.procs["other user's server"] = subprocess.Popen(
                [PY, "-m", "vllm.entrypoints.openai.api_server", "--model", "/models/Qwen2.5-7B"]
                + ["--port", str(port)],
                **{
                    **quiet,
                    "cwd": str(other),
                    "env": {**self.env(), "PYTHONPATH": str(other)},
                    "stdout": fh,
                    "stderr": subprocess.STDOUT,
                },
            )
        # a test run of the SSH user's, writing a growing output file beside the logs
        runner = self.root / "ci"
        runner.mkdir(mode=0o755)
        self.chown(runner)
        (runner / "run_tests.py").write_text(TEST_RUNNER)
        out = runner / "test-run.out"
        with out.open("ab") as fh:
            self.procs["test runner"] = subprocess.Popen(
                [PY, str(runner / "run_tests.py"), "-x", "tests/"],
                user=uid,
                group=gid,
                **{**quiet, "stdout": fh},
            )
        self.chown(out)
        # a Ray daemon of root's, idle
        self.procs["ray daemon"] = subprocess.Popen(
            [PY, "-c", "import time; time.sleep(3600)"]
            + ["/usr/lib/python3/dist-packages/ray/_private/log_monitor.py"]
            + ["--session-dir=/tmp/ray/session_latest", "--logs-dir=/tmp/ray/session_latest/logs"],
            **quiet,
        )
        self.procs["cc1plus"] = subprocess.Popen(
            ["/usr/lib/gcc/x86_64-linux-gnu/12/cc1plus", "-c", "import time; time.sleep(600)"]
            + ["-quiet", "/src/sglang/srt/layers/sglang.launch_server.cpp", "-o", "/tmp/x.s"],
            executable=PY,
            **quiet,
        )

    def start_more_bystanders(self) -> None:
        """Issue 20's further neighbours, on in every verdict test (`_busy` in
        tests/live/test_verdicts_live.py): the SSH user's own `make -j2` building kernels with
        nvcc (the same user as the launch), and another user's (nobody's) training job holding
        20 GiB of GPU 0 in the nvidia-smi stand-in."""
        uid, gid = self._ids()
        quiet = self._quiet()
        build = self.root / "build"
        (build / "bin").mkdir(parents=True)
        (build / "bin" / "nvcc").symlink_to(PY)
        (build / "spin.py").write_text(SPIN)
        (build / "Makefile").write_text(MAKEFILE)
        for d in (build, build / "bin"):
            self.chown(d)
        self.procs["make -j"] = subprocess.Popen(
            ["nice", "-n", "19", "make", "-j2", "-C", str(build)],
            user=uid,
            group=gid,
            **{**quiet, "env": {**self.env(), "PYTHONPATH": str(build)}},
        )
        job = subprocess.Popen(
            [
                PY,
                "-c",
                "import time; time.sleep(3600)",
                "train_lora.py",
                "--base",
                "/models/Qwen2.5-7B",
            ],
            user="nobody",
            group="nogroup",
            **quiet,
        )
        self.procs["gpu job"] = job
        self.sshd.fake_bin.parent.joinpath("gpu-other-apps").write_text(
            f"{job.pid}, /usr/bin/python3, {GPU_JOB_MIB}\n"
        )

    def start_duplicate(self, args: list[str] | None = None) -> subprocess.Popen[bytes]:
        """A second copy of the launch's own command, started by a supervisor into its own log:
        the same user, argv and model, still loading (a shard bar every second). It is another
        instance of the launch, never the launch itself."""
        sup = self.root / "supervisor"
        sup.mkdir(mode=0o755, exist_ok=True)
        self.chown(sup)
        script = [["out", startup()], ["loop", SHARD_BAR, 1.0, 3600]]
        return self.start_server(script, sup / "server.log", args or SERVER_ARGS, name="duplicate")

    def bystanders_alive(self) -> dict[str, bool]:
        return {n: p.poll() is None for n, p in self.procs.items() if n in BYSTANDERS}

    def tree(self, proc: subprocess.Popen[bytes]) -> list[int]:
        return [proc.pid, *_children(proc.pid)]

    def kill9(self, proc: subprocess.Popen[bytes]) -> None:
        """SIGKILL the server and its children (as the OOM killer or an operator would)."""
        pids = self.tree(proc)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc.wait()
        wait_for(lambda: all(gone(p) for p in pids), 5, "the killed server to disappear")

    def cleanup(self) -> None:
        (self.sshd.fake_bin.parent / "gpu-other-apps").unlink(missing_ok=True)
        for proc in self.procs.values():
            if proc.poll() is None:
                # each was started in a session of its own, its group led by it (alive, so the
                # group id is still ours): the group takes the grandchildren too (make's nvccs)
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                for pid in reversed(self.tree(proc)):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(Exception):
                proc.wait(timeout=5)
            if proc.stdout is not None:
                proc.stdout.close()
        self.procs.clear()
        for pid in self.orphans:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.orphans.clear()
        shutil.rmtree(self.root, ignore_errors=True)


#: The unrelated jobs every staged failure runs beside (Stage.start_bystanders).
BYSTANDERS = (
    "http.server",
    "sleep # vllm",
    "cc1plus",
    "other user's server",
    "test runner",
    "ray daemon",
    "make -j",
    "gpu job",
    "duplicate",
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def oom_kill_a_bystander() -> str:
    """A real kernel OOM kill of an unrelated process: `memhog` in a memory cgroup limited to
    64 MiB allocates until the kernel kills it, so the box's kernel log holds another job's kill
    line, as a busy shared host's does. Returns the kernel's line naming it."""
    base = Path("/sys/fs/cgroup/memory")
    v1 = base.is_dir()
    group = (base if v1 else Path("/sys/fs/cgroup")) / f"pivot-bystander-{os.getpid()}"
    group.mkdir(exist_ok=True)
    (group / ("memory.limit_in_bytes" if v1 else "memory.max")).write_text(str(64 << 20))
    if v1:
        with contextlib.suppress(OSError):
            (group / "memory.memsw.limit_in_bytes").write_text(str(64 << 20))
    tmp = Path(tempfile.mkdtemp(prefix="pivot-memhog-"))
    hog = tmp / "memhog"
    hog.symlink_to(PY)  # the kernel names the victim by the program it ran: memhog
    code = (
        f"import os; open('{group}/cgroup.procs','w').write(str(os.getpid()));"
        "b=[];\nwhile True: b.append(bytearray(8<<20))"
    )
    proc = subprocess.run([str(hog), "-c", code], capture_output=True, timeout=60)
    shutil.rmtree(tmp, ignore_errors=True)
    with contextlib.suppress(OSError):
        group.rmdir()
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, proc.stderr[-300:])
    dmesg = subprocess.run(["dmesg", "-T"], capture_output=True, text=True).stdout
    lines = [ln for ln in dmesg.splitlines() if "(memhog)" in ln and "Killed process" in ln]
    assert lines, "the kernel log does not show the memhog kill"
    return lines[-1]


def new_stage(sshd: Sshd) -> Stage:
    """A fresh tree readable by the SSH user: the fake sglang and vllm packages and a writable
    logs dir."""
    root = Path(tempfile.mkdtemp(prefix="pivot-verdict-"))
    root.chmod(0o755)
    for module in ("sglang.launch_server", "vllm.entrypoints.openai.api_server"):
        *pkgs, leaf = module.split(".")
        d = root
        for part in pkgs:
            d = d / part
            d.mkdir(mode=0o755, exist_ok=True)
            d.chmod(0o755)
            (d / "__init__.py").write_text("")
            (d / "__init__.py").chmod(0o644)
        (d / f"{leaf}.py").write_text(LAUNCHER)
        (d / f"{leaf}.py").chmod(0o644)
    (root / "logs").mkdir(mode=0o755)
    (root / "logs").chmod(0o755)
    stage = Stage(sshd=sshd, root=root)
    stage.chown(root / "logs")
    return stage


def port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def wait_port_free(port: int, timeout: float = 90.0) -> None:
    """The scenarios need the literal port (30000): another run of this suite on the same box
    may hold it for a few seconds; wait for it, then fail naming the holder."""
    deadline = time.monotonic() + timeout
    while not port_free(port):
        if time.monotonic() > deadline:
            ss = subprocess.run(["ss", "-ltnp", f"sport = :{port}"], capture_output=True, text=True)
            raise AssertionError(f"port {port} stayed in use for {timeout:.0f} s: {ss.stdout}")
        time.sleep(0.2)


# -- driving the CLI ------------------------------------------------------------------------------
def pivot_env(home: Path, sshd: Sshd, alias: str, **extra: str) -> dict[str, str]:
    """A HOME whose ~/.ssh/config names the test sshd as `alias`, and a fresh PIVOT_HOME."""
    ssh = home / ".ssh"
    ssh.mkdir(parents=True, exist_ok=True)
    (ssh / "config").write_text(
        f"Host {alias}\n  HostName {sshd.host}\n  Port {sshd.port}\n  User {sshd.user}\n"
        f"  IdentityFile {sshd.client_key}\n  IdentitiesOnly yes\n"
    )
    (ssh / "known_hosts").write_text(sshd.known_hosts.read_text())
    env = {
        **os.environ,
        "HOME": str(home),
        "PIVOT_HOME": str(home / "pivot"),
        "PYTHONPATH": str(ROOT),
        **extra,
    }
    for k in ("SSH_AUTH_SOCK", "PIVOT_SSH_TRUST_ON_FIRST_USE", "PIVOT_LLM_BASE_URL"):
        env.pop(k, None)
    return env


@dataclass
class Verdict:
    report: dict[str, Any]
    wall_s: float
    stderr: str
    returncode: int

    @property
    def text(self) -> str:
        """Everything the operator reads: the JSON report as text."""
        return json.dumps(self.report)


def investigate(
    env: dict[str, str],
    alias: str,
    logs: list[Path],
    symptom: str,
    *extra: str,
    timeout: float = 120,
) -> Verdict:
    """`pivot investigate --host ALIAS --log ... --json SYMPTOM`, timed from start to verdict."""
    argv = [PIVOT_PY, "-m", "agent.cli", "investigate", "--host", alias, "--json"]
    for log in logs:
        argv += ["--log", str(log)]
    argv += [*extra, symptom]
    t0 = time.perf_counter()
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    wall = time.perf_counter() - t0
    if p.returncode != 0 or not p.stdout.strip():
        raise AssertionError(f"pivot investigate failed (rc {p.returncode}): {p.stderr[-3000:]}")
    return Verdict(json.loads(p.stdout), wall, p.stderr, p.returncode)


# -- the scenarios' log lines (what real SGLang / FlashInfer / uvicorn print) --------------------
PORT = 30000
MODEL = "/models/Llama-3.1-8B-Instruct"
SERVER_ARGS = [
    "--model-path",
    MODEL,
    "--host",
    "0.0.0.0",
    "--port",
    str(PORT),
    "--tp-size",
    "1",
]


#: A benign warning real SGLang prints at every start (seen in real logs, e.g. the seed card
#: evals/incidents/seed-sglang-fewchan-kv-oom.yaml); it is not an error of the launch.
IMPORT_WARNING = (
    "[2025-06-01 10:00:05] Ignore import error when loading sglang.srt.models.glm4v_moe: "
    "No module named 'transformers.models.glm4v_moe'"
)


def startup(tp: int = 1, mem: float = 0.88, *, import_warning: bool = True) -> str:
    """SGLang's first lines, up to the weight load."""
    lines = [
        f"[2025-06-01 10:00:00] server_args=ServerArgs(model_path='{MODEL}', "
        f"tokenizer_path='{MODEL}', tokenizer_mode='auto', load_format='auto', "
        f"trust_remote_code=False, dtype='auto', kv_cache_dtype='auto', host='0.0.0.0', "
        f"port={PORT}, mem_fraction_static={mem}, tp_size={tp}, attention_backend='flashinfer')",
    ]
    if import_warning:
        lines.append(IMPORT_WARNING)
    for r in range(tp):
        lines += [
            f"[2025-06-01 10:00:09 TP{r}] Init torch distributed begin.",
            f"[2025-06-01 10:00:10 TP{r}] Init torch distributed ends. mem usage=0.00 GB",
            f"[2025-06-01 10:00:10 TP{r}] Load weight begin. avail mem=139.10 GB",
        ]
    return "".join(ln + "\n" for ln in lines)


SHARD_BAR = (
    "\rLoading safetensors checkpoint shards: {pct:3d}% Completed | {i}/{n} [{el}<{eta},  4.00s/it]"
)
LOADED = (
    "\n[2025-06-01 10:00:14 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, "
    "avail mem=124.05 GB, mem usage=15.05 GB.\n"
)

JIT_TRACEBACK = """\
[2025-06-01 10:00:15 TP0] KV Cache is allocated. #tokens: 873612, K size: 53.32 GB, V size: 53.32 GB
[2025-06-01 10:00:15 TP0] Memory pool end. avail mem=16.87 GB
[2025-06-01 10:00:16 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py", line 2871, in run_scheduler_process
    scheduler = Scheduler(
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py", line 312, in __init__
    self.tp_worker = TpModelWorker(
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor/model_runner.py", line 421, in initialize
    self.init_attention_backend()
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/layers/flashinfer_comm_fusion.py", line 48, in ensure_workspace_initialized
    _flashinfer_comm = flashinfer.comm.trtllm_mnnvl_ar.get_comm_module()
  File "/usr/local/lib/python3.12/dist-packages/flashinfer/jit/comm.py", line 40, in gen_trtllm_mnnvl_comm_module
    nvcc_flags = current_compilation_context.get_nvcc_flags_list(
  File "/usr/local/lib/python3.12/dist-packages/flashinfer/compilation_context.py", line 124, in get_nvcc_flags_list
    raise RuntimeError(
RuntimeError: No supported CUDA architectures found for major versions [9, 10].

[2025-06-01 10:00:16] Received sigquit from a child process. It usually means the child failed.
"""
#: FlashInfer's own wording: flashinfer/compilation_context.py, get_nvcc_flags_list.
JIT_FATAL = "RuntimeError: No supported CUDA architectures found for major versions [9, 10]."

#: uvicorn's bind error as SGLang's HTTP server prints it (the launcher really binds).
BIND_FATAL = (
    f"ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', {PORT}): "
    "address already in use"
)
SERVING = """\
[2025-06-01 10:00:20] INFO:     Started server process [{pid}]
[2025-06-01 10:00:20] INFO:     Waiting for application startup.
[2025-06-01 10:00:20] INFO:     Application startup complete.
"""

OOM_FATAL = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
    "capacity of 139.81 GiB of which 1.23 GiB is free. Including non-PyTorch memory, this "
    "process has 138.56 GiB memory in use. Of the allocated memory 131.20 GiB is allocated by "
    "PyTorch, and 5.87 GiB is reserved by PyTorch but unallocated."
)
OOM_BLOCK = f"""\
[2025-06-01 11:42:07 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py", line 2880, in run_scheduler_process
    scheduler.event_loop_overlap()
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor/model_runner.py", line 1710, in forward_extend
    return self.model.forward(
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/layers/logits_processor.py", line 312, in forward
    logits = torch.matmul(hidden_states, lm_head.weight.T)
{OOM_FATAL}

[2025-06-01 11:42:07] Received sigquit from a child process. It usually means the child failed.
"""
DECODE_NOISE = "".join(
    f"[2025-06-01 11:{i // 60 % 60:02d}:{i % 60:02d} TP0] Decode batch. #running-req: 12, "
    f"#token: {4000 + i}, token usage: 0.41, gen throughput (token/s): 1893.22, #queue-req: 0\n"
    for i in range(4000)
).encode()
DEAD_NOISE = "".join(
    f"[2025-06-01 11:42:{7 + i % 50:02d}] ERROR:    Exception in ASGI application: "
    "RuntimeError: the engine is dead, request rejected (see earlier error)\n"
    for i in range(2000)
).encode()

KV_FATAL = (
    "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
    "Current value: self.server_args.mem_fraction_static=0.55"
)
KV_TRACEBACK = f"""\
[2025-06-01 10:00:15 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py", line 2871, in run_scheduler_process
    scheduler = Scheduler(
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor/model_runner.py", line 318, in initialize
    self.init_memory_pool(
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor/model_runner_kv_cache_mixin.py", line 207, in init_memory_pool
    raise RuntimeError(
{KV_FATAL}

[2025-06-01 10:00:15] Received sigquit from a child process. It usually means the child failed.
"""


def nccl_init(tp: int = 2) -> str:
    """NCCL INFO lines of a two-rank init up to 'Init COMPLETE' (shape of the real H200 capture
    tests/fixtures/h200/nccl-init.default.log, two ranks)."""
    out = []
    for r in range(tp):
        pid = 4100 + r
        out += [
            f"gpu-box:{pid}:{pid} [{r}] NCCL INFO Bootstrap: Using eth0:192.0.2.2<0>",
            f"gpu-box:{pid}:{pid} [{r}] NCCL INFO cudaDriverVersion 13000",
            f"gpu-box:{pid}:{pid} [{r}] NCCL INFO NCCL version 2.28.9+cuda13.0",
            f"gpu-box:{pid}:{pid} [{r}] NCCL INFO Using network Socket",
            f"gpu-box:{pid}:{pid} [{r}] NCCL INFO ncclCommInitRankConfig comm 0x1fd2ff{r}0 rank "
            f"{r} nranks {tp} cudaDev {r} nvmlDev {r} busId {6 + r}0 commId 0xba2feb7eac93dd4c "
            "- Init START",
            f"gpu-box:{pid}:{pid} [{r}] NCCL INFO Channel 00/02 : 0 1",
            f"gpu-box:{pid}:{pid} [{r}] NCCL INFO Connected all rings, use ring PXN 0 GDR 1",
            f"gpu-box:{pid}:{pid} [{r}] NCCL INFO ncclCommInitRankConfig comm 0x1fd2ff{r}0 rank "
            f"{r} nranks {tp} cudaDev {r} nvmlDev {r} busId {6 + r}0 commId 0xba2feb7eac93dd4c "
            "- Init COMPLETE",
        ]
    return "".join(ln + "\n" for ln in out)


#: A stand-in `nvidia-smi` (a FIXTURE, not a GPU): two H200s with the memory of a two-rank
#: launch, GPU 0 pinned at 100% and GPU 1 idle, as a stuck collective looks. The rows follow the
#: real H200 captures in tests/fixtures/h200/ (driver 580.159.04, CC 9.0); pids are filled in.
TWO_GPU_HUNG_FIXTURE = r"""#!/bin/sh
# FIXTURE: fake nvidia-smi for a two-rank collective hang (GPU 0 pinned 100%, GPU 1 at 0%).
case "$*" in
  *--query-gpu=*noheader,nounits*)
    printf '%s\n' \
      '0, NVIDIA H200, 71234, 72537, 143771, 100, 580.159.04, 9.0, 00000000:00:06.0' \
      '1, NVIDIA H200, 71234, 72537, 143771, 0, 580.159.04, 9.0, 00000000:00:07.0' ;;
  *--query-gpu=*)
    printf '%s\n' \
      '0, NVIDIA H200, 71234 MiB, 72537 MiB, 143771 MiB, 100 %' \
      '1, NVIDIA H200, 71234 MiB, 72537 MiB, 143771 MiB, 0 %' ;;
  *--query-compute-apps=*gpu_bus_id*)
    printf '%s\n' 'pid, process_name, used_gpu_memory [MiB], gpu_bus_id' \
      '@PID0@, sglang::scheduler_TP0, 70880 MiB, 00000000:00:06.0' \
      '@PID1@, sglang::scheduler_TP1, 70880 MiB, 00000000:00:07.0' ;;
  *--query-compute-apps=*)
    printf '%s\n' 'pid, process_name, used_gpu_memory [MiB]' \
      '@PID0@, sglang::scheduler_TP0, 70880 MiB' '@PID1@, sglang::scheduler_TP1, 70880 MiB' ;;
  *)
    echo "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help." ; exit 2 ;;
esac
"""


ONE_RANK_GONE_FIXTURE = r"""#!/bin/sh
# FIXTURE: fake nvidia-smi after rank 1 was killed: GPU 0 pinned 100% by rank 0, GPU 1 empty.
case "$*" in
  *--query-gpu=*noheader,nounits*)
    printf '%s\n' \
      '0, NVIDIA H200, 21961, 121196, 143771, 100, 580.159.04, 9.0, 00000000:00:06.0' \
      '1, NVIDIA H200, 292, 142865, 143771, 0, 580.159.04, 9.0, 00000000:00:07.0' ;;
  *--query-gpu=*)
    printf '%s\n' \
      '0, NVIDIA H200, 21961 MiB, 121196 MiB, 143771 MiB, 100 %' \
      '1, NVIDIA H200, 292 MiB, 142865 MiB, 143771 MiB, 0 %' ;;
  *--query-compute-apps=*gpu_bus_id*)
    printf '%s\n' 'pid, process_name, used_gpu_memory [MiB], gpu_bus_id' \
      '@PID0@, /usr/bin/python3, 21400 MiB, 00000000:00:06.0' ;;
  *--query-compute-apps=*)
    printf '%s\n' 'pid, process_name, used_gpu_memory [MiB]' '@PID0@, /usr/bin/python3, 21400 MiB' ;;
  *)
    echo "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help." ; exit 2 ;;
esac
"""


ALL_RANKS_GONE_FIXTURE = r"""#!/bin/sh
# FIXTURE: fake nvidia-smi after both ranks were killed: two empty GPUs, no compute process.
case "$*" in
  *--query-gpu=*noheader,nounits*)
    printf '%s\n' \
      '0, NVIDIA H200, 0, 143157, 143771, 0, 580.159.04, 9.0, 00000000:00:06.0' \
      '1, NVIDIA H200, 0, 143157, 143771, 0, 580.159.04, 9.0, 00000000:00:07.0' ;;
  *--query-gpu=*)
    printf '%s\n' \
      '0, NVIDIA H200, 0 MiB, 143157 MiB, 143771 MiB, 0 %' \
      '1, NVIDIA H200, 0 MiB, 143157 MiB, 143771 MiB, 0 %' ;;
  *--query-compute-apps=*gpu_bus_id*)
    printf '%s\n' 'pid, process_name, used_gpu_memory [MiB], gpu_bus_id' ;;
  *--query-compute-apps=*)
    printf '%s\n' 'pid, process_name, used_gpu_memory [MiB]' ;;
  *)
    echo "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help." ; exit 2 ;;
esac
"""


LEFTOVER_FIXTURE = r"""#!/bin/sh
# FIXTURE: fake nvidia-smi with a leftover scheduler holding 70880 MiB of GPU 0, GPU 1 free.
case "$*" in
  *--query-gpu=*noheader,nounits*)
    printf '%s\n' \
      '0, NVIDIA H200, 71234, 72537, 143771, 0, 580.159.04, 9.0, 00000000:00:06.0' \
      '1, NVIDIA H200, 0, 143771, 143771, 0, 580.159.04, 9.0, 00000000:00:07.0' ;;
  *--query-gpu=*)
    printf '%s\n' \
      '0, NVIDIA H200, 71234 MiB, 72537 MiB, 143771 MiB, 0 %' \
      '1, NVIDIA H200, 0 MiB, 143771 MiB, 143771 MiB, 0 %' ;;
  *--query-compute-apps=*gpu_bus_id*)
    printf '%s\n' 'pid, process_name, used_gpu_memory [MiB], gpu_bus_id' \
      '@PID0@, sglang::scheduler_TP0, 70880 MiB, 00000000:00:06.0' ;;
  *--query-compute-apps=*)
    printf '%s\n' 'pid, process_name, used_gpu_memory [MiB]' \
      '@PID0@, sglang::scheduler_TP0, 70880 MiB' ;;
  *)
    echo "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help." ; exit 2 ;;
esac
"""


#: A stand-in `nvidia-smi` (a FIXTURE, not a GPU): two H200s each holding only a CUDA context,
#: both idle and still, as ranks stuck before their first collective (in NCCL's init) look.
TWO_GPU_IDLE_INIT_FIXTURE = r"""#!/bin/sh
# FIXTURE: fake nvidia-smi for two ranks stuck in NCCL init (contexts only, both GPUs at 0%).
case "$*" in
  *--query-gpu=*noheader,nounits*)
    printf '%s\n' \
      '0, NVIDIA H200, 531, 143240, 143771, 0, 580.159.04, 9.0, 00000000:00:06.0' \
      '1, NVIDIA H200, 531, 143240, 143771, 0, 580.159.04, 9.0, 00000000:00:07.0' ;;
  *--query-gpu=*)
    printf '%s\n' \
      '0, NVIDIA H200, 531 MiB, 143240 MiB, 143771 MiB, 0 %' \
      '1, NVIDIA H200, 531 MiB, 143240 MiB, 143771 MiB, 0 %' ;;
  *--query-compute-apps=*gpu_bus_id*)
    printf '%s\n' 'pid, process_name, used_gpu_memory [MiB], gpu_bus_id' \
      '@PID0@, /usr/bin/python3, 520 MiB, 00000000:00:06.0' \
      '@PID1@, /usr/bin/python3, 520 MiB, 00000000:00:07.0' ;;
  *--query-compute-apps=*)
    printf '%s\n' 'pid, process_name, used_gpu_memory [MiB]' \
      '@PID0@, /usr/bin/python3, 520 MiB' '@PID1@, /usr/bin/python3, 520 MiB' ;;
  *)
    echo "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help." ; exit 2 ;;
esac
"""


def two_gpu_idle_init_fixture(pid0: int, pid1: int) -> str:
    return TWO_GPU_IDLE_INIT_FIXTURE.replace("@PID0@", str(pid0)).replace("@PID1@", str(pid1))


def leftover_fixture(pid0: int) -> str:
    return LEFTOVER_FIXTURE.replace("@PID0@", str(pid0))


def one_rank_gone_fixture(pid0: int) -> str:
    return ONE_RANK_GONE_FIXTURE.replace("@PID0@", str(pid0))


def two_gpu_hung_fixture(pid0: int, pid1: int) -> str:
    return TWO_GPU_HUNG_FIXTURE.replace("@PID0@", str(pid0)).replace("@PID1@", str(pid1))


def write_big_log(path: Path, total: int, oom_before_end: int = 12_000_000) -> None:
    """One launch, decode noise, the OOM traceback `oom_before_end` bytes before the end, then
    engine-dead noise: written fast by repeating blocks."""
    with open(path, "wb") as fh:
        fh.write(startup().encode() + LOADED.lstrip("\n").encode())
        fh.write(SERVING.format(pid=4242).encode())
        block = DECODE_NOISE * 16
        while fh.tell() + len(block) < total - oom_before_end:
            fh.write(block)
        while fh.tell() < total - oom_before_end:
            fh.write(DECODE_NOISE[:4096].rsplit(b"\n", 1)[0] + b"\n")
        fh.write(OOM_BLOCK.encode())
        dead = DEAD_NOISE * 8
        while fh.tell() + len(dead) < total:
            fh.write(dead)
        while fh.tell() < total:
            fh.write(DEAD_NOISE[:2000].rsplit(b"\n", 1)[0] + b"\n")
