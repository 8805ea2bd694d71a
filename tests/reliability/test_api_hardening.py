"""API hardening beyond tests/server (which runs schemathesis with and without the token, the
basic traversal cases and two oversized bodies). Added here, over real uvicorn:

- wrong credentials of every shape on every route of the live OpenAPI schema: all 401, no data;
- traversal and injection spellings on the file route (encoded, NUL, doubled slashes, a
  symlinked directory, shell metacharacters that would create a canary file if ever run);
- card paths of the eval route that climb out of the card directories;
- body limits under the forms a client can lie with (chunks, a bad Content-Length) and a
  deeply nested JSON body that fits the limit: refused, never a 5xx.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.reliability._figures import figure
from tests.server.conftest import TOKEN, Live, start_live

BAD_AUTH = [
    {},
    {"Authorization": "Bearer"},
    {"Authorization": "Bearer "},
    {"Authorization": f"Bearer {TOKEN}x"},
    {"Authorization": f"Bearer {TOKEN[:-1]}"},
    {"Authorization": f"Bearer {TOKEN.upper()}"},
    {"Authorization": f"Basic {TOKEN}"},
    {"Authorization": f"Token {TOKEN}"},
    {"Authorization": f"Bearer {'a' * 10_000}"},
    {"Authorization": f"Bearer {TOKEN}\u0000"[:-1] + "\t"},
    {"X-Api-Key": TOKEN},
    {"Cookie": f"token={TOKEN}"},
]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Live, Path, Path]]:
    base = tmp_path_factory.mktemp("hardening")
    root = base / "logs"
    root.mkdir()
    (root / "server.log").write_text("line one\nNot enough memory\n")
    outside = base / "outside"
    outside.mkdir()
    (outside / "secret.log").write_text("do not read me\n")
    os.symlink(outside, root / "linkdir")  # a directory link inside the root, pointing out
    srv = start_live(base / "home", allowed_roots={"*": [str(root)]})
    yield srv, root, base
    srv.stop()


def _routes(live: Live) -> list[tuple[str, str]]:
    with live.client() as c:
        paths = c.get("/openapi.json").json()["paths"]
    out = []
    for path, ops in paths.items():
        concrete = re.sub(r"\{[^}]+\}", "x1", path)
        out += [(m.upper(), concrete) for m in ops if m in ("get", "post", "put", "delete")]
    return out


def test_wrong_credentials_of_every_shape_read_nothing(served: tuple[Live, Path, Path]) -> None:
    live, _, _ = served
    routes = _routes(live)
    tried = 0
    with httpx.Client(base_url=live.base_url, timeout=15) as c:
        for method, path in routes:
            for headers in BAD_AUTH:
                try:
                    r = c.request(method, path, headers=headers, json={}, params={"token": TOKEN})
                except httpx.LocalProtocolError:
                    continue  # the client itself refuses to send that header
                tried += 1
                want = 200 if path == "/api/health" else 401
                assert r.status_code == want, (method, path, headers, r.status_code, r.text[:200])
                if want == 401:
                    assert "server.log" not in r.text and "session" not in r.text.lower()
    figure("API wrong credentials", requests=tried, routes=len(routes), got_in=0)
    assert tried >= len(routes) * (len(BAD_AUTH) - 2)


def _file(live: Live, path: str, host: str = "local") -> httpx.Response:
    with live.client() as c:
        return c.get(f"/api/hosts/{host}/file", params={"path": path})


@pytest.mark.parametrize(
    "spelling",
    [
        "{root}/linkdir/secret.log",  # a symlinked directory inside the root
        "{root}//..//..//outside/secret.log",
        "{root}/%2e%2e/outside/secret.log",
        "{root}/..%2foutside/secret.log",
        "{root}\\..\\outside\\secret.log",
        "{root}/server.log\x00/../../outside/secret.log",
        "{root}/./linkdir/./secret.log",
        "//{root}/../outside/secret.log",
        "{base}/outside/secret.log",
        "~/../../{base}/outside/secret.log",
        "file://{root}/../outside/secret.log",
    ],
)
def test_traversal_spellings_refused(served: tuple[Live, Path, Path], spelling: str) -> None:
    live, root, base = served
    r = _file(live, spelling.format(root=root, base=base))
    assert r.status_code in (200, 400, 403, 404, 422), (r.status_code, r.text[:300])
    assert "do not read me" not in r.text
    if r.status_code == 200:  # a literal name like '%2e%2e' inside the root: simply not there
        assert r.json()["exists"] is False


@pytest.mark.parametrize(
    "injection",
    ["$(touch {canary})", "`touch {canary}`", "x; touch {canary}", "x' ; touch '{canary}",
     "x\ntouch {canary}", "x && touch {canary} #"],
)  # fmt: skip
def test_shell_metacharacters_in_paths_never_run(
    served: tuple[Live, Path, Path], injection: str
) -> None:
    live, root, base = served
    canary = base / "canary"
    r = _file(live, f"{root}/" + injection.format(canary=canary))
    assert r.status_code < 500, r.text[:300]
    assert not canary.exists(), f"{injection!r} ran on the host"


@pytest.mark.parametrize(
    "paths",
    [
        ["../../pyproject.toml"],
        ["/etc/passwd"],
        ["evals/incidents/../../pyproject.toml"],
        ["seed-sglang-fewchan-kv-oom/../../../../etc/passwd"],
        ["\x00"],
    ],
)
def test_eval_card_paths_stay_in_the_card_dirs(
    served: tuple[Live, Path, Path], paths: list[str]
) -> None:
    live, _, _ = served
    with live.client() as c:
        r = c.post("/api/evals", json={"paths": paths})
    assert r.status_code in (400, 404, 422), (r.status_code, r.text[:300])


def _raw(live: Live, request: bytes) -> int:
    """Send bytes as-is (httpx will not send a lying Content-Length); return the status."""
    host, port = live.base_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=15) as s:
        s.sendall(request)
        s.shutdown(socket.SHUT_WR)
        head = b""
        while b"\r\n" not in head:
            chunk = s.recv(4096)
            if not chunk:
                break
            head += chunk
    return int(head.split()[1]) if head.startswith(b"HTTP/") else 0


def test_oversized_and_lying_bodies_refused(served: tuple[Live, Path, Path]) -> None:
    live, _, _ = served
    limit = 64 * 1024
    auth = f"Authorization: Bearer {TOKEN}\r\n".encode()
    url = b"/api/hosts/local/todos"

    def post(headers: bytes, body: bytes) -> int:
        return _raw(
            live, b"POST " + url + b" HTTP/1.1\r\nHost: t\r\n" + auth + headers + b"\r\n" + body
        )

    big = b'{"text": "' + b"y" * (limit + 10) + b'"}'
    ct = b"Content-Type: application/json\r\n"
    statuses = {
        "declared too big": post(ct + f"Content-Length: {len(big)}\r\n".encode(), big),
        "one byte over": post(
            ct + f"Content-Length: {limit + 1}\r\n".encode(), b"{" + b" " * (limit - 1) + b"}"
        ),
        "chunked, many chunks": post(
            ct + b"Transfer-Encoding: chunked\r\n",
            b"".join(b"400\r\n" + b"y" * 1024 + b"\r\n" for _ in range(80)) + b"0\r\n\r\n",
        ),
        "bad content-length": post(ct + b"Content-Length: abc\r\n", big),
    }
    figure(
        "API oversized bodies",
        **{k.replace(" ", "_").replace(",", ""): v for k, v in statuses.items()},
    )
    for what, code in statuses.items():
        assert code == (400 if what == "bad content-length" else 413), f"{what}: {code}"
    with live.client() as c:
        assert c.post("/api/hosts/local/todos", json={"text": "small"}).status_code == 201


@pytest.mark.parametrize("depth", [1_000, 30_000])
def test_deeply_nested_json_is_not_a_server_error(
    served: tuple[Live, Path, Path], depth: int
) -> None:
    live, _, _ = served
    body = '{"text": ' + "[" * depth + "]" * depth + "}"
    with live.client() as c:
        for path in ("/api/hosts/local/todos", "/api/sessions", "/api/evals"):
            r = c.post(path, content=body, headers={"Content-Type": "application/json"})
            assert r.status_code < 500, (path, depth, r.status_code, r.text[:200])
