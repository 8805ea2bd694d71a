"""Restoring a config from its known-good copy is byte-exact: CRs, no final newline, odd bytes."""

from __future__ import annotations

import hashlib
from pathlib import Path

from tools import config_apply
from tools.local_host import LocalHost


def test_copy_from_restores_the_exact_bytes(tmp_path: Path) -> None:
    good = tmp_path / "server.yaml.orig"
    live = tmp_path / "server.yaml"
    good.write_bytes(b"model: m\r\nport: 30000\r\nmem_fraction: 0.8\xff")  # CRLF, no final \n
    live.write_bytes(b"model: m\nport: 30000\nmem_fraction: 0.95\n")
    host = LocalHost()
    r = config_apply.run(
        host,
        config_apply.Args(
            path=str(live), copy_from=str(good), reason="restore", store_dir=str(tmp_path / "s")
        ),
    )
    assert r.ok and r.changed and r.verified
    assert live.read_bytes() == good.read_bytes()
    assert r.new_sha256 == hashlib.sha256(good.read_bytes()).hexdigest()


def test_copy_from_a_missing_file_changes_nothing(tmp_path: Path) -> None:
    live = tmp_path / "server.yaml"
    live.write_bytes(b"a: 1\n")
    r = config_apply.run(
        LocalHost(),
        config_apply.Args(
            path=str(live), copy_from=str(tmp_path / "nope"), store_dir=str(tmp_path / "s")
        ),
    )
    assert not r.ok and "does not exist" in (r.error or "")
    assert live.read_bytes() == b"a: 1\n"
