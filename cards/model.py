"""Incident cards (docs/incident-format.md) as pydantic models.

A card freezes a host as it looked during an investigation. `ReplayHost` sees only `host`;
`expected` and `transcript` are for the eval harness and never reach a tool.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    field_validator,
    model_validator,
)

from tools import engines

#: A card's engine: a registry engine (tools/engines.yaml) or `other`.
ENGINES = engines.card_engines()


class TimedSnapshot(BaseModel):
    """One snapshot with the second it was taken, counted from the investigation's first read."""

    model_config = ConfigDict(extra="forbid")

    at: float = Field(ge=0, strict=True)  # a number of seconds, never a string or a bool
    text: str

    @field_validator("at")
    @classmethod
    def _finite(cls, v: float) -> float:
        if not math.isfinite(v):
            raise ValueError("at must be a finite number of seconds")
        return v


def _timed_in_order(value: list[TimedSnapshot]) -> list[TimedSnapshot]:
    if not value:
        raise ValueError("a list of timed snapshots needs at least one {at, text}")
    for before, after in zip(value, value[1:], strict=False):
        if after.at < before.at:
            raise ValueError(
                f"timed snapshots must be in time order: at {after.at:g} comes after at {before.at:g}"
            )
    return value


def _kind(value: Any) -> str:
    """Which form a host value takes, so a bad one gets one clear error, not three."""
    if (
        isinstance(value, list)
        and value
        and all(isinstance(v, dict | TimedSnapshot) for v in value)
    ):
        return "timed"
    if isinstance(value, list) and any(isinstance(v, dict | TimedSnapshot) for v in value):
        return "mixed"
    return "plain" if isinstance(value, list) else "text"


def _no_mixing(value: Any) -> Any:
    if _kind(value) == "mixed":
        raise ValueError(
            "a snapshot list is either all plain texts (read order) or all {at, text} (time)"
        )
    return value


#: A host value: one text; snapshots in read order (each read the next, the last repeats); or
#: snapshots by time (`{at: SECONDS, text: ...}`, a read at time t sees the latest `at <= t`).
Snapshots = Annotated[
    Annotated[str, Tag("text")]
    | Annotated[list[str], Tag("plain")]
    | Annotated[list[TimedSnapshot], AfterValidator(_timed_in_order), Tag("timed")],
    Discriminator(lambda v: "plain" if _kind(v) == "mixed" else _kind(v)),
    BeforeValidator(_no_mixing),
]


def snapshot_texts(value: Snapshots | None) -> list[str]:
    """Every text a value holds, in order (plain or timed); [] for an absent key."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return [v.text if isinstance(v, TimedSnapshot) else v for v in value]


class ContainerSnapshot(BaseModel):
    """One container on the card's host (Docker or Podman), as its CLI printed it. An absent
    key was not recorded, exactly like the host's own keys."""

    model_config = ConfigDict(extra="forbid")

    #: the CLI that knew it (`docker`, `podman`); absent: either answers, as before this key
    cli: Literal["docker", "podman"] | None = None
    inspect: Snapshots | None = None  # raw `docker inspect NAME` (a JSON array)
    logs: Snapshots | None = None  # raw `docker logs NAME`
    ps: Snapshots | None = None  # raw `ps aux` inside the container
    files: dict[str, Snapshots] = Field(default_factory=dict)
    commands: dict[str, Snapshots] = Field(default_factory=dict)


class HostSnapshot(BaseModel):
    """The card's host. An absent key (None, or a path/command not in the mapping) was NOT
    RECORDED: tools get "not recorded in this card", never an empty answer."""

    model_config = ConfigDict(extra="forbid")

    nvidia_smi: Snapshots | None = None
    nvidia_smi_full: Snapshots | None = None
    ps: Snapshots | None = None
    dmesg: Snapshots | None = None
    env: Snapshots | None = None
    files: dict[str, Snapshots] = Field(default_factory=dict)
    commands: dict[str, Snapshots] = Field(default_factory=dict)
    containers: dict[str, ContainerSnapshot] = Field(default_factory=dict)


class Invocation(BaseModel):
    """What the operator passed besides the symptom. Replay passes it exactly as the CLI
    would, so a card is never easier (or harder) than the same question asked live."""

    model_config = ConfigDict(extra="forbid")

    log: str | None = None  # --log: the file the operator believes is the server's log
    config: str | None = None  # --config
    container: str | None = None  # --container


class TranscriptStep(BaseModel):
    did: str
    concluded: str = ""


class Expected(BaseModel):
    model_config = ConfigDict(extra="forbid")

    root_cause: str
    evidence: list[str] = Field(min_length=1)
    ruled_out: list[str] = Field(default_factory=list)
    wrong: list[str] = Field(default_factory=list)
    #: labels a careful engineer could also defend (the taxonomy overlaps): concluding one is
    #: not wrong, it scores "unproven"; a pass needs root_cause
    also_right: list[str] = Field(default_factory=list)
    next_step: str = ""

    @field_validator("root_cause")
    @classmethod
    def _known_label(cls, v: str) -> str:
        from cards.taxonomy import LABELS

        if v not in LABELS:
            raise ValueError(f"unknown root-cause label {v!r}; known: {', '.join(LABELS)}")
        return v

    @field_validator("ruled_out", "wrong", "also_right")
    @classmethod
    def _known_labels(cls, v: list[str]) -> list[str]:
        from cards.taxonomy import LABELS

        bad = [x for x in v if x not in LABELS]
        if bad:
            raise ValueError(f"unknown labels {bad}")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> Expected:
        clash = set(self.also_right) & ({self.root_cause} | set(self.wrong))
        if clash:
            raise ValueError(
                f"also_right {sorted(clash)} is also the root cause or listed as wrong"
            )
        return self


class IncidentCard(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    title: str
    source: str
    engine: str

    @field_validator("engine")
    @classmethod
    def _known_engine(cls, v: str) -> str:
        if v not in ENGINES:
            raise ValueError(f"engine {v!r} is not in tools/engines.yaml (nor 'other')")
        return v

    symptom: str
    synthesized: list[str] = Field(default_factory=list)

    @field_validator("synthesized", mode="before")
    @classmethod
    def _one_note_is_a_list(cls, v: object) -> object:
        # a card writer's single sentence ("synthesized: the nvidia-smi table") is one note
        return [v] if isinstance(v, str) else v

    invocation: Invocation = Field(default_factory=Invocation)
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
