"""What the service needs to know beyond the agent's settings: where cards live, limits, workers.

Built from `agent.settings.Settings` so `pivot serve` runs on the same embedded defaults as the
CLI; tests build one directly with a temp home and the cards they replay.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field

from server.file_policy import Protected, shipped

#: Cards shipped with the package: the replay hosts every installation offers.
SHIPPED_CARDS = Path(__file__).resolve().parent.parent / "evals" / "incidents"


class ServeConfig(BaseModel):
    home: Path
    card_dirs: list[Path] = Field(default_factory=lambda: [SHIPPED_CARDS])
    allowed_roots: dict[str, list[str]] = Field(
        default_factory=dict, description="where an approved change may write, per host ('*': all)"
    )
    read_roots: dict[str, list[str]] = Field(
        default_factory=dict,
        description="what the file API may read, per host ('*': all); empty: file_policy.yaml",
    )
    protected: list[Path] = Field(
        default_factory=list,
        description="Pivot's own files and folders besides home (databases, loop state)",
    )
    default_brain: str = "rulebook"
    max_body_bytes: int = 64 * 1024
    workers: int = Field(8, description="investigations run at once; more wait their turn")
    local_host: bool = Field(True, description="offer the machine the service runs on as `local`")
    ping_s: float = Field(15.0, description="SSE keep-alive while a run waits for approval")
    reach_timeout_s: float = 1.0
    loop_state: Path | None = Field(None, description="default: the loop's PIVOT_LOOP_STATE")
    ssh_config: Path | None = Field(None, description="default: tools.hosts / ~/.ssh/config")

    @classmethod
    def from_settings(cls, **overrides: object) -> ServeConfig:
        from agent.settings import get_settings

        s = get_settings()
        base: dict[str, object] = {
            "home": s.home,
            "allowed_roots": s.allowed_roots,
            "default_brain": s.default_brain,
            "protected": [s.memory_path, s.checkpoint_path],
        }
        if "allowed_roots" in s.model_fields_set:  # the user named their log dirs: read those
            base["read_roots"] = s.allowed_roots
        base.update(overrides)
        return cls.model_validate(base)

    def roots_for(self, host: str) -> list[str]:
        """Where an approved change on `host` may write."""
        return list(self.allowed_roots.get(host, self.allowed_roots.get("*", [])))

    def read_roots_for(self, host: str) -> list[str]:
        """What the file API may read on `host`: the user's roots, else the shipped defaults."""
        roots = self.read_roots.get(host, self.read_roots.get("*"))
        return list(roots) if roots else list(shipped().read_roots)

    def deny(self) -> list[str]:
        return list(shipped().deny)

    def protected_now(self) -> Protected:
        """Pivot's own state as of now (WAL files come and go, so never cached)."""
        import os

        loop = self.loop_state or (
            Path(os.environ["PIVOT_LOOP_STATE"]) if os.environ.get("PIVOT_LOOP_STATE") else None
        )
        own = Protected.of(self.home, *self.protected, loop)
        return own.model_copy(update={"inodes": own.inodes | shipped().credential_inodes()})
