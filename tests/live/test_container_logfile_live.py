"""A real Podman container whose server logs to a file on a volume and prints only where
("logging to /logs/server.log"), then exits: the error is in that file, which a stopped
container cannot show from inside. Pivot reads the file the container's log names, through the
container's bind mount, and concludes from it. This FAILS in CI when Podman cannot run, never
skips."""

from __future__ import annotations

from pathlib import Path

from tests import containers
from tests.live.test_container_detect_live import investigate


def test_a_stopped_containers_log_file_on_a_volume_is_read_and_concluded_from(
    tmp_path: Path,
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    logs.chmod(0o777)
    with containers.container("-v", f"{logs}:/logs", mode="logfile", wait_for="exited") as name:
        assert "Not enough memory" in (logs / "server.log").read_text()
        report = investigate(
            tmp_path, "--container", name, "the speech server won't come up since the restart: why?"
        )
        cited = [e["line"] for e in report["evidence"]]
        assert any("Not enough memory" in ln for ln in cited), (report["root_cause"], cited)
        assert report["root_cause"] == "kv_cache_no_room", report["summary"]
