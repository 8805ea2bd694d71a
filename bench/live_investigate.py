"""Time from `pivot investigate --host ALIAS --log PATH --json` to its verdict over loopback SSH.

A real test sshd (the unprivileged test user), failing servers staged for real beside unrelated
jobs (tests/live/staging.py: an http.server, `sleep 600 # vllm`, a cc1plus stand-in), and the
real CLI as a subprocess; the clock runs from starting the CLI to its exit with the JSON verdict.

Judged (median over `--runs` runs of each; target <= 2 s): the crash cases, whose answer needs
no waiting because the server is already gone: a FlashInfer JIT arch error, a loader SIGKILLed
mid-load, a port taken. Reported apart, not judged: the liveness-window cases (a loader at 4 s
per shard, a silent hang), which wait for the log by design. Default settings throughout (no
PIVOT_LIVENESS_MAX_S), as an operator runs it.

    .venv/bin/python bench/live_investigate.py [--runs 5] [--window-runs 1]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.live import staging as S  # noqa: E402
from tests.sshd import start_sshd  # noqa: E402

TARGET_S = 2.0
ALIAS = "gpu-bench"


def _jit(stage: S.Stage, log: Path) -> None:
    script = [["out", S.startup()], ["out", S.LOADED.lstrip("\n")], ["out", S.JIT_TRACEBACK]]
    stage.start_server([*script, ["exit", 1]], log, S.SERVER_ARGS).wait(20)


def _killed(stage: S.Stage, log: Path) -> None:
    proc = stage.start_server(
        [["out", S.startup(import_warning=False)], ["loop", S.SHARD_BAR, 0.25, 200]],
        log,
        S.SERVER_ARGS,
    )
    S.wait_for(lambda: b"| 5/200" in log.read_bytes(), 10, "five shards")
    stage.kill9(proc)


def _port(stage: S.Stage, log: Path) -> None:
    S.wait_port_free(S.PORT)
    stage.start_port_holder(S.PORT)
    script = [["out", S.startup()], ["out", S.LOADED.lstrip("\n")], ["bind", S.PORT]]
    stage.start_server(script, log, S.SERVER_ARGS).wait(20)


def _slow(stage: S.Stage, log: Path) -> None:
    stage.start_server([["out", S.startup()], ["loop", S.SHARD_BAR, 4.0, 200]], log, S.SERVER_ARGS)
    S.wait_for(lambda: b"| 1/200" in log.read_bytes(), 10, "the first shard")


def _hang(stage: S.Stage, log: Path) -> None:
    proc = stage.start_server(
        [["out", S.startup(tp=2)], ["ranks", 2], ["out", S.nccl_init(2)]],
        log,
        [*S.SERVER_ARGS[:-1], "2"],
    )
    S.wait_for(lambda: b"Init COMPLETE" in log.read_bytes(), 10, "NCCL init")
    S.wait_for(lambda: len(stage.tree(proc)) == 3, 10, "the two ranks")


#: name -> (stage it, the symptom, the expected label(s))
NO_WAIT: dict[str, tuple[Callable[[S.Stage, Path], None], str, tuple[str, ...]]] = {
    "jit_arch": (_jit, "sglang died at start-up, why?", ("unsupported_gpu_arch",)),
    "killed_mid_load": (_killed, "my server vanished while loading", ("killed_externally",)),
    "port_taken": (_port, "it exits right after loading, why?", ("port_in_use",)),
}
WINDOW = {
    "slow_loader": (_slow, "it has been starting for ages, stuck?", ("still_starting",)),
    "silent_hang": (_hang, "never became ready, prints nothing", ("nccl_failure",)),
}


def _one(sshd, name: str, case, home: Path) -> tuple[float, str]:  # type: ignore[no-untyped-def]
    stage_fn, symptom, want = case
    stage = S.new_stage(sshd)
    try:
        log = stage.logs / "server.log"
        stage_fn(stage, log)
        env = S.pivot_env(home, sshd, ALIAS)
        env.pop("PIVOT_LIVENESS_MAX_S", None)  # the default window, as an operator runs it
        with contextlib.ExitStack() as stack:
            if name == "silent_hang":  # two GPUs, one pinned, one idle: a fixture nvidia-smi
                ranks = sorted(stage.tree(stage.procs["server"])[1:])
                stack.enter_context(sshd.nvidia_smi_fixture(S.two_gpu_hung_fixture(*ranks)))
            v = S.investigate(env, ALIAS, [log], symptom)
        got = v.report["root_cause"] or v.report["status"]
        mark = "ok" if got in want else f"WRONG (want {'/'.join(want)})"
        print(f"  {name:16s} {v.wall_s:6.2f} s  {got} {mark}", flush=True)
        if got not in want:
            print(f"    summary: {v.report['summary']}")
            for h in v.report["hypotheses"]:
                if h["label"] in want:
                    print(f"    {h['label']}: {h['status']} {h['score']} against {h['against']}")
            checks = [ln.strip() for ln in v.stderr.splitlines() if "Next check" in ln]
            print(f"    checks: {checks}")
        return v.wall_s, got
    finally:
        stage.cleanup()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5, help="runs of each no-wait scenario")
    ap.add_argument("--window-runs", type=int, default=1, help="runs of each window scenario")
    args = ap.parse_args()
    sshd = start_sshd()
    bystanders = S.new_stage(sshd)
    bystanders.start_bystanders()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            subprocess.run(
                [S.PIVOT_PY, "-m", "agent.cli", "--help"], capture_output=True, cwd=ROOT, check=True
            )
            print(f"CLI start-up floor (pivot --help): {time.perf_counter() - t0:.2f} s")
            print(f"sshd user {sshd.user}; bystanders: {', '.join(bystanders.bystanders_alive())}")
            judged: dict[str, list[float]] = {}
            right = total = 0
            for i in range(args.runs):
                for name, case in NO_WAIT.items():
                    wall, got = _one(sshd, name, case, Path(tmp) / f"home-{name}-{i}")
                    judged.setdefault(name, []).append(wall)
                    right += got in case[2]
                    total += 1
            apart: dict[str, list[float]] = {}
            for i in range(args.window_runs):
                for name, case in WINDOW.items():
                    wall, _ = _one(sshd, name, case, Path(tmp) / f"home-{name}-{i}")
                    apart.setdefault(name, []).append(wall)
    finally:
        bystanders.cleanup()
        sshd.stop()
    print("no-wait scenarios (judged), median per scenario:")
    for name, ts in judged.items():
        print(
            f"  {name:16s} median {statistics.median(ts):.2f} s (min {min(ts):.2f}, max {max(ts):.2f})"
        )
    print("liveness-window scenarios (not judged):")
    for name, ts in apart.items():
        print(f"  {name:16s} median {statistics.median(ts):.2f} s over {len(ts)} run(s)")
    print(f"right verdicts on the judged runs: {right}/{total}")
    med = statistics.median([t for ts in judged.values() for t in ts])
    ok = med <= TARGET_S
    print(f"{'PASS' if ok else 'FAIL'} live_investigate_median_s {med:.2f} (target <= {TARGET_S})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
