"""The harness end to end: real cards, the real graph on ReplayHost, real worker processes.

Accuracy on the public cards is not asserted here (the signature KB moves under us); what is
asserted is that the harness scores what the agent really did. The fixture cards under
tests/evals/cards are blatant (a CUDA OOM while loading weights, a port already in use).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from markupsafe import escape

from evals.harness import EvalOptions, discover, evaluate, load_cards
from evals.report_html import render

HERE = Path(__file__).resolve().parent
CARDS = HERE / "cards"
BAD = HERE / "bad_cards"


def test_discover_takes_files_and_dirs_once_and_refuses_missing_paths(tmp_path: Path) -> None:
    one = next(CARDS.glob("*.yaml"))
    found = discover([CARDS, one, BAD])
    assert found == sorted(set(found), key=found.index)  # no duplicates
    assert {p.name for p in found} >= {one.name, "fixture-bad-label.yaml"}
    (tmp_path / "notes.txt").write_text("not a card")
    assert discover([tmp_path]) == []
    with pytest.raises(ValueError, match="nope.yaml"):
        discover([tmp_path / "nope.yaml"])


def test_bad_cards_are_errors_naming_file_and_key_and_the_rest_still_run(tmp_path: Path) -> None:
    (tmp_path / "broken-yaml.yaml").write_text("id: [unclosed\n")
    (tmp_path / "wrong-id.yaml").write_text((CARDS / "fixture-sglang-port-in-use.yaml").read_text())
    seen: list[str] = []
    run = evaluate([CARDS, BAD, tmp_path], on_result=lambda r: seen.append(r.outcome))
    errors = {Path(r.path).name: r.error or "" for r in run.results if r.outcome == "error"}
    assert set(errors) == {"fixture-bad-label.yaml", "broken-yaml.yaml", "wrong-id.yaml"}
    assert "expected.root_cause" in errors["fixture-bad-label.yaml"]
    assert "gremlins" in errors["fixture-bad-label.yaml"]
    assert "cannot read YAML" in errors["broken-yaml.yaml"]
    assert "id:" in errors["wrong-id.yaml"] and "file name" in errors["wrong-id.yaml"]
    s = run.summary
    assert s.errors == 3 and s.cards == 5
    assert s.passed + s.wrong + s.insufficient + s.unproven + s.errors == s.cards
    assert len(seen) == 5  # every card reported live, errors included
    ran = [r for r in run.results if r.outcome != "error"]
    assert len(ran) == 2 and all(r.tool_calls > 0 for r in ran)
    assert s.cards_per_second > 0


def _variant(src: Path, dst_dir: Path, name: str, expected: dict[str, Any]) -> Path:
    data = yaml.safe_load(src.read_text())
    data["id"] = name
    data["expected"] = expected
    out = dst_dir / f"{name}.yaml"
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


def test_scores_follow_what_the_agent_really_concluded(tmp_path: Path) -> None:
    """Take the agent's own conclusion on a card, then re-ask with expectations built around it:
    the harness must pass the matching one and fail each mismatch for the right reason."""
    first = evaluate([CARDS])
    concluded = [r for r in first.results if r.status == "concluded" and r.evidence]
    assert concluded, "the agent concluded on no blatant fixture card"
    r0 = concluded[0]
    label, line = r0.got, r0.evidence[0].line
    other = next(lbl for lbl in ("disk_full", "port_in_use") if lbl != label)
    src = Path(r0.path)
    _variant(src, tmp_path, "v-match", {"root_cause": label, "evidence": [line[5:40] or line]})
    _variant(src, tmp_path, "v-other-label", {"root_cause": other, "evidence": [line]})
    _variant(
        src, tmp_path, "v-called-wrong", {"root_cause": label, "evidence": [line], "wrong": [label]}
    )
    _variant(src, tmp_path, "v-no-evidence", {"root_cause": label, "evidence": ["zzz never"]})
    _variant(
        src,
        tmp_path,
        "v-unrefuted-rival",
        {"root_cause": label, "evidence": [line], "ruled_out": [other]},
    )
    run = evaluate([tmp_path])
    by = {r.id: r for r in run.results}
    assert by["v-match"].outcome == "passed", by["v-match"]
    assert by["v-other-label"].outcome == "wrong" and by["v-other-label"].got == label
    assert by["v-called-wrong"].outcome == "wrong"
    assert by["v-no-evidence"].outcome == "unproven" and not by["v-no-evidence"].evidence_ok
    unref = by["v-unrefuted-rival"]
    if other in unref.ruled_out:  # the agent did refute it: then it passes, honestly
        assert unref.outcome == "passed"
    else:
        assert unref.outcome == "unproven" and unref.missing_ruled_out == [other]
    assert run.summary.passed == sum(r.passed for r in run.results)


def test_an_also_right_conclusion_scores_unproven_in_json_html_and_cli(tmp_path: Path) -> None:
    """A card that calls the agent's own label defensible (expected.also_right) but names another
    root cause: the run is unproven, not wrong, in every report."""
    import json

    from rich.console import Console

    from evals.cli import _print_summary

    first = evaluate([CARDS / "fixture-sglang-port-in-use.yaml"]).results[0]
    assert first.status == "concluded" and first.got
    label, line = first.got, first.evidence[0].line
    other = next(lbl for lbl in ("stale_gpu_process", "disk_full") if lbl != label)
    src = Path(first.path)
    _variant(
        src, tmp_path, "v-also", {"root_cause": other, "evidence": [line], "also_right": [label]}
    )
    _variant(src, tmp_path, "v-not-also", {"root_cause": other, "evidence": [line]})
    run = evaluate([tmp_path])
    by = {r.id: r for r in run.results}
    assert (by["v-also"].outcome, by["v-also"].also_right, by["v-also"].wrong) == (
        "unproven",
        True,
        False,
    )
    assert by["v-not-also"].outcome == "wrong" and not by["v-not-also"].also_right
    s = run.summary
    assert (s.passed, s.unproven, s.also_right, s.wrong, s.insufficient) == (0, 1, 1, 1, 0)
    data = json.loads(run.model_dump_json())
    assert data["summary"]["also_right"] == 1 and data["summary"]["unproven"] == 1
    assert {r["id"]: r["also_right"] for r in data["results"]} == {
        "v-also": True,
        "v-not-also": False,
    }
    html = render(run)
    assert "0</b> pass / <b>1</b> unproven" in html and "(1 also-right label)" in html
    assert "unproven (also right)" in html
    console = Console(record=True, width=200)
    _print_summary(console, run)
    text = console.export_text()
    assert "0 pass / 1 unproven (1 also-right label) / 1 wrong / 0 insufficient" in text
    assert "also_right" in text  # the card's row says why it is not a pass


def test_worker_processes_give_the_same_scores_as_one_process(tmp_path: Path) -> None:
    src = CARDS / "fixture-vllm-weights-oom.yaml"
    for i in range(4):  # enough cards that both workers get some
        data = yaml.safe_load(src.read_text())
        data["id"] = f"copy-{i}"
        (tmp_path / f"copy-{i}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    shutil.copy(CARDS / "fixture-sglang-port-in-use.yaml", tmp_path)
    one = evaluate([tmp_path], EvalOptions(jobs=1))
    two = evaluate([tmp_path], EvalOptions(jobs=2))

    def key(run):  # type: ignore[no-untyped-def]
        return [(r.id, r.outcome, r.got, r.tool_calls, r.rounds) for r in run.results]

    assert key(one) == key(two)
    assert len(two.results) == 5


def test_repeat_reports_pass_at_k_per_card() -> None:
    run = evaluate([CARDS], EvalOptions(repeat=2))
    assert len(run.results) == 4 and {r.attempt for r in run.results} == {0, 1}
    assert run.pass_at_k is not None and len(run.pass_at_k) == 2
    for p in run.pass_at_k:
        assert p.attempts == 2
        runs = [r for r in run.results if r.id == p.id]
        assert p.passes == sum(r.passed for r in runs)
    assert run.summary.repeat == 2 and run.summary.pass_at_k is not None
    assert run.summary.cards == 2


def test_runs_are_isolated_from_the_operators_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("PIVOT_HOME", str(tmp_path / "pivot-home"))
    monkeypatch.setenv("PIVOT_MEMORY_DB", str(tmp_path / "shared-memory.db"))
    evaluate([CARDS / "fixture-sglang-port-in-use.yaml"])
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_draft_cards_without_expected_are_reported_not_scored(tmp_path: Path) -> None:
    data = yaml.safe_load((CARDS / "fixture-sglang-port-in-use.yaml").read_text())
    data.pop("expected")
    data["id"] = "draft"
    (tmp_path / "draft.yaml").write_text(yaml.safe_dump(data))
    cards, errors = load_cards(discover([tmp_path]))
    assert (
        cards == [] and len(errors) == 1 and "fill expected.root_cause" in (errors[0].error or "")
    )


def test_html_report_is_self_contained_with_matrix_and_trails(tmp_path: Path) -> None:
    hostile = yaml.safe_load((CARDS / "fixture-sglang-port-in-use.yaml").read_text())
    hostile["id"] = "hostile"
    log = hostile["host"]["files"]["/data/logs/server.log"]
    hostile["host"]["files"]["/data/logs/server.log"] = log + "<script>alert(1)</script>\n"
    (tmp_path / "hostile.yaml").write_text(yaml.safe_dump(hostile, sort_keys=False))
    run = evaluate([CARDS, BAD, tmp_path])
    html = render(run)
    assert "<script" not in html and "http://" not in html and "https://" not in html
    assert "Confusion matrix" in html
    for r in run.results:
        assert r.id in html
    for r in run.results:
        for h in r.hypotheses:
            assert h.label in html
        for e in r.evidence:
            assert str(escape(e.line))[:30] in html
    assert "gremlins" in html  # the bad card's error is shown
