"""The night's recovery phase: what a restart after `kill -9` undoes (every host back to its
baseline, rows that lost their phase marked), and what the morning server runs with that
differs from the baseline.

A mixin of `Night` (loop/night.py).
"""

from __future__ import annotations

import hashlib
import shlex
import time

from loop import configs, launcher
from loop.experiment import diagnose_row, run_marker
from loop.night_search import INTERRUPTED
from loop.plan import HostSpec
from store.ledger.base import FAILED, TERMINAL, ExperimentRow, LeftChange
from tools.config_store import unified_diff
from tools.host import Host


class RecoverPhase:
    """Putting every host back after an interruption, and reading what was left in place."""

    def recover(self, why: str = "loop killed") -> list[str]:
        """Finish or re-queue whatever a stopped or killed loop left in flight; then clean and
        revert anyway. Returns what it did, in words.

        Crash-safe by construction: each row's fate is decided by whether its result was
        recorded (its status), never by the phase a previous recovery may have written; the
        steps before a row's last write (stop, revert, diagnose, tell) are all idempotent; and
        that last write is one atomic update. A kill -9 at any moment of a recovery leaves the
        row as it was, and the next start recovers it again.
        """
        actions: list[str] = []
        for row in self._own(self.ledger.experiments(self.night.id)):
            # Taken but not started (killed between marking it and its first phase): a ranked
            # row marked running, or any search row, whose trial is asked in the study.
            taken = row.phase == "pending" and (row.status == "running" or row.kind == "search")
            if row.phase == "done" or (row.phase == "pending" and not taken):
                continue
            host = self._host(row.host)
            measured = row.status in TERMINAL
            morning = row.kind == "final" and row.status == "ok"  # the server left up on purpose
            self._recover_step(row, "stop")
            if not morning:
                marker = run_marker(self.plan.name, self.night.id, row.seq, row.attempts)
                found = {p for p in [row.pid] if p and launcher._alive(host, p)}
                found |= set(launcher.marked_pids(host, marker=marker))
                left = launcher.stop(host, row.pid, marker, self.plan.policy.stop_grace_s)
                if found:
                    actions.append(
                        f"stopped {row.name}'s server and children (pids {sorted(found)})"
                    )
                if left:
                    actions.append(f"WARNING: {row.name}'s pids {left} survived kill -9")
            self._recover_step(row, "revert")
            actions += self._revert_all(host)
            self._recover_step(row, "decide")
            if measured:
                stored = self.ledger.get(row.id) or row
                if stored.status in FAILED and not stored.label and self.diagnoser:
                    diagnose_row(self._ctx(host), stored)
                if stored.kind == "search":
                    self._tell(self.ledger.get(row.id) or stored)
                self.ledger.update(row.id, phase="done", ended=time.time())
                actions.append(f"{row.name}: result already recorded ({row.status}); cleanup done")
            elif row.kind == "search":
                self._fail_trial(row, f"{INTERRUPTED} {row.phase} ({why}); params re-queued")
                actions.append(f"{row.name}: interrupted in {row.phase}; its params re-queued")
            else:
                self.ledger.update(row.id, status="pending", phase="pending", pid=None)
                actions.append(f"{row.name}: interrupted in {row.phase}; re-queued")
        # At start-up, always: no marked process of ours survives, every config is baseline.
        self._kill_ours(actions)
        for host in self.hosts:
            actions += self._revert_all(host)
        return actions

    def _spec(self, host: Host) -> HostSpec:
        """The plan's slot of `host` (the final slot's host is the first)."""
        return next(
            (s for s in self.plan.host_specs() if s.name == host.name), self.plan.host_specs()[0]
        )

    def _own(self, rows: list[ExperimentRow]) -> list[ExperimentRow]:
        """The rows this process answers for: all of them (a fleet worker: its slot's)."""
        return rows

    def _recover_step(self, row: ExperimentRow, step: str) -> None:
        """Tell the phase hook where recovery is (the crash tests kill the loop here)."""
        if self.on_phase:
            self.on_phase(row, f"recover:{step}")

    def _revert_all(self, host: Host) -> list[str]:
        changed: list[str] = []
        bad = configs.revert(
            host, self.baselines[host.name], store_root=self._store_root(host), changed=changed
        )
        if bad:
            raise configs.ConfigError(f"cannot restore baseline config on {host.name}: {bad}")
        return [f"reverted {p} on {host.name} to its baseline bytes" for p in changed]

    def _left_in_place(self, host: Host) -> list[LeftChange]:
        """Every config file the morning server runs with that is not the night's baseline,
        with the snapshot and the exact command that put the baseline back."""
        spec = self._spec(host)
        root = self._store_root(host)
        where = "--local" if spec.local else f"--host {shlex.quote(spec.where)}"
        out = []
        for path, want in self.baselines[host.name].items():
            try:
                have: bytes | None = configs.read_file(host, path)
            except configs.ConfigError:
                have = None  # missing or unreadable now: the baseline still has to go back
            if have == want:
                continue
            snap = configs.baseline_snapshot(
                host, path, want, f"night {self.night.id} baseline", root
            )
            cmd = f"pivot tools config_revert {where} --path {shlex.quote(path)}"
            if root:
                cmd += f" --store-dir {shlex.quote(root)}"
            cmd += f" --to {snap} --yes" if snap else " --yes  # no snapshot store: pick --to"
            out.append(
                LeftChange(
                    host=host.name,
                    path=path,
                    baseline_sha256=hashlib.sha256(want).hexdigest(),
                    snapshot_id=snap,
                    revert=cmd,
                    diff=unified_diff(want, have, f"{path} (baseline)", f"{path} (morning)"),
                )
            )
        return out
