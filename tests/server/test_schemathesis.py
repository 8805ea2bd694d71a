"""schemathesis over the live OpenAPI schema: with the token no request gets a 5xx; without it
every route but /api/health answers 401.

Driven through schemathesis' Python API (operation strategies + hypothesis) because its pytest
plugin does not load under pytest 9 (`'Function' object has no attribute '_nodeid'`).
"""

from __future__ import annotations

from collections.abc import Callable

import schemathesis
from hypothesis import HealthCheck, given, settings

from tests.server.conftest import TOKEN, Live

FAST = settings(
    max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True
)
RESOURCES = (
    "/api/sessions",
    "/api/sessions/{session_id}",
    "/api/sessions/{session_id}/events",
    "/api/sessions/{session_id}/messages",
    "/api/approvals",
    "/api/approvals/{approval_id}",
    "/api/hosts",
    "/api/hosts/{host}/file",
    "/api/hosts/{host}/todos",
    "/api/hosts/{host}/handoffs",
    "/api/todos/{todo_id}/close",
    "/api/conclusions",
    "/api/evals",
    "/api/evals/{eval_id}",
    "/api/loop/status",
    "/api/loop/ledger",
    "/api/health",
    "/api/alerts",
)


def _fuzz(live: Live, check: Callable[[schemathesis.Case], str | None]) -> tuple[int, list[str]]:
    schema = schemathesis.openapi.from_url(f"{live.base_url}/openapi.json")
    calls = 0
    problems: list[str] = []
    for result in schema.get_all_operations():
        op = result.ok()

        @given(case=op.as_strategy())
        @FAST
        def run(case: schemathesis.Case) -> None:
            nonlocal calls
            calls += 1
            problem = check(case)
            if problem:
                problems.append(problem)

        run()
    return calls, problems


def test_schema_covers_every_resource(live: Live) -> None:
    with live.client() as c:
        paths = c.get("/openapi.json").json()["paths"]
    assert set(RESOURCES) <= set(paths), set(RESOURCES) - set(paths)


def test_no_server_error_with_token(live: Live) -> None:
    def check(case: schemathesis.Case) -> str | None:
        resp = case.call(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=15)
        if resp.status_code >= 500:
            return f"{case.method} {case.formatted_path} -> {resp.status_code}: {resp.text[:200]}"
        return None

    calls, problems = _fuzz(live, check)
    assert calls >= 5 * len(RESOURCES)
    assert problems == []


def test_nothing_readable_without_token(live: Live) -> None:
    def check(case: schemathesis.Case) -> str | None:
        resp = case.call(timeout=15)
        want = 200 if case.path == "/api/health" else 401
        if resp.status_code != want:
            return f"{case.method} {case.formatted_path} -> {resp.status_code}, wanted {want}"
        return None

    calls, problems = _fuzz(live, check)
    assert calls >= 5 * len(RESOURCES)
    assert problems == []
