"""Tell someone: a JSON POST to a webhook (Slack's incoming webhooks read `text`) and the bell.

A failed POST is reported, never raised: the verdict is already printed, and a watch that
exits 1 must not turn into a traceback because the chat service was down.
"""

from __future__ import annotations

import sys

import httpx

from watch.outcome import Outcome


def post(url: str, outcome: Outcome, timeout_s: float = 10.0) -> str | None:
    """POST the outcome; returns None on a 2xx, else what went wrong."""
    try:
        r = httpx.post(url, json=outcome.webhook_body(), timeout=timeout_s)
    except httpx.HTTPError as exc:
        return f"--notify {url}: {type(exc).__name__}: {exc}"
    if r.is_success:
        return None
    return f"--notify {url}: HTTP {r.status_code} {r.text[:200]}"


def bell() -> None:
    """The terminal bell, on stderr (stdout may be a pipe reading --json)."""
    sys.stderr.write("\a")
    sys.stderr.flush()
