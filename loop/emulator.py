"""An engine emulator that starts, serves and fails the way SGLang does, without a GPU.

Why: the loop must be tested against real processes that load slowly, print carriage-return
progress, bind a port, answer a probe, and die (or hang, or leave orphans) for the same
configuration reasons the real engines do. It reads the same inputs a real launch reads:
NCCL_* from the environment (a sitecustomize.py on PYTHONPATH sets them, exactly as on the
seed's machine), engine flags, and an optional `--config` file of env settings.

    python -m loop.emulator --port 30000 --model-path /models/x --mem-fraction-static 0.8
    python -m loop.emulator --bench-client --port 30000 --requests 3   # the benchmark
    python -m loop.emulator --bench-client --port 30000 --format vllm  # vllm bench serve shape
    python -m loop.emulator --bench-client --port 30000 --max-concurrency 4  # or --request-rate 8

Failure modes (all driven by configuration, never by a test hook inside the loop):
- NCCL_MAX_NCHANNELS <= 2 with NCCL_BUFFSIZE < 1 MiB and --mem-fraction-static >= 0.5:
  SGLang's "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static".
- --enable-flashinfer-allreduce-fusion with EMULATOR_GPU_ARCH=sm120: FlashInfer's JIT error
  during CUDA-graph capture.
- the port already held: "OSError: [Errno 98] Address already in use".
- EMULATOR_HANG=1 / --emulate-hang: alive, silent, never ready.
- EMULATOR_GENERATE_HANG=1 / --hang-generate: ready and healthy, but /generate never answers
  (a wedged scheduler): the benchmark hangs, so only the per-experiment limit ends it.
- EMULATOR_ORPHAN=1 / --spawn-orphan: a double-forked child in its own session outlives us.
- EMULATOR_OUTLIER_ONCE=FLAG + EMULATOR_OUTLIER_REQUESTS=FROM:TO[:FACTOR]: the night's first
  server serves those requests slower, so exactly one benchmark run is an outlier.
- EMULATOR_DIE_AFTER=S: SIGKILL itself after S seconds, writing the moment to
  EMULATOR_DEATH_FILE first (the dead-launch benchmark measures from it).
- Noise shaped like a real night's (bench/aa_night.py fits it; bench/results/h200_spread.json
  holds the H200 spread it was fitted to): EMULATOR_NOISE is each request's rate noise (a
  log-normal sigma), EMULATOR_LAUNCH_NOISE a factor drawn once per server start (a relaunched
  engine is not the same engine: between-launch spread), EMULATOR_DRIFT=FRACTION with
  EMULATOR_DRIFT_FILE a steady drift of FRACTION per launch through the night; EMULATOR_SEED=S
  (with EMULATOR_DRIFT_FILE counting launches) makes a night's draws reproducible.
- Inter-token latency is per token, not the request's average: each request's decode time is
  split into token gaps with jitter and, every ITL_SPIKE_EVERY-th gap, a step that also ran
  another request's prefill, so p99 ITL sits well above p99 TPOT as in real engines.
- EMULATOR_SPEEDUP=F: F times the throughput, a change of known size for power measurements.
- --schedule-conservativeness < 0.5: +8% throughput, but a request that arrives with 3 or more
  in flight is retracted and waits 350 ms for its first token (an SLO broken under load only).
- Latency rises with load, so "the highest rate that meets the SLOs" exists: at most
  --max-running-requests decode at once (SGLang's flag); a request beyond them waits, for real,
  for the first slot to free (its TTFT includes the wait), and each running request decodes
  BATCH_COST slower per other request in the batch. Capacity in requests/s is therefore
  `max_running * tps / (1 + BATCH_COST * (max_running - 1)) / tokens` (`capacity_rps`); past it
  the queue, and TTFT with it, grows with every request.
With --gpu it holds mem-fraction of the real GPU through torch and does real matmuls per request.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

BASE_TOKENS_PER_S = 1000.0
SHARDS = 16
FUSION_ARCHS = {"sm90", "sm100"}


def _ts(tp: bool = True) -> str:
    stamp = datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    return f"[{stamp} TP0]" if tp else f"[{stamp}]"


def _say(text: str, end: str = "\n") -> None:
    sys.stdout.write(text + end)
    sys.stdout.flush()


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


def apply_config_file(path: str) -> None:
    """Apply KEY=VALUE / export KEY=VALUE / os.environ.setdefault("K", "V") lines (setdefault)."""
    import re

    pat = re.compile(
        r"""^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*["']?([^"'\n]*)["']?\s*$"""
        r"""|os\.environ(?:\.setdefault\(\s*["'](\w+)["']\s*,\s*["']([^"']*)["']\s*\)"""
        r"""|\[\s*["'](\w+)["']\s*\]\s*=\s*["']([^"']*)["'])"""
    )
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            m = pat.search(line)
            if not m:
                continue
            key = m.group(1) or m.group(3) or m.group(5)
            val = m.group(2) if m.group(1) else (m.group(4) if m.group(3) else m.group(6))
            os.environ.setdefault(key, val or "")


def throughput(args: argparse.Namespace, env: dict[str, str] | None = None) -> float:
    """Tokens/s of this start: the configuration's, times this launch's draw (none unless
    EMULATOR_LAUNCH_NOISE / EMULATOR_DRIFT are set); request noise is added per request."""
    env = dict(os.environ) if env is None else env
    bs = max(1, args.cuda_graph_max_bs)
    # Smaller graph batch sizes help this decode-bound workload up to 16 (the seed's +9%).
    f_bs = 1.0 + 0.09 * math.exp(-((math.log2(bs / 16.0)) ** 2) / 0.6)
    f_mem = 0.9 + 0.15 * min(max(args.mem_fraction_static, 0.0), 0.95)
    channels = int(env.get("NCCL_MAX_NCHANNELS", "16") or 16)
    f_nccl = 1.0 + 0.015 * math.log2(16.0 / max(1, min(channels, 32)))
    f_proto = 1.04 if env.get("NCCL_PROTO", "") == "LL" else 1.0
    f_fusion = 1.06 if args.enable_flashinfer_allreduce_fusion else 1.0
    f_tp = max(1, args.tp) ** 0.85
    # Bigger prefill chunks batch more work per step (+15%), but a request that arrives
    # behind a long chunk waits for it: see ttft_ms().
    f_chunk = 1.15 if args.chunked_prefill_size >= BIG_PREFILL_CHUNK else 1.0
    # An aggressive scheduler admits more per step (+8%), but under load (RETRACT_BUSY
    # requests in flight) it runs out of KV cache and retracts requests: see do_POST.
    f_sched = 1.08 if args.schedule_conservativeness < AGGRESSIVE else 1.0
    f_known = float(env.get("EMULATOR_SPEEDUP", "1") or 1)
    return (
        BASE_TOKENS_PER_S
        * f_bs
        * f_mem
        * f_nccl
        * f_proto
        * f_fusion
        * f_tp
        * f_chunk
        * f_sched
        * f_known
        * _launch_factor(env)
    )


def _launch_factor(env: Any) -> float:
    """This start's draw of the between-launch spread and its place in the night's drift.

    EMULATOR_SEED=S makes a night's noise reproducible: each start seeds its random draws
    (this factor and every request's noise after it) with S and its launch number, so an A/A
    bench run per seed gives the same night again and seeds can be compared."""
    sigma = float(env.get("EMULATOR_LAUNCH_NOISE", "0") or 0)
    drift = float(env.get("EMULATOR_DRIFT", "0") or 0)
    seed = env.get("EMULATOR_SEED")
    n = _count_launch(env.get("EMULATOR_DRIFT_FILE")) if drift or seed else None
    if seed:
        random.seed(f"{seed}:{n}")
    f = math.exp(random.gauss(0.0, sigma)) if sigma else 1.0
    if drift and n is not None:
        f *= 1.0 + drift * n
    return f


def _count_launch(path: str | None) -> int | None:
    """This start's number in the night (0, 1, ...), counted in EMULATOR_DRIFT_FILE."""
    if not path:
        return None
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_EX)  # two starts at once still count two launches
        n = int(os.read(fd, 32) or b"0")
        os.lseek(fd, 0, os.SEEK_SET)
        os.ftruncate(fd, 0)
        os.write(fd, str(n + 1).encode())
    finally:
        os.close(fd)
    return n


#: --schedule-conservativeness below this schedules aggressively.
AGGRESSIVE = 0.5
#: In-flight requests (the new one included) at which an aggressive scheduler retracts, and
#: what a retracted request waits before its first token.
RETRACT_BUSY = 3
RETRACT_MS = 350.0


#: Each running request decodes this much slower per other request in its batch: a bigger
#: batch makes more tokens per second in all, and each of them later.
BATCH_COST = 0.1


def capacity_rps(tps: float, max_running: int, tokens: int) -> float:
    """Requests/s this server completes at saturation: every slot busy, each at the rate of a
    full batch (the knee past which the queue grows without bound)."""
    m = max(1, max_running)
    return m * tps / (1.0 + BATCH_COST * (m - 1)) / max(1, tokens)


class Slots:
    """The running batch as a timeline: when each of `max_running` slots frees. A request takes
    the slot that frees first, starts when it does (its queue wait), and decodes at the rate of
    the batch it joins; the caller sleeps until its finish, so the wall clock is the model's."""

    def __init__(self, max_running: int) -> None:
        self.free_at = [0.0] * max(1, max_running)
        self.lock = threading.Lock()

    def admit(self, now: float, decode_s_alone: float) -> tuple[float, float]:
        """(start, finish) of a request arriving at `now` that alone would decode in
        `decode_s_alone` seconds."""
        with self.lock:
            i = min(range(len(self.free_at)), key=self.free_at.__getitem__)
            start = max(now, self.free_at[i])
            others = sum(1 for j, t in enumerate(self.free_at) if j != i and t > start)
            finish = start + decode_s_alone * (1.0 + BATCH_COST * others)
            self.free_at[i] = finish
            return start, finish


BIG_PREFILL_CHUNK = 16384
BASE_TTFT_MS = 35.0
#: Every STALL_EVERY-th request waits behind a whole long prefill chunk (the p99 tail).
STALL_EVERY = 4
STALL_MS = 420.0


def ttft_ms(args: argparse.Namespace, n: int, noise: float) -> float:
    """Time to first token of the n-th request: a prefill time plus, with big prefill
    chunks, a stall behind another request's chunk every STALL_EVERY requests."""
    t = BASE_TTFT_MS * (1.0 + random.gauss(0.0, noise))
    if args.chunked_prefill_size >= BIG_PREFILL_CHUNK and n % STALL_EVERY == STALL_EVERY - 1:
        t += STALL_MS
    return max(1.0, t)


#: Token gaps: log-normal jitter per gap, and every ITL_SPIKE_EVERY-th gap ITL_SPIKE times as
#: long (a decode step that also carried another request's prefill chunk).
ITL_JITTER = 0.25
ITL_SPIKE_EVERY = 8
ITL_SPIKE = 6.0


def token_gaps_ms(decode_s: float, tokens: int) -> list[float]:
    """The gaps between a request's tokens, summing to its decode time: a request's TPOT is
    their mean, its ITL samples are the gaps themselves (spikes and all)."""
    if tokens < 2:
        return []
    raw = [
        math.exp(random.gauss(0.0, ITL_JITTER)) * (ITL_SPIKE if i % ITL_SPIKE_EVERY == 3 else 1)
        for i in range(tokens - 1)
    ]
    scale = decode_s * 1000.0 / sum(raw)
    return [g * scale for g in raw]


def _spawn_orphan() -> None:
    """Double fork into a new session: the grandchild is re-parented to init and keeps running."""
    if os.fork() != 0:
        os.wait()
        return
    os.setsid()
    if os.fork() != 0:
        os._exit(0)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a stubborn leftover, like a stuck worker
    while True:
        time.sleep(3600)


def _die_later(after_s: float, death_file: str | None) -> None:
    def _kill() -> None:
        time.sleep(after_s)
        if death_file:
            with open(death_file, "w", encoding="utf-8") as fh:
                fh.write(f"{time.time():.6f}\n")
                fh.flush()
                os.fsync(fh.fileno())
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=_kill, daemon=True).start()


def _traceback(frames: list[tuple[str, int, str, str]], error: str) -> None:
    lines = [f"{_ts()} Scheduler hit an exception: Traceback (most recent call last):"]
    for path, no, fn, code in frames:
        lines += [f'  File "{path}", line {no}, in {fn}', f"    {code}"]
    lines += [
        error,
        "",
        f"{_ts(False)} Received sigquit from a child process. It usually means the child failed.",
    ]
    _say("\n".join(lines))


SG = "/usr/local/lib/python3.12/dist-packages/sglang/srt"


def init_distributed_environment() -> None:
    """The emulated init hang, where a real one waits: a rank at the rendezvous whose peer never
    comes (named as the engines name it, so a stack dump of the hung emulator reads as one)."""
    while True:
        time.sleep(3600)


def _fail_not_enough_memory(mf: float) -> None:
    _traceback(
        [
            (
                f"{SG}/managers/scheduler.py",
                2871,
                "run_scheduler_process",
                "scheduler = Scheduler(",
            ),
            (f"{SG}/managers/scheduler.py", 312, "__init__", "self.tp_worker = TpModelWorker("),
            (f"{SG}/model_executor/model_runner.py", 318, "initialize", "self.init_memory_pool("),
            (
                f"{SG}/model_executor/model_runner_kv_cache_mixin.py",
                207,
                "init_memory_pool",
                "raise RuntimeError(",
            ),
        ],
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
        f"Current value: self.server_args.mem_fraction_static={mf}",
    )


def _fail_fusion_jit() -> None:
    fi = "/usr/local/lib/python3.12/dist-packages/flashinfer"
    _traceback(
        [
            (
                f"{SG}/model_executor/cuda_graph_runner.py",
                389,
                "capture",
                ") = self.capture_one_batch_size(bs, forward)",
            ),
            (
                f"{SG}/layers/flashinfer_comm_fusion.py",
                54,
                "initialize_flashinfer_allreduce_workspace",
                "comm = flashinfer.comm.trtllm_ar.get_trtllm_comm_module()",
            ),
            (
                f"{fi}/jit/core.py",
                301,
                "gen_jit_spec",
                "nvcc_flags = current_compilation_context.get_nvcc_flags_list(supported_major_versions=[9, 10])",
            ),
            (f"{fi}/compilation_context.py", 62, "get_nvcc_flags_list", "raise RuntimeError("),
        ],
        "RuntimeError: No supported CUDA architectures found for major versions [9, 10].",
    )


def _fail_port(port: int) -> None:
    _say(
        f"{_ts(False)} Traceback (most recent call last):\n"
        f'  File "{SG}/entrypoints/http_server.py", line 1187, in launch_server\n'
        "    uvicorn.run(\n"
        '  File "/usr/lib/python3.12/socketserver.py", line 473, in server_bind\n'
        "    self.socket.bind(self.server_address)\n"
        "OSError: [Errno 98] Address already in use"
        f"\n{_ts(False)} ERROR: port {port} is held by another process"
    )


class _GpuLoad:
    """Real GPU memory and real matmuls when --gpu is given; torch is imported only then."""

    def __init__(self, fraction: float) -> None:
        import torch

        self.torch = torch
        free, total = torch.cuda.mem_get_info()
        want = int(total * fraction)
        self.block = torch.empty(
            max(0, min(want, free - (1 << 30))), dtype=torch.uint8, device="cuda"
        )
        self.a = torch.randn(2048, 2048, device="cuda", dtype=torch.float16)
        self.total_gb = total / 2**30
        self.held_gb = self.block.numel() / 2**30

    def work(self, tokens: int) -> None:
        x = self.a
        for _ in range(max(1, tokens // 8)):
            x = (x @ self.a).clamp_(-1, 1)
        self.torch.cuda.synchronize()


def _outlier_window(env: Any) -> tuple[int, int, float]:
    """EMULATOR_OUTLIER_ONCE=FLAG_FILE with EMULATOR_OUTLIER_REQUESTS=FROM:TO[:FACTOR]: the
    first server of a night (the one that creates FLAG_FILE) serves requests FROM..TO-1 at
    FACTOR (default 0.9) of its rate; every later server runs clean. One injected outlier."""
    flag = env.get("EMULATOR_OUTLIER_ONCE")
    spec = env.get("EMULATOR_OUTLIER_REQUESTS", "")
    if not flag or not spec:
        return (0, 0, 1.0)
    try:
        fd = os.open(flag, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return (0, 0, 1.0)
    os.close(fd)
    parts = spec.split(":")
    return (int(parts[0]), int(parts[1]), float(parts[2]) if len(parts) > 2 else 0.9)


def _make_handler(state: dict[str, Any]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt: str, *a: Any) -> None:  # the engine logs requests tersely
            return

        def _send(self, code: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path in ("/health", "/health_generate", "/v1/models"):
                self._send(200, {"status": "ok"})
            elif self.path == "/get_server_info":
                self._send(200, state["info"])
            else:
                self._send(404, {"error": "not found"})

        def do_POST(self) -> None:
            if self.path != "/generate":
                self._send(404, {"error": "not found"})
                return
            n = int(self.headers.get("Content-Length") or 0)
            try:
                req = json.loads(self.rfile.read(n) or b"{}")
            except json.JSONDecodeError:
                self._send(400, {"error": "bad json"})
                return
            tokens = int((req.get("sampling_params") or {}).get("max_new_tokens", 64))
            while state["hang_generate"]:  # health still answers; generation never does
                time.sleep(3600)
            start = time.monotonic()
            with state["lock"]:
                n = state["served"]
                state["served"] += 1
                state["inflight"] += 1
                busy = state["inflight"]
            try:
                self._generate(tokens, n, busy, start)
            finally:
                with state["lock"]:
                    state["inflight"] -= 1

        def _generate(self, tokens: int, n: int, busy: int, start: float) -> None:
            ttft = ttft_ms(state["args"], n, state["noise"])
            if state["args"].schedule_conservativeness < AGGRESSIVE and busy >= RETRACT_BUSY:
                ttft += RETRACT_MS  # retracted under KV pressure, re-scheduled later
            rate = state["tps"] * math.exp(random.gauss(0.0, state["noise"]))
            lo, hi, factor = state["outlier"]
            if lo <= n < hi:
                rate *= factor  # a slow stretch: one benchmark run comes out an outlier
            begin, finish = state["slots"].admit(start, tokens / max(rate, 1.0))
            queue_s = begin - start  # waited for a slot: real time, part of the TTFT
            if state["gpu"] is not None:
                state["gpu"].work(tokens)
            left = finish - time.monotonic()
            if left > 0:
                time.sleep(left)
            took = time.monotonic() - start
            self._send(
                200,
                {
                    "text": "ok " * min(tokens, 8),
                    # the emulated prefill time is reported, not slept: the decode rate (and
                    # the wait for a slot) alone set the throughput the client measures
                    "meta_info": {
                        "completion_tokens": tokens,
                        "e2e_latency": took,
                        "ttft": queue_s + ttft / 1000.0,
                        "queue_s": queue_s,
                        "model_s": finish - begin,  # what the decode "should" take
                        "itl_ms": token_gaps_ms(took - queue_s, tokens),
                    },
                },
            )

    return Handler


def serve(args: argparse.Namespace) -> int:
    if args.config:
        apply_config_file(args.config)
    env = os.environ
    if args.spawn_orphan or env.get("EMULATOR_ORPHAN") == "1":
        _spawn_orphan()
    die_after = args.die_after if args.die_after is not None else env.get("EMULATOR_DIE_AFTER")
    if die_after is not None:
        _die_later(float(die_after), env.get("EMULATOR_DEATH_FILE"))
    arch = env.get("EMULATOR_GPU_ARCH", "sm90")
    L = max(0.0, args.load_seconds)

    _say(
        f"{_ts(False)} server_args=ServerArgs(model_path={args.model_path!r}, tp_size={args.tp}, "
        f"mem_fraction_static={args.mem_fraction_static}, cuda_graph_max_bs={args.cuda_graph_max_bs}, "
        f"enable_flashinfer_allreduce_fusion={args.enable_flashinfer_allreduce_fusion}, port={args.port})"
    )
    # The seed's false-CRASHED trap: harmless lines that contain "Exception".
    _say(
        f"{_ts(False)} Ignore import error when loading sglang.srt.layers.quantization.deep_gemm_wrapper: Exception: DeepGEMM is not built for {arch.replace('sm', 'sm_')}"
    )
    _say(
        f"{_ts(False)} Ignore import error when loading sglang.srt.models.glm4v_moe: No module named 'transformers.models.glm4v_moe'"
    )
    nccl = " ".join(f"{k}={v}" for k, v in sorted(env.items()) if k.startswith("NCCL_"))
    _say(f"{_ts()} Init torch distributed begin. {nccl}".rstrip())
    time.sleep(L * 0.05)
    if args.emulate_hang or env.get("EMULATOR_HANG") == "1":
        init_distributed_environment()  # alive, silent, never ready: the loop must call it "hung"
    _say(f"{_ts()} Init torch distributed ends. mem usage=0.61 GB")

    gpu = _GpuLoad(args.mem_fraction_static) if args.gpu else None
    total_gb = gpu.total_gb if gpu else 139.8
    _say(f"{_ts()} Load weight begin. avail mem={total_gb - 0.6:.2f} GB")
    for i in range(SHARDS + 1):
        pct = int(100 * i / SHARDS)
        _say(
            f"\rLoading safetensors checkpoint shards: {pct:3d}% Completed | {i}/{SHARDS} [00:{i:02d}<00:{SHARDS - i:02d},  1.0s/it]",
            end="",
        )
        time.sleep(L * 0.6 / SHARDS)
    weights_gb = 0.52 * total_gb
    _say("")
    _say(
        f"{_ts()} Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, avail mem={total_gb - weights_gb:.2f} GB, mem usage={weights_gb:.2f} GB."
    )

    channels = _env_int("NCCL_MAX_NCHANNELS", 16)
    buffsize = _env_int("NCCL_BUFFSIZE", 4 << 20)
    if channels <= 2 and buffsize < (1 << 20) and args.mem_fraction_static >= 0.5:
        time.sleep(L * 0.05)
        _fail_not_enough_memory(args.mem_fraction_static)
        return 1
    kv_gb = max(0.1, args.mem_fraction_static * total_gb - weights_gb)
    _say(
        f"{_ts()} KV Cache is allocated. #tokens: {int(kv_gb * 60000)}, K size: {kv_gb / 2:.2f} GB, V size: {kv_gb / 2:.2f} GB"
    )
    _say(f"{_ts()} Memory pool end. avail mem={total_gb * (1 - args.mem_fraction_static):.2f} GB")
    _say(
        f"{_ts()} Capture cuda graph begin. This can take up to several minutes. avail mem={total_gb * (1 - args.mem_fraction_static) - 0.03:.2f} GB"
    )
    time.sleep(L * 0.05)
    if args.enable_flashinfer_allreduce_fusion and arch not in FUSION_ARCHS:
        _fail_fusion_jit()
        return 1
    sizes = [b for b in (1, 2, 4, 8, 16, 32, 64, 128, 256) if b <= args.cuda_graph_max_bs]
    for j, b in enumerate(reversed(sizes)):
        _say(
            f"\rCapturing batches (bs={b} avail_mem={total_gb * 0.1:.2f} GB): {int(100 * (j + 1) / len(sizes))}%|",
            end="",
        )
        time.sleep(L * 0.2 / max(1, len(sizes)))
    _say("")
    _say(f"{_ts()} Capture cuda graph end. Time elapsed: {L * 0.2:.2f} s. mem usage=0.35 GB.")

    tps = throughput(args)
    state: dict[str, Any] = {
        "tps": tps,
        "noise": float(env.get("EMULATOR_NOISE", "0.01")),
        "gpu": gpu,
        "hang_generate": args.hang_generate or env.get("EMULATOR_GENERATE_HANG") == "1",
        "args": args,
        "served": 0,
        "inflight": 0,
        "slots": Slots(args.max_running_requests),
        "outlier": _outlier_window(env),
        "lock": threading.Lock(),
        "info": {
            "tokens_per_s_model": tps,
            "pid": os.getpid(),
            "gpu_held_gb": gpu.held_gb if gpu else 0.0,
        },
    }
    try:
        httpd = ThreadingHTTPServer((args.host, args.port), _make_handler(state))
    except OSError as exc:
        if exc.errno == 98:
            _fail_port(args.port)
            return 1
        raise
    httpd.daemon_threads = True
    _say(
        f"{_ts(False)} INFO:     Uvicorn running on http://{args.host}:{args.port} (Press CTRL+C to quit)"
    )
    _say(f"{_ts(False)} The server is fired up and ready to roll!")
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        httpd.serve_forever(poll_interval=0.1)
    except KeyboardInterrupt:
        _say(f"{_ts(False)} Shutting down.")
    return 0


def _pct(values: list[float], p: float) -> float:
    """Linear-interpolated percentile, as numpy's default (what both real clients use)."""
    v = sorted(values)
    if not v:
        return 0.0
    k = (len(v) - 1) * p / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def _latency(prefix: str, suffix: str, values: list[float], pcts: tuple[int, ...]) -> dict:
    import statistics

    out = {
        f"mean_{prefix}{suffix}": statistics.fmean(values) if values else 0.0,
        f"median_{prefix}{suffix}": statistics.median(values) if values else 0.0,
        f"std_{prefix}{suffix}": statistics.pstdev(values) if values else 0.0,
    }
    for p in pcts:
        out[f"p{p}_{prefix}{suffix}"] = _pct(values, p)
    return out


def bench_client(args: argparse.Namespace) -> int:
    """The plan's benchmark command: N sequential requests; prints (or writes to
    --result-file) one result in the shape of `vllm bench serve --save-result`, of SGLang's
    `bench_serving` JSONL line, or the plain `{"output_throughput": ...}`."""
    import urllib.request

    url = f"http://{args.host}:{args.port}/generate"
    body = json.dumps(
        {"text": "hello", "sampling_params": {"max_new_tokens": args.tokens}}
    ).encode()
    ttfts, e2es, tpots, itls, errors, lens = [], [], [], [], [], []
    model_s = 0.0

    def one(i: int) -> tuple[str, dict[str, Any], float]:
        if args.request_rate:  # arrivals at a fixed rate, as `--request-rate` (no burstiness)
            time.sleep(max(0.0, start + i / args.request_rate - time.monotonic()))
        req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
        t0 = time.monotonic()
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return "", json.loads(resp.read())["meta_info"], time.monotonic() - t0
        except OSError as exc:
            return f"{type(exc).__name__}: {exc}", {}, 0.0

    # Sequential unless the client is given a load: a concurrency (that many in flight) or a
    # request rate (in flight as they arrive, up to --max-concurrency).
    lanes = args.max_concurrency or (args.requests if args.request_rate else 1)
    start = time.monotonic()
    if lanes <= 1:  # one at a time, in this thread: no pool between the runs' timings
        answers = [one(i) for i in range(args.requests)]
    else:
        with ThreadPoolExecutor(max_workers=lanes) as pool:
            answers = list(pool.map(one, range(args.requests)))
    for error, meta, wall in answers:
        errors.append(error)
        if error:
            lens.append(0)
            continue
        # the reported TTFT includes the slot wait, which the wall clock already holds
        e2e = (wall + meta.get("ttft", 0.0) - meta.get("queue_s", 0.0)) * 1000.0
        model_s += float(meta.get("model_s", 0.0))
        lens.append(int(meta["completion_tokens"]))
        ttfts.append(meta.get("ttft", 0.0) * 1000.0)
        e2es.append(e2e)
        tpots.append((e2e - ttfts[-1]) / max(1, lens[-1] - 1))
        itls.extend(meta.get("itl_ms") or [tpots[-1]] * max(0, lens[-1] - 1))
    took = time.monotonic() - start
    if args.clock == "model":  # the server's modelled decode time: no host timing jitter
        took = max(model_s / min(max(1, lanes), args.requests), 1e-6)
    rate_out: Any = args.request_rate or "inf"
    tokens = sum(lens)
    done = sum(1 for e in errors if not e)
    if args.format == "plain":
        out: dict[str, Any] = {
            "output_throughput": round(tokens / took, 2),
            "requests": args.requests,
            "duration_s": round(took, 3),
        }
    elif args.format == "vllm":  # vllm/benchmarks/serve.py, --save-result
        out = {
            "date": datetime.now().strftime("%Y%m%d-%H%M%S"),
            "endpoint_type": "sglang",
            "model_id": "emulated",
            "num_prompts": args.requests,
            "request_rate": rate_out,
            "max_concurrency": lanes,
            "duration": took,
            "completed": done,
            "failed": args.requests - done,
            "total_input_tokens": 5 * args.requests,
            "total_output_tokens": tokens,
            "request_throughput": done / took,
            "request_goodput": None,
            "output_throughput": tokens / took,
            "total_token_throughput": (tokens + 5 * args.requests) / took,
            "input_lens": [5] * args.requests,
            "output_lens": lens,
            "ttfts": [t / 1000.0 for t in ttfts],
            "errors": errors,
        }
        for name, vals in (("ttft", ttfts), ("tpot", tpots), ("itl", itls), ("e2el", e2es)):
            out |= _latency(name, "_ms", vals, (50, 90, 99))
    else:  # sglang.bench_serving --output-file (one JSON line per run)
        out = {
            "backend": "sglang",
            "dataset_name": "random",
            "request_rate": args.request_rate or float("inf"),
            "max_concurrency": lanes,
            "duration": took,
            "completed": done,
            "total_input_tokens": 5 * args.requests,
            "total_output_tokens": tokens,
            "total_output_tokens_retokenized": tokens,
            "request_throughput": done / took,
            "input_throughput": 5 * args.requests / took,
            "output_throughput": tokens / took,
            **_latency("e2e", "_latency_ms", e2es, (99,)),
            **_latency("ttft", "_ms", ttfts, (99,)),
            **_latency("tpot", "_ms", tpots, (99,)),
            **_latency("itl", "_ms", itls, (95, 99)),
            "concurrency": sum(e2es) / 1000.0 / took,
        }
    text = json.dumps(out).replace("Infinity", '"inf"')
    if args.result_file:
        mode = "a" if args.format == "sglang" else "w"
        with open(args.result_file, mode, encoding="utf-8") as fh:
            fh.write(text + "\n")
    else:
        print(text)
    return 0 if done else 1


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m loop.emulator", description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--model-path", default="/models/emulated")
    p.add_argument("--tp", "--tp-size", type=int, default=1)
    p.add_argument("--mem-fraction-static", type=float, default=0.8)
    p.add_argument("--cuda-graph-max-bs", type=int, default=32)
    p.add_argument("--enable-flashinfer-allreduce-fusion", action="store_true")
    p.add_argument("--chunked-prefill-size", type=int, default=8192)
    p.add_argument("--schedule-conservativeness", type=float, default=1.0)
    p.add_argument("--max-running-requests", type=int, default=16, help="requests decoding at once")
    p.add_argument("--load-seconds", type=float, default=2.0, help="how long start-up takes")
    p.add_argument("--config", help="a KEY=VALUE / sitecustomize-style env file to apply")
    p.add_argument("--gpu", action="store_true", help="hold real GPU memory and do real matmuls")
    p.add_argument("--emulate-hang", action="store_true")
    p.add_argument("--hang-generate", action="store_true", help="/generate never answers")
    p.add_argument("--spawn-orphan", action="store_true")
    p.add_argument("--die-after", type=float)
    p.add_argument("--bench-client", action="store_true", help="act as the benchmark client")
    p.add_argument("--requests", "--num-prompts", type=int, default=3)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument(
        "--request-rate", type=float, help="requests/s, fixed intervals (default: sequential)"
    )
    p.add_argument("--max-concurrency", type=int, help="requests in flight (default: 1)")
    p.add_argument("--format", choices=["plain", "vllm", "sglang"], default="plain")
    p.add_argument(
        "--clock",
        choices=["wall", "model"],
        default="wall",
        help="time runs by the wall clock, or by the server's modelled decode time (tests that "
        "judge statistics on a loaded CI box: only the emulator's own noise remains)",
    )
    p.add_argument("--result-file", help="write the result here instead of stdout")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return bench_client(args) if args.bench_client else serve(args)


if __name__ == "__main__":
    sys.exit(main())
