"""Incident cards (../shared/incident-format.md) as pydantic models.

A card freezes a host as it looked during an investigation. `ReplayHost` sees only `host`;
`expected` and `transcript` are for the eval harness and never reach a tool.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

Snapshots = str | list[str]
ENGINES = ("sglang", "vllm", "trtllm", "torch", "other")


class HostSnapshot(BaseModel):
    model_config = ConfigDict(extra="forbid")

    nvidia_smi: Snapshots | None = None
    nvidia_smi_full: Snapshots | None = None
    ps: Snapshots | None = None
    dmesg: Snapshots | None = None
    env: Snapshots | None = None
    files: dict[str, Snapshots] = Field(default_factory=dict)
    commands: dict[str, Snapshots] = Field(default_factory=dict)


class TranscriptStep(BaseModel):
    did: str
    concluded: str = ""


class Expected(BaseModel):
    model_config = ConfigDict(extra="forbid")

    root_cause: str
    evidence: list[str] = Field(min_length=1)
    ruled_out: list[str] = Field(default_factory=list)
    wrong: list[str] = Field(default_factory=list)
    next_step: str = ""

    @field_validator("root_cause")
    @classmethod
    def _known_label(cls, v: str) -> str:
        from tools.taxonomy import LABELS

        if v not in LABELS:
            raise ValueError(f"unknown root-cause label {v!r}; known: {', '.join(LABELS)}")
        return v

    @field_validator("ruled_out", "wrong")
    @classmethod
    def _known_labels(cls, v: list[str]) -> list[str]:
        from tools.taxonomy import LABELS

        bad = [x for x in v if x not in LABELS]
        if bad:
            raise ValueError(f"unknown labels {bad}")
        return v


class IncidentCard(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    title: str
    source: str
    engine: Literal["sglang", "vllm", "trtllm", "torch", "other"]
    symptom: str
    synthesized: list[str] = Field(default_factory=list)
    host: HostSnapshot = Field(default_factory=HostSnapshot)
    transcript: list[TranscriptStep] = Field(default_factory=list)
    expected: Expected | None = None


class CardError(Exception):
    """A card that does not validate; the message names file, key and problem."""


def load_card(path: str | Path) -> IncidentCard:
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise CardError(f"{path}: cannot read YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise CardError(f"{path}: a card is a YAML mapping, got {type(raw).__name__}")
    try:
        card = IncidentCard.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(top)'}: {e['msg']}" for e in exc.errors()
        )
        raise CardError(f"{path}: {problems}") from exc
    if card.id != path.stem:
        raise CardError(f"{path}: id: {card.id!r} must equal the file name {path.stem!r}")
    return card


def card_text_bytes(text: str) -> bytes:
    r"""Cards write raw non-UTF-8 bytes as \xNN, which YAML turns into U+00NN characters.

    Text made only of such characters is taken as raw bytes (latin-1); anything else is UTF-8.
    """
    try:
        raw = text.encode("latin-1")
    except UnicodeEncodeError:
        return text.encode("utf-8")
    return raw


_SAFE_ID = re.compile(r"[^a-z0-9-]+")


def slug(text: str) -> str:
    return _SAFE_ID.sub("-", text.lower()).strip("-")[:60] or "card"
