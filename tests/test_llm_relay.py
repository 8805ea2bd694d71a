"""The relay that lets a capable model (a person, another session) answer the LLM brain: an
answer in a shape it cannot send back is refused at the answer, never passed on as an empty
message the brain reads as "no tool call" (which once cost three cards of a measurement)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

RELAY = Path(__file__).resolve().parents[1] / "scripts" / "llm_relay.py"


def _answer(d: Path, rid: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(RELAY), "--dir", str(d), "answer", rid, *args],
        capture_output=True,
        text=True,
    )


@pytest.mark.parametrize(
    "given",
    [
        {"name": "ports", "arguments": {"port": 50051}},
        {"tool_calls": [{"name": "ports", "arguments": {"port": 50051}}]},
        {"tool_calls": [{"type": "function", "function": {"name": "ports", "arguments": '{"port": 50051}'}}]},
    ],
)  # fmt: skip
def test_a_tool_call_in_either_shape_is_sent_as_one_call(tmp_path: Path, given: dict) -> None:
    (tmp_path / "req").mkdir()
    (tmp_path / "resp").mkdir()
    (tmp_path / "req" / "00007.json").write_text("{}")
    r = _answer(tmp_path, "7", json.dumps(given))
    assert r.returncode == 0, r.stderr
    sent = json.loads((tmp_path / "resp" / "00007.json").read_text())
    assert sent == {"name": "ports", "arguments": {"port": 50051}}


@pytest.mark.parametrize("given", [{"tool_calls": []}, {"foo": 1}])
def test_an_answer_with_no_call_and_no_text_is_refused(tmp_path: Path, given: dict) -> None:
    (tmp_path / "req").mkdir()
    (tmp_path / "resp").mkdir()
    (tmp_path / "req" / "00001.json").write_text("{}")
    r = _answer(tmp_path, "00001", json.dumps(given))
    assert r.returncode != 0
    assert not (tmp_path / "resp" / "00001.json").exists()


def test_pages_break_between_lines_so_no_quoted_line_straddles_two() -> None:
    """A model session rejoined lines cut across `--page` boundaries by hand: pages now end at
    line ends; only a line longer than a page is cut, on its own."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("llm_relay", RELAY)
    assert spec and spec.loader
    relay = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(relay)
    lines = [f"line {i} " + "x" * (i % 37) for i in range(400)]
    pages = relay.paginate("\n".join(lines), 500)
    assert len(pages) > 1 and all(len(p) <= 500 for p in pages)
    assert "\n".join(pages).split("\n") == lines  # every line whole, in order, on one page
    long = relay.paginate("a" * 1200, 500)  # control: a line longer than a page is cut
    assert [len(p) for p in long] == [500, 500, 200]


def test_next_piped_into_head_ends_quietly(tmp_path: Path) -> None:
    """`next ... | head` closes the pipe while the page is printed: a model session saw a
    BrokenPipeError traceback and re-read the request to be sure it had not failed."""
    (tmp_path / "req").mkdir()
    (tmp_path / "resp").mkdir()
    body = "\n".join(f"line {i} " + "x" * 200 for i in range(2000))
    req = {"messages": [{"role": "user", "content": body}], "tools": []}
    (tmp_path / "req" / "00001.json").write_text(json.dumps(req))
    cmd = f"{sys.executable} {RELAY} --dir {tmp_path} next --page-chars 400000 | head -1"
    r = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=60)
    assert r.stdout.strip(), r.stderr
    assert "BrokenPipeError" not in r.stderr and "Traceback" not in r.stderr, r.stderr


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ('{"name": "conclude", "arguments": {"label": "healthy"}, "next_step": "x"}', "outside arguments"),
        ('{"name": "conclude", "arguments": {', "not JSON"),
    ],
)  # fmt: skip
def test_a_field_outside_arguments_or_broken_json_is_refused_in_words(
    tmp_path: Path, given: str, says: str
) -> None:
    """A model session put `next_step` beside `arguments` (the brain never saw it), another sent
    half a JSON object (a traceback): both are refused, saying why, and nothing is sent."""
    (tmp_path / "req").mkdir()
    (tmp_path / "resp").mkdir()
    (tmp_path / "req" / "00001.json").write_text("{}")
    r = _answer(tmp_path, "1", given)
    assert r.returncode != 0 and says in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "resp" / "00001.json").exists()


def test_a_request_already_answered_is_not_answered_again(tmp_path: Path) -> None:
    """A session sent its answer to the previous request's id: the relay said "answered" and
    overwrote an answer the agent had already taken. It is refused."""
    (tmp_path / "req").mkdir()
    (tmp_path / "resp").mkdir()
    (tmp_path / "req" / "00001.json").write_text("{}")
    call = json.dumps({"name": "ports", "arguments": {"port": 1}})
    assert _answer(tmp_path, "1", call).returncode == 0
    again = _answer(tmp_path, "1", json.dumps({"name": "ports", "arguments": {"port": 2}}))
    assert again.returncode != 0 and "already answered" in again.stderr
    assert json.loads((tmp_path / "resp" / "00001.json").read_text())["arguments"] == {"port": 1}
