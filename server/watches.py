"""The launches `pivot watch --serve` / `pivot launch --serve` report, newest first, in memory.

Why not a table: a watch report is a live view (phase, ETA) that a newer one replaces a few times
a second while a launch loads; what lasts is the investigation a failure starts, and that is a
session in memory already (the verdict links to it). A restart of the service forgets the list;
the next report of a running watch brings its launch back.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from store.records import now
from watch.live import LaunchReport

#: launches kept; the oldest report drops off first
KEEP = 50


class WatchBoard:
    def __init__(self, keep: int = KEEP) -> None:
        self.keep = keep
        self._lock = threading.Lock()
        self._items: OrderedDict[str, tuple[str, LaunchReport]] = OrderedDict()

    def put(self, report: LaunchReport) -> str:
        """Store the newest word on one launch; returns when the service first heard of it."""
        at = now()
        with self._lock:
            first = self._items.get(report.watch_id, (at, report))[0]
            self._items[report.watch_id] = (first, report)
            self._items.move_to_end(report.watch_id)
            while len(self._items) > self.keep:
                self._items.popitem(last=False)
        return first

    def list(self) -> list[tuple[str, LaunchReport]]:
        """(first seen, latest report), the most recently reported first."""
        with self._lock:
            return list(reversed(self._items.values()))
