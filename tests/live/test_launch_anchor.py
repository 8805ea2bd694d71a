"""The launch, not the box (issue 20), live over the real test sshd beside unrelated jobs: the
operator's --log may be a file the server no longer writes, and the port is the launch's own.

Each test fails with its change off: without the rotation check the fresh `server.log` (two
probe lines) is all Pivot reads; without the launch's own port the holder named is whatever
process on the box has a `--port` first."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.live import staging as S

# `scene`: the verdict tests' busy box (the staged server beside unrelated jobs), shared
from tests.live.test_verdicts_live import Scene, assert_concluded, scene  # noqa: F401

PROBES = (
    '[2025-06-01 11:43:00] INFO:     127.0.0.1:50312 - "GET /health HTTP/1.1" 503 Service Unavailable\n'
    '[2025-06-01 11:43:05] INFO:     127.0.0.1:50318 - "GET /health HTTP/1.1" 503 Service Unavailable\n'
)


def _rotate(log: Path, scene: Scene) -> None:  # noqa: F811
    """logrotate's copy-less rename: the writer keeps its descriptor on the renamed file."""
    log.rename(log.with_name(log.name + ".1"))
    log.write_text(PROBES)
    log.chmod(0o644)
    scene.stage.chown(log)


@pytest.mark.parametrize("alive", [False, True], ids=["server-dead", "server-alive"])
def test_a_rotated_log_is_followed_to_the_file_the_server_wrote(scene: Scene, alive: bool) -> None:  # noqa: F811
    log = scene.stage.logs / "server.log"
    script = [["out", S.startup()], ["out", S.LOADED.lstrip("\n")], ["sleep", 2.0]]
    script += [["out", S.OOM_BLOCK]]
    if not alive:
        script.append(["exit", 1])
    proc = scene.stage.start_server(script, log, S.SERVER_ARGS)
    time.sleep(0.8)  # the launch is under way, then the log is rotated under it
    _rotate(log, scene)
    S.wait_for(lambda: S.OOM_FATAL.encode() in log.with_name("server.log.1").read_bytes(), 15)
    if not alive:
        assert proc.wait(timeout=15) == 1

    v = scene.investigate([log], "the server died during start-up, why?")

    assert_concluded(v, "cuda_oom_runtime", "gpu_oom_weights")
    cited = [e["line"] for e in v.report["evidence"]]
    assert S.OOM_FATAL in cited, cited
    assert not any("GET /health" in c for c in cited), cited
    if alive:
        assert "server.log.1" in v.report["next_step"], v.report["next_step"]
    scene.assert_bystanders_untouched(v)
