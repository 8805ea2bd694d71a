"""The config files an experiment touches: apply one change, revert, prove it byte for byte.

The baseline bytes of every file the server reads are captured once per night into the ledger
(before anything is changed) and are the reference for every revert and every verification;
the host-side snapshot history is the config tools' store (tools.config_store), used when it
is installed, so a person can also roll back by hand with `pivot tools config_revert`.
"""

from __future__ import annotations

import difflib
import hashlib
from typing import Any

from loop.knobs import set_env
from store.ledger.sqlite import Ledger
from tools.host import Host

MAX_CONFIG_BYTES = 4_000_000


class ConfigError(RuntimeError):
    """A config file cannot be read or written back; the night must not go on blindly."""


def read_file(host: Host, path: str) -> bytes:
    tail = host.read_tail(path, max_bytes=MAX_CONFIG_BYTES)
    if not tail.exists or tail.error:
        raise ConfigError(tail.error or f"{path} missing on {host.name}")
    if tail.bytes_read < tail.size:
        raise ConfigError(f"{path} on {host.name} is larger than {MAX_CONFIG_BYTES} bytes")
    return tail.data


def capture_baseline(
    ledger: Ledger, night_id: str, host: Host, files: list[str]
) -> dict[str, bytes]:
    """Save the baseline bytes once; later calls return what was saved (never re-capture)."""
    saved = ledger.baseline_files(night_id, host.name)
    for path in files:
        if path not in saved:
            data = read_file(host, path)
            ledger.save_baseline_file(night_id, host.name, path, data)
            saved[path] = data
    return saved


def _store(host: Host, root: str | None) -> Any:
    """The host's snapshot store (tools.config_store), or None while it is not installed."""
    try:
        from tools.config_store import ConfigStore
    except ImportError:
        return None
    return ConfigStore(host, root=root)


def _write(host: Host, path: str, data: bytes, store: Any) -> None:
    if store is not None:
        store.write_verified(path, data)  # atomic write + hash check
        return
    res = host.write_file(path, data)
    if not res.ok:
        raise ConfigError(res.error or f"cannot write {path}")


def apply_env(
    host: Host,
    path: str,
    env: dict[str, Any],
    baseline: bytes,
    reason: str,
    store_root: str | None = None,
) -> str:
    """Write `env` into `path` (from the baseline text) atomically; returns the unified diff."""
    old = baseline.decode("utf-8", errors="surrogateescape")
    new = old
    for key, value in env.items():
        new = set_env(new, key, value)
    if new == old:
        return ""
    data = new.encode("utf-8", errors="surrogateescape")
    store = _store(host, store_root)
    try:
        if store is not None:
            store.ensure_original(path, baseline)
        _write(host, path, data, store)
        if store is not None:
            store.snapshot(path, reason, data)
    except Exception as exc:  # StoreError and host failures alike: the caller reverts
        raise ConfigError(f"cannot apply {reason} to {path} on {host.name}: {exc}") from exc
    if read_file(host, path) != data:
        raise ConfigError(f"{path} on {host.name} does not hold what was written")
    return "".join(
        difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a{path}", f"b{path}")
    )


def revert(
    host: Host,
    baseline: dict[str, bytes],
    reason: str = "loop revert",
    store_root: str | None = None,
    changed: list[str] | None = None,
) -> list[str]:
    """Put every file back to its baseline bytes; returns the files that still differ.

    The paths it had to rewrite are appended to `changed` (so a stop can say what it did)."""
    bad: list[str] = []
    store = None
    for path, want in baseline.items():
        try:
            have = read_file(host, path)
        except ConfigError:
            have = None
        if have != want:
            store = store or _store(host, store_root)
            try:
                if store is not None and have is not None:
                    store.snapshot(path, f"{reason}: state before revert", have)
                _write(host, path, want, store)
                if changed is not None:
                    changed.append(path)
            except Exception:
                bad.append(path)
                continue
        try:
            if hashlib.sha256(read_file(host, path)).digest() != hashlib.sha256(want).digest():
                bad.append(path)
        except ConfigError:
            bad.append(path)
    return bad


def baseline_snapshot(
    host: Host, path: str, baseline: bytes, reason: str, store_root: str | None = None
) -> str | None:
    """The id of a snapshot holding `baseline` in the host's store, saved now if none does.

    Why not 'known-good' or 'original': those name the first state the store ever saw for the
    path, which is an older night's baseline when an earlier morning kept its change.
    """
    store = _store(host, store_root)
    if store is None:
        return None
    digest = hashlib.sha256(baseline).hexdigest()
    try:
        same = [s for s in store.list(path) if s.sha256 == digest]
        return (same[-1] if same else store.snapshot(path, reason, baseline)).id
    except Exception:  # a store that cannot be read or written: the report says so
        return None
