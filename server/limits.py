"""Request-body size limit as plain ASGI middleware, so an oversized body is refused with 413
before any of it is parsed, whether it declares a Content-Length or streams chunked."""

from __future__ import annotations

import json
from typing import Any

Scope = dict[str, Any]


class BodyTooLarge(Exception):
    pass


class BodyLimit:
    def __init__(self, app: Any, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    too_big = int(value) > self.max_bytes
                except ValueError:
                    too_big = False
                if too_big:
                    await self._refuse(send)
                    return
        seen = 0
        started = False
        exceeded = False

        async def counted_receive() -> Any:
            nonlocal seen, exceeded
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > self.max_bytes:
                    exceeded = True
                    raise BodyTooLarge
            return msg

        async def tracking_send(msg: Any) -> None:
            nonlocal started
            if exceeded:
                # FastAPI turns any error while reading the body into its own 400 response;
                # an oversized body is still a 413, so that response is replaced by ours.
                if not started:
                    started = True
                    await self._refuse(send)
                return
            if msg["type"] == "http.response.start":
                started = True
            await send(msg)

        try:
            await self.app(scope, counted_receive, tracking_send)
        except BodyTooLarge:
            if not started:
                await self._refuse(send)

    async def _refuse(self, send: Any) -> None:
        body = json.dumps({"detail": f"request body larger than {self.max_bytes} bytes"}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
