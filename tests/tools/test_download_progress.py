"""download_progress: a hub-model download that grows is told from one that stalled, on the
host's clock (virtual on replay, real on a live host)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from cards.model import IncidentCard
from cards.replay import ReplayHost
from tests.cardkit import minimal_card
from tools import download_progress as D
from tools.local_host import LocalHost

BLOBS = "/root/.cache/huggingface/hub/models--org--big-model/blobs/"
LS0 = (
    "total 8\n"
    "-rw-r--r-- 1 root root 4625017896 Nov 14 10:07 aaaa\n"
    "-rw-r--r-- 1 root root 1372585984 Nov 14 10:24 bbbb.incomplete\n"
)
LS1 = LS0.replace("1372585984 Nov 14 10:24", "2833281024 Nov 14 10:26")


def _card(later: str) -> ReplayHost:
    snaps = [{"at": 0, "text": LS0}, {"at": 40, "text": later}]
    card = minimal_card({"commands": {f"ls -l {BLOBS}": snaps}})
    return ReplayHost(IncidentCard.model_validate(card))


def test_a_growing_incomplete_blob_is_a_download_in_progress_on_replay() -> None:
    r = D.run(_card(LS1), D.Args(model="org/big-model", watch_s=60))
    assert r.ok and r.downloading is True, r.lines()
    assert r.grew_bytes == 2833281024 - 1372585984
    assert r.growing_line.endswith("bbbb.incomplete") and r.growing_line in r.lines()


def test_a_blob_that_does_not_grow_is_a_stalled_download() -> None:
    r = D.run(_card(LS0), D.Args(model="org/big-model", watch_s=60))
    assert r.ok and r.downloading is False and r.waited_s >= 60


def test_a_local_path_is_not_a_hub_model() -> None:
    r = D.run(LocalHost(), D.Args(model="/models/llama"))
    assert not r.ok and "not a hub model id" in (r.error or "")


def test_live_growth_is_seen_within_seconds(tmp_path: Path) -> None:
    blobs = tmp_path / "models--org--big-model" / "blobs"
    blobs.mkdir(parents=True)
    part = blobs / "cccc.incomplete"
    part.write_bytes(b"x" * 1000)

    def grow() -> None:
        time.sleep(0.5)
        with part.open("ab") as fh:
            fh.write(b"y" * 5000)

    t = threading.Thread(target=grow)
    t.start()
    t0 = time.monotonic()
    r = D.run(LocalHost(), D.Args(model="org/big-model", caches=[str(tmp_path)], watch_s=30))
    t.join()
    assert r.downloading is True and r.grew_bytes == 5000, r.lines()
    assert time.monotonic() - t0 < 10  # stopped at the growth, not at the window's end


def test_the_cache_is_where_the_launch_says() -> None:
    from agent.checks import hub_caches, hub_model

    obs = [
        {
            "ok": True,
            "tool": "processes",
            "lines": ["1 vllm serve org/x --download-dir /mnt/m --port 8000"],
        },
        {"ok": True, "tool": "host_facts", "lines": ["HF_HOME=/data/hf"]},
        {
            "ok": True,
            "tool": "log_tail",
            "lines": ["INFO non-default args: {'model': '/models/local'}"],
        },
    ]
    assert hub_caches(obs) == ["/mnt/m", "/data/hf/hub"]  # type: ignore[arg-type]
    assert hub_model(obs) == "org/x"  # type: ignore[arg-type]
    assert (
        hub_model([{"ok": True, "tool": "processes", "lines": ["vllm serve /models/llama"]}])
        is None
    )  # type: ignore[list-item]
