"""A server no engine pattern knows, started by the launch script the operator names, seen alive
over a real SSH connection (blind round 39: an in-house `ft serve` was called "gone" while it
downloaded its weights).

The script is a real shell script run by bash; the server is a real process whose command line
is what `ps` shows on a real box (an interpreter in front of the program's path). Pivot reads the
script with `config_read`, asks `processes` for the script's command, and derives the facts the
rules read. Control: once the server is killed, nothing keeps it "alive".
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent import script_cmd
from agent.facts import derive
from agent.observe import run_many
from tests.sshd import Sshd, free_port
from tools.ssh_host import SSHHost

PY = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable

#: the in-house server: a program named `ft` that prints a start-up line and then goes quiet
#: (downloading, as far as its log says nothing)
FT = f"""#!{PY}
import sys, time
print("ft 0.6.2 starting: model=%s" % sys.argv[sys.argv.index("--model") + 1], flush=True)
while True:
    time.sleep(0.5)
"""


@pytest.fixture
def launched() -> Iterator[tuple[Path, Path, subprocess.Popen[bytes]]]:
    root = Path(tempfile.mkdtemp(prefix="pivot-ft-"))
    root.chmod(0o755)
    bin_dir = root / "bin"
    bin_dir.mkdir()
    ft = bin_dir / "ft"
    ft.write_text(FT)
    ft.chmod(0o755)
    log = root / "ft-serve.log"
    script = root / "launch.sh"
    script.write_text(
        "#!/usr/bin/env bash\n"
        "set -euo pipefail\n"
        f"export PATH={bin_dir}:$PATH\n"
        f"exec ft serve --model org/big-model --tp 8 --port {free_port()} \\\n"
        f"  >> {log} 2>&1\n"
    )
    script.chmod(0o755)
    proc = subprocess.Popen(["bash", str(script)], stdin=subprocess.DEVNULL, start_new_session=True)
    end = time.monotonic() + 10
    while not (log.exists() and b"starting" in log.read_bytes()):
        assert time.monotonic() < end, "the staged server did not start"
        time.sleep(0.05)
    try:
        yield script, log, proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        import shutil

        shutil.rmtree(root, ignore_errors=True)


def _facts(host: SSHHost, script: Path, log: Path):  # type: ignore[no-untyped-def]
    first = run_many(
        host,
        [
            ("processes", {"link_gpu": False}),
            ("config_read", {"path": str(script)}),
            ("log_tail", {"path": str(log)}),
        ],
        1,
        0,
    )
    f = derive(first)
    assert f.script_commands, first[1]["lines"]
    # the check the agent offers when no engine process is known: the script's own command
    again = run_many(
        host,
        [("processes", {"link_gpu": False, "pattern": script_cmd.pattern(f.script_commands)})],
        len(first) + 1,
        1,
    )
    return derive(first + again), again[0]


def test_the_scripts_own_command_running_is_the_launch_alive(
    live: tuple[SSHHost, Sshd], launched: tuple[Path, Path, subprocess.Popen[bytes]]
) -> None:
    host, _ = live
    script, log, proc = launched
    facts, ps = _facts(host, script, log)
    assert proc.pid in facts.server_pids, ps["lines"]
    assert facts.server_alive is True

    os.killpg(proc.pid, signal.SIGKILL)  # control: the server is gone
    proc.wait()
    facts, ps = _facts(host, script, log)
    assert proc.pid not in facts.server_pids, ps["lines"]
    assert facts.server_alive is not True, ps["lines"]
