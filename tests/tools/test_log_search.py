"""log_search: regex with context over real fixtures, bounded windows, clear errors."""

from __future__ import annotations

import os
from pathlib import Path

from cards.model import IncidentCard
from cards.replay import ReplayHost
from tools.local_host import LocalHost
from tools.log_search import MAX_SEARCH_BYTES, SPEC, Args, run

LOGS = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "logs"


def test_matches_with_context_and_line_numbers() -> None:
    path = str(LOGS / "nccl-init.fewchan.log")
    res = run(LocalHost(), Args(path=path, pattern=r"NCCL_\w+ set by environment", context=1))
    assert res.ok and res.total_matches >= 1
    raw = (LOGS / "nccl-init.fewchan.log").read_text().splitlines()
    for m in res.matches:
        assert raw[m.line_no - 1] == m.line
        assert m.before == raw[max(0, m.line_no - 2) : m.line_no - 1]
        assert m.after == raw[m.line_no : m.line_no + 1]
    body = [ln for ln in res.lines() if not ln.startswith("# ")]
    assert all(ln in raw for ln in body)  # verbatim, no prefixes


def test_ignore_case_and_max_matches_bound() -> None:
    path = str(LOGS / "nccl-init.default.log")
    loud = run(LocalHost(), Args(path=path, pattern="CHANNEL", ignore_case=True, max_matches=3))
    assert loud.total_matches > 3 and len(loud.matches) == 3
    assert any("first 3 shown" in ln for ln in loud.lines())
    quiet = run(LocalHost(), Args(path=path, pattern="CHANNEL"))
    assert quiet.total_matches == 0


def test_invalid_regex_is_a_clear_error() -> None:
    res = run(LocalHost(), Args(path=str(LOGS / "port-in-use.log"), pattern="Errno (98"))
    assert not res.ok
    assert "invalid regular expression" in (res.error or "")
    assert res.fix


def test_missing_file() -> None:
    res = SPEC.call(LocalHost(), {"path": "/no/such.log", "pattern": "x"})
    assert not res.ok and "/no/such.log" in (res.error or "")


def test_big_file_is_searched_whole_since_the_launch(tmp_path: Path) -> None:
    """Past the 8 MiB window the search goes on by grep on the host, from the last launch."""
    log = tmp_path / "big.log"
    block = b"".join(b"INFO step %d fine\n" % i for i in range(4000))
    with open(log, "wb") as fh:
        fh.write(b"$ python -m sglang.launch_server --port 1\nERROR: from the run before\n")
        fh.write(b"$ python -m sglang.launch_server --port 1\n")
        fh.write(b"ERROR at the start of this run\n")
        while fh.tell() < 24 * 1024 * 1024:
            fh.write(block)
        fh.write(b"INFO ok\nERROR: Address already in use\nINFO bye\n")
    res = run(LocalHost(), Args(path=str(log), pattern="^ERROR"))
    assert res.ok and res.whole_since_launch and res.launch_found and not res.truncated
    assert [m.line for m in res.matches] == [
        "ERROR at the start of this run",
        "ERROR: Address already in use",
    ]
    assert res.searched_from == len(
        b"$ python -m sglang.launch_server --port 1\nERROR: from the run before\n"
    )
    assert res.bytes_searched == res.size - res.searched_from
    assert "since the last launch" in res.lines()[0]


def test_no_launch_marker_means_the_whole_file(tmp_path: Path) -> None:
    log = tmp_path / "big.log"
    with open(log, "wb") as fh:
        fh.write(b"ERROR at the very start\n")
        fh.write(b"INFO filler line\n" * (MAX_SEARCH_BYTES // 8))
        fh.write(b"INFO bye\n")
    res = run(LocalHost(), Args(path=str(log), pattern="^ERROR"))
    assert res.whole_since_launch and not res.launch_found and res.searched_from == 0
    assert [m.line for m in res.matches] == ["ERROR at the very start"]
    assert "no launch marker" in res.lines()[0]


def test_host_that_cannot_grep_says_what_was_not_read(tmp_path: Path) -> None:
    log = tmp_path / "big.log"
    with open(log, "wb") as fh:
        fh.write(b"ERROR at the very start\n" + b"INFO filler line\n" * (MAX_SEARCH_BYTES // 8))
    card = IncidentCard(
        id="t",
        title="t",
        source="test",
        engine="vllm",
        symptom="s",
        host={"files": {"/l.log": log.read_text()}},
    )
    res = run(ReplayHost(card), Args(path="/l.log", pattern="^ERROR"))
    assert res.ok and not res.whole_since_launch and res.truncated
    assert res.matches == [] and res.searched_from > 0
    assert any(ln.startswith("# NOT searched: bytes 0-") for ln in res.lines())


def test_binary_file_is_not_searched(tmp_path: Path) -> None:
    blob = tmp_path / "core.bin"
    blob.write_bytes(os.urandom(100_000))
    res = run(LocalHost(), Args(path=str(blob), pattern="."))
    assert not res.ok and res.binary and res.problem == "binary" and res.matches == []
    assert all(ln.startswith("# ") for ln in res.lines())


def test_directory_names_the_logs_in_it(tmp_path: Path) -> None:
    (tmp_path / "server.log").write_text("x\n")
    res = run(LocalHost(), Args(path=str(tmp_path), pattern="x"))
    assert not res.ok and res.problem == "directory"
    assert "server.log" in (res.error or "") and "--log" in (res.fix or "")


def test_replay_card_file_with_progress_bars() -> None:
    card = IncidentCard(
        id="t",
        title="t",
        source="test",
        engine="vllm",
        symptom="s",
        host={"files": {"/l.log": "\rLoad 1%\rLoad 100%\nValueError: bad --max-model-len\n"}},
    )
    res = run(ReplayHost(card), Args(path="/l.log", pattern="Error", context=1))
    assert res.matches[0].line == "ValueError: bad --max-model-len"
    assert res.matches[0].before == ["Load 100%"]
