"""The failure-signature knowledge base: log patterns kept as data (knowledge/signatures.yaml).

A signature says which taxonomy label a log line points to and how strongly. `fatal` lines end a
process by themselves (a traceback's final error, "Killed", a bind failure); `strong` lines
point at a cause but need the process gone or a fatal line to call it a crash; `weak` lines are
hints (deprecation warnings, "Ignore import error") that never decide anything alone; `progress`
lines show a server that is still working (loading shards, capturing graphs).
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, Field, field_validator, model_validator

from tools.taxonomy import LABELS

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

    @field_validator("label")
    @classmethod
    def _label(cls, v: str | None) -> str | None:
        if v is not None and v not in LABELS:
            raise ValueError(f"unknown label {v!r}")
        return v

    @model_validator(mode="after")
    def _compiles_and_matches(self) -> Signature:
        for p in [*self.patterns, *self.unless]:
            try:
                re.compile(p)
            except re.error as exc:
                raise ValueError(f"{self.id}: bad regex {p!r}: {exc}") from exc
        for ex in self.examples:
            if not self.matches(ex):
                raise ValueError(f"{self.id}: example does not match: {ex!r}")
        if self.strength in ("fatal", "strong", "weak") and self.label is None:
            raise ValueError(f"{self.id}: a {self.strength} signature needs a label")
        return self

    def matches(self, line: str) -> bool:
        return any(r.search(line) for r in _compiled(tuple(self.patterns))) and not any(
            r.search(line) for r in _compiled(tuple(self.unless))
        )


@lru_cache(maxsize=4096)
def _compiled(patterns: tuple[str, ...]) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(p) for p in patterns)


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
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
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
    """Every (line, signature) hit, in line order; one line may hit several signatures."""
    sigs = signatures if signatures is not None else load_signatures()
    hits: list[Match] = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        for s in sigs:
            if s.matches(line):
                hits.append(
                    Match(signature=s.id, label=s.label, strength=s.strength, line=line, line_no=i)
                )
    return hits
