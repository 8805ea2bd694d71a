"""The regression gate: the rulebook brain passes every public card, scored as `pivot eval` does.

A card joins evals/incidents/ only when it passes every time; this test fails the moment a change
to signatures, rules or the graph stops one from passing.
"""

from __future__ import annotations

import sys

import pytest

from evals.harness import EvalOptions, evaluate
from tests.agent.conftest import CARDS


def test_rulebook_passes_every_public_card() -> None:
    run = evaluate([str(CARDS)], EvalOptions(brain="rulebook", jobs=1))
    assert len(run.results) == len(list(CARDS.glob("*.yaml")))  # every card, not "enough"
    assert not [r for r in run.results if r.error], [r.error for r in run.results if r.error]
    failed = [
        f"{r.id}: expected {r.expected}, got {r.got} ({r.status}); evidence_ok={r.evidence_ok} "
        f"ruled_out_ok={r.ruled_out_ok}"
        for r in run.results
        if not r.passed
    ]
    assert not failed, "\n".join(failed)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__]))
