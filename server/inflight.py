"""Which sessions this service is running right now, kept in a small file under PIVOT_HOME.

Why a file: a killed service (SIGKILL, OOM, a reboot) runs no shutdown hook, and memory cannot
tell a run the service lost from one the CLI is running at the same moment (both are
"running"). The next start reads this file and ends exactly its own lost runs as failed, by
name, instead of leaving them "running" forever.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

FILE = "server-inflight.json"


class Inflight:
    def __init__(self, home: Path) -> None:
        self.path = home / FILE
        self._lock = threading.Lock()
        self._ids: set[str] = set()

    def load(self) -> set[str]:
        """What an earlier process left behind (read once, at start)."""
        try:
            return set(json.loads(self.path.read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError):
            return set()

    def add(self, session_id: str) -> None:
        with self._lock:
            self._ids.add(session_id)
            self._write()

    def discard(self, session_id: str) -> None:
        with self._lock:
            if session_id in self._ids:
                self._ids.discard(session_id)
                self._write()

    def reset(self) -> None:
        with self._lock:
            self._ids.clear()
            self._write()

    def _write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(sorted(self._ids)), encoding="utf-8")
        os.replace(tmp, self.path)
