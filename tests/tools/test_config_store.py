"""Config snapshot store: apply/revert round trips on real files and through a replay host."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from cards.model import load_card
from cards.replay import ReplayHost
from tools.config_apply import SPEC as APPLY
from tools.config_apply import apply_settings
from tools.config_revert import SPEC as REVERT
from tools.config_store import ConfigStore
from tools.local_host import LocalHost

ROOT = Path(__file__).resolve().parents[2]
SITE = "/usr/lib/python3.12/sitecustomize.py"
ORIGINAL = (
    b"import os\n# NCCL tuning (known good)\n"
    b'os.environ.setdefault("NCCL_MAX_NCHANNELS", "16")\n'
    b'os.environ.setdefault("NCCL_BUFFSIZE", "16777216")\n'
)


@pytest.fixture
def site(tmp_path: Path) -> tuple[Path, str]:
    cfg = tmp_path / "sitecustomize.py"
    cfg.write_bytes(ORIGINAL)
    cfg.chmod(0o644)
    return cfg, str(tmp_path / "store")


def test_apply_then_revert_is_byte_for_byte(site: tuple[Path, str]) -> None:
    cfg, store = site
    host = LocalHost()
    a = APPLY.call(
        host,
        {
            "path": str(cfg),
            "set": {"NCCL_MAX_NCHANNELS": "2", "NCCL_ALGO": "Ring"},
            "reason": "fewchan",
            "store_dir": store,
        },
    )
    assert a.ok and a.changed and a.verified, a.error
    new = cfg.read_bytes()
    assert b'os.environ.setdefault("NCCL_MAX_NCHANNELS", "2")' in new
    assert b'os.environ.setdefault("NCCL_ALGO", "Ring")' in new  # the file's own style
    assert a.new_sha256 == hashlib.sha256(new).hexdigest()
    assert '-os.environ.setdefault("NCCL_MAX_NCHANNELS", "16")' in a.diff
    assert '+os.environ.setdefault("NCCL_MAX_NCHANNELS", "2")' in a.diff
    assert cfg.stat().st_mode & 0o777 == 0o644  # mode kept by the atomic write

    r = REVERT.call(
        host,
        {"path": str(cfg), "store_dir": store},
    )
    assert r.ok and r.identical, r.error
    assert cfg.read_bytes() == ORIGINAL
    assert r.restored_id == a.snapshot_id == a.known_good_id
    assert '+os.environ.setdefault("NCCL_MAX_NCHANNELS", "16")' in r.diff


def test_original_never_lost_and_snapshots_intact(site: tuple[Path, str]) -> None:
    cfg, store_dir = site
    host = LocalHost()
    ids = []
    for i in range(3):
        res = APPLY.call(
            host, {"path": str(cfg), "content": f"import os\n# v{i}\n", "store_dir": store_dir}
        )
        assert res.ok
        ids.append(res.applied_snapshot_id)
    REVERT.call(host, {"path": str(cfg), "to": ids[1], "store_dir": store_dir})
    assert cfg.read_bytes() == b"import os\n# v1\n"
    store = ConfigStore(host, store_dir)
    snaps = store.list(str(cfg))
    assert snaps[0].label == "original" and snaps[0].known_good
    assert sum(s.known_good for s in snaps) == 1
    for s in snaps:  # every blob is there and matches its hash
        blob = Path(store_dir, "blobs", s.sha256).read_bytes()
        assert hashlib.sha256(blob).hexdigest() == s.sha256
    assert store.content(store.get(str(cfg), "original")) == ORIGINAL
    # identical contents are stored once
    assert len(list(Path(store_dir, "blobs").iterdir())) == len({s.sha256 for s in snaps})
    # index is JSON lines
    lines = Path(store_dir, "index.jsonl").read_text().splitlines()
    assert [json.loads(ln)["id"] for ln in lines] == [s.id for s in store.all()]
    # diff of known-good vs the current file
    assert "+# v1" in store.diff(str(cfg), "known-good")
    # mark another snapshot known-good; revert follows it
    store.mark_known_good(str(cfg), ids[0])
    r = REVERT.call(host, {"path": str(cfg), "store_dir": store_dir})
    assert r.identical and cfg.read_bytes() == b"import os\n# v0\n"
    r = REVERT.call(host, {"path": str(cfg), "to": "original", "store_dir": store_dir})
    assert cfg.read_bytes() == ORIGINAL


def test_unknown_snapshot_is_a_clear_error(site: tuple[Path, str]) -> None:
    cfg, store = site
    APPLY.call(LocalHost(), {"path": str(cfg), "set": {"NCCL_ALGO": "Tree"}, "store_dir": store})
    r = REVERT.call(LocalHost(), {"path": str(cfg), "to": "s9999-deadbeef", "store_dir": store})
    assert not r.ok and "s9999-deadbeef" in (r.error or "") and r.snapshots
    assert any("snapshots of" in ln for ln in r.lines())


def test_new_file_reverts_to_absent(tmp_path: Path) -> None:
    cfg = tmp_path / "new.env"
    store = str(tmp_path / "store")
    a = APPLY.call(
        LocalHost(), {"path": str(cfg), "content": "NCCL_DEBUG=INFO\n", "store_dir": store}
    )
    assert a.ok and cfg.read_text() == "NCCL_DEBUG=INFO\n"
    r = REVERT.call(LocalHost(), {"path": str(cfg), "store_dir": store})
    assert r.ok and r.identical and not cfg.exists()


def test_apply_through_replay_host() -> None:
    card = None
    for base in (ROOT / "evals" / "incidents",):
        p = base / "seed-sglang-fusion-sm120-jit.yaml"
        if p.exists():
            card = load_card(p)
            break
    assert card is not None
    host = ReplayHost(card)
    before = host.read_tail(SITE).data
    a = APPLY.call(host, {"path": SITE, "set": {"NCCL_MAX_NCHANNELS": "16"}})
    assert a.ok and a.changed, a.error
    assert b'"NCCL_MAX_NCHANNELS", "16"' in host.read_tail(SITE).data
    r = REVERT.call(host, {"path": SITE})
    assert r.ok and r.identical and host.read_tail(SITE).data == before


def test_apply_settings_styles() -> None:
    script = (
        "#!/bin/bash\nexport NCCL_DEBUG=INFO\n"
        "python -m sglang.launch_server --tp 2 \\\n  --mem-fraction-static=0.55\n"
    )
    out = apply_settings(
        "/a/launch.sh",
        script,
        {
            "--mem-fraction-static": "0.8",
            "--tp": "4",
            "NCCL_ALGO": "Ring",
            "--enable-x": "true",
            "NCCL_DEBUG": "WARN",
        },
    )
    assert out == (
        "#!/bin/bash\nexport NCCL_DEBUG=WARN\nexport NCCL_ALGO=Ring\n"
        "python -m sglang.launch_server --tp 4 \\\n  --mem-fraction-static=0.8 --enable-x\n"
    )
    assert apply_settings("/a/.env", "A=1\n", {"B": "two words"}) == "A=1\nB='two words'\n"
    with pytest.raises(ValueError):
        apply_settings("/a/x.yaml", "a: 1\n", {"a": "2"})
    with pytest.raises(ValueError):
        apply_settings("/a/.env", "A=1\n", {"--tp": "2"})
