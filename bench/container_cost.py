"""What investigating a server in a container costs over the same investigation on the host.

The same staged failure both ways (the stand-in engine of tests/containers.py rejecting
`max_model_len` and exiting 1): once as a host process writing a log, investigated with
`pivot investigate --local --log LOG`; once in a real Podman container, investigated with
`pivot investigate --local --container NAME` (exec for the reads inside, inspect and logs for
the record). The real CLI as a subprocess both ways, the clock from its start to its exit with
the JSON verdict; runs interleaved (host, container, host, ...) so drift hits both alike.
Judged: median container time / median host time (target <= 1.5x). Writes its table to
bench/results/container_cost.md (commit, machine, date).

    .venv/bin/python bench/container_cost.py [--runs 3]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench._common import verdict  # noqa: E402
from tests import containers  # noqa: E402

TARGET = 1.5
LABEL = "bad_launch_argument"
PIVOT = str(Path(sys.executable).parent / "pivot")
RESULTS = ROOT / "bench" / "results" / "container_cost.md"


def investigate(home: Path, *where: str) -> float:
    env = {**os.environ, "PIVOT_HOME": str(home)}
    env.pop("PIVOT_DATABASE_URL", None)
    t0 = time.perf_counter()
    out = subprocess.run(
        [PIVOT, "investigate", "the server exits at startup", "--local", *where]
        + ["--brain", "rulebook", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    took = time.perf_counter() - t0
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    cause = json.loads(out.stdout)["root_cause"]
    if cause != LABEL:  # a fast wrong answer is not a time
        raise RuntimeError(f"{where}: concluded {cause}, not {LABEL}")
    return took


def host_log(tmp: Path) -> Path:
    """The same engine, same mode, run on the host: its log once it has exited."""
    engine, log = tmp / "engine.py", tmp / "server.log"
    engine.write_text(containers.ENGINE)
    with log.open("wb") as fh:
        subprocess.run([sys.executable, str(engine), "crash"], stdout=fh, stderr=fh, timeout=60)
    return log


def _commit() -> str:
    res = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True)  # fmt: skip
    return res.stdout.strip() or "?"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    host_t: list[float] = []
    box_t: list[float] = []
    with tempfile.TemporaryDirectory(prefix="pivot-bench-ctr-") as d:
        tmp = Path(d)
        log = host_log(tmp)
        with containers.container(mode="crash", wait_for="exited") as name:
            investigate(tmp / "warm", "--log", str(log))  # first import of everything: not timed
            for i in range(a.runs):
                host_t.append(investigate(tmp / f"h{i}", "--log", str(log)))
                box_t.append(investigate(tmp / f"c{i}", "--container", name))
    h, c = statistics.median(host_t), statistics.median(box_t)
    ratio = c / h
    rows = [
        "| where | command | runs | median s | all s |",
        "| --- | --- | --- | --- | --- |",
        f"| host | `pivot investigate --local --log LOG` | {a.runs} | {h:.2f} | "
        + ", ".join(f"{t:.2f}" for t in host_t)
        + " |",
        f"| Podman container | `pivot investigate --local --container NAME` | {a.runs} | {c:.2f} | "
        + ", ".join(f"{t:.2f}" for t in box_t)
        + " |",
    ]
    table = "\n".join(rows)
    print(table)
    print(f"container / host: {ratio:.2f}x")
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        "# Container investigation cost (bench/container_cost.py)\n\n"
        f"commit {_commit()} · {platform.node()} ({os.cpu_count()} CPUs) · {when}\n\n"
        f"{table}\n\ncontainer / host: **{ratio:.2f}x** (target <= {TARGET}x)\n"
    )
    verdict(ratio <= TARGET, "container/host", f"{ratio:.2f}x", f"<= {TARGET}x")


if __name__ == "__main__":
    main()
