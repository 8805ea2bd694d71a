"""Investigation cost over the public cards: median rounds and tool calls (rulebook brain), and
the LLM context per decision with the scripted model (target: within the brain's configured
decision budget, `Settings.llm_decision_tokens`, 16k by default: docs/llm-brain.md says why it
is not 8k).

    python bench/investigate.py
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent.runner import Runner, investigate  # noqa: E402
from agent.settings import Settings  # noqa: E402
from cards.model import load_card  # noqa: E402
from cards.replay import ReplayHost  # noqa: E402
from tests.scripted_llm import board, observation_lines, serve, tool_call  # noqa: E402

CARDS = sorted((ROOT / "evals" / "incidents").glob("*.yaml"))
#: the budget the brain trims each request to (one home: the settings), not a copy of it
TOKEN_TARGET = Settings().llm_decision_tokens


def _scripted(body: dict[str, Any]) -> dict[str, Any]:
    """A model that concludes with the leading hypothesis and a line quoted from the prompt."""
    rows = [r for r in board(body) if r[1] != "refuted"]
    if not rows:
        return tool_call("insufficient_evidence", {"why": "empty board"})
    obs = observation_lines(body)
    text = "\n".join(str(m.get("content") or "") for m in body["messages"] if m["role"] == "user")
    head = next(
        (ln for ln in text.splitlines() if ln.startswith(f"- {rows[0][0]} [") and "for: " in ln),
        None,
    )
    if head is None:
        return tool_call("insufficient_evidence", {"why": "no evidence"})
    quote = head.split("for: ", 1)[1].split(' "', 1)[1].rsplit('"', 1)[0][:120]
    oid = next((o for o, lines in obs.items() if any(quote in ln for ln in lines)), "o1")
    return tool_call(
        "conclude", {"label": rows[0][0], "evidence": [{"observation": oid, "line": quote}]}
    )


def main() -> int:
    rounds, calls, secs = [], [], []
    with tempfile.TemporaryDirectory() as d:
        runner = Runner(Settings(home=Path(d)))
        for path in CARDS:
            card = load_card(path)
            t0 = time.perf_counter()
            r = runner.start(ReplayHost(card), card.symptom)
            secs.append(time.perf_counter() - t0)
            rounds.append(r.rounds)
            calls.append(r.tool_calls)
        runner.close()
    print(
        f"rulebook over {len(CARDS)} cards: median rounds {statistics.median(rounds)}, "
        f"median tool calls {statistics.median(calls)}, median seconds {statistics.median(secs):.3f}"
    )
    sizes: list[int] = []

    def script(body: dict[str, Any]) -> dict[str, Any]:
        sizes.append(
            sum(len(str(m.get("content") or "")) for m in body["messages"])
            + len(str(body.get("tools", "")))
        )
        return _scripted(body)

    with tempfile.TemporaryDirectory() as d, serve(script) as (url, _):
        s = Settings(home=Path(d), llm_base_url=url, llm_model="scripted", llm_api_key="x")
        for path in CARDS:
            card = load_card(path)
            investigate(ReplayHost(card), card.symptom, brain="llm", settings=s)
    tokens = [n / 4 for n in sizes]  # ~4 characters per token for English and log text
    med, worst = statistics.median(tokens), max(tokens)
    print(
        f"llm (scripted) context per decision: median {med:.0f} tokens, max {worst:.0f} tokens over {len(tokens)} turns"
    )
    ok = worst <= TOKEN_TARGET
    print(
        f"{'PASS' if ok else 'FAIL'} llm_context_tokens_max {worst:.0f} (target <= {TOKEN_TARGET})"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
