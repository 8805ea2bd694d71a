"""`pivot investigate --host ALIAS` against the real test sshd, resolved through ~/.ssh/config."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.agent.conftest import ROOT
from tests.sshd import Sshd


def _home(tmp_path: Path, sshd: Sshd, known: bool) -> dict[str, str]:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text(
        f"Host gpu-test\n  HostName {sshd.host}\n  Port {sshd.port}\n  User {sshd.user}\n"
        f"  IdentityFile {sshd.client_key}\n  IdentitiesOnly yes\n"
    )
    kh = home / ".ssh" / "known_hosts"
    kh.write_text(sshd.known_hosts.read_text() if known else "")
    env = {
        **os.environ,
        "HOME": str(home),
        "PIVOT_HOME": str(tmp_path / "pivot"),
        "PYTHONPATH": str(ROOT),
    }
    env.pop("SSH_AUTH_SOCK", None)
    env.pop("PIVOT_SSH_TRUST_ON_FIRST_USE", None)
    return env


def _pivot(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent.cli", "investigate", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_unknown_host_key_stops_before_the_sweep_and_names_the_fix(
    tmp_path: Path, sshd: Sshd
) -> None:
    env = _home(tmp_path, sshd, known=False)
    p = _pivot(env, "--host", "gpu-test", "--json", "why?")
    assert p.returncode == 2
    assert "ssh-keyscan" in p.stderr and "gpu-test" in p.stderr
    assert p.stdout == ""


def test_trust_new_host_key_records_it_and_investigates_over_ssh(
    tmp_path: Path, sshd: Sshd
) -> None:
    env = _home(tmp_path, sshd, known=False)
    log = sshd.scratch / "cli-ssh-server.log"
    log.write_text("INFO starting\nOSError: [Errno 98] Address already in use\n")
    p = _pivot(
        env, "--host", "gpu-test", "--trust-new-host-key", "--json", "--log", str(log), "why?"
    )
    assert p.returncode == 0, p.stderr
    report = json.loads(p.stdout)
    assert report["host"] == "gpu-test"
    assert report["root_cause"] == "port_in_use"
    assert (Path(env["HOME"]) / ".ssh" / "known_hosts").read_text().strip()
