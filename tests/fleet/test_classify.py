"""How one host's report becomes a row of the fleet table: a small pure rule, case by case."""

from __future__ import annotations

import pytest

from agent.fleet import Health, HostOutcome, classify
from store.records import Evidence, Report

LINE = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."


def _report(status: str, root_cause: str | None = None) -> Report:
    return Report(
        session_id="s1",
        host="node-1",
        symptom="sweep",
        status=status,  # type: ignore[arg-type]
        root_cause=root_cause,
        evidence=[Evidence(observation="o3", line=LINE)] if root_cause else [],
    )


@pytest.mark.parametrize(
    "status, cause, health, why",
    [
        ("concluded", "cuda_oom_runtime", Health.unhealthy, f"cuda_oom_runtime: {LINE}"),
        (
            "awaiting_approval",
            "config_changed",
            Health.unhealthy,
            f"config_changed: {LINE} (paused for a fix: pivot investigate --resume s1 --approve)",
        ),
        ("awaiting_approval", None, Health.healthy, "no failure proven (awaiting_approval)"),
        (
            "insufficient_evidence",
            None,
            Health.healthy,
            "no failure proven (insufficient_evidence)",
        ),
        ("budget_exhausted", None, Health.healthy, "no failure proven (budget_exhausted)"),
    ],
)
def test_a_report_becomes_one_row(status: str, cause: str | None, health: Health, why: str) -> None:
    row = classify(_report(status, cause), 1.5)
    assert (row.host, row.health, row.why, row.session_id) == ("node-1", health, why, "s1")


def test_a_host_that_did_not_answer_says_the_error_and_the_fix() -> None:
    row = HostOutcome(
        host="node-2",
        health=Health.no_answer,
        status="no_answer",
        error="cannot connect to 10.0.0.2:22 (host node-2): Connection refused",
        fix="check that sshd runs on node-2",
    )
    assert row.why == (
        "did not answer: cannot connect to 10.0.0.2:22 (host node-2): Connection refused"
        " — check that sshd runs on node-2"
    )
