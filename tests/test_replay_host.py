"""ReplayHost answers from a card's `host` and nothing else: snapshots, misses, no leaks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tools.cards import IncidentCard, load_card
from tools.replay_host import ReplayHost

CARDS = sorted((Path(__file__).resolve().parent.parent / "evals" / "incidents").glob("*.yaml"))
SECRET = "ZZ-the-answer-is-kv-cache-ZZ"


def _card(**host: Any) -> dict[str, Any]:
    return {
        "id": "replay-test",
        "title": "a card for ReplayHost tests",
        "source": "test",
        "engine": "sglang",
        "symptom": "it died",
        "host": host,
        "transcript": [{"did": f"grep {SECRET} log", "concluded": f"{SECRET} in transcript"}],
        "expected": {
            "root_cause": "kv_cache_no_room",
            "evidence": ["Not enough memory"],
            "next_step": f"{SECRET} next step",
        },
    }


def test_list_values_advance_one_snapshot_per_read_and_the_last_repeats(
    replay_host_factory,
) -> None:
    host = replay_host_factory(
        _card(
            ps=["USER PID\nroot 1 loading\n", "USER PID\n"],
            files={"/data/server.log": ["loading 10%\n", "loading 90%\n", "Not enough memory\n"]},
        )
    )
    assert [host.read_tail("/data/server.log").data for _ in range(4)] == [
        b"loading 10%\n",
        b"loading 90%\n",
        b"Not enough memory\n",
        b"Not enough memory\n",
    ]
    assert [host.run("ps aux").stdout for _ in range(3)] == [
        "USER PID\nroot 1 loading\n",
        "USER PID\n",
        "USER PID\n",
    ]


def test_a_command_the_card_lacks_answers_like_a_missing_program(replay_host_factory) -> None:
    host = replay_host_factory(_card(commands={"df -h /dev/shm": "shm 64M\n"}))
    miss = host.run("lsof -i :30000")
    assert miss.rc == 127 and miss.missing_command and "lsof: not found" in miss.stderr
    assert host.run("df -h /dev/shm").stdout == "shm 64M\n"
    assert host.run("nvidia-smi").rc == 127  # no nvidia_smi_full in the card
    gone = host.read_tail("/var/log/none.log")
    assert not gone.exists and gone.error and gone.fix


def test_writes_stay_in_memory(replay_host_factory, tmp_path: Path) -> None:
    host = replay_host_factory(_card(files={"/etc/app.env": "A=1\n"}))
    target = tmp_path / "app.env"
    assert host.write_file(str(target), b"A=2\n").ok and not target.exists()
    assert host.read_tail(str(target)).data == b"A=2\n"


def _every_answer(host: ReplayHost, card: IncidentCard) -> list[str]:
    """Everything an agent could make the replay host say."""
    snap = card.host
    commands = [
        "ps aux",
        "nvidia-smi",
        "nvidia-smi --query-gpu=index,name,memory.used --format=csv,noheader",
        "nvidia-smi --query-compute-apps=pid,used_memory --format=csv",
        "dmesg -T",
        "env",
        "cat /proc/1/environ",
        "find / -name '*.log'",
        "find /",
        "grep -r expected /",
        "cat expected",
        "cat transcript",
        *snap.commands,
    ]
    out: list[str] = []
    for _ in range(3):  # walk through every snapshot
        for c in commands:
            r = host.run(c)
            out += [r.stdout, r.stderr, r.error or "", r.fix or ""]
        for path in [*snap.files, "/expected", "/transcript"]:
            t = host.read_tail(path)
            out += [t.data.decode("utf-8", "replace"), t.error or ""]
            out.append(host.run(f"tail -n 200 {path}").stdout)
    return out


def test_expected_and_transcript_never_reach_an_answer(replay_host_factory) -> None:
    card = IncidentCard.model_validate(
        _card(
            ps="USER PID\n", files={"/l.log": "Not enough memory\n"}, commands={"ls /": "l.log\n"}
        )
    )
    host = replay_host_factory(card)
    answers = _every_answer(host, card)
    assert not [a for a in answers if SECRET in a]
    assert not any(isinstance(v, IncidentCard) for v in vars(host).values())


@pytest.mark.parametrize("path", CARDS, ids=[p.stem for p in CARDS])
def test_real_cards_never_leak_their_answers(path: Path) -> None:
    card = load_card(path)
    host = ReplayHost(card)
    host_text = card.host.model_dump_json()
    secrets = [s.concluded for s in card.transcript] + [
        card.expected.next_step if card.expected else ""
    ]
    # Only text that the card's host section does not itself contain can leak.
    secrets = [s.strip() for s in secrets if len(s.strip()) > 12 and s.strip() not in host_text]
    if not secrets:
        pytest.skip("this card holds no answer text outside its host section")
    blob = "\n".join(_every_answer(host, card))
    assert not [s for s in secrets if s in blob]


def test_closest_command_needs_the_same_path_and_some_shared_nvidia_smi_flag() -> None:
    from tools.cards import IncidentCard
    from tools.replay_host import ReplayHost

    card = IncidentCard.model_validate(
        {
            "id": "cmds",
            "title": "t",
            "source": "test",
            "engine": "other",
            "symptom": "s",
            "host": {
                "commands": {
                    "cat /proc/driver/nvidia/version": "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.86\n",
                    "nvidia-smi --query-compute-apps=pid,used_memory --format=csv": "pid, used_memory\n",
                    "df -h /workspace": "Filesystem Size Used Avail Use% Mounted on\n/dev/sda1 100G 100G 0 100% /workspace\n",
                }
            },
        }
    )
    host = ReplayHost(card)
    assert host.run("cat /proc/net/tcp").rc == 127  # another file is not an answer
    assert host.run("nvidia-smi -q -d ECC").rc == 127  # another question is not an answer
    assert "100%" in host.run("df -hP").stdout  # same program, same flag family: the card's df
    assert "535.86" in host.run("cat /proc/driver/nvidia/version").stdout
