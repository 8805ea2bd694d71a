"""A real Podman container under a restart policy that loads, then cannot bind the port another
server on the machine holds (host networking: its port mapping is discarded), as uvicorn says it
(one ERROR line, then an orderly shutdown). Investigated while it restarts, the current
instance loading again, the answer is the port, not "still starting". This FAILS in CI when
Podman cannot run, never skips."""

from __future__ import annotations

import socket
from pathlib import Path

from tests import containers
from tests.live.test_container_detect_live import investigate


def test_a_restart_loop_on_a_taken_port_is_port_in_use_while_it_loads_again(tmp_path: Path) -> None:
    holder = socket.socket()
    holder.bind(("0.0.0.0", 0))
    holder.listen()
    port = holder.getsockname()[1]
    try:
        with containers.container(
            "--network", "host", "--restart", "on-failure", "-e", f"PIVOT_TEST_PORT={port}",
            mode="bind-loop", wait_for="restarted", timeout=120, as_vllm=True,
        ) as name:  # fmt: skip
            report = investigate(tmp_path, "--container", name, "why does it keep restarting?")
            assert report["root_cause"] == "port_in_use", report["summary"]
            cited = [e["line"] for e in report["evidence"]]
            assert any("address already in use" in ln for ln in cited), cited
            assert report["root_cause"] != "still_starting"
    finally:
        holder.close()
