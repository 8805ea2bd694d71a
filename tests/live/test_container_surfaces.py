"""`--container` on every way in: `pivot chat`, `pivot sweep` (a fleet target `alias:container`,
over the real test sshd as root, who owns the containers) and the API (`container` in the body
that starts a session, real HTTP against the app). One real Podman container whose engine fills
a 64 MB /dev/shm is read inside by each, through the same ContainerHost `pivot investigate
--container` uses. These FAIL in CI when Podman cannot run (tests/strict_skips.py), never skip.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.fleet import Health, run_fleet
from agent.settings import Settings
from store.memory.sqlite import Memory
from tests import containers
from tests.server.conftest import start_live, wait_status
from tools.host import Host
from tools.ssh_host import SSHHost

PIVOT = str(Path(sys.executable).parent / "pivot")
SYMPTOM = "the server died at startup"
TERMINAL = ("concluded", "insufficient_evidence", "budget_exhausted", "error")


@pytest.fixture(scope="module")
def shm_container() -> Iterator[str]:
    with containers.container("--shm-size", "64m", mode="shm", wait_for="exited") as name:
        yield name


def _env(tmp_path: Path) -> dict[str, str]:
    env = {**os.environ, "PIVOT_HOME": str(tmp_path / "pivot-home")}
    env.pop("PIVOT_DATABASE_URL", None)
    return env


def test_chat_reads_inside_the_container(tmp_path: Path, shm_container: str) -> None:
    """The real `pivot chat` with the symptom typed on its stdin, then /quit."""
    out = subprocess.run(
        [PIVOT, "chat", "--local", "--container", shm_container, "--brain", "rulebook"],
        input=f"{SYMPTOM}\n/quit\n",
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"Pivot on local/{shm_container}." in out.stdout
    assert "shm_too_small" in out.stdout, out.stdout[-3000:]
    assert "--shm-size 16g" in out.stdout


def test_chat_with_an_unknown_container_says_so(tmp_path: Path) -> None:
    containers.need_podman()
    out = subprocess.run(
        [PIVOT, "chat", "--local", "--container", "no-such-ctr", "--brain", "rulebook"],
        input="/quit\n",
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        timeout=120,
    )
    assert out.returncode == 2 and "no container 'no-such-ctr'" in out.stderr


def test_api_session_with_a_container_reads_inside_it(tmp_path: Path, shm_container: str) -> None:
    srv = start_live(tmp_path / "home", database_url=None)
    try:
        with srv.client() as c:
            r = c.post(
                "/api/sessions",
                json={"host": "local", "symptom": SYMPTOM, "container": shm_container},
            )
            assert r.status_code == 201, r.text
            sid = r.json()["session_id"]
            d = wait_status(c, sid, TERMINAL, timeout=240)
            assert d["status"] == "concluded", d
            assert d["report"]["root_cause"] == "shm_too_small"
            assert "--shm-size 16g" in d["report"]["next_step"]
            assert d["host"] == f"local/{shm_container}"
            assert any(o["tool"] == "container_inspect" for o in d["observations"])
            r = c.post(
                "/api/sessions", json={"host": "local", "symptom": "x", "container": "no-such-ctr"}
            )
            assert r.status_code == 404 and "no container 'no-such-ctr'" in r.text
            r = c.post("/api/sessions", json={"host": "local", "symptom": "x", "container": "a b"})
            assert r.status_code == 422
    finally:
        srv.stop()


def test_sweep_target_alias_colon_container_reads_inside_over_ssh(
    tmp_path: Path, shm_container: str
) -> None:
    from tests.live.conftest import _sshd

    server = _sshd("root")

    def opener(alias: str, connect_timeout: float) -> Host:
        return SSHHost(
            alias,
            hostname=server.host,
            port=server.port,
            user=server.user,
            key_filename=str(server.client_key),
            known_hosts=str(server.known_hosts),
            ssh_config_path="/dev/null",
            allow_agent=False,
            connect_timeout=connect_timeout,
        )

    settings = Settings(home=tmp_path / "home")
    report = run_fleet(
        [f"gpu-a:{shm_container}", "gpu-b"],
        "Fleet health sweep",
        container="no-such-ctr",  # the default for targets naming none: gpu-b
        brain="rulebook",
        deadline_s=120,
        settings=settings,
        open_host=opener,
    )
    inside, missing = report.hosts
    assert inside.host == f"gpu-a/{shm_container}" and inside.health is Health.unhealthy, inside
    assert inside.label == "shm_too_small" and "NCCL" in (inside.line or "")
    assert missing.host == "gpu-b/no-such-ctr" and missing.health is Health.no_answer
    assert "no container 'no-such-ctr'" in (missing.error or "") and "ps -a" in (missing.fix or "")
    mem = Memory(settings.home / "memory.db")
    try:
        assert mem.host_spec(inside.session_id or "") == f"ssh:gpu-a|container={shm_container}"
        hosts = {s.host for s in mem.list_sessions()}
        assert hosts == {"gpu-b/no-such-ctr", f"gpu-a/{shm_container}"}
    finally:
        mem.close()
