"""Real Podman containers for tests: a small image made on this machine, and staged failures.

No registry is reachable, so the image is a root filesystem tarball built here (Python with its
standard library, a shell, procps and coreutils: what a server image and Pivot's reads need)
and loaded with `podman import`. Its tag carries a hash of the recipe, so it is built once per
recipe and reused across test sessions. A test that needs Podman skips with "podman ..." outside
CI and fails in CI (tests/strict_skips.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

PODMAN = shutil.which("podman")
BINARIES = (
    "sh", "dash", "bash", "ps", "df", "tail", "head", "cat", "grep", "env", "sleep", "dd", "ls",
    "wc", "stat", "find", "timeout", "readlink", "printf", "mv", "rm", "mkdir", "true", "false",
    "sed", "tr", "sort", "uniq", "id", "hostname", "ss",
)  # fmt: skip
#: The stand-in engine: what it does is chosen by its first argument (see ENGINE below).
ENGINE = r"""
import os, sys, time
mode = sys.argv[1] if len(sys.argv) > 1 else "serve"
log = lambda m: print(m, flush=True)
if mode == "logfile":
    # a launcher that sends the server's log to a file on a volume and prints only where
    # (sgl-omni's "logging to ..."): the error is in the file, not in the container's log
    log("[2026-04-14 09:03:11] logging to /logs/server.log")
    with open("/logs/server.log", "w") as fh:
        fh.write("[2026-04-14 09:03:12] server_args=ServerArgs(model_path='/models/tiny', "
                 "mem_fraction_static=0.7, tp_size=1)\n")
        fh.write("[2026-04-14 09:04:06] Load weight end. avail mem=18.31 GB, mem usage=59.82 GB.\n")
        fh.write("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
                 "Current value: mem_fraction_static=0.7\n")
    log("[2026-04-14 09:04:07] stage thinker exited with code 1; shutting down pipeline")
    sys.exit(1)
log("INFO:     Started server process [%d]" % os.getpid())
log("INFO vllm.engine: Initializing an LLM engine (v0.6.3) with config: model='/models/tiny'")
if mode == "shm":
    # what NCCL / the worker's shared-memory broadcast does: a big segment in /dev/shm
    log("INFO worker: allocating 256 MiB shared memory buffer in /dev/shm for NCCL")
    try:
        with open("/dev/shm/nccl-buffer", "wb") as fh:
            for _ in range(256):
                fh.write(b"\0" * (1 << 20))
                fh.flush()
    except OSError as exc:
        log("ERROR nccl: NCCL WARN Error while creating shared memory segment /dev/shm/nccl-buffer "
            "(size 268435456): %s" % exc)
        log("RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)")
        sys.exit(1)
elif mode == "oom":
    log("INFO model_runner: Loading model weights into host memory")
    hog = []
    while True:
        hog.append(bytearray(16 << 20))
        time.sleep(0.01)
elif mode == "wrapped":
    # a gateway's backend wrapping the engine (LocalAI's backend.py, a Triton stub): the engine
    # runs as a `python -c` child no registry knows, and its log lines name it by pid
    child = (
        "import os, time\n"
        "for k in range(1, 4):\n"
        "    print('(EngineCore pid=%d) Loading safetensors checkpoint shards: %d%% Completed | "
        "%d/4 [00:%02d<00:02, 1.0s/it]' % (os.getpid(), 25 * k, k, k), flush=True)\n"
        "time.sleep(3600)  # then quiet: compiling, or stuck; alive either way\n"
    )
    import subprocess
    subprocess.run([sys.executable, "-c", child])
elif mode == "crash":
    log("ValueError: User-specified max_model_len (999999) is greater than the derived "
        "max_model_len (max_position_embeddings=4096 or model_max_length=None in model's "
        "config.json).")
    sys.exit(1)
log("INFO:     Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)")
while True:
    time.sleep(1)
"""


#: `python -m vllm.entrypoints.openai.api_server MODE`: the stand-in engine under the command line
#: of a real vLLM launch (so the engine registry knows its processes, from the host too), mounted
#: into the container at run time (the image stays as built). Its own modes, on top of ENGINE's:
#:   nogpu     - what vLLM prints when CUDA finds no device (no nvidia-smi, no /dev/nvidia*), exit 1
#:   slow-load - a loader printing one shard every 2 s: a log that keeps growing
#:   bind-loop - loads for 8 s, then cannot bind $PIVOT_TEST_PORT (held outside): exit 1
#:   shm-stay  - the engine's /dev/shm failure in a worker, while the API server stays up (as
#:               vLLM's frontend lingers after its engine core dies): the container keeps running
#: Outside a container (no /engine.py) any mode only prints a start line and sleeps: a host launch.
VLLM_SHIM = r"""
import os, runpy, shutil, subprocess, sys, time
mode = sys.argv[1] if len(sys.argv) > 1 else "serve"
log = lambda m: print(m, flush=True)
if not os.path.exists("/engine.py"):
    log("INFO:     Started server process [%d]" % os.getpid())
    while True:
        time.sleep(1)
if mode == "nogpu":
    log("INFO:     Started server process [%d]" % os.getpid())
    log("INFO vllm.engine: Initializing an LLM engine (v0.6.3) with config: model='/models/tiny'")
    smi = shutil.which("nvidia-smi")
    seen = bool(smi) and subprocess.run([smi, "-L"], capture_output=True).returncode == 0
    if not seen and not os.path.exists("/dev/nvidia0"):
        log("RuntimeError: Found no NVIDIA driver on your system. Please check that you have an "
            "NVIDIA GPU and installed a driver from http://www.nvidia.com/Download/index.aspx")
        sys.exit(1)
    mode = "serve"
if mode == "slow-load":
    log("INFO:     Started server process [%d]" % os.getpid())
    for k in range(1, 1000):
        log("Loading safetensors checkpoint shards: %d%% Completed | %d/50 [00:%02d<01:40, 2.0s/it]"
            % (2 * k, k, 2 * k))
        time.sleep(2)
if mode == "bind-loop":
    # loads, then fails to bind the port another server on the machine holds (host networking),
    # as uvicorn says it: one ERROR line, then an orderly shutdown; a restart policy runs it again
    import socket
    port = int(os.environ["PIVOT_TEST_PORT"])
    log("INFO:     Started server process [%d]" % os.getpid())
    log("INFO vllm.engine: Initializing an LLM engine (v0.6.3) with config: model='/models/tiny'")
    for k in range(1, 5):
        log("Loading safetensors checkpoint shards: %d%% Completed | %d/4 [00:%02d<00:06, 2.0s/it]"
            % (25 * k, k, 2 * k))
        time.sleep(2)
    log("INFO:     Application startup complete.")
    try:
        socket.socket().bind(("0.0.0.0", port))
    except OSError as exc:
        log("ERROR:    [Errno %d] error while attempting to bind on address ('0.0.0.0', %d): %s"
            % (exc.errno, port, exc.strerror.lower()))
        log("INFO:     Waiting for application shutdown.")
        log("INFO:     Application shutdown complete.")
        sys.exit(1)
    while True:
        time.sleep(1)
if mode == "shm-stay":
    subprocess.run([sys.executable, "/engine.py", "shm"])
    log("ERROR vllm.engine: Engine core died; the API server keeps running")
    while True:
        time.sleep(1)
sys.argv = ["/engine.py", mode]
runpy.run_path("/engine.py", run_name="__main__")
"""
#: where the shim package is mounted inside the container
SHIM_DIR = "/opt/stand-in"


def shim_tree(root: Path) -> Path:
    """Write the `vllm.entrypoints.openai.api_server` package under ROOT; returns ROOT."""
    pkg = root / "vllm" / "entrypoints" / "openai"
    pkg.mkdir(parents=True, exist_ok=True)
    for d in (root / "vllm", root / "vllm" / "entrypoints", pkg):
        (d / "__init__.py").write_text("")
    (pkg / "api_server.py").write_text(VLLM_SHIM)
    root.chmod(0o755)
    return root


def available() -> str | None:
    """Why Podman cannot run here, or None when it can."""
    if PODMAN is None:
        return "podman is not installed (run scripts/system-deps.sh)"
    res = subprocess.run([PODMAN, "info", "--format", "{{.Host.OCIRuntime.Name}}"],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    if res.returncode != 0:
        return f"podman cannot run here: {res.stderr.strip()[:300]}"
    return None


def need_podman() -> str:
    why = available()
    if why:
        pytest.skip(why)
    assert PODMAN is not None
    return PODMAN


def _libs(paths: list[str]) -> set[str]:
    out: set[str] = set()
    res = subprocess.run(["ldd", *paths], capture_output=True, text=True)
    for ln in res.stdout.splitlines():
        parts = ln.split()
        for p in parts:
            if p.startswith("/") and os.path.exists(p):
                out.add(p)
    return out


def _recipe() -> tuple[str, list[str], Path]:
    python = os.path.realpath(sys.executable)
    stdlib = Path(os.__file__).resolve().parent
    bins = [p for b in BINARIES if (p := shutil.which(b, path="/usr/bin:/bin:/usr/sbin"))]
    key = hashlib.sha256(
        "\n".join([python, str(stdlib), *bins, ENGINE, sys.version]).encode()
    ).hexdigest()[:12]
    return key, [python, *bins], stdlib


def image() -> str:
    """The test image's tag, built (once per recipe) from this machine's own files."""
    podman = need_podman()
    key, bins, stdlib = _recipe()
    tag = f"localhost/pivot-test-engine:{key}"
    if subprocess.run([podman, "image", "exists", tag]).returncode == 0:
        return tag
    with tempfile.TemporaryDirectory(prefix="pivot-rootfs-") as tmp:
        tar_path = Path(tmp) / "rootfs.tar"
        with tarfile.open(tar_path, "w") as tar:
            added: set[str] = set()

            def add(path: str, source: str | None = None) -> None:
                # one entry per path: the layer format refuses duplicates
                if path in added:
                    return
                added.add(path)
                tar.add(source or path, arcname=path.lstrip("/"), recursive=False)

            def add_tree(root: Path) -> None:
                for dirpath, dirnames, filenames in os.walk(root):
                    dirnames[:] = [
                        d for d in dirnames if d not in ("test", "tests", "__pycache__", "idlelib")
                    ]
                    add(dirpath)
                    for f in filenames:
                        add(os.path.join(dirpath, f))

            for p in [*bins, *_libs(bins)]:
                add(p, os.path.realpath(p))
            # the interpreter finds its prefix from its own path: mirror it, stdlib included
            add_tree(stdlib)
            dyn = stdlib / "lib-dynload"
            if dyn.is_dir():
                for so in _libs([str(x) for x in dyn.glob("*.so")]):
                    add(so, os.path.realpath(so))
            for d in ("tmp", "dev/shm", "proc", "sys", "etc", "models", "var/log"):
                info = tarfile.TarInfo(d)
                info.type = tarfile.DIRTYPE
                info.mode = 0o1777 if d == "tmp" else 0o755
                tar.addfile(info)
            for name, text in (
                ("engine.py", ENGINE),
                ("etc/passwd", "root:x:0:0:root:/root:/bin/sh\n"),
                ("etc/group", "root:x:0:\n"),
            ):
                data = text.encode()
                info = tarfile.TarInfo(name)
                info.size, info.mode = len(data), 0o644
                import io

                tar.addfile(info, io.BytesIO(data))
            py = tarfile.TarInfo("usr/local/bin/python3")
            py.type, py.linkname = tarfile.SYMTYPE, bins[0]
            tar.addfile(py)
        res = subprocess.run([podman, "import", str(tar_path), tag], capture_output=True, text=True)
        if res.returncode != 0:
            raise RuntimeError(f"podman import failed: {res.stderr[-2000:]}")
    return tag


def python_in_image() -> str:
    return os.path.realpath(sys.executable)


@contextlib.contextmanager
def container(*run_args: str, mode: str = "serve", wait_for: str | None = None,
              timeout: float = 60, as_vllm: bool = False) -> Iterator[str]:  # fmt: skip
    """Run the stand-in engine in MODE in a fresh container (`podman run -d RUN_ARGS`), yield its
    name once WAIT_FOR holds ("exited", "running", "restarted" or None), remove it after.
    AS_VLLM: under vLLM's command line (VLLM_SHIM, mounted), so its processes are an engine's."""
    podman = need_podman()
    tag = image()
    name = f"pivot-test-{mode}-{uuid.uuid4().hex[:8]}"
    shim = Path(tempfile.mkdtemp(prefix="pivot-shim-")) if as_vllm else None
    cmd = [python_in_image(), "/engine.py", mode]
    if shim is not None:
        shim_tree(shim)
        run_args = (*run_args, "-v", f"{shim}:{SHIM_DIR}:ro", "-e", f"PYTHONPATH={SHIM_DIR}")
        cmd = [python_in_image(), "-m", "vllm.entrypoints.openai.api_server", mode]
    subprocess.run(
        [podman, "run", "-d", "--name", name, *run_args, tag, *cmd],
        check=True,
        capture_output=True,
    )
    try:
        deadline = time.monotonic() + timeout
        while wait_for:
            state = inspect(name)["State"]
            restarts = inspect(name).get("RestartCount", 0)
            if wait_for == "exited" and state["Status"] in ("exited", "stopped"):
                break
            if wait_for == "running" and state["Status"] == "running":
                break
            if wait_for == "restarted" and restarts >= 2:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name} never reached {wait_for}: {state}")
            time.sleep(0.3)
        yield name
    finally:
        subprocess.run([podman, "rm", "-f", "-t", "0", name], capture_output=True)
        if shim is not None:
            shutil.rmtree(shim, ignore_errors=True)


def inspect(name: str) -> dict:  # type: ignore[type-arg]
    assert PODMAN is not None
    res = subprocess.run([PODMAN, "inspect", name], capture_output=True, text=True, check=True)
    return json.loads(res.stdout)[0]  # type: ignore[no-any-return]
