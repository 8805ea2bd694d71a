"""Shared fixtures: a real sshd, hosts of every kind, and the fake-GPU PATH.

Others add fixtures below; keep the ones here stable, every area's tests use them.
- `sshd`: a real OpenSSH sshd for the whole session (tests/sshd.py); skips only when sshd
  cannot start here at all.
- `ssh_host`: an `SSHHost` connected to it as the test user (PATH has the fake nvidia-smi).
- `ssh_host_factory(**overrides)`: more SSHHosts to it, e.g. with other keys or known_hosts.
- `local_host`, `fake_gpu_path` (puts the fake nvidia-smi first on this process's PATH).
- `replay_host_factory(card)`: a ReplayHost from a card path, dict or IncidentCard.
- `postgres`: a real PostgreSQL server for the whole session (tests/postgres.py); FAILS, never
  skips, when it cannot start.
- `database`: parametrized over both storage backends: unsets `PIVOT_DATABASE_URL` (SQLite
  under the home) or points it at a fresh PostgreSQL database; returns the URL or None.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from cards.model import IncidentCard, load_card  # noqa: E402
from cards.replay import ReplayHost  # noqa: E402
from tests.postgres import Postgres, PostgresUnavailable, start_postgres  # noqa: E402
from tests.sshd import FAKE_BIN, Sshd, SshdUnavailable, start_sshd  # noqa: E402

# in CI a skip for a missing sshd / Chromium / PostgreSQL / tmux is a failure (tests/strict_skips.py)
from tests.strict_skips import pytest_runtest_makereport  # noqa: E402, F401
from tools.local_host import LocalHost  # noqa: E402
from tools.ssh_host import SSHHost  # noqa: E402


@pytest.fixture(scope="session")
def sshd() -> Iterator[Sshd]:
    try:
        server = start_sshd()
    except SshdUnavailable as exc:
        pytest.skip(f"a real OpenSSH sshd cannot start here: {exc}")
    yield server
    server.stop()


def _ssh_kwargs(server: Sshd, **overrides: Any) -> dict[str, Any]:
    kw: dict[str, Any] = {
        "hostname": server.host,
        "port": server.port,
        "user": server.user,
        "key_filename": str(server.client_key),
        "known_hosts": str(server.known_hosts),
        "ssh_config_path": "/dev/null",
        "allow_agent": False,
        "connect_timeout": 5.0,
    }
    kw.update(overrides)
    return kw


@pytest.fixture
def ssh_host_factory(sshd: Sshd) -> Iterator[Callable[..., SSHHost]]:
    made: list[SSHHost] = []

    def make(alias: str = "test-sshd", server: Sshd | None = None, **overrides: Any) -> SSHHost:
        host = SSHHost(alias, **_ssh_kwargs(server or sshd, **overrides))
        made.append(host)
        return host

    yield make
    for h in made:
        h.close()


@pytest.fixture
def ssh_host(ssh_host_factory: Callable[..., SSHHost]) -> SSHHost:
    return ssh_host_factory()


@pytest.fixture(autouse=True)
def short_patience(monkeypatch: pytest.MonkeyPatch) -> None:
    """The patient watch (tools/launch_progress.py) waits up to 5 minutes on a live host; a test
    of a stalled launch caps it as it caps the liveness window. A test of the watch itself sets
    its own PIVOT_PATIENCE_S."""
    monkeypatch.setenv("PIVOT_PATIENCE_S", "4")


@pytest.fixture
def local_host() -> LocalHost:
    return LocalHost()


@pytest.fixture
def fake_gpu_path(monkeypatch: pytest.MonkeyPatch) -> Path:
    """Put the replaying fake nvidia-smi first on PATH for LocalHost; state idle unless set."""
    import os

    monkeypatch.setenv("PATH", f"{FAKE_BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("PIVOT_FAKE_GPU_STATE", "idle")
    return FAKE_BIN


@pytest.fixture
def replay_host_factory() -> Callable[[str | Path | dict[str, Any] | IncidentCard], ReplayHost]:
    def make(card: str | Path | dict[str, Any] | IncidentCard) -> ReplayHost:
        if isinstance(card, IncidentCard):
            return ReplayHost(card)
        if isinstance(card, dict):
            return ReplayHost(IncidentCard.model_validate(card))
        return ReplayHost(load_card(card))

    return make


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    try:
        server = start_postgres()
    except PostgresUnavailable as exc:
        pytest.fail(f"a real PostgreSQL cannot start here: {exc}")
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str | None:
    """Run the requesting test once per storage backend, through the same env var users set."""
    if request.param == "sqlite":
        monkeypatch.delenv("PIVOT_DATABASE_URL", raising=False)
        return None
    url = request.getfixturevalue("postgres").new_database()
    monkeypatch.setenv("PIVOT_DATABASE_URL", url)
    return url
