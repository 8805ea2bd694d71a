"""Scoring is the contract of the benchmark: every rule of issue 4, one outcome per run."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from cards.model import IncidentCard
from cards.taxonomy import LABELS
from evals.scoring import CardResult, confusion, counts_line, pass_at_k, score, summarize
from store.records import Evidence, HypothesisView, Report

OOM_LINE = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 896.00 MiB"


def card(**expected: Any) -> IncidentCard:
    exp = {
        "root_cause": "gpu_oom_weights",
        "evidence": ["CUDA out of memory"],
        "ruled_out": ["stale_gpu_process"],
        "wrong": ["still_starting"],
    }
    exp.update(expected)
    return IncidentCard.model_validate(
        {
            "id": "c1",
            "title": "t",
            "source": "s",
            "engine": "vllm",
            "symptom": "it died",
            "transcript": [{"did": "tail log"}, {"did": "nvidia-smi"}],
            "expected": exp,
        }
    )


def report(**kw: Any) -> Report:
    base: dict[str, Any] = {
        "session_id": "s",
        "host": "replay:c1",
        "symptom": "it died",
        "status": "concluded",
        "root_cause": "gpu_oom_weights",
        "evidence": [Evidence(observation="o3", line=OOM_LINE)],
        "ruled_out": ["stale_gpu_process", "still_starting"],
        "hypotheses": [HypothesisView(label="gpu_oom_weights", status="confirmed", score=5)],
        "tool_calls": 7,
        "rounds": 2,
    }
    base.update(kw)
    return Report(**base)


def test_a_correct_proven_conclusion_passes() -> None:
    r = score(card(), report(), path="c1.yaml")
    assert (r.passed, r.outcome, r.evidence_ok, r.ruled_out_ok, r.wrong) == (
        True,
        "passed",
        True,
        True,
        False,
    )
    assert (r.expected, r.got, r.rounds, r.tool_calls, r.transcript_steps) == (
        "gpu_oom_weights",
        "gpu_oom_weights",
        2,
        7,
        2,
    )


def test_another_label_is_wrong() -> None:
    r = score(card(), report(root_cause="cuda_oom_runtime"))
    assert (r.passed, r.wrong, r.outcome, r.got) == (False, True, "wrong", "cuda_oom_runtime")


def test_a_label_the_card_calls_wrong_fails_even_if_expected() -> None:
    r = score(
        card(root_cause="still_starting", wrong=["still_starting"]),
        report(root_cause="still_starting"),
    )
    assert (r.passed, r.wrong, r.outcome) == (False, True, "wrong")


def test_no_conclusion_is_insufficient_not_wrong() -> None:
    for status in ("insufficient_evidence", "budget_exhausted", "awaiting_approval"):
        r = score(card(), report(status=status, root_cause=None))
        assert (r.passed, r.wrong, r.outcome, r.got) == (False, False, "insufficient", None)
    # a root_cause left in a non-concluded report is not an answer
    r = score(card(), report(status="budget_exhausted", root_cause="cuda_oom_runtime"))
    assert (r.wrong, r.outcome, r.got) == (False, "insufficient", None)


def test_right_label_without_expected_evidence_is_unproven() -> None:
    r = score(card(), report(evidence=[Evidence(observation="o1", line="Loading weights")]))
    assert (r.passed, r.evidence_ok, r.outcome) == (False, False, "unproven")


def test_evidence_is_a_substring_of_any_cited_line_case_sensitive() -> None:
    ev = [
        Evidence(observation="o1", line="x"),
        Evidence(observation="o2", line=f"ERROR {OOM_LINE}"),
    ]
    assert score(card(), report(evidence=ev)).evidence_ok
    assert not score(card(evidence=["cuda OUT of memory"]), report()).evidence_ok


def test_every_expected_rival_must_be_ruled_out() -> None:
    r = score(card(ruled_out=["stale_gpu_process", "host_oom_killed"]), report())
    assert (r.passed, r.ruled_out_ok, r.missing_ruled_out, r.outcome) == (
        False,
        False,
        ["host_oom_killed"],
        "unproven",
    )


def test_a_card_without_expected_is_an_error_naming_the_file() -> None:
    c = card().model_copy(update={"expected": None})
    r = score(c, report(), path="/x/draft.yaml")
    assert r.outcome == "error" and not r.passed
    assert "/x/draft.yaml" in (r.error or "") and "expected" in (r.error or "")


@given(
    status=st.sampled_from(["concluded", "insufficient_evidence", "budget_exhausted"]),
    got=st.sampled_from(LABELS),
    cite=st.booleans(),
    refuted=st.booleans(),
    in_wrong=st.booleans(),
    in_also=st.booleans(),
)
def test_exactly_one_outcome_and_passed_iff_every_rule_holds(
    status: str, got: str, cite: bool, refuted: bool, in_wrong: bool, in_also: bool
) -> None:
    also = in_also and not in_wrong and got != "gpu_oom_weights"
    c = card(wrong=[got] if in_wrong else [], also_right=[got] if also else [])
    rep = report(
        status=status,
        root_cause=got,
        evidence=[Evidence(observation="o1", line=OOM_LINE if cite else "nothing")],
        ruled_out=["stale_gpu_process"] if refuted else [],
    )
    r = score(c, rep)
    rules = status == "concluded" and got == "gpu_oom_weights" and cite and refuted and not in_wrong
    assert r.passed == rules
    assert (r.outcome == "passed") == r.passed
    assert r.wrong == (
        status == "concluded" and not also and (got != "gpu_oom_weights" or in_wrong)
    )
    assert r.also_right == (status == "concluded" and also)
    if r.also_right:
        assert r.outcome == "unproven"
    assert (r.outcome == "insufficient") == (status != "concluded")


def test_an_also_right_label_is_unproven_never_wrong_never_a_pass() -> None:
    c = card(also_right=["cuda_oom_runtime"])
    r = score(c, report(root_cause="cuda_oom_runtime"))
    assert (r.passed, r.wrong, r.also_right, r.outcome) == (False, False, True, "unproven")
    # even with the expected evidence cited and every rival refuted: a pass needs root_cause
    assert r.evidence_ok and r.ruled_out_ok
    # a label outside also_right is still wrong, and the root cause still passes
    assert score(c, report(root_cause="disk_full")).outcome == "wrong"
    ok = score(c, report())
    assert (ok.outcome, ok.also_right) == ("passed", False)
    # no conclusion stays insufficient whatever also_right says
    assert score(c, report(status="insufficient_evidence")).outcome == "insufficient"


def test_also_right_must_not_overlap_the_root_cause_or_wrong() -> None:
    import pytest

    for bad in ({"also_right": ["gpu_oom_weights"]}, {"also_right": ["still_starting"]}):
        with pytest.raises(ValueError, match="also_right"):
            card(**bad)
    with pytest.raises(ValueError, match="unknown labels"):
        card(also_right=["oom_maybe"])


def test_summary_counts_also_right_among_the_unproven() -> None:
    results = [
        _res("a", "passed", True),
        _res("b", "unproven", also_right=True),
        _res("c", "unproven"),
        _res("d", "wrong", wrong=True),
        _res("e", "insufficient"),
        _res("f", "insufficient"),
    ]
    s = summarize(results, seconds=1.0)
    assert (s.passed, s.unproven, s.also_right, s.wrong, s.insufficient) == (1, 2, 1, 1, 2)
    assert counts_line(s) == "1 pass / 2 unproven (1 also-right label) / 1 wrong / 2 insufficient"
    assert s.model_dump()["also_right"] == 1  # in the JSON summary


def test_wrong_costs_more_than_unsure() -> None:
    """The cost figure: right +1, insufficient 0, wrong -3; one wrong undoes three rights."""
    results = [
        CardResult(id="a", status="concluded", outcome="passed", expected="x", got="x"),
        CardResult(id="b", status="concluded", outcome="unproven", expected="x", got="x"),
        CardResult(id="c", status="concluded", outcome="wrong", expected="x", got="y"),
        CardResult(id="d", status="insufficient_evidence", outcome="insufficient", expected="x"),
    ]
    s = summarize(results, seconds=1.0)
    assert (s.right_label, s.wrong, s.cost) == (2, 1, 2 - 3)


def _res(i: str, outcome: str, passed: bool = False, **kw: Any) -> CardResult:
    return CardResult(
        id=i, path=f"{i}.yaml", status="concluded", outcome=outcome, passed=passed, **kw
    )  # type: ignore[arg-type]


def test_summary_counts_medians_and_rate() -> None:
    results = [
        _res("a", "passed", True, rounds=1, tool_calls=6, expected="disk_full", got="disk_full"),
        _res("b", "wrong", rounds=3, tool_calls=10, expected="disk_full", got="port_in_use"),
        _res("c", "insufficient", rounds=5, tool_calls=12, expected="port_in_use"),
        _res("d", "unproven", rounds=2, tool_calls=8, expected="disk_full", got="disk_full"),
        CardResult(id="e", path="e.yaml", status="error", error="e.yaml: bad"),
    ]
    s = summarize(results, seconds=2.0)
    assert (s.cards, s.passed, s.wrong, s.insufficient, s.unproven, s.errors) == (5, 1, 1, 1, 1, 1)
    assert s.accuracy == 0.2
    assert s.median_rounds == 2.5 and s.median_tool_calls == 9.0
    assert s.cards_per_second == 2.0  # 4 runs in 2 s; the bad card never ran
    assert s.pass_at_k is None
    m = confusion(results)
    assert m == {
        "disk_full": {"disk_full": 2, "port_in_use": 1},
        "port_in_use": {"insufficient": 1},
    }


def test_pass_at_k_over_repeats() -> None:
    results = [
        _res("a", "passed", True, attempt=0),
        _res("a", "wrong", attempt=1),
        _res("b", "passed", True, attempt=0),
        _res("b", "passed", True, attempt=1),
        _res("c", "insufficient", attempt=0),
        _res("c", "insufficient", attempt=1),
    ]
    per = {p.id: p for p in pass_at_k(results)}
    assert (per["a"].passes, per["a"].pass_at_k, per["a"].pass_all, per["a"].pass_at_1) == (
        1,
        True,
        False,
        0.5,
    )
    assert per["b"].pass_all and not per["c"].pass_at_k
    s = summarize(results, seconds=1.0, repeat=2)
    assert s.cards == 3 and s.passed == 2  # first attempts only
    assert s.pass_at_k == round(2 / 3, 4) and s.pass_all_k == round(1 / 3, 4)
    assert s.mean_pass_at_1 == 0.5
