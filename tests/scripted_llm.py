"""A scripted OpenAI-compatible server, served over real HTTP by uvicorn.

No LLM endpoint is reachable from CI, so LLM-path tests talk to this instead. A script is a
function from the request body to the assistant message (tool calls or text); the server wraps
it in a real chat.completions response with usage figures, so the openai SDK is exercised fully.
A script may also answer `http_error(500, ...)`: the HTTP error a server that rejects a request
sends (llama-cpp-python's server answers 500 to tool_choice="required").
"""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

Script = Callable[[dict[str, Any]], dict[str, Any]]


def tool_call(name: str, args: dict[str, Any] | str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": f"call_{uuid.uuid4().hex[:8]}",
                "type": "function",
                "function": {
                    "name": name,
                    "arguments": args if isinstance(args, str) else json.dumps(args),
                },
            }
        ],
    }


def text(content: str) -> dict[str, Any]:
    """A plain assistant reply, no tool call (a server that ignores `tools`)."""
    return {"role": "assistant", "content": content}


def http_error(status: int, message: str) -> dict[str, Any]:
    return {"__status__": status, "error": {"message": message, "type": "server_error"}}


def make_app(script: Script, requests: list[dict[str, Any]]) -> FastAPI:
    app = FastAPI()

    @app.post("/v1/chat/completions", response_model=None)
    async def complete(request: Request) -> dict[str, Any] | JSONResponse:
        body = await request.json()
        requests.append(body)
        msg = script(body)
        if "__status__" in msg:
            return JSONResponse({"error": msg["error"]}, status_code=int(msg["__status__"]))
        prompt_chars = sum(len(str(m.get("content") or "")) for m in body.get("messages", []))
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:10]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "scripted"),
            "choices": [
                {
                    "index": 0,
                    "message": msg,
                    "finish_reason": "tool_calls" if msg.get("tool_calls") else "stop",
                }
            ],
            "usage": {
                "prompt_tokens": prompt_chars // 4,
                "completion_tokens": 20,
                "total_tokens": prompt_chars // 4 + 20,
            },
        }

    return app


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serve(script: Script) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """Yield (base_url, requests seen) while a real uvicorn serves the script."""
    requests: list[dict[str, Any]] = []
    port = _free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            make_app(script, requests),
            host="127.0.0.1",
            port=port,
            log_level="warning",
            lifespan="off",
        )
    )
    t = threading.Thread(target=server.run, daemon=True)
    t.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}/v1", requests
    finally:
        server.should_exit = True
        t.join(timeout=5)


def observation_lines(body: dict[str, Any]) -> dict[str, list[str]]:
    """Parse the prompt's observation block back into {obs_id: lines} (what a model would read)."""
    text = "\n".join(str(m.get("content") or "") for m in body["messages"] if m["role"] == "user")
    out: dict[str, list[str]] = {}
    cur = None
    inside = False
    for ln in text.splitlines():
        if ln.startswith("<<<HOST-OUTPUT"):
            inside = True
            continue
        if ln.startswith("HOST-OUTPUT>>>"):
            inside = False
            continue
        if inside and ln.startswith("## o"):
            cur = ln.split()[1]
            out[cur] = []
        elif inside and cur:
            out[cur].append(ln)
    return out


def board(body: dict[str, Any]) -> list[tuple[str, str, float]]:
    text = "\n".join(str(m.get("content") or "") for m in body["messages"] if m["role"] == "user")
    rows = []
    for ln in text.splitlines():
        if ln.startswith("- ") and " [" in ln and "]" in ln:
            label = ln[2:].split(" [", 1)[0]
            status, _, score = ln.split(" [", 1)[1].split("]", 1)[0].partition(", ")
            try:
                rows.append((label, status, float(score)))
            except ValueError:
                continue
    return rows
