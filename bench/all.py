"""Run every benchmark that produces a figure and write docs/figures.md.

Each benchmark in bench/ ends with one line `PASS|FAIL <metric> <value> (target ...)`: that line
is its figure. Each row of docs/figures.md says the command, the figure, how long it took and the
load average when it started; the page's head says the commit, the machine and the date. A
figure lives where it is produced: the README links this page and copies no number.

    .venv/bin/python bench/all.py                 # every benchmark below that is not skipped
    .venv/bin/python bench/all.py sweep eval_throughput   # only these; the other rows are kept
                                                          # from the page as it was, with their
                                                          # own commit and date
    .venv/bin/python bench/all.py --list          # what would run, and what is skipped and why

Skipped (listed on the page with the reason): benchmarks that need a GPU, and those that take
more than 10 minutes or keep their own table of results (bench/results/), which is linked.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "figures.md"
PY = str(ROOT / ".venv" / "bin" / "python") if (ROOT / ".venv").exists() else sys.executable
PIVOT = str(ROOT / ".venv" / "bin" / "pivot")
#: a benchmark that runs longer than this is stopped and its row says so
LIMIT_S = 600
VERDICT = re.compile(r"^(PASS|FAIL) \S+ .*$", re.M)
#: `pivot eval`'s summary line: "143/143 passed (accuracy 1.000), 0 wrong, ..."
EVAL_SUMMARY = re.compile(r"^\d+/\d+ passed .*$", re.M)


@dataclass(frozen=True)
class Bench:
    name: str
    argv: tuple[str, ...]
    what: str
    skip: str | None = None  # why it is not run by bench/all.py
    figure: re.Pattern[str] = VERDICT

    @property
    def command(self) -> str:
        shown = [
            "python" if a == PY else "pivot" if a == PIVOT else a.replace(str(ROOT) + "/", "")
            for a in self.argv
        ]
        return " ".join(shown)


def _py(script: str, *args: str) -> tuple[str, ...]:
    return (PY, f"bench/{script}.py", *args)


BENCHES = [
    Bench(
        "public_cards",
        (PIVOT, "eval", "evals/incidents", "--brain", "rulebook", "--jobs", "2"),
        "rulebook over the public cards: passed, wrong, insufficient",
        figure=EVAL_SUMMARY,
    ),
    Bench("ssh_overhead", _py("ssh_overhead"), "a command over the reused SSH connection vs `ssh`"),
    Bench(
        "sweep",
        _py("sweep"),
        "the first sweep (run_many over the first-wave tools) vs its slowest tool",
    ),
    Bench("log_tail", _py("log_tail"), "tail of a 5 GB log; carriage-return progress log cleaned"),
    Bench(
        "investigate",
        _py("investigate"),
        "rounds and tool calls per card; LLM context per decision",
    ),
    Bench("eval_throughput", _py("eval_throughput"), "eval throughput, rulebook, `--jobs 2`"),
    Bench(
        "live_investigate",
        _py("live_investigate"),
        "live `pivot investigate --host` over loopback SSH, crash cases",
    ),
    Bench("server", _py("server"), "first SSE event after a session starts"),
    Bench(
        "followup", _py("followup"), "follow-up question to its prose answer on the event stream"
    ),
    Bench("dead_launch", _py("dead_launch"), "server death to the loop's verdict"),
    Bench("watch_death", _py("watch_death"), "launch death to `pivot watch`'s verdict"),
    Bench(
        "loop_overhead",
        _py("loop_overhead"),
        "loop overhead per experiment beyond launch + benchmark",
    ),
    Bench(
        "fleet_sweep",
        _py("fleet_sweep"),
        "`pivot sweep` over 20 real sshd hosts vs the slowest alone",
    ),
    Bench("replicas", _py("replicas"), "cross-replica event delay over PostgreSQL LISTEN/NOTIFY"),
    Bench(
        "loop_workers", _py("loop_workers"), "loop workers claiming experiments on one PostgreSQL"
    ),
    Bench("db_copy", _py("db_copy"), "`pivot db copy` of a 10k-session home into PostgreSQL"),
    Bench(
        "container_cost",
        _py("container_cost"),
        "investigating in a Podman container vs on the host",
        skip="keeps its own table: [bench/results/container_cost.md](../bench/results/container_cost.md)",
    ),
    Bench(
        "aa_night",
        _py("aa_night"),
        "A/A nights: false keeps and discards, power",
        skip="6-8 min of both cores, keeps its own table: [bench/results/aa_night.md](../bench/results/aa_night.md)",
    ),
    Bench(
        "h200_spread",
        _py("h200_spread"),
        "spread of a real GPU decode night",
        skip="needs a GPU; its output: [bench/results/h200_spread.json](../bench/results/h200_spread.json)",
    ),
]


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def commit() -> str:
    def git(*args: str) -> str:
        r = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return r.stdout.strip()

    sha = git("rev-parse", "--short", "HEAD") or "unknown"
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return f"{sha}{' (uncommitted changes)' if dirty else ''}"


def cpu_reference() -> str:
    """How fast this machine runs plain Python right now: the best of three 2M-step loops, in ms.
    A shared machine's speed drifts by a factor of two over hours (its neighbours, its host's
    steal); a row's figure is read against this number, taken just before it ran."""
    best = float("inf")
    for _ in range(3):
        t0, s = time.perf_counter(), 0
        for i in range(2_000_000):
            s += i
        best = min(best, time.perf_counter() - t0)
    return f"{best * 1000:.0f} ms"


def run(b: Bench) -> dict[str, str]:
    at_load = f"{load()}; ref {cpu_reference()}"
    started = time.perf_counter()
    print(f"== {b.name}: {b.command} (load {at_load})", flush=True)
    try:
        p = subprocess.run(
            b.argv, cwd=ROOT, capture_output=True, text=True, timeout=LIMIT_S, check=False
        )
        out = p.stdout + p.stderr
        found = [m.group(0) for m in b.figure.finditer(out)]
        figure = (
            found[-1].strip()
            if found
            else f"no figure line (exit {p.returncode}): {out.strip()[-200:]}"
        )
    except subprocess.TimeoutExpired:
        figure = f"stopped after {LIMIT_S} s"
    secs = time.perf_counter() - started
    print(f"   {figure} ({secs:.0f} s)", flush=True)
    return {
        "figure": figure.replace("|", "\\|"),
        "seconds": f"{secs:.0f}",
        "load": at_load,
        "commit": commit(),
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M"),
    }


ROW = re.compile(r"^\| `(?P<name>[a-z0-9_]+)` \| (?P<rest>.*) \|$")


def previous_rows() -> dict[str, str]:
    """The rows of the page as it stands, by benchmark, to keep when only some are re-run."""
    if not PAGE.exists():
        return {}
    return {m["name"]: m.group(0) for m in map(ROW.match, PAGE.read_text().splitlines()) if m}


def write(results: dict[str, dict[str, str]], started: str, finished: str, at_load: str) -> None:
    keep = previous_rows()
    lines = [
        "# Figures",
        "",
        "Written by `python bench/all.py` (do not edit by hand); each row is one benchmark's final",
        "`PASS|FAIL` line. Rows re-run on their own (`python bench/all.py NAME`) carry their own",
        "commit and date.",
        "",
        f"- commit: `{commit()}`",
        f"- machine: {os.cpu_count()} CPUs ({cpu_model()}), {platform.system()} {platform.release()},"
        f" Python {platform.python_version()}",
        f"- date (UTC): {started} to {finished}",
        f"- load average (1, 5, 15 min) at the start: {at_load}; the machine is shared,"
        " so timings vary with what else runs (each row gives the load when it started)",
        "- `ref`: the machine's speed just before the row ran, the best of three 2M-step Python"
        " loops (`bench/all.py` `cpu_reference`); the same code measured at twice the ref takes"
        " about twice as long, so compare rows at like refs",
        "",
        "| benchmark | what | command | figure | s | load at start; ref | commit, date (UTC) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for b in BENCHES:
        if b.skip and b.name not in results:
            continue
        r = results.get(b.name)
        if r is not None:
            lines.append(
                f"| `{b.name}` | {b.what} | `{b.command}` | {r['figure']} | {r['seconds']} |"
                f" {r['load']} | {r['commit']}, {r['date']} |"
            )
        elif b.name in keep:
            lines.append(keep[b.name])
        else:
            lines.append(f"| `{b.name}` | {b.what} | `{b.command}` | not run yet | | | |")
    lines += [
        "",
        "## Not run by `bench/all.py`",
        "",
        "| benchmark | command | why |",
        "| --- | --- | --- |",
    ]
    lines += [f"| `{b.name}` | `{b.command}` | {b.skip} |" for b in BENCHES if b.skip]
    PAGE.write_text("\n".join(lines) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("names", nargs="*", help="only these benchmarks (default: all not skipped)")
    ap.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    args = ap.parse_args()
    known = {b.name: b for b in BENCHES}
    unknown = [n for n in args.names if n not in known]
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; known: {', '.join(known)}")
        return 2
    if args.list:
        for b in BENCHES:
            print(f"{b.name:18s} {'SKIP ' + b.skip if b.skip else b.command}")
        return 0
    chosen = [known[n] for n in args.names] if args.names else [b for b in BENCHES if not b.skip]
    at_load = f"{load()}; ref {cpu_reference()}"
    started = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M")
    results = {b.name: run(b) for b in chosen}
    write(results, started, dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M"), at_load)
    print(f"wrote {PAGE.relative_to(ROOT)}")
    failed = [
        n for n, r in results.items() if not r["figure"].startswith("PASS") and n != "public_cards"
    ]
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
