"""log_search: regex with context over real fixtures, bounded windows, clear errors."""

from __future__ import annotations

import os
from pathlib import Path

from tools.cards import IncidentCard
from tools.local_host import LocalHost
from tools.log_search import MAX_SEARCH_BYTES, SPEC, Args, run
from tools.replay_host import ReplayHost

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


def test_big_file_searches_only_the_last_window(tmp_path: Path) -> None:
    log = tmp_path / "big.log"
    with open(log, "wb") as fh:
        fh.write(b"ERROR at the very start\n")
        fh.truncate(64 * 1024 * 1024)
        fh.seek(0, os.SEEK_END)
        fh.write(b"INFO ok\nERROR: Address already in use\nINFO bye\n")
    res = run(LocalHost(), Args(path=str(log), pattern="^ERROR"))
    assert res.truncated and res.searched_bytes == MAX_SEARCH_BYTES
    assert [m.line for m in res.matches] == ["ERROR: Address already in use"]
    assert "the last" in res.lines()[0]


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
