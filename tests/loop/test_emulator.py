"""The engine emulator as a real process: it serves, and it fails the way SGLang fails."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

from tests.loop.conftest import REPO, bench_cmd, emulator_cmd, free_port


def _run(
    cmd: str, env: dict[str, str] | None = None, timeout: float = 20
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cmd, shell=True, cwd=REPO, env={**os.environ, **(env or {})}, capture_output=True,
        text=True, timeout=timeout,
    )  # fmt: skip


def _wait_health(port: int, proc: subprocess.Popen[str], limit: float = 15) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=0.5) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.05)
    raise AssertionError("emulator never became healthy")


def test_serves_health_and_generate_with_config_dependent_throughput(tmp_path: Path) -> None:
    rates = {}
    for bs in (32, 16):
        port = free_port()
        with open(tmp_path / f"{bs}.log", "w") as log:
            proc = subprocess.Popen(
                emulator_cmd(port, 0.2, f"--cuda-graph-max-bs {bs}").split(), cwd=REPO,
                stdout=log, stderr=subprocess.STDOUT, text=True,
            )  # fmt: skip
        try:
            _wait_health(port, proc)
            out = _run(bench_cmd(port, tokens=80))
            rates[bs] = json.loads(out.stdout)["output_throughput"]
        finally:
            proc.kill()
            proc.wait(5)
        text = (tmp_path / f"{bs}.log").read_bytes().decode()
        assert "\rLoading safetensors checkpoint shards:" in text  # carriage-return progress
        assert "Ignore import error when loading" in text and "Exception:" in text
        assert "The server is fired up and ready to roll!" in text
    assert rates[16] > rates[32]  # smaller graph batch sizes are faster in the emulator


def test_fewer_channels_dies_with_sglangs_not_enough_memory(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        'import os\nos.environ.setdefault("NCCL_MAX_NCHANNELS", "2")\n'
        'os.environ.setdefault("NCCL_BUFFSIZE", "131072")\n'
    )
    res = _run(emulator_cmd(free_port(), 0.1), env={"PYTHONPATH": f"{site}:{REPO}"})
    assert res.returncode == 1
    assert (
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value:"
        in res.stdout
    )
    assert "NCCL_MAX_NCHANNELS=2" in res.stdout  # the sitecustomize really ran


def test_fusion_on_sm120_fails_in_graph_capture() -> None:
    res = _run(
        emulator_cmd(free_port(), 0.1, "--enable-flashinfer-allreduce-fusion"),
        env={"EMULATOR_GPU_ARCH": "sm120"},
    )
    assert res.returncode == 1
    assert res.stdout.index("Capture cuda graph begin") < res.stdout.index(
        "RuntimeError: No supported CUDA architectures found for major versions [9, 10]."
    )
    ok = _run(
        emulator_cmd(free_port(), 0.1, "--enable-flashinfer-allreduce-fusion --die-after 1.5"),
        env={"EMULATOR_GPU_ARCH": "sm90"},
    )
    assert "No supported CUDA" not in ok.stdout and "ready to roll" in ok.stdout


def test_port_held_gives_errno_98() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        res = _run(emulator_cmd(port, 0.1))
    assert res.returncode == 1
    assert "OSError: [Errno 98] Address already in use" in res.stdout


def test_orphan_outlives_its_parent(tmp_path: Path) -> None:
    marker = f"orphan-test-{os.getpid()}"
    with open(tmp_path / "log", "w") as log:  # the orphan keeps its stdout: not a pipe
        rc = subprocess.call(
            emulator_cmd(free_port(), 0.1, "--spawn-orphan --die-after 0.3"), shell=True,
            cwd=REPO, env={**os.environ, "PIVOT_RUN_ID": marker}, stdout=log, stderr=log,
        )  # fmt: skip
    assert rc in (-signal.SIGKILL, 128 + signal.SIGKILL)
    found = subprocess.run(
        ["grep", "-lazxF", f"PIVOT_RUN_ID={marker}", *map(str, Path("/proc").glob("[0-9]*/environ"))],
        capture_output=True, text=True,
    )  # fmt: skip
    pids = [int(p.split("/")[2]) for p in found.stdout.split()]
    sessions = [os.getsid(pid) for pid in pids]
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    assert pids, "the double-forked child should still be running"
    assert os.getsid(0) not in sessions  # another session: our group kill cannot reach it


def test_itl_is_per_token_and_latencies_agree(tmp_path: Path) -> None:
    """Issue 23 item 7: ITL is the token gaps (spikes and all), TPOT a request's mean gap, so
    their means agree and p99 ITL sits above p99 TPOT; a seed gives the same launch draw."""
    port = free_port()
    with open(tmp_path / "e.log", "w") as log:
        proc = subprocess.Popen(
            emulator_cmd(port, 0.05).split(), cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
            text=True,
        )  # fmt: skip
    try:
        _wait_health(port, proc)
        cmd = f"{bench_cmd(port, tokens=40)} --format vllm".replace("--requests 2", "--requests 6")
        out = json.loads(_run(cmd).stdout)
    finally:
        proc.kill()
        proc.wait(5)
    assert out["p99_itl_ms"] > 1.5 * out["p99_tpot_ms"], out
    assert abs(out["mean_itl_ms"] - out["mean_tpot_ms"]) < 0.25 * out["mean_tpot_ms"], out


def test_a_seed_repeats_a_launch_draw(tmp_path: Path) -> None:
    from loop.emulator import _launch_factor

    def draws(seed: str, name: str) -> list[float]:
        env = {"EMULATOR_LAUNCH_NOISE": "0.1", "EMULATOR_SEED": seed}
        env["EMULATOR_DRIFT_FILE"] = str(tmp_path / name)
        return [_launch_factor(env) for _ in range(3)]

    a, b, c = draws("1", "a"), draws("1", "b"), draws("2", "c")
    assert a == b and a != c and len(set(a)) == 3


def test_latency_rises_with_load_past_a_known_knee(tmp_path: Path) -> None:
    """Capacity is well defined: below `capacity_rps` requests start at once (TTFT is the
    prefill); past it they wait for a slot, for real, and TTFT grows with the queue while the
    throughput stays at the knee. End-to-end holds the wait once (not twice)."""
    from loop.emulator import capacity_rps

    port = free_port()
    extra = "--max-running-requests 2 --mem-fraction-static 0.8"
    with open(tmp_path / "e.log", "w") as log:
        proc = subprocess.Popen(
            emulator_cmd(port, 0.05, extra).split(), cwd=REPO, stdout=log,
            stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
    try:
        _wait_health(port, proc)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/get_server_info") as r:
            knee = capacity_rps(json.loads(r.read())["tokens_per_s_model"], 2, 40)
        out = {}
        for f in (0.6, 1.5):
            cmd = f"{bench_cmd(port, 40)} --format vllm --request-rate {knee * f:.2f}"
            out[f] = json.loads(_run(cmd.replace("--requests 2", "--requests 40")).stdout)
    finally:
        proc.kill()
        proc.wait(5)
    below, above = out[0.6], out[1.5]
    assert below["p90_ttft_ms"] < 60 and above["p90_ttft_ms"] > 150, (below, above)
    assert above["request_throughput"] < 1.1 * knee < 1.1 * above["request_throughput"] * 1.1
    # the wait is in TTFT and e2e alike, so the decode part (TPOT) does not grow with the queue
    assert above["mean_tpot_ms"] < 1.5 * below["mean_tpot_ms"]
    assert above["mean_e2el_ms"] - above["mean_ttft_ms"] < 1.5 * (
        below["mean_e2el_ms"] - below["mean_ttft_ms"]
    )
