"""A tiny HTTP proxy that sends request N to replica N % len(replicas), every request.

A page makes a varying number of background requests, so for it the proxy can give chosen paths
turns of their own (`own_turns`): the k-th `/events` goes to replica k % len(replicas) whatever
the page asked in between, and a test can say "followed live from both replicas" every time.

Why not a TCP forwarder: a keep-alive client would pin all its requests to one replica, and the
bugs the replica tests look for (a diff served from one process's memory, an approval card
missed on a relayed stream) only show when consecutive requests of one page land on different
replicas. So each request is parsed (head + Content-Length body; clients here send no chunked
bodies), sent upstream on a fresh connection with `Connection: close`, and the upstream's
answer is piped back as-is until it closes: a Server-Sent Events stream passes through live,
and the client sees `connection: close` and opens a new connection for its next request.

Runs on its own event loop in a daemon thread so sync tests (httpx, Playwright) can use it.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from dataclasses import dataclass, field

MAX_HEAD = 64 * 1024


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Routed:
    """One forwarded request: which replica answered which path."""

    n: int
    method: str
    path: str
    replica: int


@dataclass
class RoundRobin:
    upstreams: list[int]  # ports on 127.0.0.1
    port: int = field(default_factory=_free_port)
    routed: list[Routed] = field(default_factory=list)
    # Paths containing one of these fragments take turns among themselves (their own counter),
    # so a page whose background requests vary in number still spreads them over the replicas.
    own_turns: tuple[str, ...] = ()
    _count: int = 0
    _turns: dict[str, int] = field(default_factory=dict)
    _loop: asyncio.AbstractEventLoop | None = None
    _server: asyncio.Server | None = None
    _thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def replicas_for(self, fragment: str) -> set[int]:
        """Which replicas answered requests whose path contains `fragment`."""
        return {r.replica for r in self.routed if fragment in r.path}

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> RoundRobin:
        ready = threading.Event()

        def run() -> None:
            self._loop = asyncio.new_event_loop()
            self._server = self._loop.run_until_complete(
                asyncio.start_server(self._serve, "127.0.0.1", self.port)
            )
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="round-robin", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("round-robin proxy did not start")
        return self

    def stop(self) -> None:
        if self._loop is None or self._server is None:
            return
        loop, server = self._loop, self._server

        async def close() -> None:
            server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)  # let them unwind here

        asyncio.run_coroutine_threadsafe(close(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(10)

    # -- one client connection: one request ------------------------------------------------------
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await self._one(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        if len(head) > MAX_HEAD:
            return
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        headers = [ln for ln in lines[1:] if ln]
        length = 0
        kept = []
        for h in headers:
            name, _, value = h.partition(":")
            low = name.strip().lower()
            if low == "content-length":
                length = int(value.strip())
            if low in ("connection", "keep-alive"):
                continue
            kept.append(h)
        body = await reader.readexactly(length) if length else b""
        n = self._count
        self._count += 1
        turn = next((f for f in self.own_turns if f in path), None)
        if turn is None:
            replica = n % len(self.upstreams)
        else:
            replica = self._turns.get(turn, 0) % len(self.upstreams)
            self._turns[turn] = self._turns.get(turn, 0) + 1
        self.routed.append(Routed(n, method, path, replica))
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstreams[replica])
        try:
            out = "\r\n".join([lines[0], *kept, "Connection: close", "", ""]).encode("latin-1")
            up_writer.write(out + body)
            await up_writer.drain()
            await self._pipe(up_reader, writer, reader)
        finally:
            up_writer.close()
            with contextlib.suppress(Exception):
                await up_writer.wait_closed()

    async def _pipe(
        self,
        up: asyncio.StreamReader,
        client: asyncio.StreamWriter,
        client_reader: asyncio.StreamReader,
    ) -> None:
        """Upstream to client until upstream closes, or the client hangs up (an SSE reader
        that has what it wanted): then the upstream connection is dropped too."""
        hung_up = asyncio.ensure_future(client_reader.read(1))
        try:
            while True:
                chunk = asyncio.ensure_future(up.read(65536))
                done, _ = await asyncio.wait({chunk, hung_up}, return_when=asyncio.FIRST_COMPLETED)
                if chunk not in done:
                    chunk.cancel()
                    return
                data = chunk.result()
                if not data:
                    return
                client.write(data)
                await client.drain()
        finally:
            hung_up.cancel()
