"""Follow-up answer latency: POST a question to a paused session, until its prose answer arrives
on the session's event stream, over real uvicorn and real TCP (the path the page and the chat use).

Per question: the wall time from sending POST /api/sessions/{id}/messages to receiving the
agent's `message` event of kind `answer` (GET /events with Last-Event-ID). The questions cycle
through the intents (why a change, why a hypothesis fell, why the cause, what next).
Target: median <= 300 ms over >= 20 questions. Final line: PASS|FAIL <metric> <value> (target ...).

    .venv/bin/python bench/followup.py [--questions 24]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._common import verdict  # noqa: E402
from tests.server.conftest import SEED, read_stream, start_live, wait_status  # noqa: E402

TARGET_MS = 300.0
QUESTIONS = [
    "why did you want to restore sitecustomize.py?",
    "why not a stale GPU process?",
    "how sure are you?",
    "what would the next check show?",
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--questions", type=int, default=24)
    n = ap.parse_args().questions
    live = start_live(Path(tempfile.mkdtemp(prefix="pivot-bench-followup-")))
    times: list[float] = []
    try:
        with live.client() as c:
            symptom = 'It died during start-up with "Not enough memory".'
            sid = c.post("/api/sessions", json={"host": SEED, "symptom": symptom}).json()[
                "session_id"
            ]
            last = read_stream(c, sid, stop=lambda ev: ev[-1].type == "approval_request")[-1].seq
            wait_status(c, sid, ("awaiting_approval",))
            for i in range(n):
                t0 = time.perf_counter()
                r = c.post(f"/api/sessions/{sid}/messages", json={"text": QUESTIONS[i % 4]})
                assert r.status_code == 202, r.text
                got = read_stream(
                    c,
                    sid,
                    last_event_id=last,
                    stop=lambda ev: ev[-1].data["data"].get("kind") == "answer",
                )
                times.append(time.perf_counter() - t0)
                last = got[-1].seq
                wait_status(c, sid, ("awaiting_approval",))
    finally:
        live.stop()
    ms = 1000 * statistics.median(times)
    print(f"questions {n}: median {ms:.0f} ms, max {1000 * max(times):.0f} ms")
    verdict(ms <= TARGET_MS, "followup_answer_median_ms", f"{ms:.0f}", f"<= {TARGET_MS:.0f}")


if __name__ == "__main__":
    main()
