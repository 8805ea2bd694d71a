"""Per-command cost: the reused SSHHost connection vs OpenSSH's `ssh` started per command.

Both talk to the same real test sshd with the same key and known_hosts; the command is `true`,
so what is measured is the cost of getting a command run at all. Target: >= 20x cheaper.
"""

from __future__ import annotations

import subprocess

from _common import median_s, test_sshd, verdict

RUNS = 40


def main() -> None:
    with test_sshd() as (server, host):
        first = host.run("true")
        assert first.ok, first
        reused = median_s(lambda: host.run("true"), RUNS)
        argv = server.ssh_argv("true")
        subprocess.run(argv, check=True, capture_output=True)
        fresh = median_s(lambda: subprocess.run(argv, check=True, capture_output=True), 30)
        assert host.connects == 1, "the benchmark must measure ONE reused connection"
    ratio = fresh / reused
    print(f"reused SSHHost connection: {reused * 1000:.2f} ms/command (median of {RUNS})")
    print(f"ssh client per command:    {fresh * 1000:.2f} ms/command (median of 30)")
    verdict(ratio >= 20, "ssh_overhead_ratio", f"{ratio:.1f}x", ">= 20x")


if __name__ == "__main__":
    main()
