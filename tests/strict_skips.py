"""In CI a test that needs a real component (sshd, Chromium, PostgreSQL, tmux, Alertmanager)
fails, never skips.

A skipped test proves nothing: CI passing on "sshd cannot start here" would hide that the SSH
path was never exercised. Outside CI (a laptop without Chromium) the skip stays a skip. CI is
told by the `CI` environment variable, which scripts/test.sh sets.
"""

from __future__ import annotations

import os
import re
from collections.abc import Generator
from typing import Any

import pytest

#: A skip reason naming one of these is a missing real component.
REQUIRED = re.compile(
    r"(?i)\bsshd\b|\bopenssh\b|chrom(?:e|ium)|playwright|postgres|\bpsql\b|tmux|\bpodman\b|alertmanager"
)


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def skip_reason(report: pytest.TestReport) -> str:
    longrepr: Any = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr or "")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Any, None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if not (report.skipped and in_ci()) or hasattr(report, "wasxfail"):
        return
    reason = skip_reason(report)
    if REQUIRED.search(reason):
        report.outcome = "failed"
        report.longrepr = (
            f"a required real component is missing in CI (a skip is a failure): {reason}"
        )
