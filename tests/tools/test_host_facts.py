"""host_facts: allowlisted sections; ECC counters; rc 127 recorded as unavailable."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cardkit import minimal_card as _card
from tools.host import CommandResult
from tools.host_facts import COMMANDS, SPEC, Args, parse_ecc, parse_free, run

FIX = Path(__file__).resolve().parent.parent / "fixtures"
ECC_BAD = """
==============NVSMI LOG==============

Attached GPUs                             : 1
GPU 00000000:17:00.0
    ECC Mode
        Current                           : Enabled
        Pending                           : Enabled
    ECC Errors
        Volatile
            SRAM Correctable              : 0
            SRAM Uncorrectable            : 0
            DRAM Correctable              : 2
            DRAM Uncorrectable            : 4
        Aggregate
            SRAM Correctable              : 0
            SRAM Uncorrectable            : 0
            DRAM Correctable              : 7
            DRAM Uncorrectable            : 4
"""


def test_ecc_real_h200_is_clean() -> None:
    e = parse_ecc((FIX / "h200-device" / "nvidia-smi-q-ECC.txt").read_text())
    assert e.found and e.volatile_uncorrectable == 0 and e.aggregate_uncorrectable == 0


def test_ecc_counts_uncorrectable() -> None:
    e = parse_ecc(ECC_BAD)
    assert (e.volatile_uncorrectable, e.aggregate_uncorrectable) == (4, 4)
    assert (e.volatile_correctable, e.aggregate_correctable) == (2, 7)
    assert not parse_ecc("pid, process_name, used_gpu_memory [MiB]\n").found


def test_sections_are_an_allowlist() -> None:
    with pytest.raises(ValueError):
        Args.model_validate({"sections": ["rm -rf /"]})
    assert set(COMMANDS) == {
        "env",
        "driver",
        "ecc",
        "memory",
        "network",
        "ulimit",
        "kernel",
        "docker",
        "kubectl",
        "pods",
    }


def test_replay_card_sections(replay_host_factory) -> None:  # type: ignore[no-untyped-def]
    events = "LAST SEEN   TYPE      REASON      OBJECT     MESSAGE\n1m43s       Normal    Killing     pod/x      Container vllm failed startup probe, will be restarted\n"
    h = replay_host_factory(
        _card(
            {
                "commands": {
                    "nvidia-smi -q -d ECC | sed -n '1,40p'": ECC_BAD,
                    "kubectl get events --field-selector involvedObject.name=x": events,
                    "cat /proc/driver/nvidia/version": (
                        FIX / "h200" / "proc-driver-nvidia-version.txt"
                    ).read_text(),
                }
            }
        )
    )
    r = SPEC.call(h)
    by = {s.name: s for s in r.sections}
    assert r.driver_version == "580.159.04"
    assert r.ecc is not None and r.ecc.aggregate_uncorrectable == 4
    # docker was not recorded in this card: unknown, not "docker is not installed"
    assert not by["docker"].ok and by["docker"].lines == []
    assert "not recorded" in by["docker"].note
    assert (
        "1m43s       Normal    Killing     pod/x      Container vllm failed startup probe, will be restarted"
        in by["kubectl"].lines
    )
    text = r.lines()
    assert "            DRAM Uncorrectable            : 4" in text
    assert any("GPU memory fault" in ln for ln in text)
    assert any(ln.startswith("# $ docker ps -a") and "not recorded" in ln for ln in text)


def test_local_with_fake_h200(fake_gpu_path: Path, local_host) -> None:  # type: ignore[no-untyped-def]
    r = SPEC.call(local_host)
    by = {s.name: s for s in r.sections}
    assert r.ok and by["memory"].ok and any(ln.startswith("Mem:") for ln in by["memory"].lines)
    assert by["ulimit"].ok and by["kernel"].ok
    assert r.ecc is not None and r.ecc.found and r.ecc.aggregate_uncorrectable == 0
    # this machine's own free -m, parsed: something is held, never all of it
    assert r.memory is not None and 0 < r.memory.held_pct < 100
    assert r.memory.line in by["memory"].lines


@pytest.mark.parametrize(
    ("text", "held"),
    [
        (  # procps 3.3+, -m: page cache is not held
            "               total        used        free      shared  buff/cache   available\n"
            "Mem:          515702       98312        4211          52      413178      412980\n",
            19.9,
        ),
        (  # -h: units per value
            "              total        used        free      shared  buff/cache   available\n"
            "Mem:           2.0Ti       1.9Ti        12Gi       1.0Gi        80Gi        41Gi\n",
            98.0,
        ),
        (  # procps before 3.3.10: no available column; free + buffers + cached stand in
            "             total       used       free     shared    buffers     cached\n"
            "Mem:        257846     255120       2726          0        123       1024\n"
            "-/+ buffers/cache:     253973       3873\n",
            98.5,
        ),
    ],
)
def test_free_reads_what_is_held(text: str, held: float) -> None:
    mem = parse_free(text)
    assert mem is not None and abs(mem.held_pct - held) < 0.1
    assert mem.line.startswith("Mem:")


def test_free_without_a_mem_row_is_no_reading() -> None:
    assert parse_free("free: command not found\n") is None
    assert parse_free("Mem: 1 2 3\n") is None  # no header: columns unknown


class _Kubectl:
    """A host whose kubectl answers `events` as given; records what it was asked."""

    name = "box"

    def __init__(self, events: CommandResult) -> None:
        self.events = events
        self.asked: list[str] = []

    def run(self, command: str, timeout: float = 0, max_bytes: int = 0) -> CommandResult:
        self.asked.append(command)
        if command == "kubectl get events":
            return self.events.model_copy(update={"command": command})
        return CommandResult(host="box", command=command, rc=0, stdout="Name: p\nStatus: Running\n")


@pytest.mark.parametrize(
    ("events", "asks_pods", "pods_rc"),
    [
        (dict(rc=0, stdout="LAST SEEN   TYPE   REASON\n"), True, 0),
        (dict(rc=1, stderr="Error from server (Forbidden): events is forbidden"), True, 0),
        (
            dict(rc=1, stderr="The connection to the server localhost:8080 was refused - did"),
            False,
            1,
        ),
        (dict(rc=127, stderr="sh: kubectl: not found"), False, 127),
        (dict(rc=None, timed_out=True, error="ran past its 15s timeout"), False, None),
    ],
)
def test_pods_are_asked_only_of_a_cluster_that_answers(
    events: dict, asks_pods: bool, pods_rc: int | None
) -> None:
    host = _Kubectl(CommandResult(host="box", command="", **events))
    res = run(host, Args(sections=["kubectl", "pods"]))  # type: ignore[arg-type]
    assert ("kubectl describe pods" in host.asked) is asks_pods
    pods = next(s for s in res.sections if s.name == "pods")
    assert pods.command == "kubectl describe pods" and pods.rc == pods_rc
    assert pods.available is (pods_rc != 127)
