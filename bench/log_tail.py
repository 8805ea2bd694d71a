"""Benchmark `log_tail`: cost independent of file size, and what CR collapsing saves the agent.

1. A 5 GB log (a sparse file: truncate, then real lines at its end), tailed 200 lines via
   LocalHost 30 times: median time <= 50 ms and bytes read <= 2 MB.
2. A carriage-return progress log (several tqdm-style bars with thousands of updates, server
   lines and a few errors, some glued to a bar without a newline): the cleaned 200-line tail
   must cost >= 20x fewer tokens (chars / 4) than the raw `tail -n 200`, with every error kept.

Ends with one line `PASS|FAIL <metric> <value> (target ...)`; exits non-zero on FAIL.
"""

from __future__ import annotations

import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tools.local_host import LocalHost  # noqa: E402
from tools.log_tail import Args, run  # noqa: E402

SIZE = 5 * 1024**3
RUNS = 30
MAX_MEDIAN_MS = 50.0
MAX_BYTES = 2 * 1024 * 1024
MIN_TOKEN_RATIO = 20.0
ERRORS = [
    "[2026-06-10 20:31:12 TP3] NCCL WARN Cuda failure 'out of memory'",
    "RuntimeError: No supported CUDA architectures found for major versions [9, 10].",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
    "ValueError: --max-model-len 131072 exceeds the model's max_position_embeddings",
]


def big_sparse_log(directory: str) -> str:
    path = os.path.join(directory, "huge.log")
    with open(path, "wb") as fh:
        fh.truncate(SIZE)
        fh.seek(0, os.SEEK_END)
        for i in range(20_000):
            fh.write(
                f"[2026-06-10 21:{i // 600:02d}:{i % 60:02d} TP0] Decode batch. #running-req: {i % 64}, #token: {i * 17}, gen throughput (token/s): 812.4\n".encode()
            )
    return path


def _bar(label: str, total: int, rng: random.Random) -> str:
    out = []
    for step in range(total + 1):
        pct = step * 100 // total
        fill = "█" * (pct // 10) + " " * (10 - pct // 10)
        out.append(
            f"\r{label}: {pct:3d}%|{fill}| {step}/{total} [00:{step % 60:02d}<01:{rng.randint(0, 59):02d}, {rng.uniform(1, 9):.2f}it/s]"
        )
    return "".join(out)


def progress_log(directory: str) -> str:
    rng = random.Random(7)
    parts = [
        "[2026-06-10 21:14:02] server_args=ServerArgs(model_path='/data/models/Kimi-K2.5', tp_size=8)\n",
        "[2026-06-10 21:14:15 TP0] Init torch distributed begin.\n",
        _bar("Downloading model-00001-of-00004.safetensors", 2000, rng) + "\n",
        _bar("Downloading model-00002-of-00004.safetensors", 2000, rng) + "\n",
        ERRORS[0] + "\n",
        _bar("Loading safetensors checkpoint shards", 64, rng) + "\n",
        "[2026-06-10 21:20:07 TP0] Load weight end. avail mem=21.80 GB\n",
        _bar("Capturing batches (bs=256 avail_mem=13.38 GB)", 1500, rng)[:-40] + ERRORS[1] + "\n",
        _bar("Compiling kernels", 800, rng) + "\n",
        ERRORS[2] + "\n",
        _bar("Capturing CUDA graph shapes", 67, rng) + ERRORS[3] + "\n",
        "[2026-06-10 21:22:12] Received sigquit from a child process. It usually means the child failed.\n",
    ]
    path = os.path.join(directory, "progress.log")
    Path(path).write_text("".join(parts))
    return path


def tokens(text: str) -> float:
    return len(text) / 4


def main() -> int:
    host = LocalHost()
    with tempfile.TemporaryDirectory(prefix="pivot-bench-") as d:
        big = big_sparse_log(d)
        times, reads = [], []
        for _ in range(RUNS):
            t0 = time.perf_counter()
            res = run(host, Args(path=big, lines=200))
            times.append((time.perf_counter() - t0) * 1000)
            reads.append(res.bytes_read)
        assert res.ok and len(res.tail) == 200, res.error
        median_ms = statistics.median(times)
        max_read = max(reads)
        print(
            f"5 GB sparse log: median {median_ms:.2f} ms over {RUNS} runs, p max {max(times):.2f} ms, bytes read {max_read}"
        )

        plog = progress_log(d)
        raw = Path(plog).read_bytes().decode()  # read_text would turn \r into \n
        raw_tail = "\n".join(raw.split("\n")[-201:])  # what `tail -n 200` hands over
        res = run(host, Args(path=plog, lines=200))
        cleaned = "\n".join(res.lines())
        ratio = tokens(raw_tail) / tokens(cleaned)
        missing = [e for e in ERRORS if not any(e in ln for ln in res.tail)]
        print(
            f"progress log: {len(raw)} bytes; raw tail ~{tokens(raw_tail):.0f} tokens, cleaned ~{tokens(cleaned):.0f} tokens ({ratio:.1f}x fewer); {res.progress_collapsed} updates collapsed; errors missing: {missing or 'none'}"
        )

    checks = [
        ("median_ms", round(median_ms, 2), median_ms <= MAX_MEDIAN_MS, f"<= {MAX_MEDIAN_MS} ms"),
        ("bytes_read", max_read, max_read <= MAX_BYTES, f"<= {MAX_BYTES}"),
        (
            "token_ratio",
            round(ratio, 1),
            ratio >= MIN_TOKEN_RATIO and not missing,
            f">= {MIN_TOKEN_RATIO}x, all {len(ERRORS)} errors kept",
        ),
    ]
    failed = [c for c in checks if not c[2]]
    for name, value, ok, target in checks:
        print(f"  {'ok  ' if ok else 'FAIL'} {name} {value} (target {target})")
    summary = ",".join(f"{n}={v}" for n, v, _, _ in checks)
    print(
        f"{'FAIL' if failed else 'PASS'} log_tail {summary} (target {'; '.join(c[3] for c in checks)})"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
