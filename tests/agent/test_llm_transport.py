"""Any OpenAI-compatible server, over real HTTP: one that rejects tool_choice="required", one that
ignores tools and writes its call as JSON in the content, a normal one; and record/replay that
survives a prompt change (by the turn's place in its card's sequence when the hash misses)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agent.brains import llm as llm_mod
from agent.brains.llm import TALLY_ENV, parse_content_call, sequence_id
from agent.cli import full_app
from agent.runner import investigate
from agent.settings import Settings
from cards.model import load_card
from cards.replay import ReplayHost, replay_name
from tests.agent.conftest import card_path
from tests.agent.test_llm_brain import SEED, _conclude_from_board, _llm_settings
from tests.scripted_llm import http_error, serve, text, tool_call

app = full_app()

OFFERED = {"dmesg", "log_tail", "conclude", "insufficient_evidence"}


def _competent(body: dict[str, Any], n: int) -> dict[str, Any]:
    """First a check, then the conclusion the board supports (as a tool call)."""
    return tool_call("dmesg", {}) if n == 1 else _conclude_from_board(body)


def _as_content(msg: dict[str, Any], style: str) -> dict[str, Any]:
    fn = msg["tool_calls"][0]["function"]
    call = json.dumps({"name": fn["name"], "arguments": json.loads(fn["arguments"])})
    if style == "fenced":
        return text(f"Looking at the log, the next step is clear.\n```json\n{call}\n```\n")
    if style == "prose":
        return text(f"I will call {fn['name']} now: {call} (that settles it).")
    return text(call)


def _run(settings: Settings, url: str):  # type: ignore[no-untyped-def]
    card = load_card(card_path(SEED))
    return investigate(
        ReplayHost(card), card.symptom, brain="llm", settings=_llm_settings(settings, url)
    )


def test_a_normal_server_gets_required_tool_calls(settings: Settings) -> None:
    n = [0]

    def script(body: dict[str, Any]) -> dict[str, Any]:
        n[0] += 1
        return _competent(body, n[0])

    with serve(script) as (url, requests):
        r = _run(settings, url)
    assert r.status == "concluded" and r.root_cause == "kv_cache_no_room"
    assert [q["tool_choice"] for q in requests] == ["required"] * len(requests)


@pytest.mark.parametrize("status", [500, 400])
def test_a_server_rejecting_required_falls_back_to_auto_once(
    settings: Settings, status: int
) -> None:
    n = [0]

    def script(body: dict[str, Any]) -> dict[str, Any]:
        if body.get("tool_choice") == "required":  # llama-cpp-python's server
            return http_error(status, "tool_choice 'required' is not supported")
        n[0] += 1
        return _competent(body, n[0])

    with serve(script) as (url, requests):
        r = _run(settings, url)
    assert r.status == "concluded" and r.root_cause == "kv_cache_no_room"
    choices = [q["tool_choice"] for q in requests]
    first_auto = choices.index("auto")
    # "required" only before the first answer (the SDK retries a 500 once); never after
    assert set(choices[:first_auto]) == {"required"} and 1 <= first_auto <= 2
    assert set(choices[first_auto:]) == {"auto"} and len(choices) - first_auto >= 2


@pytest.mark.parametrize("style", ["fenced", "prose", "bare"])
def test_a_server_ignoring_tools_answers_json_in_content(settings: Settings, style: str) -> None:
    n = [0]

    def script(body: dict[str, Any]) -> dict[str, Any]:
        n[0] += 1
        return _as_content(_competent(body, n[0]), style)

    with serve(script) as (url, requests):
        r = _run(settings, url)
    assert r.status == "concluded" and r.root_cause == "kv_cache_no_room"
    assert r.tool_calls > 0 and len(requests) == 2  # the dmesg check, then the conclusion


def test_content_without_a_call_is_refused_and_retried(settings: Settings) -> None:
    n = [0]

    def script(body: dict[str, Any]) -> dict[str, Any]:
        n[0] += 1
        if n[0] == 1:
            return text("I think it is NCCL, but I am not sure {maybe}.")
        return _competent(body, n[0])

    with serve(script) as (url, requests):
        r = _run(settings, url)
    assert r.status == "concluded"
    retry = requests[1]["messages"]
    assert retry[-1]["role"] == "user" and "REFUSED: no tool call" in retry[-1]["content"]


def test_parse_content_call_shapes() -> None:
    args = {"label": "nccl_failure", "evidence": [{"observation": "o3", "line": "x {y}"}]}
    call = json.dumps({"name": "conclude", "arguments": args})
    assert parse_content_call(call, OFFERED) == ("conclude", args, "")
    got = parse_content_call(f"Sure.\n```json\n{call}\n```\nDone.", OFFERED)
    assert got is not None and got[:2] == ("conclude", args) and got[2] == "Sure. Done."
    # arguments as a JSON string, "parameters", OpenAI's own nesting
    s = json.dumps({"name": "dmesg", "arguments": "{}"})
    assert parse_content_call(s, OFFERED) == ("dmesg", {}, "")
    s = json.dumps({"name": "log_tail", "parameters": {"path": "/x.log"}})
    assert parse_content_call(s, OFFERED) == ("log_tail", {"path": "/x.log"}, "")
    s = json.dumps({"type": "function", "function": {"name": "dmesg", "arguments": "{}"}})
    assert parse_content_call(s, OFFERED)[:2] == ("dmesg", {})  # type: ignore[index]
    # an offered tool wins over a quoted fake call before it; no object, no call
    fake = json.dumps({"name": "run_shell", "arguments": {"cmd": "reboot"}})
    got = parse_content_call(f"the log says {fake}; so: {json.dumps({'name': 'dmesg'})}", OFFERED)
    assert got is not None and got[0] == "dmesg"
    assert parse_content_call("no call {here} at all", OFFERED) is None
    assert parse_content_call('{"label": "x"}', OFFERED) is None


# -- record / replay robust to drift -----------------------------------------------------------------
def _tally(path: Path) -> dict[str, int]:
    words = path.read_text().split() if path.exists() else []
    return {w: words.count(w) for w in set(words)}


def test_replay_falls_back_to_the_sequence_when_the_prompt_drifted(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rec = tmp_path / "rec"
    tally = tmp_path / "tally"
    monkeypatch.setenv(TALLY_ENV, str(tally))
    n = [0]

    def script(body: dict[str, Any]) -> dict[str, Any]:
        n[0] += 1
        return _competent(body, n[0])

    card = load_card(card_path(SEED))
    with serve(script) as (url, requests):
        s = _llm_settings(settings, url).model_copy(update={"llm_record_dir": rec})
        recorded = investigate(ReplayHost(card), card.symptom, brain="llm", settings=s)
    assert recorded.status == "concluded"
    turns = sorted((rec / replay_name(card.id)).glob("turn-*.json"))
    assert [p.name for p in turns] == ["turn-001.json", "turn-002.json"]
    assert len(list(rec.glob("*.json"))) == 2  # the hash files, as before
    assert json.loads(turns[0].read_text())["hash"] + ".json" in {p.name for p in rec.iterdir()}
    assert _tally(tally) == {"recorded": 2}

    def replay(home: str) -> Any:
        s = Settings(home=tmp_path / home, llm_replay_dir=rec, llm_model="scripted")
        return investigate(ReplayHost(card), card.symptom, brain="llm", settings=s)

    tally.unlink()
    same = replay("h1")
    assert _tally(tally) == {"hash": 2}
    assert (same.status, same.root_cause, same.evidence) == (
        recorded.status,
        recorded.root_cause,
        recorded.evidence,
    )

    # the prompt changes (a new rule in the system prompt): every hash misses, the sequence holds
    real_render = llm_mod.render
    monkeypatch.setattr(
        llm_mod, "render", lambda name, **kw: real_render(name, **kw) + "\n- A new rule."
    )
    tally.unlink()
    drifted = replay("h2")
    assert _tally(tally) == {"sequence": 2}
    assert (drifted.status, drifted.root_cause) == (recorded.status, recorded.root_cause)

    # nothing recorded for this card at all: an honest insufficient naming the missing turn
    tally.unlink()
    other = tmp_path / "other"
    other.mkdir()
    s = Settings(home=tmp_path / "h3", llm_replay_dir=other, llm_model="scripted")
    r = investigate(ReplayHost(card), card.symptom, brain="llm", settings=s)
    assert r.status == "insufficient_evidence" and "no recorded model turn" in (r.summary or "")
    assert f"{replay_name(card.id)}/turn-001.json" in (r.summary or "")
    assert _tally(tally) == {"missing": 1}


def test_sequence_ids_are_the_replayed_hosts_opaque_names() -> None:
    name = replay_name("seed-sglang-fewchan-kv-oom")
    assert sequence_id(name, "abc") == name and "sglang" not in name
    assert sequence_id("replay:seed-sglang-fewchan-kv-oom", "abc") == "seed-sglang-fewchan-kv-oom"
    assert sequence_id("gpu-box-3", "0123abcd") == "gpu-box-3-0123abcd"
    assert sequence_id("user@10.0.0.1:22", "s1") == "user_10.0.0.1_22-s1"
    assert "/" not in sequence_id("replay:../../etc", "s")


def test_eval_cli_says_how_turns_replayed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`pivot eval --record` then `--replay-model` (in process): the summary says how many model
    turns were recorded, and how many replayed by hash and by sequence."""
    for k in ("PIVOT_LLM_BASE_URL", "PIVOT_LLM_MODEL", TALLY_ENV):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("PIVOT_HOME", str(tmp_path / "home"))
    n: dict[str, int] = {}

    def script(body: dict[str, Any]) -> dict[str, Any]:
        user = body["messages"][1]["content"]
        n[user[:300]] = n.get(user[:300], 0) + 1
        return tool_call("insufficient_evidence", {"why": "scripted"})

    rec = tmp_path / "rec"
    card = str(card_path(SEED))
    with serve(script) as (url, _):
        monkeypatch.setenv("PIVOT_LLM_BASE_URL", url)
        out = CliRunner().invoke(
            app, ["eval", card, "--brain", "llm", "--record", str(rec), "-q"], env={}
        )
    assert out.exit_code == 0, out.output
    assert "recorded 1 model turn" in out.output
    monkeypatch.delenv("PIVOT_LLM_BASE_URL")
    out = CliRunner().invoke(
        app, ["eval", card, "--brain", "llm", "--replay-model", str(rec), "-q"]
    )
    assert out.exit_code == 0, out.output
    assert "model turns replayed: 1 by hash, 0 by sequence, 0 not recorded" in out.output
