"""The public benchmark (evals/incidents/) is data that judges the agent, so it must be honest data.

Every card loads through the same model the harness uses, every expected evidence string really
occurs in what a tool could read on that host, and the set covers the whole taxonomy and every
engine. A card that breaks any of these would score agents against facts the host never showed.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from cards.model import ENGINES, IncidentCard, Snapshots, load_card, snapshot_texts
from cards.taxonomy import LABELS

CARD_DIR = Path(__file__).resolve().parents[1] / "evals" / "incidents"
CARD_PATHS = sorted(CARD_DIR.glob("*.yaml"))
MIN_CARDS = 40  # the floor; the folder holds more
MIN_PER_LABEL = 2


def _snapshots(value: Snapshots | None) -> list[str]:
    """Every text of a value: one text, read-ordered snapshots or timed `{at, text}` ones."""
    return snapshot_texts(value)


def host_texts(card: IncidentCard) -> list[str]:
    """Every text a tool can read from the card's host: all snapshots of every key."""
    h = card.host
    texts: list[str] = []
    for value in (h.nvidia_smi, h.nvidia_smi_full, h.ps, h.dmesg, h.env):
        texts += _snapshots(value)
    for value in (*h.files.values(), *h.commands.values()):
        texts += _snapshots(value)
    return texts


@pytest.fixture(scope="module")
def cards() -> list[IncidentCard]:
    return [load_card(p) for p in CARD_PATHS]


@pytest.mark.parametrize("path", CARD_PATHS, ids=[p.stem for p in CARD_PATHS])
def test_card_loads_and_evidence_is_on_the_host(path: Path) -> None:
    card = load_card(path)  # validates the schema and id == file name
    assert card.expected is not None, f"{path.name}: a benchmark card needs expected"
    exp = card.expected
    texts = host_texts(card)
    assert texts, f"{path.name}: the host section is empty"
    missing = [ev for ev in exp.evidence if not any(ev in t for t in texts)]
    assert not missing, f"{path.name}: evidence not found verbatim in host text: {missing}"
    assert exp.root_cause not in exp.wrong, f"{path.name}: root cause listed as wrong"
    assert exp.root_cause not in exp.ruled_out, f"{path.name}: root cause listed as ruled out"
    clash = set(exp.also_right) & set(exp.ruled_out)
    assert not clash, f"{path.name}: {sorted(clash)} is both also_right and ruled_out"
    assert card.source.strip(), f"{path.name}: source is empty"


def test_public_cards_name_their_thread(cards: list[IncidentCard]) -> None:
    """A card from public material points at it; a capture or seed says so in its source."""
    for card in cards:
        src = card.source
        public = re.match(r"https://github\.com/\S+/(issues|pull)/\d+", src) or re.match(
            r"https://forums\.developer\.nvidia\.com/t/\S+", src
        )
        assert public or src.startswith(("captured on", "seed:")), (
            f"{card.id}: source is neither a thread URL nor a capture/seed note: {src!r}"
        )


def test_ids_unique(cards: list[IncidentCard]) -> None:
    dupes = [i for i, n in Counter(c.id for c in cards).items() if n > 1]
    assert not dupes, f"duplicate card ids: {dupes}"


def test_coverage_of_labels_and_engines(cards: list[IncidentCard]) -> None:
    assert len(cards) >= MIN_CARDS, f"only {len(cards)} cards; the benchmark needs >= {MIN_CARDS}"
    per_label = Counter(c.expected.root_cause for c in cards if c.expected)
    thin = {label: per_label.get(label, 0) for label in LABELS if per_label.get(label, 0) < 2}
    assert not thin, f"labels with fewer than {MIN_PER_LABEL} cards: {thin}"
    engines = {c.engine for c in cards}
    assert {"sglang", "vllm", "trtllm", "torch"} <= engines, f"engines present: {engines}"
    assert engines <= set(ENGINES)


def test_nccl_centred_cards_present(cards: list[IncidentCard]) -> None:
    nccl = [c for c in cards if any("NCCL" in t for t in host_texts(c))]
    assert any(c.expected and c.expected.root_cause == "nccl_failure" for c in nccl)
    assert any(c.expected and c.expected.root_cause == "shm_too_small" for c in nccl)


def test_still_starting_cards_show_a_live_server_that_progresses(cards: list[IncidentCard]) -> None:
    """'Still starting' is only fair to ask when the host shows a live process and a growing log."""
    for card in cards:
        if not card.expected or card.expected.root_cause != "still_starting":
            continue
        last_ps = _snapshots(card.host.ps)[-1]
        assert len(last_ps.strip().splitlines()) > 1, f"{card.id}: ps shows no process"
        grows = [t for v in card.host.files.values() if len(t := _snapshots(v)) >= 2]
        assert grows, f"{card.id}: no file with two or more snapshots"
        assert any(len(t[-1]) > len(t[0]) for t in grows), f"{card.id}: the log does not grow"


def test_index_lists_every_card_once(cards: list[IncidentCard]) -> None:
    index = (CARD_DIR / "INDEX.md").read_text(encoding="utf-8")
    # the engine column holds any registry name (tools/engines.yaml), dots included (llama.cpp)
    rows = re.findall(
        r"^\| ([a-z0-9][a-z0-9-]*) \| ([a-z_]+) \| ([a-z][a-z0-9.-]*) \|", index, re.M
    )
    rows = [r for r in rows if r[0] != "id"]  # the table's header row
    listed = Counter(r[0] for r in rows)
    assert set(listed) == {c.id for c in cards}, "INDEX.md and the card files disagree"
    assert all(n == 1 for n in listed.values()), "a card is listed twice in INDEX.md"
    by_id = {c.id: c for c in cards}
    for cid, label, engine in rows:
        card = by_id[cid]
        assert card.expected and (label, engine) == (card.expected.root_cause, card.engine), cid


def test_card_format_extensions_load(tmp_path: Path) -> None:
    """Timed snapshots and expected.also_right load; a bad `at` order or label is refused."""
    from cards.model import CardError

    body = """
id: {id}
title: t
source: "seed: test"
engine: sglang
symptom: s
host:
  files:
    /l.log:
      - {{at: 0, text: "a\\n"}}
      - {{at: {later}, text: "a\\nb\\n"}}
expected:
  root_cause: still_starting
  evidence: ["b"]
  also_right: [{also}]
"""
    good = tmp_path / "good.yaml"
    good.write_text(body.format(id="good", later=4, also="killed_externally"))
    card = load_card(good)
    assert card.expected and card.expected.also_right == ["killed_externally"]
    assert _snapshots(card.host.files["/l.log"]) == ["a\n", "a\nb\n"]
    for name, later, also, why in (
        ("order", 0.5, "killed_externally", "time order"),
        ("label", 4, "maybe_oom", "unknown labels"),
        ("same", 4, "still_starting", "also the root cause"),
    ):
        bad = tmp_path / f"{name}.yaml"
        bad.write_text(body.format(id=name, later=later, also=also).replace("at: 0,", "at: 1,"))
        with pytest.raises(CardError, match=why):
            load_card(bad)
