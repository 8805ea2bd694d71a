"""launch_progress: the patient watch stops at the first sign of work (log, storage reads, GPU
memory) or at the process's death, on the host's clock (virtual on replay, real on a live host),
and says "nothing moved" only after the whole window."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from cards.model import IncidentCard
from cards.replay import ReplayHost
from tests.cardkit import minimal_card
from tools import launch_progress as L
from tools.local_host import LocalHost

LOG = "/srv/logs/server.log"
PS = (
    "USER         PID %CPU %MEM    VSZ   RSS TTY      STAT START   TIME COMMAND\n"
    "root        4242  5.0  6.0 3701244 9284412 ?     Dl   14:03   0:31 python -m "
    "vllm.entrypoints.openai.api_server --model /data/m --port 8000\n"
)
PS_GONE = PS.splitlines()[0] + "\n"
GPU0 = "0, NVIDIA H200, 15274 MiB, 128497 MiB, 143771 MiB, 0 %\n"
GPU1 = "0, NVIDIA H200, 74107 MiB, 69664 MiB, 143771 MiB, 0 %\n"
IO0 = "rchar: 9108402117\nread_bytes: 9105326080\n"
IO1 = "rchar: 13284118903\nread_bytes: 13281378304\n"
LINE0 = "INFO 12-25 14:03:11 llm_engine.py:73] Initializing an LLM engine\n"
LINE1 = LINE0 + "INFO 12-25 14:17:58 llm_engine.py:223] # GPU blocks: 3581\n"


def _host(
    log_at: float | None = None,
    io_at: float | None = None,
    gpu_at: float | None = None,
    dies_at: float | None = None,
) -> ReplayHost:
    def timed(first: str, later: str, at: float | None) -> list[dict[str, object]]:
        snaps: list[dict[str, object]] = [{"at": 0, "text": first}]
        if at is not None:
            snaps.append({"at": at, "text": later})
        return snaps

    host = {
        "ps": timed(PS, PS_GONE, dies_at),
        "nvidia_smi": timed(GPU0, GPU1, gpu_at),
        "files": {LOG: timed(LINE0, LINE1, log_at)},
        "commands": {"cat /proc/4242/io": timed(IO0, IO1, io_at)},
    }
    return ReplayHost(IncidentCard.model_validate(minimal_card(host)))


ARGS = L.Args(path=LOG, pid=4242, watch_s=300)


@pytest.fixture(autouse=True)
def _full_patience(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIVOT_PATIENCE_S", "300")


def test_storage_reads_that_grow_after_minutes_are_work() -> None:
    r = L.run(_host(io_at=170), ARGS)
    assert r.moved == "io" and r.reading and r.line == "read_bytes: 13281378304", r.lines()
    assert 170 <= r.waited_s < 180  # stopped at the sign, not at the window's end
    assert "read_bytes: 13281378304" in r.lines()


def test_a_log_that_grows_is_seen_first_and_read_again_by_log_tail() -> None:
    r = L.run(_host(log_at=100, io_at=200), ARGS)
    assert r.moved == "log" and r.grew_bytes > 0 and 100 <= r.waited_s < 102
    assert "read the log again" in r.lines()[0]


def test_gpu_memory_that_moves_is_allocation() -> None:
    r = L.run(_host(gpu_at=120), ARGS)
    assert r.moved == "gpu" and r.memory_moved_mib >= 58000 and r.moved_line == GPU1.strip()


def test_a_death_during_the_watch_is_seen_within_seconds_of_it() -> None:
    r = L.run(_host(dies_at=90), ARGS)
    assert r.died and r.moved is None and 90 <= r.waited_s < 92, r.lines()
    assert "GONE" in r.lines()[0]


def test_nothing_moves_only_after_the_whole_window() -> None:
    r = L.run(_host(), ARGS)
    assert r.moved is None and not r.died and r.waited_s >= 300
    assert "NOTHING moved" in r.lines()[0]


def test_the_window_is_capped_by_pivot_patience(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIVOT_PATIENCE_S", "60")
    r = L.run(_host(io_at=170), ARGS)
    assert r.moved is None and 60 <= r.waited_s < 62 and r.window_s == 60
    assert "PIVOT_PATIENCE_S=60" in r.lines()[0]


def test_nothing_readable_is_a_failure_with_a_fix() -> None:
    r = L.run(_host(), L.Args(path="/nope.log", pid=99, gpus=False, watch_s=5))
    assert not r.ok and r.error and r.fix


# -- live: real processes on this machine, the real clock ----------------------------------------


def _spawn(code: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", code])


def test_live_a_log_written_after_a_silence_is_seen_at_once(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("loading\n")
    proc = _spawn(
        f"import time; time.sleep(2.5); open({str(log)!r}, 'a').write('step 2\\n'); time.sleep(60)"
    )
    try:
        t0 = time.monotonic()
        r = L.run(LocalHost(), L.Args(path=str(log), pid=proc.pid, gpus=False, watch_s=60))
        took = time.monotonic() - t0
    finally:
        proc.kill()
        proc.wait()
    assert r.moved == "log" and r.grew_bytes == len("step 2\n"), r.lines()
    assert 2.0 < took < 6  # the growth ended the watch, not its 60 s window


def test_live_a_process_that_dies_is_seen_within_two_seconds(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("loading\n")
    proc = _spawn("import time; time.sleep(1.5)")
    t0 = time.monotonic()
    r = L.run(LocalHost(), L.Args(path=str(log), pid=proc.pid, gpus=False, watch_s=60))
    took = time.monotonic() - t0
    proc.wait()
    assert r.died and r.moved is None, r.lines()
    assert took < 5


def test_live_a_quiet_process_is_watched_the_whole_window(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("loading\n")
    proc = _spawn("import time; time.sleep(60)")
    try:
        r = L.run(LocalHost(), L.Args(path=str(log), pid=proc.pid, gpus=False, watch_s=3))
    finally:
        proc.kill()
        proc.wait()
    assert r.moved is None and not r.died and r.waited_s >= 3
    assert "the process" in r.watched and "the log" in r.watched
