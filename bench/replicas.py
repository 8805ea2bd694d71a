"""Cross-replica event delay: an event stored by replica A, received on replica B's SSE stream.

Two real `pivot serve` processes on one real PostgreSQL (tests/postgres.py, tests/replicas.py).
Per session: start it on A (a replay card that pauses for approval), follow it on B until the
pause, then approve on A and keep reading B's stream. Every event A emits after the approval
reaches B only through PostgreSQL (NOTIFY, the relay's read, SSE); its delay is B's arrival
time minus the event's own `at` stamp (set by A as it emits it; one machine, one clock).
Also printed, for docs/scale.md: sessions per second (a replay card that concludes without
approval) with all sessions posted to A alone, then spread over A and B, and for reference one
lone replica on SQLite.
Target: p50 <= 100 ms. Final line: PASS|FAIL <metric> <value> (target ...).

    .venv/bin/python bench/replicas.py [--sessions 20]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._common import verdict  # noqa: E402
from tests.postgres import start_postgres  # noqa: E402
from tests.replicas import shared_home, start_replica  # noqa: E402

TARGET_MS = 100.0
CARD = "replay:seed-sglang-fewchan-kv-oom"
QUICK = "replay:h200-stale-process-cuda-oom"


def throughput(clients: list, n: int) -> float:  # type: ignore[type-arg]
    """Sessions per second: n sessions posted round-robin, until every one has concluded."""
    t0 = time.perf_counter()
    sids = [
        clients[i % len(clients)]
        .post("/api/sessions", json={"host": QUICK, "symptom": f"oom #{i}"})
        .json()["session_id"]
        for i in range(n)
    ]
    for sid in sids:
        while clients[0].get(f"/api/sessions/{sid}").json()["status"] != "concluded":
            time.sleep(0.02)
    return n / (time.perf_counter() - t0)


def _follow(client, sid: str, after: int, until: str, delays: list[float] | None) -> int:  # type: ignore[no-untyped-def]
    headers = {"Last-Event-ID": str(after)}
    last, cur = after, {}
    with client.stream("GET", f"/api/sessions/{sid}/events", headers=headers, timeout=60) as r:
        for line in r.iter_lines():
            if line.startswith(":"):
                continue
            if line:
                k, _, v = line.partition(":")
                cur[k] = v.lstrip(" ")
                continue
            if "data" not in cur:
                continue
            arrived = time.time()
            ev = json.loads(cur["data"])
            cur = {}
            last = ev["seq"]
            if delays is not None:
                delays.append((arrived - datetime.fromisoformat(ev["at"]).timestamp()) * 1000)
            if ev["type"] == until:
                return last
    return last


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=20)
    ap.add_argument("--throughput", type=int, default=100, help="sessions per throughput run")
    args = ap.parse_args()
    pg = start_postgres()
    tmp = Path(tempfile.mkdtemp(prefix="pivot-bench-replicas-"))
    home = tmp / "home"
    token = shared_home(home)
    url = pg.new_database()
    a = start_replica("a", home, url, token)
    b = start_replica("b", home, url, token)
    delays: list[float] = []
    try:
        with a.client() as ca, b.client() as cb:
            for i in range(args.sessions):
                sid = ca.post("/api/sessions", json={"host": CARD, "symptom": f"died #{i}"}).json()[
                    "session_id"
                ]
                paused_at = _follow(cb, sid, 0, "approval_request", None)
                while ca.get(f"/api/sessions/{sid}").json()["status"] != "awaiting_approval":
                    time.sleep(0.01)
                appr = next(x for x in ca.get("/api/approvals").json() if x["session_id"] == sid)
                t = threading.Thread(
                    target=_follow, args=(cb, sid, paused_at, "conclusion", delays)
                )
                t.start()
                time.sleep(0.2)  # B's stream is open and subscribed before A runs on
                ca.post(f"/api/approvals/{appr['id']}", json={"approve": True})
                t.join(60)
            one = throughput([ca], args.throughput)
            two = throughput([ca, cb], args.throughput)
    finally:
        a.stop()
        b.stop()
        pg.stop()
    lone = start_replica("sqlite", tmp / "lone", None, shared_home(tmp / "lone"))
    try:
        with lone.client() as cl:
            alone = throughput([cl], args.throughput)
    finally:
        lone.stop()
    print(
        f"sessions/s: one replica {one:.1f}, two replicas {two:.1f} (PostgreSQL); "
        f"one on SQLite {alone:.1f}"
    )
    delays.sort()
    p50 = statistics.median(delays)
    p95 = delays[int(0.95 * (len(delays) - 1))]
    print(f"events relayed A -> B: {len(delays)} over {args.sessions} sessions")
    print(f"delay ms: p50 {p50:.1f}  p95 {p95:.1f}  max {delays[-1]:.1f}")
    verdict(
        p50 <= TARGET_MS, "cross_replica_event_delay_p50", f"{p50:.1f} ms", f"<= {TARGET_MS:.0f} ms"
    )


if __name__ == "__main__":
    main()
