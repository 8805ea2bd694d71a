"""The LLM path against a scripted OpenAI-compatible server over real HTTP (no endpoint here)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from agent import observe
from agent.brains.base import BrainContext
from agent.brains.llm import LLMBrain, compact
from agent.facts import Facts
from agent.runner import investigate
from agent.settings import Settings
from agent.state import State
from cards.model import load_card
from cards.replay import ReplayHost
from store.memory.sqlite import Memory
from tests.agent.conftest import card_path
from tests.scripted_llm import board, observation_lines, serve, tool_call
from tools.base import ToolSpec
from tools.registry import TOOLS

SEED = "seed-sglang-fewchan-kv-oom"
SITECUSTOMIZE = "/usr/lib/python3.12/sitecustomize.py"


def _llm_settings(tmp_settings: Settings, url: str) -> Settings:
    return tmp_settings.model_copy(
        update={"llm_base_url": url, "llm_model": "scripted", "llm_api_key": "test"}
    )


def _conclude_from_board(body: dict[str, Any]) -> dict[str, Any]:
    """What a competent model does: take the leading hypothesis and quote its line from an observation."""
    rows = [r for r in board(body) if r[1] != "refuted"]
    label = rows[0][0]
    obs = observation_lines(body)
    text = "\n".join(str(m.get("content") or "") for m in body["messages"] if m["role"] == "user")
    cited = next(ln for ln in text.splitlines() if ln.startswith(f"- {label} ["))
    quote = cited.split("for: ", 1)[1].split(' "', 1)[1].rsplit('"', 1)[0][:120]
    oid = next(o for o, lines in obs.items() if any(quote in ln for ln in lines))
    refuted = [r[0] for r in board(body) if r[1] == "refuted"]
    return tool_call(
        "conclude",
        {
            "label": label,
            "evidence": [{"observation": oid, "line": quote}],
            "ruled_out": refuted,
            "next_step": "revert the one change",
            "confidence": 0.8,
        },
    )


def test_llm_brain_runs_the_same_graph_and_concludes(settings: Settings) -> None:
    calls: list[str] = []

    def script(body: dict[str, Any]) -> dict[str, Any]:
        calls.append("x")
        if len(calls) == 1:
            return tool_call("dmesg", {})
        return _conclude_from_board(body)

    card = load_card(card_path(SEED))
    with serve(script) as (url, requests):
        r = investigate(
            ReplayHost(card), card.symptom, brain="llm", settings=_llm_settings(settings, url)
        )
    assert r.status == "concluded" and r.root_cause == "kv_cache_no_room"
    assert "stale_gpu_process" in r.ruled_out
    assert requests[0]["temperature"] == 0
    offered = {t["function"]["name"] for t in requests[0]["tools"]}
    assert offered <= set(TOOLS) | {"conclude", "insufficient_evidence"}
    assert not any("shell" in name or "exec" in name for name in offered)


def test_unknown_tool_malformed_args_and_invented_evidence_are_refused(settings: Settings) -> None:
    turns = iter(
        [
            tool_call("run_shell", {"cmd": "rm -rf /"}),
            tool_call("gpu_status", "{not json"),
            tool_call(
                "conclude",
                {
                    "label": "stale_gpu_process",
                    "evidence": [{"observation": "o1", "line": "pid 4242 holds all GPU memory"}],
                },
            ),
        ]
    )

    def script(body: dict[str, Any]) -> dict[str, Any]:
        nxt = next(turns, None)
        return nxt if nxt is not None else _conclude_from_board(body)

    card = load_card(card_path(SEED))
    with serve(script) as (url, requests):
        r = investigate(
            ReplayHost(card), card.symptom, brain="llm", settings=_llm_settings(settings, url)
        )
    refusals = [m["content"] for req in requests for m in req["messages"] if m["role"] == "tool"]
    assert any("no tool named 'run_shell'" in c for c in refusals)
    assert any("malformed arguments" in c for c in refusals)
    events = Memory(settings.memory_path).events(r.session_id)
    guard = [e for e in events if e.type == "error"]
    assert any(
        any(
            w in str(e.data)
            for w in ("occurs in no observation", "not in observation", "not found verbatim")
        )
        for e in guard
    )
    tools_run = {o["tool"] for o in Memory(settings.memory_path).observations(r.session_id)}
    assert tools_run <= set(TOOLS)
    assert r.status == "concluded" and r.root_cause == "kv_cache_no_room"


def test_a_model_that_never_answers_validly_ends_cleanly(settings: Settings) -> None:
    card = load_card(card_path(SEED))
    with serve(lambda body: {"role": "assistant", "content": "I think it is NCCL."}) as (url, _):
        r = investigate(
            ReplayHost(card), card.symptom, brain="llm", settings=_llm_settings(settings, url)
        )
    assert r.status == "insufficient_evidence"
    assert r.root_cause is None


def test_context_per_decision_stays_small(settings: Settings) -> None:
    sizes: list[int] = []

    def script(body: dict[str, Any]) -> dict[str, Any]:
        sizes.append(sum(len(str(m.get("content") or "")) for m in body["messages"]))
        return _conclude_from_board(body)

    card = load_card(card_path(SEED))
    with serve(script) as (url, _):
        investigate(
            ReplayHost(card), card.symptom, brain="llm", settings=_llm_settings(settings, url)
        )
    assert sizes and max(sizes) / 4 < 8000  # rough tokens; bench/investigate.py reports the figure


# -- the token budget per decision ------------------------------------------------------------------
def _log_obs(oid: str, lines: list[str]) -> dict[str, Any]:
    return {
        "id": oid,
        "tool": "log_tail",
        "args": {"path": "/var/log/server.log"},
        "ok": True,
        "lines": lines,
        "data": {},
        "round": 0,
    }


_WORK = ("prefill", "decode", "swap", "evict", "schedule")


def _noise(n: int, tag: str = "") -> list[str]:
    """Log lines that differ in words, not only numbers (a run alike but for its numbers is
    shown by its ends: test_a_heartbeat_repeated_...)."""
    return [
        f"[2025-01-01 00:00:{i % 60:02d}] INFO scheduler.py:{i}: {_WORK[i % 5]} batch {tag}{i} ok"
        for i in range(n)
    ]


def _rendered_chars(views: list[dict[str, Any]]) -> int:
    text = ""
    for o in views:
        text += f"## {o['id']} {o['tool']} {json.dumps(o['args'])} ok\n"
        text += "".join(ln + "\n" for ln in o["lines"])
    return len(text)


def test_a_fatal_line_in_the_middle_of_a_20k_line_log_is_kept_within_budget() -> None:
    lines = _noise(20_000)
    fatal = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    nccl = "gpu-3:1234:1300 [3] NCCL WARN Cuda failure 'out of memory'"
    lines[10_000] = fatal
    lines[4_321] = nccl
    lines[15_000:15_006] = [
        "Traceback (most recent call last):",
        '  File "/app/serve.py", line 12, in <module>',
        "    main()",
        '  File "/app/serve.py", line 9, in main',
        "    raise SomeCustomThing('boom')",
        "SomeCustomThing: boom",
    ]
    budget = 8000 * 4 - 20_000  # what a decision leaves for observations, roughly
    state: State = {"observations": [_log_obs("o1", lines), _log_obs("o2", _noise(300, "b"))]}
    out = compact(state, budget_chars=budget)
    kept = out[0]["lines"]
    assert fatal in kept and nccl in kept
    assert "SomeCustomThing: boom" in kept and '  File "/app/serve.py", line 9, in main' in kept
    assert _rendered_chars(out) <= budget
    # head and tail are filled; what is elided says how much and where
    assert kept[0] == lines[0] and kept[-1] == lines[-1]
    marks = [ln for ln in kept if ln.startswith("# … ")]
    assert marks and all("lines not shown (lines " in m for m in marks)
    shown = sum(1 for ln in kept if not ln.startswith("# … "))
    hidden = sum(int(m.split()[2]) for m in marks)
    assert shown + hidden == 20_000
    assert any(ln.startswith("# … ") for ln in out[1]["lines"])  # both observations share it


def test_cited_lines_and_phase_markers_are_kept() -> None:
    lines = _noise(3000)
    lines[1200] = "Load weight begin. avail mem=139.20 GB"
    lines[1500] = "decode batch something the board quotes 1500"
    state: State = {
        "observations": [_log_obs("o1", lines)],
        "hypotheses": {
            "kv_cache_no_room": {
                "label": "kv_cache_no_room",
                "statement": "",
                "status": "open",
                "score": 1.0,
                "evidence": [{"observation": "o1", "line": lines[1500]}],
                "against": [],
                "check": "",
            }
        },
    }
    out = compact(state, budget_chars=6000)
    kept = out[0]["lines"]
    assert lines[1500] in kept and lines[1200] in kept
    assert _rendered_chars(out) <= 6000


def test_a_heartbeat_repeated_every_ten_seconds_shows_its_first_and_last_and_a_count() -> None:
    """A model session paged through 80 copies of "Waiting for 1 local, 0 remote core engine
    proc(s) to start." (round 36): a run of lines alike but for their time stamps shows its
    first and last line and how many are between; a cited one among them is kept. Controls:
    lines that differ in words, or in a port or rank (the evidence, another session found), and
    a table's rows are all shown."""
    beat = "(APIServer pid=1) DEBUG 10-28 03:{:02d}:{:02d} [utils.py:776] Waiting for 1 local"
    lines = ["INFO start", *[beat.format(m // 6, m % 6 * 10) for m in range(80)], "INFO end"]
    state: State = {"observations": [_log_obs("o1", lines)]}
    kept = compact(state, budget_chars=50_000)[0]["lines"]
    assert lines[1] in kept and lines[80] in kept and lines[40] not in kept, kept
    assert any("78 more lines like the one above" in ln for ln in kept), kept
    state["hypotheses"] = {
        "x": {"label": "x", "statement": "", "status": "open", "score": 0.0, "check": "",
              "evidence": [{"observation": "o1", "line": lines[40]}], "against": []}
    }  # fmt: skip
    assert lines[40] in compact(state, budget_chars=50_000)[0]["lines"]
    words = ["INFO start", *[f"INFO step {w}" for w in ("load", "shard", "cast", "bind")]]
    assert compact({"observations": [_log_obs("o2", words)]}, 50_000)[0]["lines"] == words
    # a table's rows differ only in numbers, and each matters: 8 GPUs are 8 rows
    ports = [
        f"INFO [parallel_state.py:1395] rank={i} init=tcp://127.0.0.1:{47000 + i}" for i in range(8)
    ]
    assert compact({"observations": [_log_obs("o4", ports)]}, 50_000)[0]["lines"] == ports
    gpus = [f"{i}, NVIDIA H200, {i * 1000} MiB, 143771 MiB, 0 %" for i in range(8)]
    table = {**_log_obs("o3", gpus), "tool": "gpu_status"}
    assert compact({"observations": [table]}, 50_000)[0]["lines"] == gpus


def test_short_observations_are_shown_whole() -> None:
    state: State = {"observations": [_log_obs("o1", _noise(20)), _log_obs("o2", ["# one"])]}
    out = compact(state, budget_chars=20_000)
    assert out[0]["lines"] == _noise(20) and out[1]["lines"] == ["# one"]


@pytest.mark.parametrize("decision_tokens", [16_000, 8_000])
def test_a_whole_decision_on_a_huge_log_stays_within_its_token_budget(
    settings: Settings, decision_tokens: int
) -> None:
    """Over real HTTP: the request the model gets (messages and tools' schemas) stays within
    the configured decision budget (~4 chars a token; 8k for a small local model) with a
    20k-line log, and its fatal line is in it."""
    big = _noise(20_000)
    big[9_999] = "RuntimeError: CUDA error: an illegal memory access was encountered"
    brain_settings = settings.model_copy(
        update={
            "llm_base_url": "",
            "llm_model": "scripted",
            "llm_api_key": "test",
            "llm_decision_tokens": decision_tokens,
        }
    )
    sizes: list[int] = []
    seen: list[bool] = []

    tools_sent: list[list[dict[str, Any]]] = []

    def script(body: dict[str, Any]) -> dict[str, Any]:
        tools_sent.append(body.get("tools", []))
        sizes.append(
            sum(len(str(m.get("content") or "")) for m in body["messages"])
            + len(json.dumps(body.get("tools", [])))
        )
        seen.append(big[9_999] in observation_lines(body).get("o1", []))
        return tool_call("insufficient_evidence", {"why": "test"})

    state: State = {
        "session_id": "budget-test",
        "host": "replay:budget",
        "symptom": "it died",
        "observations": [_log_obs("o1", big), *(_log_obs(f"o{i}", _noise(200)) for i in (2, 3))],
    }
    with serve(script) as (url, _):
        brain = LLMBrain(brain_settings.model_copy(update={"llm_base_url": url}))
        action = brain.decide(state, BrainContext(options=[], facts=Facts()))
    assert action["kind"] == "insufficient"
    assert seen == [True] and sizes[0] / 4 <= decision_tokens
    assert sizes[0] / 4 > decision_tokens * 0.6  # the budget is used, not left idle
    # a small window gets the schemas without their arguments' descriptions; a large one whole
    described = any(
        "description" in prop
        for t in tools_sent[0]
        for prop in t["function"]["parameters"].get("properties", {}).values()
    )
    assert described is (decision_tokens >= 16_000), decision_tokens


# -- the operator's words are a hint -------------------------------------------------------------
def test_the_symptom_is_marked_as_the_operators_hint_not_evidence(settings: Settings) -> None:
    prompts: list[str] = []

    def script(body: dict[str, Any]) -> dict[str, Any]:
        prompts.append("\n".join(str(m.get("content") or "") for m in body["messages"][:2]))
        return _conclude_from_board(body)

    card = load_card(card_path(SEED))
    with serve(script) as (url, _):
        investigate(
            ReplayHost(card), card.symptom, brain="llm", settings=_llm_settings(settings, url)
        )
    first = prompts[0]
    assert f'"{card.symptom}"' in first
    said = first.index("What the operator said (")
    assert "NOT evidence" in first[said : said + 200] and "never cite it" in first[said:]
    assert "hint for which checks to run first, not evidence" in first  # the system rule
    # and it is never inside the untrusted host-output block the model may cite from
    block = first.split("<<<HOST-OUTPUT", 1)[1].split("HOST-OUTPUT>>>", 1)[0]
    assert "What the operator said" not in block


# -- a tool that raises is a failed observation, not the end --------------------------------------
def _raising_spec(name: str, exc: Exception) -> ToolSpec:  # type: ignore[type-arg]
    real = TOOLS[name]

    def boom(host: Any, args: Any) -> Any:
        raise exc

    return dataclasses.replace(real, fn=boom)


def test_a_tool_that_raises_becomes_a_failed_observation(monkeypatch: Any) -> None:
    monkeypatch.setitem(TOOLS, "dmesg", _raising_spec("dmesg", KeyError("kmsg parser: 'ts'")))
    card = load_card(card_path(SEED))
    ok, lines, data = observe.call(ReplayHost(card), "dmesg", {})
    assert ok is False and data == {}
    assert lines[0].startswith("# error: the dmesg tool failed: KeyError: ")
    assert "kmsg parser" in lines[0]
    assert not any("Traceback" in ln or 'File "' in ln for ln in lines)
    obs = observe.run_many(ReplayHost(card), [("dmesg", {}), ("gpu_status", {})], 1, 0)
    assert [o["ok"] for o in obs] == [False, True]


def test_an_investigation_survives_a_crashing_tool(settings: Settings, monkeypatch: Any) -> None:
    monkeypatch.setitem(TOOLS, "dmesg", _raising_spec("dmesg", RuntimeError("parser bug")))
    card = load_card(card_path(SEED))
    r = investigate(ReplayHost(card), card.symptom, brain="rulebook", settings=settings)
    assert r.status == "concluded" and r.root_cause == "kv_cache_no_room"
    obs = Memory(settings.memory_path).observations(r.session_id)
    failed = [o for o in obs if o["tool"] == "dmesg"]
    assert failed and not failed[0]["ok"]
    assert "RuntimeError: parser bug" in failed[0]["lines"][0]


def test_asked_again_after_a_denied_fix_the_model_is_told_why(settings: Settings) -> None:
    """A conclusion offers the known-good config back behind approval; when that is denied the
    graph asks again, and the prompt says what was concluded and what the operator decided."""
    prompts: list[str] = []

    def script(body: dict[str, Any]) -> dict[str, Any]:
        prompts.append(body["messages"][1]["content"])
        if len(prompts) == 1:  # the known-good copy: what makes the revert possible
            return tool_call("config_read", {"path": f"{SITECUSTOMIZE}.known-good"})
        return _conclude_from_board(body)

    card = load_card(card_path(SEED))
    with serve(script) as (url, _):
        r = investigate(
            ReplayHost(card), card.symptom, brain="llm", settings=_llm_settings(settings, url)
        )
    assert r.status == "concluded" and len(prompts) >= 3
    assert not any("You already concluded" in p for p in prompts[:2])
    assert "You already concluded `kv_cache_no_room`" in prompts[2]
    assert f"- config_apply on {SITECUSTOMIZE}: denied" in prompts[2]
