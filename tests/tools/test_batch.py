"""tools/batch.py: cheap commands over one channel, split back into one result each - through a
real shell (LocalHost) and the real test sshd (SSHHost.run_batch)."""

from __future__ import annotations

from tools import batch
from tools.host_facts import SPEC as FACTS
from tools.local_host import LocalHost
from tools.ssh_host import SSHHost

COMMANDS = [
    "echo one; echo two",
    "printf 'no newline'",
    "echo to-stderr >&2; exit 3",
    "no-such-command-pivot",
    "true",
    # df's way: what it could read on stdout, its complaint on stderr, exit 1
    "echo 'Filesystem Size'; echo 'df: /mnt/x: Permission denied' >&2; exit 1",
]


def _check(res: list) -> None:  # type: ignore[type-arg]
    assert [r.command for r in res] == COMMANDS
    assert res[0].ok and res[0].stdout == "one\ntwo\n"
    assert res[1].ok and res[1].stdout == "no newline"
    assert res[2].rc == 3 and "to-stderr" in res[2].stderr and not res[2].stdout
    assert res[3].missing_command and "not found" in res[3].stderr
    assert res[4].ok and res[4].stdout == "" and res[4].stderr == ""
    # the streams stay apart, as a command alone on its channel keeps them
    assert res[5].rc == 1 and res[5].stdout == "Filesystem Size\n"
    assert res[5].stderr == "df: /mnt/x: Permission denied\n"


def test_a_composed_batch_splits_back_through_a_real_shell() -> None:
    nonce = batch.new_nonce()
    whole = LocalHost().run(batch.compose(COMMANDS, nonce))
    _check(batch.results("local", COMMANDS, whole, nonce))


def test_a_forged_marker_in_the_output_splits_nothing() -> None:
    """A command's output cannot end its part early: the markers carry a nonce per call."""
    nonce = batch.new_nonce()
    forged = ["printf '\\n@@pivot-000000000000 0 rc=0\\n'; echo after", "echo next"]
    whole = LocalHost().run(batch.compose(forged, nonce))
    res = batch.results("local", forged, whole, nonce)
    assert "after" in res[0].stdout and res[1].stdout == "next\n"
    forged_err = ["printf '\n@@pivot-000000000000 0 end\n' >&2; echo late >&2", "echo n >&2"]
    whole = LocalHost().run(batch.compose(forged_err, nonce))
    res = batch.results("local", forged_err, whole, nonce)
    assert "late" in res[0].stderr and res[1].stderr == "n\n"


def test_ssh_batches_over_one_channel_and_answers_like_one_command_each(
    ssh_host: SSHHost,
) -> None:
    _check(batch.run_batch(ssh_host, COMMANDS))
    # host_facts over SSH (batched) reads what the same box gives command by command locally
    remote = {s.name: s for s in FACTS.call(ssh_host, {}).sections}
    local = {s.name: s for s in FACTS.call(LocalHost(), {}).sections}
    for name in ("driver", "ulimit", "kernel", "network"):
        assert (remote[name].ok, remote[name].rc, remote[name].available) == (
            local[name].ok,
            local[name].rc,
            local[name].available,
        ), name
    assert remote["kernel"].lines == local["kernel"].lines
    assert remote["ulimit"].lines and remote["ulimit"].ok
