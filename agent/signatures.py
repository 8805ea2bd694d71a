"""The failure-signature knowledge base: log patterns kept as data (knowledge/signatures.yaml).

A signature says which taxonomy label a log line points to and how strongly. `fatal` lines end a
process by themselves (a traceback's final error, "Killed", a bind failure); `strong` lines
point at a cause but need the process gone or a fatal line to call it a crash; `weak` lines are
hints (deprecation warnings, "Ignore import error") that never decide anything alone; `progress`
lines show a server that is still working (loading shards, capturing graphs).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, PrivateAttr, field_validator, model_validator

from cards.taxonomy import LABELS
from tools import engines, yamlio

Strength = Literal["fatal", "strong", "weak", "progress", "ready"]
KB_DIR = Path(__file__).with_name("knowledge")


class Signature(BaseModel):
    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    label: str | None = Field(description="taxonomy label; None for progress/ready lines")
    strength: Strength
    engines: list[str] = Field(default_factory=lambda: ["any"])
    patterns: list[str] = Field(min_length=1, description="Python regexes, searched per line")
    unless: list[str] = Field(default_factory=list, description="a line matching these is skipped")
    meaning: str = ""
    next_step: str = ""
    source: str = ""
    examples: list[str] = Field(min_length=1, description="real lines that must match")
    supersedes: list[str] = Field(
        default_factory=list,
        description="signatures whose hits on the lines just before this one (the same chained "
        "traceback) are this error seen without its context: when this one hits, they are dropped",
    )
    leads_to: list[str] = Field(
        default_factory=list,
        description="signatures whose hits on the lines just after this one are its consequence "
        "(Open MPI's 'not enough slots', then mpi4py's MPI_ERR_SPAWN): when this one hits, they "
        "are dropped",
    )
    latent: bool = Field(
        False,
        description="a condition that does not stop the server at once (a library version "
        "mismatch): a server that worked past it and failed later failed of it",
    )
    _rx: tuple[re.Pattern[str], ...] = PrivateAttr(default=())
    _unless: tuple[re.Pattern[str], ...] = PrivateAttr(default=())
    #: lower-cased text each pattern needs; a line without any of them cannot match (fast path)
    _lits: tuple[str, ...] | None = PrivateAttr(default=None)

    @field_validator("engines")
    @classmethod
    def _engines(cls, v: list[str]) -> list[str]:
        known = set(engines.card_engines()) | engines.underlying()
        unknown = sorted(set(v) - known)
        if unknown:
            raise ValueError(f"engines {unknown} are not in tools/engines.yaml (nor any/other)")
        return v

    @field_validator("label")
    @classmethod
    def _label(cls, v: str | None) -> str | None:
        if v is not None and v not in LABELS:
            raise ValueError(f"unknown label {v!r}")
        return v

    @model_validator(mode="after")
    def _compiles_and_matches(self) -> Signature:
        try:
            self._rx = tuple(re.compile(p) for p in self.patterns)
            lits = [required_literal(p) for p in self.patterns]
            self._lits = None if any(x is None for x in lits) else tuple(x for x in lits if x)
            self._unless = tuple(re.compile(p) for p in self.unless)
        except re.error as exc:
            raise ValueError(f"{self.id}: bad regex: {exc}") from exc
        for ex in self.examples:
            if not self.matches(ex):
                raise ValueError(f"{self.id}: example does not match: {ex!r}")
        if self.strength in ("fatal", "strong", "weak") and self.label is None:
            raise ValueError(f"{self.id}: a {self.strength} signature needs a label")
        return self

    def matches(self, line: str, lower: str | None = None) -> bool:
        if self._lits is not None:
            low = lower if lower is not None else line.lower()
            if not any(lit in low for lit in self._lits):
                return False
        return any(r.search(line) for r in self._rx) and not any(
            r.search(line) for r in self._unless
        )


_META = set(".^$*+?{}[]|()")
_ESCAPED_LITERAL = set(".()[]{}*+?|^$/\\-:'\" #=<>,;!@%&~`")


def required_literal(pattern: str) -> str | None:
    """Lower-cased text that every match of `pattern` contains, or None when unsure.

    Conservative: only a literal run at the start (after `(?i)` or a `[Xx](?i:` opener, as
    docs/signatures.md asks patterns to begin) is used, and a top-level `|` gives up."""
    depth, in_class, esc = 0, False, False
    for ch in pattern:
        if esc:
            esc = False
            continue
        if ch == "\\":
            esc = True
        elif in_class:
            in_class = ch != "]"
        elif ch == "[":
            in_class = True
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "|" and depth == 0:
            return None
    p = pattern
    if p.startswith("(?i)"):
        p = p[4:]
    out = ""
    m = re.match(r"\[([A-Za-z])([A-Za-z])\]\(\?i:", p)
    if m and m.group(1).lower() == m.group(2).lower():
        out, p = m.group(1).lower(), p[m.end() :]
    i = 0
    while i < len(p):
        ch = p[i]
        if ch == "\\" and i + 1 < len(p):
            nxt = p[i + 1]
            if nxt in _ESCAPED_LITERAL:
                out += nxt
                i += 2
                continue
            break
        if ch in _META:
            if ch in "*?{" and out:
                out = out[:-1]  # the last char was optional or repeated
            break
        out += ch
        i += 1
    out = out.lower()
    return out if len(out) >= 3 else None


class SignatureFile(BaseModel):
    signatures: list[Signature]

    @model_validator(mode="after")
    def _unique(self) -> SignatureFile:
        seen: set[str] = set()
        for s in self.signatures:
            if s.id in seen:
                raise ValueError(f"duplicate signature id {s.id}")
            seen.add(s.id)
        return self


@lru_cache(maxsize=1)
def load_signatures(directory: Path = KB_DIR) -> tuple[Signature, ...]:
    """Every *.yaml under knowledge/signatures/ (one file per engine or theme)."""
    out: list[Signature] = []
    for path in sorted((directory / "signatures").glob("*.yaml")):
        data = yamlio.safe_load(path.read_text(encoding="utf-8")) or {}
        try:
            out.extend(SignatureFile.model_validate(data).signatures)
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from exc
    ids = [s.id for s in out]
    dupes = {i for i in ids if ids.count(i) > 1}
    if dupes:
        raise ValueError(f"duplicate signature ids across files: {sorted(dupes)}")
    return tuple(out)


class Match(BaseModel):
    signature: str
    label: str | None
    strength: Strength
    line: str
    line_no: int


def scan(lines: list[str], signatures: tuple[Signature, ...] | None = None) -> list[Match]:
    """Every (line, signature) hit, in line order; one line may hit several signatures.

    Observations never change once taken, and each decision re-reads them, so scans of the
    knowledge base are memoised by the lines themselves."""
    if signatures is None:
        return list(_scan_cached(tuple(lines)))
    return _scan(lines, signatures)


@lru_cache(
    maxsize=64
)  # one investigation's observations; small so evals stay honest (cold per card)
def _scan_cached(lines: tuple[str, ...]) -> tuple[Match, ...]:
    return tuple(_scan(list(lines), load_signatures()))


class _Index:
    """The knowledge base laid out for the innermost loop: plain tuples (pydantic private
    attributes are slow to read there), one regex for "does the line hold any signature's
    required literal", which signatures require each literal, and those that require none.

    Most log lines hold no literal: for them only the few without one can match (trying all ~500
    per line was a sixth of an eval's CPU). A line that does hold one used to test every
    signature's literals in turn (two million generator steps over the public cards, a tenth of
    an eval's CPU); now the line is tested once per distinct literal and only the signatures of
    the literals it holds are tried, in the knowledge base's order, as before."""

    def __init__(self, sigs: tuple[Signature, ...]) -> None:
        self.sigs = sigs
        self.every = [(s, s._rx, s._unless) for s in sigs]
        by_literal: dict[str, list[int]] = {}
        for i, s in enumerate(sigs):
            for lit in set(s._lits or ()):
                by_literal.setdefault(lit, []).append(i)
        self.literals = tuple(by_literal)
        self.by_literal = tuple(tuple(by_literal[lit]) for lit in self.literals)
        self.no_literal = tuple(i for i, s in enumerate(sigs) if s._lits is None)
        self.any_literal = _any_literal(set(self.literals))
        #: signature id -> the ids its hit supersedes (only signatures that supersede any)
        self.supersedes = {s.id: frozenset(s.supersedes) for s in sigs if s.supersedes}
        #: signature id -> the ids whose later hits are its consequence
        self.leads_to = {s.id: frozenset(s.leads_to) for s in sigs if s.leads_to}

    def candidates(self, low: str) -> Iterable[int]:
        """The signatures that may match a line (`low` is it lowercased), in order."""
        if not self.any_literal.search(low):
            return self.no_literal
        held = [self.by_literal[j] for j, lit in enumerate(self.literals) if lit in low]
        return sorted({i for group in held for i in group}.union(self.no_literal))


_COMPILED: dict[int, _Index] = {}


def _any_literal(words: set[str]) -> re.Pattern[str]:
    """One regex that finds whether a lowercased line holds any of `words`, as a trie (a word's
    shared prefixes written once), so re tests one branch per character, not one per word."""
    trie: dict[str, dict] = {}  # type: ignore[type-arg]
    for w in words:
        node = trie
        for ch in w:
            node = node.setdefault(ch, {})
        node[""] = {}

    def build(node: dict) -> str:  # type: ignore[type-arg]
        if "" in node:  # a word ends here: a search needs nothing longer
            return ""
        alts = [re.escape(ch) + build(child) for ch, child in sorted(node.items())]
        return alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"

    return re.compile(build(trie) if trie else "(?!)")


def _compiled(sigs: tuple[Signature, ...]) -> _Index:
    hit = _COMPILED.get(id(sigs))
    if hit is None or hit.sigs is not sigs:
        hit = _COMPILED[id(sigs)] = _Index(sigs)
    return hit


def _scan(lines: list[str], sigs: tuple[Signature, ...]) -> list[Match]:
    hits: list[Match] = []
    index = _compiled(sigs)
    every = index.every
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        for j in index.candidates(line.lower()):
            s, rx, unless = every[j]
            if any(r.search(line) for r in rx) and not any(r.search(line) for r in unless):
                hits.append(
                    Match(signature=s.id, label=s.label, strength=s.strength, line=line, line_no=i)
                )
    hits = _drop_superseded(hits, index.supersedes) if index.supersedes else hits
    return _drop_consequences(hits, index.leads_to) if index.leads_to else hits


#: how many lines before a superseding hit its chained traceback may reach
SUPERSEDE_REACH = 80


def _drop_superseded(hits: list[Match], supersedes: dict[str, frozenset[str]]) -> list[Match]:
    """Hits of a signature another one supersedes, on the lines just before that one's hit:
    the same error without the context the later line gives it (a chained traceback)."""
    drop: set[int] = set()
    for m in hits:
        over = supersedes.get(m.signature)
        if over:
            drop |= {
                k
                for k, h in enumerate(hits)
                if h.signature in over and m.line_no - SUPERSEDE_REACH <= h.line_no <= m.line_no
            }
    return [h for k, h in enumerate(hits) if k not in drop] if drop else hits


def _drop_consequences(hits: list[Match], leads_to: dict[str, frozenset[str]]) -> list[Match]:
    """Hits of a signature another one leads to, on the lines just after that one's hit: the
    consequence printed after its cause (the same failure told twice, the cause first)."""
    drop: set[int] = set()
    for m in hits:
        after = leads_to.get(m.signature)
        if after:
            drop |= {
                k
                for k, h in enumerate(hits)
                if h.signature in after and m.line_no <= h.line_no <= m.line_no + SUPERSEDE_REACH
            }
    return [h for k, h in enumerate(hits) if k not in drop] if drop else hits
