"""All knobs in one place: paths, the LLM endpoint and the budgets that end a run by name."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Budget(BaseSettings):
    """Limits that end an investigation with status `budget_exhausted`, never a traceback."""

    model_config = SettingsConfigDict(env_prefix="PIVOT_BUDGET_")

    max_rounds: int = 12
    max_tool_calls: int = 40
    max_seconds: float = 180.0
    #: a whole investigation's model tokens: about ten decisions of `llm_decision_tokens`
    max_tokens: int = 200_000


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="PIVOT_", env_nested_delimiter="__")

    home: Path = Field(default_factory=lambda: Path.home() / ".pivot")
    memory_db: Path | None = None
    checkpoint_db: Path | None = None
    #: `postgresql://…`: memory, checkpoints, the loop's ledger and its study live in this one
    #: team database instead of SQLite files under `home` (see docs/scale.md)
    database_url: str | None = None
    llm_base_url: str | None = None
    llm_model: str = "gpt-4o-mini"
    llm_api_key: str | None = None
    llm_timeout_s: float = 60.0
    llm_max_retries: int = 2
    #: one decision's request (system prompt, tools' schemas, board, observations) stays within
    #: this many tokens; the observations get what the rest leaves. A small local model with an
    #: 8k context needs PIVOT_LLM_DECISION_TOKENS=7000; a capable model reads better with more.
    llm_decision_tokens: int = 16_000
    #: keep every model turn here (`pivot eval --record DIR`)
    llm_record_dir: Path | None = None
    #: answer model turns from a recording, offline (`pivot eval --replay-model DIR`)
    llm_replay_dir: Path | None = None
    brain: str | None = Field(
        None, description="rulebook | llm; default: llm iff an endpoint is set"
    )
    budget: Budget = Field(default_factory=Budget)
    #: when LangGraph writes checkpoints: "sync"/"async" after every step (a crashed run resumes
    #: where it was), "exit" only when the run pauses or ends (evals, which never resume)
    checkpoint_durability: Literal["sync", "async", "exit"] = "async"
    #: Directories whose files may be read as logs/configs through the API, per host alias;
    #: "*" applies to every host.
    allowed_roots: dict[str, list[str]] = Field(
        default_factory=lambda: {
            "*": [
                "/var/log",
                "/tmp",
                "/data",
                "/workspace",
                "/home",
                "/root",
                "/opt",
                "/app",
                "/usr/lib",
                "/etc",
                "/srv",
                "/mnt",
                "/runpod",
                "/k8s",
                "/tensorrtllm_backend",
            ]
        }
    )

    @property
    def memory_path(self) -> Path:
        return self.memory_db or self.home / "memory.db"

    @property
    def checkpoint_path(self) -> Path:
        return self.checkpoint_db or self.home / "checkpoints.db"

    @property
    def default_brain(self) -> str:
        return self.brain or ("llm" if self.llm_base_url or self.llm_replay_dir else "rulebook")


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
