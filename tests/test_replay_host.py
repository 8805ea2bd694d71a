"""ReplayHost answers from a card's `host` and nothing else: snapshots, misses, no leaks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cards.model import IncidentCard, load_card
from cards.replay import ReplayHost

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


def test_a_command_the_card_lacks_is_not_recorded_never_a_missing_program(
    replay_host_factory,
) -> None:
    host = replay_host_factory(_card(commands={"df -h /dev/shm": "shm 64M\n"}))
    miss = host.run("lsof -i :30000")
    assert miss.rc is None and not miss.ok and not miss.missing_command
    assert miss.error == "not recorded in this card: `lsof -i :30000` (not in host.commands)"
    assert miss.fix and "live host" in miss.fix and miss.stdout == "" and miss.stderr == ""
    assert host.run("df -h /dev/shm").stdout == "shm 64M\n"
    gpu = host.run("nvidia-smi")  # no nvidia_smi_full in the card
    assert gpu.rc is None and "host.nvidia_smi_full is absent" in (gpu.error or "")
    gone = host.read_tail("/var/log/none.log")
    assert not gone.exists and gone.error and gone.fix
    assert gone.error.startswith("not recorded in this card: /var/log/none.log")
    assert "does not exist" not in gone.error


@pytest.mark.parametrize(
    "command",
    [
        "ps aux",
        "dmesg -T | tail -n 500",
        "journalctl -k --no-pager -n 2000",
        "nvidia-smi --query-gpu=index,name --format=csv,noheader",
        "env",
        "cat /proc/1/environ",
        "df -hP",
        "free -m",
        "ss -ltnp",
        "cat /data/server.log",
        "tail -n 50 /data/server.log",
    ],
)
def test_every_absent_key_answers_not_recorded(replay_host_factory, command: str) -> None:
    host = replay_host_factory(_card(commands={"journalctl -u vllm --no-pager": "unit log\n"}))
    r = host.run(command)
    assert r.rc is None and r.error and r.error.startswith("not recorded in this card: ")
    assert not r.missing_command and r.stdout == ""


def test_a_key_given_empty_or_header_only_is_a_real_nothing(replay_host_factory) -> None:
    host = replay_host_factory(
        _card(dmesg="", ps="USER PID %CPU COMMAND\n", commands={"ss -ltnp": ""})
    )
    for command, out in (
        ("dmesg -T | tail -n 500", ""),
        ("journalctl -k --no-pager -n 2000", ""),  # the kernel journal is the card's dmesg
        ("ps aux", "USER PID %CPU COMMAND\n"),
        ("ss -ltnp", ""),
    ):
        r = host.run(command)
        assert r.ok and r.stdout == out, command


def test_a_unit_journal_never_answers_for_the_kernel_log(replay_host_factory) -> None:
    host = replay_host_factory(
        _card(commands={"journalctl -u ollama --no-pager | tail -4": "ollama: no space left\n"})
    )
    assert host.run("journalctl -k --no-pager -n 2000").error
    assert host.run("journalctl -u ollama --no-pager").stdout == "ollama: no space left\n"
    kernel = replay_host_factory(_card(commands={"journalctl -k -b": "kernel: Out of memory\n"}))
    assert "Out of memory" in kernel.run("journalctl -k --no-pager -n 2000").stdout


def test_a_file_is_absent_only_where_the_card_shows_it(replay_host_factory) -> None:
    host = replay_host_factory(
        _card(
            files={"/models/m/config.json": "{}"},
            commands={
                "ls -la /models/m": "total 8\n-rw-r--r-- 1 root root 2 Jan 1 00:00 config.json\n",
                "ls /etc/x.env": "ls: cannot access '/etc/x.env': No such file or directory\n",
            },
        )
    )
    # a listing of the directory that lacks it: genuinely not there
    gone = host.read_tail("/models/m/tokenizer.json")
    assert not gone.exists and gone.error and "does not exist" in gone.error
    cat = host.run("cat /models/m/tokenizer.json")
    assert cat.rc == 1 and "No such file or directory" in cat.stderr and cat.error is None
    assert "does not exist" in (host.read_tail("/etc/x.env").error or "")
    # a directory nobody listed: unknown
    assert "not recorded" in (host.read_tail("/models/other/config.json").error or "")
    # Pivot's own snapshot store starts empty on replay, so config apply can snapshot
    assert "does not exist" in (host.read_tail("/root/.pivot/snapshots/index.jsonl").error or "")


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
    from cards.model import IncidentCard
    from cards.replay import ReplayHost

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
    assert host.run("cat /proc/net/tcp").error  # another file is not an answer
    assert host.run("nvidia-smi -q -d ECC").error  # another question is not an answer
    assert "100%" in host.run("df -hP").stdout  # same program, same flag family: the card's df
    assert "535.86" in host.run("cat /proc/driver/nvidia/version").stdout


def _timed(*texts: str, step: float = 4.0) -> list[dict[str, Any]]:
    return [{"at": i * step, "text": t} for i, t in enumerate(texts)]


LOG = ["shard 1/3\n", "shard 1/3\nshard 2/3\n", "shard 1/3\nshard 2/3\nshard 3/3\n"]


def test_timed_snapshots_answer_by_the_investigations_clock(replay_host_factory) -> None:
    host = replay_host_factory(_card(files={"/data/server.log": _timed(*LOG)}))
    first = host.read_tail("/data/server.log").data
    host.sleep(0.25)
    again = host.read_tail("/data/server.log").data
    assert first == again == LOG[0].encode()  # a reread after 0.25 s sees no growth, as live
    host.sleep(3.75)  # t = 4
    assert host.read_tail("/data/server.log").data == LOG[1].encode()
    assert host.run("tail -n 200 /data/server.log").stdout == LOG[1]  # rereads do not advance
    host.sleep(100)
    assert host.read_tail("/data/server.log").data == LOG[2].encode()  # the last one stays
    assert host.clock() == 104.0


def test_time_zero_is_the_first_read(replay_host_factory) -> None:
    host = replay_host_factory(_card(ps=_timed("USER PID\nroot 7 sglang\n", "USER PID\n")))
    host.sleep(10)  # waiting before anything was read does not count
    assert "sglang" in host.run("ps aux").stdout
    host.sleep(3.9)
    assert "sglang" in host.run("ps aux").stdout
    host.sleep(0.1)
    assert host.run("ps aux").stdout == "USER PID\n"


def test_timed_snapshots_for_every_kind_of_key(replay_host_factory) -> None:
    host = replay_host_factory(
        _card(
            nvidia_smi=_timed("0, H200, 100 MiB\n", "0, H200, 90000 MiB\n"),
            dmesg=_timed("", "Out of memory: Killed process 7 (python3)\n"),
            commands={"df -h /dev/shm": _timed("shm 64M 1% /dev/shm\n", "shm 64M 99% /dev/shm\n")},
        )
    )
    q = "nvidia-smi --query-gpu=index,name,memory.used --format=csv,noheader"
    reads = [host.run(q).stdout, host.run("dmesg -T").stdout, host.run("df -hP /dev/shm").stdout]
    assert reads == ["0, H200, 100 MiB\n", "", "shm 64M 1% /dev/shm\n"]
    host.sleep(4)
    assert "90000" in host.run(q).stdout and "Killed process" in host.run("dmesg").stdout
    assert "99%" in host.run("df -h /dev/shm").stdout


def test_read_order_lists_keep_their_meaning_beside_timed_ones(replay_host_factory) -> None:
    host = replay_host_factory(
        _card(files={"/a.log": ["one\n", "two\n"], "/b.log": _timed("one\n", "two\n")})
    )
    assert [host.read_tail("/a.log").data for _ in range(3)] == [b"one\n", b"two\n", b"two\n"]
    assert [host.read_tail("/b.log").data for _ in range(3)] == [b"one\n"] * 3


def test_timed_snapshots_are_validated() -> None:
    from cards.model import IncidentCard

    ok = IncidentCard.model_validate(_card(ps=[{"at": 0, "text": "a"}, {"at": 0, "text": "b"}]))
    assert ok.host.ps and len(ok.host.ps) == 2  # equal times are allowed
    for bad, why in (
        ([{"at": 4, "text": "a"}, {"at": 1, "text": "b"}], "time order"),
        ([{"at": 0, "text": "a"}, "b"], "either all plain"),
        ([{"at": "soon", "text": "a"}], "valid number"),
        ([{"at": True, "text": "a"}], "valid number"),
        ([{"at": -1, "text": "a"}], "greater than or equal to 0"),
        ([{"at": 1}], "Field required"),
        ([{"at": 1, "text": "a", "when": 2}], "Extra inputs"),
    ):
        with pytest.raises(ValueError, match=why):
            IncidentCard.model_validate(_card(files={"/l.log": bad}))


def test_a_gpu_query_never_answers_a_compute_apps_query(replay_host_factory) -> None:
    """`--query-gpu=index,name,compute_cap` rows ("0, NVIDIA A10, 8.6") are no process rows:
    read as compute apps they became "pid 0 holds 8 MiB" and pid 1 a GPU holder."""
    cc = "nvidia-smi --query-gpu=index,name,compute_cap --format=csv,noheader"
    host = replay_host_factory(_card(commands={cc: "0, NVIDIA A10, 8.6\n"}))
    apps = "nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader"
    assert host.run(apps).error  # not recorded, never the GPU query's rows
    assert host.run(cc).stdout == "0, NVIDIA A10, 8.6\n"


def test_a_cards_free_g_answers_free_m_in_mib_as_the_live_host_would() -> None:
    from cards.model import IncidentCard
    from cards.replay import ReplayHost
    from tools.host_facts import parse_free

    free_g = (
        "               total        used        free      shared  buff/cache   available\n"
        "Mem:            1007         118         331           7         557         881\n"
        "Swap:              7           0           7\n"
    )
    host_of = lambda cmd: ReplayHost(  # noqa: E731
        IncidentCard.model_validate(
            {
                "id": "f",
                "title": "t",
                "source": "test",
                "engine": "other",
                "symptom": "s",
                "host": {"commands": {cmd: free_g}},
            }
        )
    )
    served = host_of("free -g").run("free -m").stdout
    mem = parse_free(served)
    assert mem is not None and mem.total_mib == 1007 * 1024  # about 1 TiB, not 1007 MiB
    assert "total" in served.splitlines()[0]  # the header is kept
    # control: the same text recorded under the command we ask is served as it is
    assert host_of("free -m").run("free -m").stdout == free_g
