"""Reliability tests print one line per figure so a run's numbers can be copied into
docs/reliability.md; `pytest -s tests/reliability` shows them."""

from __future__ import annotations

import os


def trials(name: str, default: int) -> int:
    """A heavy count, raised by an env var for the figure runs (see docs/reliability.md)."""
    return int(os.environ.get(name, str(default)))


def figure(what: str, **numbers: object) -> None:
    body = ", ".join(f"{k}={v}" for k, v in numbers.items())
    print(f"\nFIGURE {what}: {body}", flush=True)


def rss_kb(pid: int | str = "self") -> int:
    """Resident set size from /proc (no psutil here): what the kernel says we hold."""
    with open(f"/proc/{pid}/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0
