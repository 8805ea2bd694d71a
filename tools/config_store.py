"""The config snapshot store, kept on the host itself.

Every change Pivot makes to a config goes through here: the file's bytes are saved under their
sha256 (so identical contents are stored once), an index line records path, hash, time, reason
and size, and any snapshot can be restored with an atomic write whose result is verified by
hash. The first change to a path saves its current content as `original` and marks it
known-good unless the path already has one, so the pre-Pivot state can always be recovered.

The store lives on the host (default `$HOME/.pivot/snapshots`) because that is where the
change happened and where an engineer will look; it is read and written only through the Host
protocol (`read_tail`, `write_file`, `run`), so it works the same over SSH, locally and on a
replay host (whose writes land in its in-memory overlay).
"""

from __future__ import annotations

import difflib
import hashlib
import os
import posixpath
import shlex
from datetime import UTC, datetime

from pydantic import BaseModel, Field

from tools.host import Host
from tools.textclean import safe_decode

#: Configs bigger than this are not configs; refuse rather than store megabytes.
MAX_CONFIG_BYTES = 4 * 1024 * 1024
INDEX = "index.jsonl"
ABSENT = "absent"
ENV_STORE_DIR = "PIVOT_SNAPSHOT_DIR"


class Snapshot(BaseModel):
    id: str
    path: str
    sha256: str = Field(description=f"content hash, or {ABSENT!r} when the file did not exist")
    size: int
    time: str = Field(description="UTC, ISO 8601")
    reason: str = ""
    label: str | None = Field(None, description="'original' for a path's first snapshot")
    known_good: bool = False


class StoreError(Exception):
    """An expected failure (unreadable file, failed write, unknown snapshot); says what to do."""

    def __init__(self, message: str, fix: str) -> None:
        super().__init__(message)
        self.fix = fix


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def unified_diff(old: bytes | None, new: bytes | None, old_name: str, new_name: str) -> str:
    a = safe_decode(old or b"").splitlines(keepends=True)
    b = safe_decode(new or b"").splitlines(keepends=True)
    lines = difflib.unified_diff(a, b, fromfile=old_name, tofile=new_name)
    return "".join(
        ln if ln.endswith("\n") else ln + "\n\\ No newline at end of file\n" for ln in lines
    )


class ConfigStore:
    def __init__(self, host: Host, root: str | None = None) -> None:
        self.host = host
        self.root = root or os.environ.get(ENV_STORE_DIR) or self._default_root()

    # -- reading and writing through the host ---------------------------------------------------
    def _default_root(self) -> str:
        res = self.host.run('printf %s "$HOME"', timeout=10)
        home = res.stdout.strip() if res.ok and res.stdout.strip().startswith("/") else "/root"
        return posixpath.join(home, ".pivot", "snapshots")

    def read(self, path: str) -> bytes | None:
        """The file's full bytes, or None if it does not exist; raises StoreError otherwise."""
        ft = self.host.read_tail(path, max_bytes=MAX_CONFIG_BYTES + 1)
        if not ft.exists:
            if ft.error and "does not exist" not in ft.error:
                raise StoreError(ft.error, ft.fix or "check permissions")
            return None
        if ft.error:
            raise StoreError(ft.error, ft.fix or "check permissions")
        if ft.size > MAX_CONFIG_BYTES or ft.bytes_read < ft.size:
            raise StoreError(
                f"{path} on {self.host.name} is {ft.size} bytes; configs over "
                f"{MAX_CONFIG_BYTES} bytes are not snapshotted",
                "check that this is the config you meant",
            )
        return ft.data

    def _write(self, path: str, data: bytes, mode: int | None = None) -> None:
        res = self.host.write_file(path, data, mode)
        if not res.ok:
            raise StoreError(
                res.error or f"writing {path} on {self.host.name} failed (rc {res.rc})",
                res.fix or "check that the directory exists and is writable",
            )

    def _mkdir(self, directory: str) -> None:
        # A replay host has no mkdir; its writes go to an overlay that needs no directories.
        self.host.run(f"mkdir -p -- {shlex.quote(directory)}", timeout=10)

    # -- the index -----------------------------------------------------------------------------
    def _index_path(self) -> str:
        return posixpath.join(self.root, INDEX)

    def _blob_path(self, digest: str) -> str:
        return posixpath.join(self.root, "blobs", digest)

    def all(self) -> list[Snapshot]:
        data = self.read(self._index_path())
        if not data:
            return []
        out = []
        for line in safe_decode(data).splitlines():
            if line.strip():
                try:
                    out.append(Snapshot.model_validate_json(line))
                except ValueError:
                    continue  # a damaged line loses one record, never the store
        return out

    def _save_index(self, snaps: list[Snapshot]) -> None:
        self._mkdir(self.root)
        body = "".join(s.model_dump_json() + "\n" for s in snaps).encode()
        self._write(self._index_path(), body)

    def list(self, path: str) -> list[Snapshot]:
        return [s for s in self.all() if s.path == path]

    def get(self, path: str, ref: str) -> Snapshot:
        """`ref`: a snapshot id, 'known-good', 'original' or 'latest'."""
        snaps = self.list(path)
        if ref == "known-good":
            found = [s for s in snaps if s.known_good]
        elif ref == "original":
            found = [s for s in snaps if s.label == "original"]
        elif ref == "latest":
            found = snaps
        else:
            found = [s for s in snaps if s.id == ref]
        if not found:
            ids = ", ".join(s.id for s in snaps) or "none"
            raise StoreError(
                f"no snapshot {ref!r} for {path} on {self.host.name} (snapshots: {ids})",
                "list the snapshots with config_revert's error or pass one of the ids above",
            )
        return found[-1]

    # -- operations ----------------------------------------------------------------------------
    def snapshot(self, path: str, reason: str, content: bytes | None = None) -> Snapshot:
        """Save the file's current bytes (or `content` already read) and record them."""
        data = self.read(path) if content is None else content
        snaps = self.all()
        digest = ABSENT if data is None else sha256(data)
        if data is not None and self.read(self._blob_path(digest)) is None:
            self._mkdir(posixpath.join(self.root, "blobs"))
            self._write(self._blob_path(digest), data, 0o600)
        first = not any(s.path == path for s in snaps)
        snap = Snapshot(
            id=f"s{len(snaps) + 1:04d}-{digest[:8]}",
            path=path,
            sha256=digest,
            size=0 if data is None else len(data),
            time=datetime.now(UTC).isoformat(timespec="seconds"),
            reason=reason,
            label="original" if first else None,
            known_good=first and not any(s.path == path and s.known_good for s in snaps),
        )
        self._save_index([*snaps, snap])
        return snap

    def ensure_original(self, path: str, current: bytes | None) -> Snapshot:
        """Before the first change to `path`: keep what was there, marked known-good."""
        snaps = self.list(path)
        if snaps:
            latest = snaps[-1]
            want = ABSENT if current is None else sha256(current)
            if latest.sha256 == want:
                return latest
            return self.snapshot(path, "state before this change", current)
        return self.snapshot(path, "original, before Pivot changed it", current)

    def mark_known_good(self, path: str, snapshot_id: str) -> Snapshot:
        snaps = self.all()
        target = self.get(path, snapshot_id)
        for s in snaps:
            if s.path == path:
                s.known_good = s.id == target.id
        self._save_index(snaps)
        return target.model_copy(update={"known_good": True})

    def content(self, snap: Snapshot) -> bytes | None:
        if snap.sha256 == ABSENT:
            return None
        data = self.read(self._blob_path(snap.sha256))
        if data is None or sha256(data) != snap.sha256:
            raise StoreError(
                f"the stored content of snapshot {snap.id} on {self.host.name} is missing or "
                f"damaged ({self._blob_path(snap.sha256)})",
                "restore another snapshot; do not delete the snapshot directory",
            )
        return data

    def diff(self, path: str, ref: str = "known-good") -> str:
        """What would change if `path` went back to snapshot `ref` (snapshot -> current)."""
        snap = self.get(path, ref)
        return unified_diff(self.content(snap), self.read(path), f"{path}@{snap.id}", path)

    def write_verified(self, path: str, data: bytes) -> str:
        """Atomic write, then re-read and compare hashes; returns the new hash."""
        self._sweep_temps(path)
        self._write(path, data)
        back = self.read(path)
        if back is None or sha256(back) != sha256(data):
            raise StoreError(
                f"{path} on {self.host.name} does not hold what was written (hash mismatch)",
                "check for another process rewriting the file; revert to known-good",
            )
        return sha256(data)

    def _sweep_temps(self, path: str) -> None:
        """A write killed between temp file and rename leaves `.pivot-*` beside the config; the
        config itself is whole, so tidy temp files older than a minute on the next write."""
        directory = shlex.quote(posixpath.dirname(path) or ".")
        self.host.run(
            f"find {directory} -maxdepth 1 -name '.pivot-*' -type f -mmin +1 -delete 2>/dev/null",
            timeout=10,
        )

    def restore(self, path: str, ref: str = "known-good") -> tuple[Snapshot, Snapshot, str]:
        """Put snapshot `ref` back; the state it replaces is snapshotted first.

        Returns (restored snapshot, snapshot of the replaced state, diff replaced -> restored).
        """
        snap = self.get(path, ref)
        want = self.content(snap)
        current = self.read(path)
        before = self.ensure_original(path, current)
        diff = unified_diff(current, want, f"{path} (before revert)", f"{path}@{snap.id}")
        if want is None:
            res = self.host.run(f"rm -f -- {shlex.quote(path)}", timeout=10)
            if not res.ok or self.read(path) is not None:
                raise StoreError(
                    f"{path} did not exist in snapshot {snap.id}, and removing it on "
                    f"{self.host.name} failed: {res.error or res.stderr.strip()}",
                    "remove the file by hand",
                )
        elif current is None or sha256(current) != snap.sha256:
            self.write_verified(path, want)
        return snap, before, diff
