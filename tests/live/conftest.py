"""Live scenarios: a real OpenSSH sshd on 127.0.0.1, real processes staged on this machine.

These are the tests a card cannot replace (who is the server, on a box with other jobs running).
They run twice: logged in as root, and as an unprivileged SSH user who cannot read other users'
/proc entries. They FAIL, never skip, when sshd cannot start: a skipped live suite proves nothing.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.sshd import TEST_USER, Sshd, SshdUnavailable, start_sshd
from tools.ssh_host import SSHHost

_SERVERS: dict[str, Sshd] = {}


def _sshd(who: str) -> Sshd:
    if who not in _SERVERS:
        if who == "root" and os.geteuid() != 0:
            pytest.fail("the root scenario needs the tests to run as root (they do in CI)")
        try:
            _SERVERS[who] = start_sshd(user="root" if who == "root" else None)
        except SshdUnavailable as exc:
            pytest.fail(f"live tests need a real OpenSSH sshd: {exc}")
        if who == "user" and _SERVERS[who].user == "root":
            pytest.fail(f"could not create the unprivileged SSH user {TEST_USER!r}")
    return _SERVERS[who]


@pytest.fixture(scope="session", autouse=True)
def _stop_sshds() -> Iterator[None]:
    yield
    for s in _SERVERS.values():
        s.stop()
    _SERVERS.clear()


@pytest.fixture(params=["root", "user"])
def live(request: pytest.FixtureRequest) -> Iterator[tuple[SSHHost, Sshd]]:
    """An SSH host to a real sshd, as root and as the unprivileged test user."""
    server = _sshd(request.param)
    host = SSHHost(
        f"live-{request.param}",
        hostname=server.host,
        port=server.port,
        user=server.user,
        key_filename=str(server.client_key),
        known_hosts=str(server.known_hosts),
        ssh_config_path="/dev/null",
        allow_agent=False,
        connect_timeout=5.0,
    )
    yield host, server
    host.close()


@pytest.fixture(params=["root", "user"])
def live_server(request: pytest.FixtureRequest) -> Sshd:
    """The real sshd alone (no SSHHost), as root and as the unprivileged test user: for tests
    that drive the `pivot` CLI, which reaches it through an ssh config alias of its own."""
    return _sshd(request.param)


@pytest.fixture
def live_user_server() -> Sshd:
    """The real sshd logged in as the unprivileged test user only."""
    return _sshd("user")


@pytest.fixture(scope="session")
def bystander_kill() -> str:
    """Once per session, a real kernel OOM kill of an unrelated process (tests/live/staging.py):
    every staged failure after it runs on a box whose kernel log holds another job's kill."""
    from tests.live.staging import oom_kill_a_bystander

    return oom_kill_a_bystander()
