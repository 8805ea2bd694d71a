"""The chat loop itself, with its input and output injected: approvals left for later and
decided with /approve, answers that are not y/n asked again, a failed command said, not raised."""

from __future__ import annotations

import io
from collections.abc import Iterator

from agent.chat import Chat
from agent.runner import Runner
from agent.settings import Settings
from tests.agent.conftest import card_path
from tools.cards import load_card
from tools.replay_host import ReplayHost

SEED = "seed-sglang-fewchan-kv-oom"


def _chat(settings: Settings, lines: list[str]) -> tuple[Chat, io.StringIO, list[str]]:
    card = load_card(card_path(SEED))
    out = io.StringIO()
    asked: list[str] = []
    feed: Iterator[str] = iter(lines)

    def read(prompt: str) -> str:
        asked.append(prompt)
        out.write(prompt)
        try:
            return next(feed)
        except StopIteration:
            raise EOFError from None

    runner = Runner(settings)
    host = ReplayHost(card, name=f"replay:{SEED}")
    return Chat(runner, host, f"replay:{card_path(SEED)}", "rulebook", read, out), out, asked


def test_later_then_approve_and_a_bad_answer_is_asked_again(settings: Settings) -> None:
    chat, out, asked = _chat(
        settings,
        [
            "died with Not enough memory",
            "maybe",  # not an answer: asked again
            "later",
            "/approve",  # decides the waiting change (its diff was shown above)
            "/approve",
            "/nonsense",
            "/quit",
        ],
    )
    try:
        chat.run()
    finally:
        chat.runner.close()
    text = out.getvalue()
    assert asked.count("Approve this change? [y/N/later/why] ") == 2
    assert "Answer y, n, later or why." in text
    assert "Left waiting for your approval: /approve or /deny here" in text
    assert "Applied with approval: config_apply /usr/lib/python3.12/sitecustomize.py" in text
    assert "No change is waiting for your approval here." in text
    assert "Unknown command /nonsense" in text
    assert chat.session_id is not None


def test_eof_leaves_the_change_waiting(settings: Settings) -> None:
    chat, out, _ = _chat(settings, ["died with Not enough memory"])
    try:
        chat.run()
        assert chat.session_id is not None
        assert chat.runner.pending(chat.session_id) is not None
        row = chat.runner.memory.get_session(chat.session_id)
        assert row is not None and row.status == "awaiting_approval"
    finally:
        chat.runner.close()
    assert "Root cause: kv_cache_no_room" in out.getvalue()
