"""A scripted OpenAI-compatible chat endpoint, served for real by uvicorn in the tests.

The model endpoint is the one seam that cannot be real here, so this app stands in for it over
real HTTP. Its policy is simple and reads only what a model would read, the prompt:
- a hypothesis on the board marked `supported` -> `conclude` with that label, the evidence line
  the board quotes for it (verbatim from an observation), and the refuted labels as ruled out;
- otherwise the first suggested check it has not asked for yet -> that tool with those args;
- otherwise `insufficient_evidence`.
"""

from __future__ import annotations

import json
import re
import threading
import time
from typing import Any

import uvicorn
from fastapi import FastAPI, Request

_BOARD = re.compile(
    r"^- (?P<label>[a-z_]+) \[(?P<status>\w+), (?P<score>-?[\d.]+)\]"
    r'(?: for: (?P<obs>o\d+) "(?P<line>.*?)")?(?: against: .*)?$'
)
_OPTION = re.compile(r"^- (?P<tool>[a-z_]+) (?P<args>\{.*\}) value=")


def policy(prompt: str, asked: set[str]) -> tuple[str, dict[str, Any]]:
    supported, refuted = None, []
    options: list[tuple[str, dict[str, Any]]] = []
    section = ""
    for line in prompt.splitlines():
        if line.startswith("Hypothesis board"):
            section = "board"
        elif line.startswith("Suggested checks"):
            section = "options"
        elif line.startswith(("Budget left", "Observations so far", "Reversible changes")):
            section = ""
        elif section == "board" and (m := _BOARD.match(line)):
            if m["status"] == "supported" and supported is None and m["line"]:
                supported = m
            elif m["status"] == "refuted":
                refuted.append(m["label"])
        elif section == "options" and (m := _OPTION.match(line)):
            options.append((m["tool"], json.loads(m["args"])))
    if supported is not None:
        return "conclude", {
            "label": supported["label"],
            "evidence": [{"observation": supported["obs"], "line": supported["line"]}],
            "ruled_out": refuted,
            "confidence": 0.8,
            "summary": f"scripted: {supported['label']}",
        }
    for tool, args in options:
        key = tool + json.dumps(args, sort_keys=True)
        if key not in asked:
            asked.add(key)
            return tool, args
    return "insufficient_evidence", {"why": "scripted policy: nothing supported, nothing to check"}


def make_app() -> FastAPI:
    app = FastAPI()
    app.state.requests = 0
    asked: set[str] = set()

    @app.post("/v1/chat/completions")
    async def complete(request: Request) -> dict[str, Any]:
        body = await request.json()
        app.state.requests += 1
        prompt = "\n".join(
            m.get("content") or "" for m in body.get("messages", []) if m.get("role") == "user"
        )
        name, args = policy(prompt, asked)
        return {
            "id": f"chatcmpl-{app.state.requests}",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model", "scripted"),
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "tool_calls",
                    "message": {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": f"call_{app.state.requests}",
                                "type": "function",
                                "function": {"name": name, "arguments": json.dumps(args)},
                            }
                        ],
                    },
                }
            ],
            "usage": {
                "prompt_tokens": len(prompt) // 4,
                "completion_tokens": 20,
                "total_tokens": len(prompt) // 4 + 20,
            },
        }

    return app


class FakeLLMServer:
    """uvicorn on 127.0.0.1, a free port, in a thread; `stop()` really closes the socket."""

    def __init__(self) -> None:
        self.app = make_app()
        self._server = uvicorn.Server(
            uvicorn.Config(self.app, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
        )
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self.port = 0

    def start(self) -> FakeLLMServer:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("fake LLM server did not start")
            time.sleep(0.01)
        self.port = self._server.servers[0].sockets[0].getsockname()[1]
        return self

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def requests(self) -> int:
        return int(self.app.state.requests)

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
