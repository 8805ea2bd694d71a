"""The LLM path against a scripted OpenAI-compatible server over real HTTP (no endpoint here)."""

from __future__ import annotations

from typing import Any

from agent.memory import Memory
from agent.runner import investigate
from agent.settings import Settings
from tests.agent.conftest import card_path
from tests.scripted_llm import board, observation_lines, serve, tool_call
from tools.cards import load_card
from tools.registry import TOOLS
from tools.replay_host import ReplayHost

SEED = "seed-sglang-fewchan-kv-oom"


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
        "occurs in no observation" in str(e.data) or "not in observation" in str(e.data)
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
