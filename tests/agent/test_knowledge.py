"""Knowledge and prompts are data: every file loads (or renders) and says something coherent."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from agent.checks import catalogue, deciding_checks
from cards.taxonomy import LABELS, TAXONOMY
from prompts import names, render
from tools import engines
from tools.registry import TOOLS

KB = Path(__file__).resolve().parents[2] / "agent" / "knowledge"


def _labels_in(obj: object) -> set[str]:
    if isinstance(obj, str):
        return {obj} if obj in LABELS else set()
    if isinstance(obj, dict):
        return (
            set().union(*(_labels_in(k) | _labels_in(v) for k, v in obj.items())) if obj else set()
        )
    if isinstance(obj, list):
        return set().union(*(_labels_in(x) for x in obj)) if obj else set()
    return set()


def test_relation_files_name_only_taxonomy_labels() -> None:
    for name in ("explains.yaml", "exclusive.yaml", "rivals.yaml"):
        data = yaml.safe_load((KB / name).read_text())
        words = set(re.findall(r"\b[a-z]+(?:_[a-z]+)+\b", yaml.safe_dump(data))) - {"symptom_words"}
        assert words <= set(LABELS), f"{name}: unknown labels {words - set(LABELS)}"


def test_rival_and_followup_patterns_compile_and_name_real_tools() -> None:
    rivals = yaml.safe_load((KB / "rivals.yaml").read_text())
    assert set(rivals["always"]) <= set(LABELS)
    for pattern in rivals["symptom_words"]:
        re.compile(pattern)
    for pattern, tool in yaml.safe_load((KB / "followups.yaml").read_text()).items():
        re.compile(pattern)
        assert tool in TOOLS, tool
    for pattern in engines.launch_patterns():  # launch markers live in the engine registry
        re.compile(pattern)


def test_every_check_uses_a_registered_read_only_tool_and_separates_real_labels() -> None:
    for c in catalogue():
        assert c["tool"] in TOOLS and not TOOLS[c["tool"]].changing, c["id"]
        assert set(c["separates"]) <= set(LABELS), c["id"]
    assert set(deciding_checks()) <= set(LABELS)


def test_every_prompt_renders() -> None:
    assert {"system.j2", "decide.j2", "follow_up.j2", "answer.j2"} <= set(names())
    assert "kv_cache_no_room" in render("system.j2", taxonomy=TAXONOMY, resource_wait_s=300.0)
    text = render(
        "decide.j2",
        symptom="s",
        notes=["n"],
        board=[],
        options=[],
        changes=[],
        rejections=[],
        budget={"rounds": 3},
        observations=[{"id": "o1", "tool": "log_tail", "args": {}, "ok": True, "lines": ["x"]}],
    )
    assert "UNTRUSTED HOST OUTPUT" in text and "o1" in text
    assert "why not nccl?" in render("follow_up.j2", symptom="s", text="why not nccl?", board=[])


def test_question_patterns_load_and_the_answer_prompt_renders() -> None:
    from agent.followup import _patterns

    assert set(_patterns()) == {"check", "approval", "next_check", "why"}
    text = render(
        "answer.j2",
        question="why restore?",
        symptom="s",
        facts="f",
        cites=[{"observation": "o1", "line": "x"}],
        diff=["-a", "+b"],
    )
    assert 'o1: "x"' in text and "+b" in text


def test_the_rulebook_numbers_load_from_one_table_and_disk_full_is_one_number() -> None:
    from agent import board
    from agent.rules.common import WEIGHT
    from agent.signatures import load_signatures
    from agent.thresholds import THRESHOLDS, load
    from tools.disk import FULL_PCT

    assert load() == THRESHOLDS
    assert THRESHOLDS.signature_weight.model_dump() == WEIGHT
    assert (board.SUPPORTED_AT, board.REFUTED_AT) == (1.5, -2.0)
    # one fatal line is enough to support a label; one weak line never is
    assert WEIGHT["fatal"] >= board.SUPPORTED_AT > WEIGHT["weak"]
    df = next(s for s in load_signatures() if s.id == "df-filesystem-full")
    row = "/dev/vdb         20G   19G   1G {}% /workspace"
    assert [p for p in range(80, 101) if df.matches(row.format(p))] == list(range(FULL_PCT, 101))
