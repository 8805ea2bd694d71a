"""disk: df -hP rows, full mounts, /dev/shm size, free -m; on captures, cards and this host."""

from __future__ import annotations

from pathlib import Path

from tests.cardkit import minimal_card as _card
from tools.disk import SPEC, human_bytes, parse_df, parse_free
from tools.local_host import LocalHost

FIX = Path(__file__).resolve().parent.parent / "fixtures"


def test_real_h200_df_and_free() -> None:
    shm = parse_df((FIX / "h200" / "df-dev-shm.txt").read_text())
    assert [(m.filesystem, m.size, m.use_pct, m.mount) for m in shm] == [
        ("tmpfs", "128G", 0, "/dev/shm")
    ]
    mem = parse_free((FIX / "h200" / "free-m.txt").read_text())
    assert (mem.total_mib, mem.available_mib, mem.swap_total_mib) == (128887, 128422, 0)
    dev = parse_df((FIX / "h200-device" / "df-hP.txt").read_text())
    assert {m.mount: m.use_pct for m in dev} == {"/dev/shm": 0, "/": 21}


def test_docker_shm_and_full_disk_with_space_in_mount() -> None:
    ms = {
        m.mount: m
        for m in parse_df((FIX / "synthetic-facts" / "df-hP.docker-shm-full.txt").read_text())
    }
    assert ms["/dev/shm"].size_bytes == 64 << 20
    assert ms["/data/hf cache"].use_pct == 100 and ms["/"].use_pct == 98
    assert human_bytes("4.0K") == 4096 and human_bytes("junk") is None


def test_replay_card_with_df_of_one_path(replay_host_factory) -> None:  # type: ignore[no-untyped-def]
    df = (FIX / "synthetic-facts" / "df-hP.docker-shm-full.txt").read_text()
    free_g = "               total        used        free      shared  buff/cache   available\nMem:             125           3         119           0           2         120\n"
    h = replay_host_factory(_card({"commands": {"df -h /workspace": df, "free -g": free_g}}))
    r = SPEC.call(h)
    assert r.ok and r.shm_too_small is True
    assert set(r.full) == {"/", "/data/hf cache"}
    assert (
        r.memory is not None and r.memory.total_mib == 125 * 1024
    )  # free -g numbers, scaled to MiB
    lines = r.lines()
    assert "/dev/nvme1n1    3.5T  3.5T     0 100% /data/hf cache" in lines
    assert any("too small for NCCL" in ln for ln in lines)


def test_replay_nothing(replay_host_factory) -> None:  # type: ignore[no-untyped-def]
    r = SPEC.call(replay_host_factory(_card({})))
    assert not r.ok and r.fix


def test_local_host_and_bad_path(local_host: LocalHost, tmp_path: Path) -> None:
    r = SPEC.call(local_host, {"paths": [str(tmp_path), "/no/such/dir"]})
    assert r.ok and r.mounts and r.memory and r.memory.total_mib
    assert any("/no/such/dir" in n for n in r.notes)
    bad = SPEC.call(LocalHost(), {"paths": ["/tmp; rm -rf /"]})
    assert not bad.ok and "refusing" in (bad.error or "")
