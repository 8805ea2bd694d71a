"""dmesg: OOM-killer, Xid, NVRM, fallen-off-the-bus and segfault lines; restricted logs."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from cards.replay import replay_name
from tests.cardkit import minimal_card as _card
from tools.dmesg import SPEC, parse_dmesg
from tools.local_host import LocalHost

FIX = Path(__file__).resolve().parent.parent / "fixtures"
INCIDENTS = Path(__file__).resolve().parents[2] / "evals" / "incidents"


def test_oom_xid_bus_segfault() -> None:
    p = parse_dmesg((FIX / "synthetic-facts" / "dmesg.oom-xid.txt").read_text())
    assert [(k.pid, k.name) for k in p.oom_kills] == [(48213, "python")]
    assert len(p.oom_lines) == 4  # invoked, oom-kill:, Out of memory, oom_reaper
    assert [(x.code, x.device, x.pid) for x in p.xids] == [
        (79, "PCI:0000:3b:00", None),
        (31, "PCI:0000:5e:00", 48211),
    ]
    assert len(p.bus_lines) == 2 and len(p.segfault_lines) == 1
    assert any("GPU at PCI:0000:3b:00" in ln for ln in p.nvrm_lines)


def test_real_device_dmesg_has_nvrm_only() -> None:
    p = parse_dmesg((FIX / "h200-device" / "dmesg-T.txt").read_text())
    assert p.oom_kills == [] and p.xids == []
    assert any("580.159.04" in ln for ln in p.nvrm_lines)


def test_pattern_keeps_extra_lines() -> None:
    text = "[1.0] EXT4-fs error (device sda1)\n[2.0] other\n"
    assert parse_dmesg(text, pattern="ext4|nothing").matched_lines == [text.splitlines()[0]]
    # an invalid regex is taken literally, not raised
    assert parse_dmesg(text, pattern="(device").matched_lines == [text.splitlines()[0]]


def test_replay_dmesg_key(replay_host_factory) -> None:  # type: ignore[no-untyped-def]
    text = (FIX / "synthetic-facts" / "dmesg.oom-xid.txt").read_text()
    r = SPEC.call(replay_host_factory(_card({"dmesg": text})))
    assert r.ok and r.hardware_fault and r.source == "dmesg -T"
    lines = r.lines()
    assert (
        "[Tue Oct 24 20:52:17 2023] Out of memory: Killed process 48213 (python) total-vm:151260480kB,"
        " anon-rss:127541236kB, file-rss:71680kB, shmem-rss:0kB, UID:1000 pgtables:251300kB"
        " oom_score_adj:0" in lines
    )
    assert "# OOM killer killed pid 48213 (python)" in lines


def test_replay_card_with_dmesg_only_in_commands(replay_host_factory) -> None:  # type: ignore[no-untyped-def]
    r = SPEC.call(replay_host_factory(INCIDENTS / "torch-deepseek-vl2-load-host-oom.yaml"))
    assert [(k.pid, k.name) for k in r.oom_kills] == [(576419, "python")]


def test_replay_no_kernel_log(replay_host_factory) -> None:  # type: ignore[no-untyped-def]
    r = SPEC.call(replay_host_factory(_card({})))
    assert not r.ok and replay_name("t") in (r.error or "") and r.fix


def test_local_permission_denied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A dmesg that fails like an unprivileged user's under kernel.dmesg_restrict=1."""
    script = tmp_path / "dmesg"
    script.write_text(
        f'#!/bin/sh\necho "$*" >> {tmp_path}/dmesg-calls\n'
        "echo 'dmesg: read kernel buffer failed: Operation not permitted' >&2\nexit 1\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    for tool in ("tail",):
        (tmp_path / tool).symlink_to(f"/usr/bin/{tool}")
    monkeypatch.setenv("PATH", str(tmp_path))  # no journalctl either
    r = SPEC.call(LocalHost("locked"))
    assert not r.ok and "restricted" in (r.error or "")
    assert "dmesg_restrict=0" in (r.fix or "")


def test_local_real_dmesg_never_raises(local_host: LocalHost) -> None:
    r = SPEC.call(local_host, {"tail": 50})
    assert r.ok or (r.error and r.fix)
    assert len(r.lines()) <= 200
    if r.ok:
        assert r.total_lines <= 50 and os.path.exists("/bin/sh")


def test_real_unprivileged_refusal_says_unknown_and_how_to_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The exact text dmesg prints for a non-root user under kernel.dmesg_restrict=1, with a
    journalctl that only has "-- No entries --" for this user."""
    (tmp_path / "dmesg").write_text(
        f'#!/bin/sh\necho "$*" >> {tmp_path}/dmesg-calls\n'
        "echo 'dmesg: read kernel buffer failed: Operation not permitted' >&2\nexit 1\n"
    )
    (tmp_path / "journalctl").write_text("#!/bin/sh\necho '-- No entries --'\n")
    for f in ("dmesg", "journalctl"):
        (tmp_path / f).chmod(0o755)
    (tmp_path / "tail").symlink_to("/usr/bin/tail")
    monkeypatch.setenv("PATH", str(tmp_path))
    r = SPEC.call(LocalHost("box"))
    assert not r.ok and r.denied and not r.readable
    text = "\n".join(r.lines())
    assert "UNKNOWN" in text and "unknown because" in (r.error or "")
    assert "sudo dmesg -T" in (r.fix or "") and "adm" in (r.fix or "")
    assert "journalctl -k" in (r.fix or "") and "/var/log/kern.log" in (r.fix or "")
    assert all(ln.startswith("# ") for ln in r.lines())
    # the kernel refused its buffer: plain dmesg (the same buffer) is not asked again
    assert (tmp_path / "dmesg-calls").read_text() == "-T\n"
    assert any(t.startswith("dmesg: not asked") for t in r.tried)


def test_storage_stalls_are_shown_without_a_pattern() -> None:
    """A model session found the NFS server's "not responding" only by searching (round 36):
    storage stalls and I/O errors are part of what the kernel log read shows by default.
    Control: an ordinary line is not."""
    from tools.dmesg import parse_dmesg

    text = (
        "[Mon Jul  1 10:00:00 2025] nfs: server nas01 not responding, still trying\n"
        "[Mon Jul  1 10:02:00 2025] INFO: task ollama:2211 blocked for more than 122 seconds.\n"
        "[Mon Jul  1 10:03:00 2025] blk_update_request: I/O error, dev sdb, sector 2048\n"
        "[Mon Jul  1 10:04:00 2025] e1000e: eth0 NIC Link is Up 1000 Mbps Full Duplex\n"
        "[Mon Jul  1 10:05:00 2025] nfs: server nas01 OK\n"
    )
    p = parse_dmesg(text)
    assert (
        len(p.storage_lines) == 4
        and p.storage_lines[-1].endswith("nas01 OK")
        and "NIC Link" not in " ".join(p.storage_lines)
    )
