"""log_tail on real fixtures, a replayed card, sparse multi-GB files and over a real sshd."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cards.model import load_card
from cards.replay import ReplayHost
from tools.local_host import LocalHost
from tools.log_tail import FIRST_WINDOW, MAX_WINDOW, SPEC, Args, run

ROOT = Path(__file__).resolve().parents[2]
LOGS = ROOT / "tests" / "fixtures" / "logs"
FUSION_LOG = "/data/eagle3/synth_100k/logs/nccl_exp_1b_fewchan_fusion.log"


def card_path(card_id: str) -> Path:
    """Cards live in evals/incidents/ once the eval area lands; the shared seeds until then."""
    for base in (ROOT / "evals" / "incidents",):
        if (base / f"{card_id}.yaml").exists():
            return base / f"{card_id}.yaml"
    pytest.skip(f"card {card_id} not found")


def test_cr_progress_fixture_collapses_to_final_state() -> None:
    res = run(LocalHost(), Args(path=str(LOGS / "loading-progress.cr.log")))
    assert res.ok
    assert res.tail == [
        "Loading safetensors checkpoint shards: 100% Completed | 64/64 [00:50<00:50,  1.2it/s]"
    ]
    assert res.progress_collapsed == 20
    assert res.size == (LOGS / "loading-progress.cr.log").stat().st_size


@pytest.mark.parametrize("name", ["cuda-oom.stale-process.log", "cuda-oom.too-big.log"])
def test_oom_lines_kept_verbatim(name: str) -> None:
    raw = (LOGS / name).read_text()
    res = run(LocalHost(), Args(path=str(LOGS / name)))
    assert res.tail == raw.splitlines()
    assert any("torch.OutOfMemoryError: CUDA out of memory." in ln for ln in res.tail)
    # the lines the agent sees carry no prefixes: metadata is on '# ' lines only
    body = [ln for ln in res.lines() if not ln.startswith("# ")]
    assert body == raw.splitlines()


def test_seed_fusion_card_shows_the_jit_error_hidden_past_progress_bars() -> None:
    host = ReplayHost(load_card(card_path("seed-sglang-fusion-sm120-jit")))
    res = SPEC.call(host, {"path": FUSION_LOG})
    assert res.ok
    assert (
        "RuntimeError: No supported CUDA architectures found for major versions [9, 10]."
        in res.tail
    )
    progress = [ln for ln in res.tail if "checkpoint shards" in ln]
    assert progress == [
        "Loading safetensors checkpoint shards: 100% Completed | 64/64 [10:40<08:00,  7.5s/it]"
    ]
    assert res.progress_collapsed == 100
    assert all("\r" not in ln for ln in res.tail)


def test_error_right_after_progress_is_not_lost(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_bytes(
        b"\rLoading 99%\rLoading 100%\nRuntimeError: CUDA error: out of memory\n"
        b"\rCapturing 10%\rCapturing 50%Traceback (most recent call last):\n"
        b"\rLoad 5%\r[TP1] NCCL error: unhandled system error\rLoad 6%\n"
    )
    res = run(LocalHost(), Args(path=str(log)))
    assert res.tail == [
        "Loading 100%",
        "RuntimeError: CUDA error: out of memory",
        "Capturing 50%Traceback (most recent call last):",
        "[TP1] NCCL error: unhandled system error",
        "Load 6%",
    ]


def test_ansi_and_non_utf8_are_cleaned(tmp_path: Path) -> None:
    log = tmp_path / "colour.log"
    log.write_bytes(b"\x1b[31mERROR\x1b[0m bad byte \xff here\n\x1b]0;title\x07\x1b[2Kdone\n")
    res = run(LocalHost(), Args(path=str(log)))
    assert res.tail == ["ERROR bad byte \ufffd here", "done"]


def test_tail_of_sparse_5gb_file_reads_only_its_end(tmp_path: Path) -> None:
    log = tmp_path / "huge.log"
    with open(log, "wb") as fh:
        fh.truncate(5 * 1024**3)
        fh.seek(0, os.SEEK_END)
        fh.write(b"".join(f"[INFO] step {i} ok\n".encode() for i in range(5000)))
    res = run(LocalHost(), Args(path=str(log), lines=200))
    assert res.tail[-1] == "[INFO] step 4999 ok"
    assert res.tail[0] == "[INFO] step 4800 ok"
    assert len(res.tail) == 200
    assert res.bytes_read == FIRST_WINDOW  # one window was enough
    assert res.truncated and not res.cut
    assert res.size > 5 * 1024**3


def test_window_grows_and_stops_at_its_cap(tmp_path: Path) -> None:
    log = tmp_path / "long-lines.log"
    line = b"x" * 20_000 + b"\n"  # 200 lines need ~4 MB: more than the cap
    log.write_bytes(line * 300)
    res = run(LocalHost(), Args(path=str(log), lines=200))
    assert res.bytes_read <= FIRST_WINDOW + 4 * FIRST_WINDOW + MAX_WINDOW
    assert res.window == MAX_WINDOW
    assert res.cut and 0 < len(res.tail) < 200
    assert any("read cap reached" in ln for ln in res.lines())


def test_partial_first_line_with_progress_keeps_its_whole_segments(tmp_path: Path) -> None:
    log = tmp_path / "bar.log"
    updates = b"".join(b"\rDownloading shard: %d%%" % (i % 100) for i in range(60_000))
    log.write_bytes(updates + b"\nOSError: [Errno 28] No space left on device\n")
    res = run(LocalHost(), Args(path=str(log)))
    assert res.tail[-1] == "OSError: [Errno 28] No space left on device"
    assert res.tail[0].startswith("Downloading shard: ")
    assert len(res.tail) == 2


def test_missing_file_is_a_result_naming_host_and_path() -> None:
    res = run(LocalHost(), Args(path="/nonexistent/server.log"))
    assert not res.ok
    assert "/nonexistent/server.log" in (res.error or "") and "localhost" in (res.error or "")
    assert res.fix
    assert res.lines()[0].startswith("# error:")


def test_growing_log_reports_growing_size() -> None:
    host = ReplayHost(load_card(card_path("h200-still-loading")))
    path = next(p for p in host.file_paths() if p.endswith(".log"))
    first = SPEC.call(host, {"path": path})
    second = SPEC.call(host, {"path": path})
    assert first.ok and second.ok
    assert second.size > first.size


def test_over_real_ssh(ssh_host) -> None:  # type: ignore[no-untyped-def]
    tmp = ssh_host.run("mktemp -d")
    assert tmp.ok, tmp.error
    path = tmp.stdout.strip() + "/ssh.log"
    data = (LOGS / "loading-progress.cr.log").read_bytes() + b"\nRuntimeError: boom\n"
    assert ssh_host.write_file(path, data).ok
    try:
        res = run(ssh_host, Args(path=path))
    finally:
        ssh_host.run(f"rm -rf -- {tmp.stdout.strip()}")
    assert res.ok, res.error
    assert res.tail[-1] == "RuntimeError: boom"
    assert res.tail[0].startswith("Loading safetensors checkpoint shards: 100%")


# -- liveness window, progress, bad input -------------------------------------------------------
def _card(files: dict) -> "ReplayHost":  # noqa: UP037
    from cards.model import IncidentCard

    return ReplayHost(
        IncidentCard(
            id="t", title="t", source="test", engine="sglang", symptom="s", host={"files": files}
        )
    )


def test_progress_bar_parsed_with_rate_and_eta() -> None:
    from tools.log_window import parse_progress

    p = parse_progress(
        "Loading safetensors checkpoint shards:   2% Completed | 3/200 [00:12<13:00,  4.00s/it]"
    )
    assert p and (p.done, p.total, p.s_per_item, p.eta_s) == (3, 200, 4.0, 788.0)
    assert p.describe().endswith("shard 3/200 at 4.0 s each: about 13 minutes left")
    fast = parse_progress("Capturing batches (bs=8): 45%|####  | 23/52 [00:05<00:06,  4.00it/s]")
    assert fast and fast.s_per_item == 0.25 and fast.eta_s == pytest.approx(7.25)
    assert parse_progress("INFO Loading weights took 3.2 s") is None
    assert parse_progress("Capture cuda graph begin. This can take up to several minutes.")


def test_replayed_window_waits_on_the_virtual_clock() -> None:
    import time

    host = _card({"/l.log": "INFO up\nLoading checkpoint shards: 3/200 [00:12<13:00, 4.00s/it]\n"})
    t = time.monotonic()
    res = SPEC.call(host, {"path": "/l.log", "watch_s": 6})
    assert time.monotonic() - t < 2  # an eval never sleeps
    assert res.grew is False and res.window_s == 7.0 and host.clock() >= 7.0


def test_replayed_snapshots_grow_within_the_window() -> None:
    host = _card({"/l.log": ["INFO a\n", "INFO a\nINFO b\n"]})
    first = SPEC.call(host, {"path": "/l.log"})
    res = SPEC.call(host, {"path": "/l.log", "watch_s": 6})
    assert first.size < res.size and res.grew is True and res.tail[-1] == "INFO b"


def test_user_limit_caps_the_window(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIVOT_LIVENESS_MAX_S", "3")
    host = _card({"/l.log": "Compiling the model graph\n"})
    res = SPEC.call(host, {"path": "/l.log", "watch_s": 1})
    assert res.window_s == 3.0 and res.waited_s >= 3.0


def test_missing_and_directory_paths_are_named_with_the_fix(tmp_path: Path) -> None:
    miss = run(LocalHost(), Args(path=str(tmp_path / "no.log")))
    assert not miss.ok and miss.problem == "missing" and str(tmp_path / "no.log") in miss.error
    (tmp_path / "a.log").write_text("x\n")
    d = run(LocalHost(), Args(path=str(tmp_path)))
    assert d.problem == "directory" and "a.log" in d.error and "--log" in d.fix


def test_binary_log_is_flagged_and_never_shown(tmp_path: Path) -> None:
    blob = tmp_path / "model.safetensors"
    blob.write_bytes(b"\x00\x01\x02garbage\x00" * 5000)
    res = run(LocalHost(), Args(path=str(blob)))
    assert not res.ok and res.binary and res.tail == []
    assert all(ln.startswith("# ") for ln in res.lines())
    text = tmp_path / "hostile.log"
    text.write_bytes(b"INFO ok\x00\x00\x00 NUL tail\n" + b"INFO line\n" * 50)
    assert run(LocalHost(), Args(path=str(text))).ok  # a few NULs are still text


@pytest.mark.parametrize(
    ("head", "want"),
    [
        (
            b"52 alice 1796214400 1796214461 2026-12-01 23:30:01.123456789 +0000",
            (52, "alice", "2026-12-01 23:30:01", "2026-12-01 23:29:00"),
        ),
        (  # no birth kept (0): unknown, not the epoch
            b"52 alice 0 1796214461 2026-12-01 23:30:01.1 +0000",
            (52, "alice", "2026-12-01 23:30:01", None),
        ),
        # an older stat's form without the epoch times still reads
        (
            b"52 alice 2026-12-01 23:30:01.123456789 +0000",
            (52, "alice", "2026-12-01 23:30:01", None),
        ),
        (b"7 UNKNOWN 2026-12-01 23:30:01.1 +0000", (7, None, "2026-12-01 23:30:01", None)),
        (b"stat: cannot stat 'x'", None),
    ],
)
def test_the_stat_head_gives_size_owner_and_time(head: bytes, want: object) -> None:
    from tools.host import parse_stat_head

    assert parse_stat_head(head) == want


def test_a_read_says_when_the_log_was_born(tmp_path: Path) -> None:
    """Birth as the same wall clock as the last write: never after it, on this filesystem known."""
    log = tmp_path / "server.log"
    log.write_text("INFO start\n")
    res = run(LocalHost(), Args(path=str(log)))
    assert res.born is not None and res.modified is not None and res.born <= res.modified


def test_a_local_read_names_the_logs_owner(tmp_path: Path) -> None:
    import pwd

    log = tmp_path / "server.log"
    log.write_text("INFO start\n")
    res = run(LocalHost(), Args(path=str(log)))
    assert res.owner == pwd.getpwuid(os.getuid()).pw_name
    assert f"owner {res.owner}" in res.lines()[0]
