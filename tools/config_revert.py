"""`config_revert`: put a config back to a snapshot (needs approval).

The usual move after a failed experiment: back to known-good. The state being replaced is
snapshotted first, so a revert is itself revertible; the write is atomic and the result says
whether the file now equals the snapshot byte for byte.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from tools.base import ToolResult, ToolSpec, bound_lines
from tools.config_store import ConfigStore, StoreError, sha256
from tools.host import Host


class Args(BaseModel):
    path: str = Field(description="absolute path of the config on the host")
    to: str = Field("known-good", description="'known-good', 'original' or a snapshot id")
    store_dir: str | None = Field(
        None, description="snapshot store dir; default ~/.pivot/snapshots"
    )


class Result(ToolResult):
    path: str = ""
    restored_id: str | None = None
    replaced_snapshot_id: str | None = Field(None, description="the state the revert replaced")
    diff: str = Field("", description="replaced state -> restored state")
    identical: bool = Field(False, description="the file now equals the snapshot byte for byte")
    sha256: str | None = None
    snapshots: list[str] = Field(default_factory=list, description="ids known for this path")

    def lines(self) -> list[str]:
        if self.error:
            return [
                *super().lines(),
                f"# snapshots of {self.path}: {', '.join(self.snapshots) or 'none'}",
            ]
        state = "equals" if self.identical else "DOES NOT equal"
        head = (
            f"# {self.path} on {self.host} reverted to {self.restored_id}; it {state} the "
            f"snapshot byte for byte; the replaced state is {self.replaced_snapshot_id}"
        )
        body = self.diff.splitlines() or ["# (the file already held this content)"]
        return [head, *bound_lines(body)]


def run(host: Host, args: Args) -> Result:
    store: ConfigStore | None = None
    try:
        store = ConfigStore(host, args.store_dir)
        snap, before, diff = store.restore(args.path, args.to)
        now = store.read(args.path)
        identical = (now is None and snap.sha256 == "absent") or (
            now is not None and sha256(now) == snap.sha256
        )
    except StoreError as exc:
        try:
            ids = [s.id for s in store.list(args.path)] if store is not None else []
        except StoreError:
            ids = []
        return Result(
            host=host.name, ok=False, path=args.path, error=str(exc), fix=exc.fix, snapshots=ids
        )
    return Result(
        host=host.name,
        path=args.path,
        restored_id=snap.id,
        replaced_snapshot_id=before.id,
        diff=diff,
        identical=identical,
        sha256=None if now is None else sha256(now),
        snapshots=[s.id for s in store.list(args.path)],
    )


SPEC = ToolSpec(
    name="config_revert",
    description=(
        "Revert a config on the host to a snapshot (needs approval): to='known-good' (default), "
        "'original' or a snapshot id from config_apply. Snapshots the replaced state first, "
        "writes atomically and reports whether the file now equals the snapshot byte for byte."
    ),
    args=Args,
    result=Result,
    fn=run,
    changing=True,
)
