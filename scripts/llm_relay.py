#!/usr/bin/env python3
"""An OpenAI-compatible endpoint whose answers come from files: a person or another capable model answers each request.

    python3 llm_relay.py --port 18555 --dir /tmp/relay serve     # the endpoint
    python3 llm_relay.py --dir /tmp/relay next [--wait 600]       # print the oldest open request (options before the verb)
    python3 llm_relay.py --dir /tmp/relay answer ID '{"name": "...", "arguments": {...}}'
    python3 llm_relay.py --dir /tmp/relay answer ID --text 'plain reply'

Each POST /v1/chat/completions is written to DIR/req/ID.json and held until DIR/resp/ID.json
exists; the reply becomes one tool call (or plain content). It lets the LLM brain run against a
capable model where no model endpoint can be reached; `pivot eval --record DIR` keeps the turns.
Whoever answers should see only what `next` prints, never the incident card.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

_ids = itertools.count(1)
_lock = threading.Lock()


def serve(port: int, d: Path, timeout: float) -> None:
    (d / "req").mkdir(parents=True, exist_ok=True)
    (d / "resp").mkdir(parents=True, exist_ok=True)

    class H(BaseHTTPRequestHandler):
        def log_message(self, *a):  # quiet
            pass

        def _send(self, code: int, obj: dict) -> None:
            body = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            self._send(200, {"object": "list", "data": [{"id": "relay", "object": "model"}]})

        def do_POST(self):
            n = int(self.headers.get("content-length") or 0)
            req = json.loads(self.rfile.read(n) or b"{}")
            with _lock:
                rid = f"{next(_ids):05d}"
            (d / "req" / f"{rid}.json").write_text(json.dumps(req))
            resp_path = d / "resp" / f"{rid}.json"
            t0 = time.time()
            while not resp_path.exists():
                if time.time() - t0 > timeout:
                    self._send(504, {"error": {"message": "relay: no answer in time"}})
                    return
                time.sleep(0.2)
            time.sleep(0.05)
            ans = json.loads(resp_path.read_text())
            msg: dict = {"role": "assistant", "content": ans.get("text")}
            if "name" in ans:
                msg["tool_calls"] = [
                    {
                        "id": f"call_{rid}",
                        "type": "function",
                        "function": {
                            "name": ans["name"],
                            "arguments": json.dumps(ans.get("arguments", {})),
                        },
                    }
                ]
            self._send(
                200,
                {
                    "id": f"relay-{rid}",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": req.get("model", "relay"),
                    "choices": [
                        {
                            "index": 0,
                            "message": msg,
                            "finish_reason": "tool_calls" if "name" in ans else "stop",
                        }
                    ],
                    "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
                },
            )

    ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()


def _open(d: Path) -> list[Path]:
    return sorted(p for p in (d / "req").glob("*.json") if not (d / "resp" / p.name).exists())


def next_req(d: Path, wait: float, show_system: bool, show_tools: bool) -> int:
    t0 = time.time()
    while not _open(d):
        if time.time() - t0 > wait:
            print("NO OPEN REQUEST")
            return 1
        time.sleep(0.5)
    p = _open(d)[0]
    req = json.loads(p.read_text())
    print(f"=== REQUEST {p.stem} (tool_choice={req.get('tool_choice')})")
    for m in req.get("messages", []):
        role = m.get("role")
        if role == "system" and not show_system:
            print("[system prompt unchanged; pass --system to see it]")
            continue
        content = m.get("content")
        if m.get("tool_calls"):
            content = f"(your earlier call) {json.dumps(m['tool_calls'][0]['function'])}"
        print(f"--- {role}\n{content}")
    if show_tools:
        print("--- tools")
        for t in req.get("tools", []):
            f = t["function"]
            print(
                f"* {f['name']}: {f.get('description', '')[:300]}\n  params: {json.dumps(f.get('parameters', {}))[:900]}"
            )
    else:
        print("--- tools: " + ", ".join(t["function"]["name"] for t in req.get("tools", [])))
    return 0


def answer(d: Path, rid: str, call: str | None, text: str | None) -> None:
    out: dict = {}
    if call:
        out.update(json.loads(call))
    if text:
        out["text"] = text
    (d / "resp" / f"{rid}.json").write_text(json.dumps(out))
    print("answered", rid)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=["serve", "next", "answer"])
    ap.add_argument("rest", nargs="*")
    ap.add_argument("--dir", default="/tmp/relay")
    ap.add_argument("--port", type=int, default=18555)
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--wait", type=float, default=600)
    ap.add_argument("--system", action="store_true")
    ap.add_argument("--tools", action="store_true")
    ap.add_argument("--text")
    a = ap.parse_args()
    d = Path(a.dir)
    if a.cmd == "serve":
        serve(a.port, d, a.timeout)
    elif a.cmd == "next":
        sys.exit(next_req(d, a.wait, a.system, a.tools))
    else:
        answer(d, a.rest[0], a.rest[1] if len(a.rest) > 1 else None, a.text)


if __name__ == "__main__":
    main()
