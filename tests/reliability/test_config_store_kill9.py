"""kill -9 at random points during config apply and revert (real processes, real files).

After every kill: the config is one of the versions whole (never a torn or empty file), every
line of the snapshot index parses, every snapshot's blob matches its hash, and revert to
known-good succeeds and gives back the original byte for byte.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import time
from pathlib import Path

from tests.reliability._config_worker import churn, versions
from tests.reliability._figures import figure, trials
from tools import config_revert
from tools.config_store import ABSENT, ConfigStore, Snapshot, sha256
from tools.local_host import LocalHost

TRIALS = trials("PIVOT_RELIABILITY_TRIALS", 200)


def _check_store(store: ConfigStore, path: str) -> int:
    """Every index line is a whole record and every snapshot's bytes match its hash."""
    raw = Path(store.root, "index.jsonl").read_text(encoding="utf-8")
    snaps = [Snapshot.model_validate_json(line) for line in raw.splitlines() if line.strip()]
    assert len(snaps) == len(store.all()), "a damaged index line was silently skipped"
    for s in snaps:
        if s.sha256 != ABSENT:
            assert sha256(store.content(s)) == s.sha256  # content() raises on a damaged blob
    good = [s for s in snaps if s.path == path and s.known_good]
    assert len(good) == 1 and good[0].label == "original"
    return len(snaps)


def test_kill_9_during_apply_and_revert_never_tears_anything(tmp_path: Path) -> None:
    cfg = tmp_path / "site" / "sitecustomize.py"
    cfg.parent.mkdir()
    store_dir = tmp_path / "store"
    all_versions = versions()
    old = all_versions[0]
    cfg.write_bytes(old)
    whole = {sha256(v) for v in all_versions}
    host = LocalHost("reliability")
    store = ConfigStore(host, str(store_dir))

    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["tests.reliability._config_worker"])
    rng = random.Random(int(os.environ.get("PIVOT_RELIABILITY_SEED", "7")))
    states = {"old": 0, "new": 0}
    killed_with_work = 0
    t0 = time.monotonic()
    for trial in range(TRIALS):
        proc = ctx.Process(target=churn, args=(str(cfg), str(store_dir), trial), daemon=True)
        proc.start()
        time.sleep(rng.uniform(0.0, 0.12))
        proc.kill()  # SIGKILL: no finally, no atexit, no flush
        proc.join(5)
        assert proc.exitcode == -9, f"trial {trial}: worker ended by itself ({proc.exitcode})"

        now = cfg.read_bytes()
        assert sha256(now) in whole, f"trial {trial}: torn config ({len(now)} bytes)"
        states["old" if now == old else "new"] += 1
        if Path(store_dir, "index.jsonl").exists():
            killed_with_work += 1
            _check_store(store, str(cfg))
            r = config_revert.SPEC.call(
                host, {"path": str(cfg), "to": "known-good", "store_dir": str(store_dir)}
            )
            assert r.ok and r.identical, f"trial {trial}: revert failed: {r.error}"
        assert cfg.read_bytes() == old, f"trial {trial}: known-good is not the original"

    litter = [p.name for p in cfg.parent.iterdir() if p != cfg]
    assert all(n.startswith(".pivot-") for n in litter), litter  # only killed writes' temp files
    store_litter = [p for p in store_dir.rglob(".pivot-*")]
    figure(
        "config store kill -9",
        trials=TRIALS,
        torn=0,
        config_old_at_kill=states["old"],
        config_new_at_kill=states["new"],
        reverts_ok=killed_with_work,
        snapshots_at_end=_check_store(store, str(cfg)),
        temp_files_left=len(litter) + len(store_litter),
        seconds=round(time.monotonic() - t0, 1),
    )
