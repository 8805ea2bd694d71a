"""What a run needs besides its state: the host, the brain, the settings. Never checkpointed."""

from __future__ import annotations

from dataclasses import dataclass, field

from agent.brains.base import Brain
from agent.observe import Prefetch
from agent.settings import Settings
from tools.host import Host


@dataclass
class RunContext:
    host: Host
    brain: Brain
    settings: Settings
    #: wall-clock start of this run segment (a resume starts a new segment)
    started: float = 0.0
    extra_logs: list[str] = field(default_factory=list)
    extra_configs: list[str] = field(default_factory=list)
    #: the first wave, already started by the caller (agent.observe.Prefetch), or None
    prefetched: Prefetch | None = None
