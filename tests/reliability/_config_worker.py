"""The process that gets `kill -9`ed: applies and reverts a config forever, as the tools do.

It lives in its own module so a forkserver can preload the tools once and fork a fresh worker
per trial in a few milliseconds (a cold `python -c` costs ~150 ms, 200 trials would not fit).
"""

from __future__ import annotations

import random

from tools import config_apply, config_revert
from tools.local_host import LocalHost


def versions(n: int = 4) -> list[bytes]:
    """Distinct config versions of different sizes (small to ~300 KB) so writes take time."""
    out = []
    for i in range(n):
        line = f'os.environ.setdefault("NCCL_MIN_NCHANNELS", "{i}")  # version {i}\n'
        out.append(("import os\n" + line * (10 ** (i % 4) + i)).encode())
    return out


def churn(path: str, store: str, seed: int) -> None:
    """Apply a random version, revert to known-good, repeat until killed."""
    host = LocalHost("reliability")
    rng = random.Random(seed)
    new = versions()[1:]
    first = True
    while True:
        if first or rng.random() < 0.6:  # a revert needs a known-good: the first op applies
            first = False
            body = rng.choice(new).decode()
            r = config_apply.SPEC.call(
                host, {"path": path, "content": body, "store_dir": store, "reason": "trial"}
            )
        else:
            r = config_revert.SPEC.call(
                host, {"path": path, "to": "known-good", "store_dir": store}
            )
        if not r.ok:  # an expected failure would be a finding: say it loudly, then stop
            raise SystemExit(f"tool failed mid-churn: {r.error}")
