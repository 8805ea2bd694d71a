"""First SSE event latency after POST /api/sessions, on a replay host, against real uvicorn.

Measures, per session, the wall time from sending POST /api/sessions to receiving the first
complete event on GET /api/sessions/{id}/events (both over real TCP, one client at a time).
The verdict uses sessions started on an idle server (the previous run has paused or ended); the
same figure with earlier runs still working behind the new one is printed for information.
Target: median <= 100 ms over >= 20 sessions. Final line: PASS|FAIL <metric> <value> (target ...).

    .venv/bin/python bench/server.py [--sessions 30] [--host replay:seed-sglang-fewchan-kv-oom]
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import uvicorn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agent.settings import Settings  # noqa: E402
from server.app import create_app  # noqa: E402
from server.config import SHIPPED_CARDS, ServeConfig  # noqa: E402

TARGET_MS = 100.0
TOKEN = "bench-token"


def first_event_ms(c: httpx.Client, host: str, drain: bool) -> float:
    """POST, then the first event on the stream; with `drain`, also wait for the run to pause or
    end, so the next session starts on an idle server."""
    t0 = time.perf_counter()
    r = c.post("/api/sessions", json={"host": host, "symptom": "why did the launch die?"})
    r.raise_for_status()
    sid = r.json()["session_id"]
    first = None
    with c.stream("GET", f"/api/sessions/{sid}/events") as resp:
        for line in resp.iter_lines():
            if line.startswith("data:") and first is None:
                first = 1000 * (time.perf_counter() - t0)
                if not drain:
                    break
            if line.startswith(("event: approval_request", "event: conclusion")):
                break
    if first is None:
        raise RuntimeError(f"stream of {sid} ended without an event")
    return first


def _stats(lat: list[float]) -> str:
    p90 = sorted(lat)[int(0.9 * (len(lat) - 1))]
    return f"median {statistics.median(lat):.1f}  p90 {p90:.1f}  min {min(lat):.1f}  max {max(lat):.1f}"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=30)
    ap.add_argument("--host", default="replay:seed-sglang-fewchan-kv-oom")
    args = ap.parse_args()
    cards = SHIPPED_CARDS
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        settings = Settings(home=home)
        config = ServeConfig(home=home, card_dirs=[cards], allowed_roots=settings.allowed_roots)
        app = create_app(config, settings=settings, token=TOKEN)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
        )
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.01)
        try:
            with httpx.Client(
                base_url=f"http://127.0.0.1:{port}",
                headers={"Authorization": f"Bearer {TOKEN}"},
                timeout=30,
            ) as c:
                first_event_ms(c, args.host, True)  # warm-up: imports, graph compile, card parse
                lat = [first_event_ms(c, args.host, True) for _ in range(args.sessions)]
                # Informational: back to back, each new session competing (GIL, 2 cores) with
                # the investigations still running behind it.
                busy = [first_event_ms(c, args.host, False) for _ in range(args.sessions)]
        finally:
            server.should_exit = True
            thread.join(timeout=30)
    med = statistics.median(lat)
    print(f"sessions={len(lat)} host={args.host} cards={cards}")
    print(f"first-event latency ms, idle server:       {_stats(lat)}")
    print(f"first-event latency ms, runs still behind: {_stats(busy)}")
    verdict = "PASS" if med <= TARGET_MS and len(lat) >= 20 else "FAIL"
    print(
        f"{verdict} first_event_latency_median_ms {med:.1f} (target <= {TARGET_MS:.0f} ms over >= 20 sessions)"
    )
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    raise SystemExit(main())
