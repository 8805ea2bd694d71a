#!/usr/bin/env bash
# Live scenarios on real GPUs (issue 11, "The same scenarios on real GPUs"), run on a lent
# 2 x H200 machine through the device tool. Each failure is staged FOR REAL (torch.distributed,
# NCCL, two ranks) and `pivot investigate --local --json --log LOG "<symptom>"` runs WHILE it
# happens. Beside every scenario run an unrelated `python3 -m http.server` and a `sleep 600`.
#   s1 loader     torchrun, 2 ranks alive, 4 s per shard of 50            -> still_starting (+ETA)
#   s2 hang       torchrun, rank 1 sleeps before all_reduce, rank 0 in it -> nccl_failure (stall)
#   s3 killed     mp launcher, kill -9 rank 1 mid-load, rank 0 in barrier -> killed_externally
#   s4 cotenant   user alice holds 100 GiB on GPU 1 + matmul loop; our
#                 TP=2 torchrun OOMs on rank 1                             -> stale_gpu_process /
#                                                                            cuda_oom, never "kill it"
#   s5 noise      inductor "OutOfMemoryError: out of resource: triton_mm"
#                 ERROR lines while a real GPU job keeps running           -> not cuda_oom_runtime
#   s6 core gone  an SGLang-shaped launch (main, scheduler_TP0 holding GPU 0, detokenizer); the
#                 scheduler is SIGKILLed, the front end keeps logging /health 200 -> killed_externally
#                                                                            (the core gone, named)
#   s7 slow bar   a loader at 45 s per shard, watched for 20 s (PIVOT_LIVENESS_MAX_S) -> still_starting,
#                                                                            said to be inferred
#   s8 leftover   a scheduler_TP0 that outlived its launch (re-parented to init) holds 40 GiB of
#                 GPU 0 and :30000; the relaunch dies binding :30000        -> stale_gpu_process, the
#                                                                            leftover named, never "alive"
#   s9 slow disk  a loader re-reading its 4 GiB checkpoint off the disk (page cache dropped) at
#                 ~60 MiB/s, log silent after "Loading weights", GPU held   -> still_starting (process_io)
#   s10 duplicate the same `python3 -m sglang.launch_server` started twice into one log (a
#                 supervisor's restart): the first still loads holding 72 GiB, the second dies
#                 of a real CUDA OOM naming the first's pid                 -> stale_gpu_process, the
#                                                                            other instance named
#   s11 rotated   the server's log renamed to server.log.1 under it; a fresh server.log gets two
#                 probe lines; the server then dies of a real CUDA OOM into server.log.1, and
#                 Pivot is given --log server.log                            -> cuda_oom_runtime from .1
#   s12 env file  start.sh sources gpu.env, whose CUDA_VISIBLE_DEVICES=${GPU_IDS} expands to nothing
#                 (GPU_IDS unset); torch then finds no GPU; Pivot is given --config start.sh
#                                                                            -> bad_launch_argument, the
#                                                                            env file's line cited
#   s13 wrong log the operator passes a neighbour's log (its server serves :8000, alive) and says
#                 the launch was on :8005; that launch wrote run/nohup.out and died -> its own error,
#                                                                            the --log named as not its log
#   s15 init hang rank 0 of a two-rank job (RANK=0 WORLD_SIZE=2) waits in init_process_group for a
#                 rank 1 never launched; the GPU holds at most a context    -> nccl_failure (stacks in
#                                                                            init, or an inferred stall)
#   s14 watch ETA a loader copying 40 shards of 1 GiB into the GPU at its own uneven pace, then its
#                 ready line; `pivot watch --local --log --json` follows it from the start
#                                                                         -> ready; each ETA sample's
#                                                                            error vs the real ready time
# GL_ONE_GPU=1 (one H200 lent): every rank on GPU 0 with gloo between them; for s3 only.
# GL_NO_PYSPY=1: no py-spy on the box (py_stacks falls back to the kernel's view).
# Everything goes to $OUT/gpu-live.tar.gz (+ $OUT/summary.txt). Needs wheels in .whl/ (no network
# there). GL_DRY=1 runs the orchestration without torch/GPUs (to test the script anywhere).
set -u
OUT=${OUT:-/tmp/gpu-live-out}
W=/tmp/gl
DRY=${GL_DRY:-0}
GL_ONLY=${GL_ONLY:-"s1 s2 s3 s4 s5 s6 s7 s8 s9 s10 s11 s12 s13 s14"}
rm -rf "$W"; mkdir -p "$OUT" "$W/logs" "$W/res" "$W/srv" "$W/bin" "$W/stage"
chmod 1777 "$W/stage"; chmod 755 "$W" "$W/srv"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
SYSPY=$(command -v python3)
say() { echo "[gl $(date +%T)] $*" | tee -a "$W/res/driver.txt"; }

# -- pivot in its own venv (the device's torch stays with the device's python3) ------------------
if [ "$DRY" = 1 ]; then
    PYBIN=${GL_PIVOT_PY:-$PWD/.venv/bin/python}
else
    "$SYSPY" -m venv --system-site-packages "$W/venv" >/dev/null
    "$W/venv/bin/pip" install -q --no-index --no-deps --no-compile .whl/*.whl 2>&1 | tail -3
    PYBIN=$W/venv/bin/python
fi
# py-spy on PATH, nothing else of the venv; GL_NO_PYSPY=1: a box without it (the kernel's view only)
[ "${GL_NO_PYSPY:-0}" = 1 ] || ln -sf "$(dirname "$PYBIN")/py-spy" "$W/bin/py-spy"
export PATH=$W/bin:$PATH PYTHONPATH=$PWD PIVOT_HOME=$W/home PIVOT_LIVENESS_MAX_S=20
PIVOT="$PYBIN -m agent.cli"

{
    echo "date: $(date -u +%FT%TZ)"; uname -a; echo "python3: $SYSPY $("$SYSPY" -V 2>&1)"
    echo "git: $(git rev-parse HEAD 2>/dev/null) dirty: $(git status --short 2>/dev/null | tr '\n' ' ')"
    nvidia-smi --query-gpu=index,name,driver_version,memory.total,pci.bus_id --format=csv 2>&1
    nvidia-smi topo -m 2>&1 | head -8
    "$SYSPY" -c "import torch;print('torch',torch.__version__,'cuda',torch.version.cuda,'nccl',torch.cuda.nccl.version(),'gpus',torch.cuda.device_count())" 2>&1
    py-spy --version 2>&1
    $PIVOT --help >/dev/null 2>"$W/pivot-help.err" && echo "pivot cli ok" || { echo "PIVOT CLI BROKEN:"; tail -5 "$W/pivot-help.err"; "$PYBIN" -m pip check 2>&1 | head; }
} > "$W/res/versions.txt" 2>&1
cat "$W/res/versions.txt"

# -- the staged programs ---------------------------------------------------------------------------
cat > "$W/srv/rank.py" <<'PY'
"""One rank of a TP=2 server, staged. argv: MODE. Rank/world from torchrun's env or argv[2:4]."""
import datetime, os, sys, time
MODE = sys.argv[1]
RANK = int(os.environ.get("RANK", sys.argv[2] if len(sys.argv) > 2 else 0))
WORLD = int(os.environ.get("WORLD_SIZE", sys.argv[3] if len(sys.argv) > 3 else 1))
DRY = os.environ.get("GL_DRY") == "1"
STAGE = os.environ.get("GL_STAGE", "/tmp/gl/stage")
ONE = os.environ.get("GL_ONE_GPU") == "1"   # one GPU lent: every rank on GPU 0, gloo between them
GiB = 2**30


def log(msg, end="\n"):
    ts = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    print(f"[{ts} TP{RANK}] {msg}" if end == "\n" else msg, end=end, flush=True)


if DRY:
    torch = dist = None
    def alloc(n): return bytearray(1)
    def all_reduce_step(): time.sleep(0.2)
    def barrier(): (time.sleep(10**6) if os.path.exists(f"{STAGE}/dead1") and RANK == 0 else time.sleep(0.1))
    def avail(): return 139.10
else:
    import torch, torch.distributed as dist
    torch.cuda.set_device(0 if ONE else RANK)
    def alloc(n): return torch.empty(int(n * GiB), dtype=torch.uint8, device="cuda")
    def all_reduce_step():
        t = torch.ones(1 << 20, device="cpu" if ONE else "cuda")
        dist.all_reduce(t)
        torch.cuda.synchronize()
        return t
    def barrier(): dist.barrier()
    def avail(): return torch.cuda.mem_get_info()[0] / GiB

open(f"{STAGE}/rank{RANK}.pid", "w").write(str(os.getpid()))
open(f"{STAGE}/allpids", "a").write(f"{os.getpid()}\n")  # torchrun puts ranks in their own sessions
log(f"server_args=ServerArgs(model_path='/models/Llama-3.1-70B-Instruct', tp_size={WORLD}, port=30000, mode={MODE!r})") if RANK == 0 else None
log(f"Init torch distributed begin. world_size={WORLD} backend=nccl")
if DRY and MODE == "inithang":
    time.sleep(10**6)                    # s15 (dry): as the real rank waits in init_process_group
if not DRY:
    if ONE:
        dist.init_process_group("gloo", rank=RANK, world_size=WORLD)
    else:
        dist.init_process_group("nccl", rank=RANK, world_size=WORLD, device_id=torch.device("cuda", RANK))
all_reduce_step()
log(f"Init torch distributed ends. mem usage=0.00 GB")
log(f"Load weight begin. avail mem={avail():.2f} GB")

if MODE == "load":                       # s1: a slow loader, 4 s per shard of 50
    w = alloc(12)
    n, start = 50, time.time()
    for k in range(n + 1):
        if RANK == 0:
            el = time.time() - start
            eta = (n - k) * 4
            log(f"\rLoading safetensors checkpoint shards: {100 * k // n:3d}% Completed | {k}/{n} "
                f"[{int(el) // 60:02d}:{int(el) % 60:02d}<{eta // 60:02d}:{eta % 60:02d},  4.00s/it]", end="")
        time.sleep(4)
elif MODE == "hang":                     # s2: rank 1 never reaches the collective
    w = alloc(8)
    log("Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=131.02 GB")
    log("Capture cuda graph end. Time elapsed: 3.21 s") if RANK == 0 else None
    if RANK == 0:
        log("The server is fired up and ready to roll!")
    for step in range(6):
        all_reduce_step()
        if RANK == 0:
            log(f"Decode batch. #running-req: 4, #token: {800 + 40 * step}, token usage: 0.01, gen throughput (token/s): 1480.{step:02d}, #queue-req: 0")
        time.sleep(0.5)
    if RANK == 1:
        time.sleep(10**6)                # stuck on the host side before the next all_reduce
    all_reduce_step() if not DRY else time.sleep(10**6)  # rank 0: NCCL kernel spins on GPU 0
    log("unreachable")
elif MODE == "killload":                 # s3: both loading; rank 1 is SIGKILLed from outside
    w = alloc(20)
    n = 10
    for k in range(n + 1):
        if RANK == 0:
            log(f"\rLoading safetensors checkpoint shards: {100 * k // n:3d}% Completed | {k}/{n} [00:{k:02d}<00:{n - k:02d},  1.00s/it]", end="")
        time.sleep(1)
    if RANK == 0:
        print(flush=True)
    log("Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=119.30 GB")
    barrier()                            # rank 0 waits here for rank 1 forever
    log("ready")
elif MODE == "oom":                      # s4: weights do not fit beside a co-tenant on GPU 1
    w = alloc(70)
    log(f"Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem={avail():.2f} GB")
    barrier()
    time.sleep(10**6)
PY

cat > "$W/srv/launch_mp.py" <<'PY'
"""An engine-style launcher: spawns the TP ranks with multiprocessing and waits for them."""
import multiprocessing as mp, os, runpy, sys


def worker(mode, rank, world):
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
    sys.argv = [os.path.join(os.path.dirname(__file__), "rank.py"), mode]
    runpy.run_path(sys.argv[0], run_name="__main__")


if __name__ == "__main__":
    mode, world = sys.argv[1], int(sys.argv[2])
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", sys.argv[3] if len(sys.argv) > 3 else "29531")
    print(f"launching {world} TP workers, mode={mode}", flush=True)
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=worker, args=(mode, r, world), name=f"TP{r}") for r in range(world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    print("all workers exited", [p.exitcode for p in procs], flush=True)
PY

cat > "$W/srv/cotenant.py" <<'PY'
"""Another team's training job: 100 GiB held on its GPU and a matmul loop."""
import os, sys, time
if os.environ.get("GL_DRY") == "1":
    open(os.environ["GL_READY"], "w").close()
    while True:
        time.sleep(1)
import torch
hold = torch.empty(100 * 2**30, dtype=torch.uint8, device="cuda")
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
open(os.environ["GL_READY"], "w").close()
step = 0
while True:
    for _ in range(200):
        c = a @ b
    torch.cuda.synchronize()
    step += 1
    if step % 20 == 0:
        print(f"step {step} loss {float(c[0, 0]) % 3:.4f}", flush=True)
PY

cat > "$W/srv/compile_noise.py" <<'PY'
"""A real GPU job warming up under torch.compile(max-autotune): inductor prints ERROR-level
'out of resource' autotune lines (a rejected Triton config, not a CUDA OOM) and carries on."""
import datetime, os, time
DRY = os.environ.get("GL_DRY") == "1"
if not DRY:
    import torch
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    w = torch.empty(30 * 2**30, dtype=torch.uint8, device="cuda")
pid = os.getpid()
def ts(): return datetime.datetime.now().strftime("%m%d %H:%M:%S.%f")
print("[2026-11-30 10:00:00] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=108.12 GB", flush=True)
print("[2026-11-30 10:00:01] Compiling a graph for dynamo with mode=max-autotune", flush=True)
for i in range(3):
    p = f"E{ts()} {pid} torch/_inductor/select_algorithm.py:2230] [0/0]"
    print(f"{p} Runtime error during autotuning: ", flush=True)
    print(f"{p} No valid triton configs. OutOfMemoryError: out of resource: triton_mm_{i + 4} Required: 262144 Hardware limit:232448 Reducing block sizes or `num_stages` may help.. ", flush=True)
    print(f"{p} Ignoring this choice.", flush=True)
    print(f"AUTOTUNE mm(8192x8192, 8192x8192)\n  triton_mm_{i + 9} 0.6712 ms 100.0% ACC_TYPE='tl.float32', BLOCK_K=64, BLOCK_M=128, BLOCK_N=256, num_stages=3, num_warps=8\n  mm 0.7020 ms 95.6%", flush=True)
    time.sleep(1)
print("SingleProcess AUTOTUNE benchmarking takes 4.1123 seconds and 0.2311 seconds precompiling for 24 choices", flush=True)
step = 0
t0 = time.time()
while True:
    if not DRY:
        for _ in range(100):
            c = a @ b
        torch.cuda.synchronize()
    else:
        time.sleep(0.5)
    step += 1
    if step % 4 == 0:
        print(f"[{datetime.datetime.now():%Y-%m-%d %H:%M:%S}] Capturing batches (bs={min(step, 160)} avail_mem=77.41 GB): {min(100, step)}%", flush=True)
PY


mkdir -p "$W/srv/pkg/sglang"; : > "$W/srv/pkg/sglang/__init__.py"
cat > "$W/srv/pkg/sglang/launch_server.py" <<'PY'
"""An SGLang-shaped launch (staged): the main process serves HTTP-like /health lines, a child
titled sglang::scheduler_TP0 holds GPU memory and logs decode batches, a sglang::detokenizer
child idles. Children inherit stdout (the log), as SGLang's do."""
import datetime, os, subprocess, sys, time
STAGE = os.environ.get("GL_STAGE", "/tmp/gl/stage")
DRY = os.environ.get("GL_DRY") == "1"
def now(): return datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
print(f"[{now()}] server_args=ServerArgs(model_path='/models/Qwen2.5-32B-Instruct', tp_size=1, port=30000)", flush=True)
sched = (
    "import datetime, time, os\n"
    "DRY = os.environ.get('GL_DRY') == '1'\n"
    "if not DRY:\n"
    "    import torch; w = torch.empty(10 * 2**30, dtype=torch.uint8, device='cuda')\n"
    "n = 0\n"
    "while True:\n"
    "    n += 1\n"
    "    ts = datetime.datetime.now().strftime('%Y-%m-%d %H:%M:%S')\n"
    "    print(f'[{ts} TP0] Decode batch. #running-req: 4, #token: {900 + n}, token usage: 0.01, gen throughput (token/s): 412.00, #queue-req: 0', flush=True)\n"
    "    time.sleep(0.5)\n"
)
# a retitled interpreter (argv[0] is the title) cannot find its venv from argv[0]: hand it our path
env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
kids = [subprocess.Popen(["sglang::scheduler_TP0", "-c", sched], executable=sys.executable, env=env),
        subprocess.Popen(["sglang::detokenizer", "-c", "import time\nwhile True: time.sleep(1)"], executable=sys.executable, env=env)]
open(f"{STAGE}/scheduler.pid", "w").write(str(kids[0].pid))
with open(f"{STAGE}/allpids", "a") as f:
    f.write("".join(f"{k.pid}\n" for k in kids))
while True:
    print(f'[{now()}] INFO:     127.0.0.1:51234 - "GET /health HTTP/1.1" 200 OK', flush=True)
    time.sleep(1)
PY

cat > "$W/srv/serve_hf.py" <<'PY'
"""A transformers-style loader reading shards from slow storage: one shard per 45 s, each
shard's weights really put on the GPU."""
import os, sys, time
DRY = os.environ.get("GL_DRY") == "1"
if not DRY:
    import torch
print("2026-12-01 10:02:11,417 INFO serve_hf.py:41 starting transformers server model=/mnt/models/Llama-3.1-70B-Instruct dtype=bfloat16", flush=True)
n, pace, held, start = 30, 45.0, [], time.time()
sys.stdout.write(f"Loading checkpoint shards:   0%|          | 0/{n} [00:00<?, ?it/s]"); sys.stdout.flush()
for k in range(1, n + 1):
    time.sleep(pace)
    if not DRY:
        held.append(torch.empty(2 * 2**30, dtype=torch.uint8, device="cuda"))
    el, eta = int(time.time() - start), int((n - k) * pace)
    sys.stdout.write(f"\rLoading checkpoint shards: {100 * k // n:3d}%|#         | {k}/{n} "
                     f"[{el // 60:02d}:{el % 60:02d}<{eta // 60:02d}:{eta % 60:02d}, {pace:.2f}s/it]")
    sys.stdout.flush()
PY

cat > "$W/srv/leftover.py" <<'PY'
"""An earlier launch's scheduler that outlived it: forks a child that re-titles itself
sglang::scheduler_TP0, holds GPU memory and :30000, and is re-parented to init when we exit."""
import os, sys
STAGE = os.environ.get("GL_STAGE", "/tmp/gl/stage")
code = (
    "import os, socket, time\n"
    "if os.environ.get('GL_DRY') != '1':\n"
    "    import torch; w = torch.empty(40 * 2**30, dtype=torch.uint8, device='cuda')\n"
    "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    "s.bind(('0.0.0.0', 30000)); s.listen()\n"
    "open(os.environ['GL_STAGE'] + '/leftover.ready', 'w').close()\n"
    "while True: time.sleep(1)\n"
)
env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.execve(sys.executable, ["sglang::scheduler_TP0", "-c", code], env)
    os._exit(0)
os.wait()
PY

cat > "$W/srv/relaunch.py" <<'PY'
"""The relaunch of the same server: loads, then binds its port as uvicorn does, and dies."""
import datetime, os, socket, sys, time
def now(): return datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
print(f"[{now()}] server_args=ServerArgs(model_path='/models/Qwen2.5-32B-Instruct', tp_size=1, port=30000)", flush=True)
print(f"[{now()}] Load weight end. type=Qwen2ForCausalLM, dtype=torch.bfloat16, avail mem=98.10 GB", flush=True)
s = socket.socket()
try:
    s.bind(("0.0.0.0", 30000))
except OSError as e:
    print(f"[{now()}] ERROR:    [Errno {e.errno}] error while attempting to bind on address ('0.0.0.0', 30000): {e.strerror.lower()}", flush=True)
    sys.exit(1)
PY

cat > "$W/srv/disk_loader.py" <<'PY'
"""A loader on slow storage: holds its GPU memory, prints nothing after 'Loading weights', and
re-reads its checkpoint off the disk (page cache dropped each pass) at about 60 MiB/s."""
import datetime, os, sys, time
DRY = os.environ.get("GL_DRY") == "1"
path = sys.argv[1]
if not DRY:
    import torch; w = torch.empty(12 * 2**30, dtype=torch.uint8, device="cuda")
def now(): return datetime.datetime.now().strftime("%m-%d %H:%M:%S")
print(f"INFO {now()} llm_engine.py:73] Initializing an LLM engine with config: model='/data/models/Baichuan2-13B-Chat', tensor_parallel_size=1", flush=True)
print(f"INFO {now()} model_runner.py:88] Loading weights from /data/models/Baichuan2-13B-Chat/pytorch_model.bin", flush=True)
fd = os.open(path, os.O_RDONLY)
while True:
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.lseek(fd, 0, 0)
    while os.read(fd, 4 << 20):
        time.sleep(0.06)
PY

mkdir -p "$W/pkg/sglang"; : > "$W/pkg/sglang/__init__.py"
cat > "$W/pkg/sglang/launch_server.py" <<'PY'
"""`python3 -m sglang.launch_server`, staged (s10, s11): SGLang's own start lines, then
GL_MODE: hold72 (a first instance still loading), oom (allocate past what is free), or
rotate-oom (wait for the log to be rotated under it, then the OOM)."""
import datetime, os, sys, time
DRY = os.environ.get("GL_DRY") == "1"
mode = os.environ.get("GL_MODE", "oom")
GiB = 2**30
def log(m): print(f"[{datetime.datetime.now():%Y-%m-%d %H:%M:%S}] {m}", flush=True)
if not DRY:
    import torch
log("server_args=ServerArgs(model_path='/models/Llama-3.1-70B-Instruct', tp_size=1, port=30000, mem_fraction_static=0.88)")
free = torch.cuda.mem_get_info()[0] / GiB if not DRY else 139.1
log(f"Load weight begin. avail mem={free:.2f} GB")
if mode == "hold72":
    w = torch.empty(72 * GiB, dtype=torch.uint8, device="cuda") if not DRY else None
    for k in range(1, 10**6):
        time.sleep(15)
        print(f"Loading safetensors checkpoint shards: {k}/400 [00:{k:02d}<59:00, 15.00s/it]", flush=True)
if mode == "rotate-oom":
    log("Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=4.1 GB, mem usage=131.02 GB.")
    w = torch.empty(120 * GiB, dtype=torch.uint8, device="cuda") if not DRY else None
    log("Capture cuda graph begin. This can take up to several minutes. avail mem=18.20 GB")
    stage = os.environ.get("GL_STAGE", "/tmp/gl/stage")
    open(f"{stage}/rotate.ready", "w").write(str(os.getpid()))
    while not os.path.exists(f"{stage}/rotated"):
        time.sleep(0.1)
try:
    if DRY:
        raise RuntimeError("CUDA out of memory (dry run)")
    x = torch.empty(int(torch.cuda.mem_get_info()[0] + 8 * GiB), dtype=torch.uint8, device="cuda")
except Exception:
    import traceback
    print(f"[{datetime.datetime.now():%Y-%m-%d %H:%M:%S} TP0] Scheduler hit an exception: " + traceback.format_exc(), flush=True)
    sys.exit(1)
PY

# -- helpers ---------------------------------------------------------------------------------------
start_group() {   # start_group LOGFILE CMD... : own session + process group, stdout/err -> LOGFILE
    local logf=$1; shift
    setsid "$@" > "$logf" 2>&1 < /dev/null &
    local pid=$!
    echo "$pid" >> "$W/stage/pgids"
    echo "$pid"
}
stop_group() {   # the launcher's group, then every rank (torchrun starts each in its own session)
    kill -9 -- "-$1" 2>/dev/null
    for p in $(cat "$W/stage/allpids" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
    : > "$W/stage/allpids"
}
wait_for() {      # wait_for SECONDS CMD...
    local n=$(( $1 * 10 )); shift
    for _ in $(seq 1 "$n"); do "$@" && return 0; sleep 0.1; done; return 1
}
gpu_idle() { [ "$DRY" = 1 ] && return 0
    local used; used=$(nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null | grep -c .)
    [ "$used" = 0 ]; }
snapshot() {      # snapshot DIR TAG
    {
        echo "### $2 $(date +%T.%N)"
        nvidia-smi 2>&1
        nvidia-smi --query-gpu=index,utilization.gpu,memory.used,memory.total --format=csv 2>&1
        nvidia-smi --query-compute-apps=pid,process_name,used_memory,gpu_bus_id --format=csv 2>&1
    } >> "$1/nvidia-smi.txt"
    { echo "### $2 $(date +%T.%N)"; ps -eo user,pid,ppid,pgid,stat,etime,pcpu,rss,args --sort=pid; } >> "$1/ps.txt"
}
investigate() {   # investigate NAME LOG SYMPTOM...
    local name=$1 logf=$2; shift 2
    local d=$W/res/$name; mkdir -p "$d"
    echo "$*" > "$d/symptom.txt"
    snapshot "$d" before
    local t0; t0=$(date +%s.%N)
    # shellcheck disable=SC2086  # GL_EXTRA: extra flags for one scenario (--config FILE)
    timeout 240 $PIVOT investigate --local --json --log "$logf" ${GL_EXTRA:-} "$*" > "$d/report.json" 2> "$d/pivot.stderr"
    local rc=$?
    echo "rc=$rc wall_s=$("$PYBIN" -c "print(round($(date +%s.%N)-$t0, 1))")" > "$d/run.txt"
    snapshot "$d" after
    cp "$logf" "$d/server.log" 2>/dev/null
    say "$name investigated: $(cat "$d/run.txt")"
    "$PYBIN" - "$d/report.json" <<'PY' | tee -a "$W/res/driver.txt"
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except Exception as e:
    print("  no report:", e); sys.exit()
print("  status:", r.get("status"), "| root_cause:", r.get("root_cause"), "| confidence:", r.get("confidence"))
for e in r.get("evidence", [])[:4]:
    print("  evidence:", (e.get("line") or "")[:160])
print("  ruled_out:", r.get("ruled_out"))
print("  next_step:", (r.get("next_step") or "")[:400])
PY
}
TORCHRUN() {      # TORCHRUN MODE PORT : torchrun, 2 ranks (the mp launcher in dry mode)
    if [ "$DRY" = 1 ]; then echo "$SYSPY" "$W/srv/launch_mp.py" "$1" 2 "$2"
    else echo "$SYSPY" -m torch.distributed.run --nproc-per-node 2 --master-port "$2" "$W/srv/rank.py" "$1"; fi
}
pack() {          # after each scenario, so a run cut short still brings back what it has
    cp "$W/res/driver.txt" "$OUT/summary.txt" 2>/dev/null
    local d; d=res; [ -d "$W/home" ] && d="res home"
    tar -C "$W" -czf "$OUT/gpu-live.tar.gz.part" $d; mv -f "$OUT/gpu-live.tar.gz.part" "$OUT/gpu-live.tar.gz"
}
export GL_DRY=$DRY GL_STAGE=$W/stage

# -- unrelated jobs, beside every scenario ---------------------------------------------------------
UNREL_HTTP=$(start_group "$W/logs/http.log" "$SYSPY" -m http.server 8765 --bind 127.0.0.1 --directory /tmp)
UNREL_SLEEP=$(start_group /dev/null sleep 600)
say "unrelated: http.server pid $UNREL_HTTP, sleep pid $UNREL_SLEEP"

# -- s1: two-rank loader, 4 s per shard ------------------------------------------------------------
if [[ " $GL_ONLY " == *" s1 "* ]]; then
    say "s1 start"
    L=$W/logs/s1_server.log
    G=$(start_group "$L" $(TORCHRUN load 29511))
    wait_for 90 grep -q "Loading safetensors" "$L" || say "s1: no progress line in 90 s"
    sleep 9
    investigate s1_loader "$L" "Readiness probe on :30000 gave up after 60 s on my TP=2 launch. Did it crash or hang?"
    stop_group "$G"; wait_for 30 gpu_idle; pack
fi

# -- s2: collective hang -----------------------------------------------------------------------------
if [[ " $GL_ONLY " == *" s2 "* ]]; then
    say "s2 start"
    rm -f "$W"/stage/rank*.pid
    L=$W/logs/s2_server.log
    G=$(start_group "$L" $(TORCHRUN hang 29512))
    wait_for 90 grep -q "#token: 1000" "$L" || say "s2: never reached the last decode batch"
    sleep 20
    investigate s2_hang "$L" "Server stopped answering: every request times out and nothing new in the log. Is it hung?"
    stop_group "$G"; wait_for 30 gpu_idle; pack
fi

# -- s3: rank killed mid-load ------------------------------------------------------------------------
if [[ " $GL_ONLY " == *" s3 "* ]]; then
    say "s3 start"
    rm -f "$W"/stage/rank*.pid
    L=$W/logs/s3_server.log
    G=$(start_group "$L" "$SYSPY" "$W/srv/launch_mp.py" killload 2 29513)
    wait_for 90 grep -q "3/10" "$L" || say "s3: loading never reached 3/10"
    R1=$(cat "$W/stage/rank1.pid" 2>/dev/null)
    say "s3: kill -9 rank 1 pid $R1"; kill -9 "$R1"; touch "$W/stage/dead1"
    wait_for 30 grep -q "Load weight end" "$L"
    sleep 8
    investigate s3_killed "$L" "Startup never finishes: stuck after loading weights, the server never becomes ready. Why?"
    stop_group "$G"; rm -f "$W/stage/dead1"; wait_for 30 gpu_idle; pack
fi

# -- s4: co-tenant on GPU 1, our TP=2 launch OOMs --------------------------------------------------
if [[ " $GL_ONLY " == *" s4 "* ]]; then
    say "s4 start"
    CO_USER=root
    if [ "$DRY" != 1 ] && { id alice >/dev/null 2>&1 || useradd -m alice; }; then CO_USER=alice; fi
    CO_HOME=$(getent passwd "$CO_USER" | cut -d: -f6); CO_LOG=$CO_HOME/train_run7.log
    cp "$W/srv/cotenant.py" "$CO_HOME/train.py" 2>/dev/null || CO_HOME=$W/srv
    chmod 755 "$CO_HOME"; chown "$CO_USER" "$CO_HOME/train.py" 2>/dev/null
    touch "$CO_LOG"; chown "$CO_USER" "$CO_LOG" 2>/dev/null
    CO_ENV="CUDA_VISIBLE_DEVICES=1 GL_READY=$W/stage/cotenant.ready GL_DRY=$DRY NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 HOME=$CO_HOME"
    if [ "$CO_USER" = root ]; then
        CO=$(start_group "$CO_LOG" env $CO_ENV "$SYSPY" "$CO_HOME/train.py")
    else
        CO=$(start_group "$CO_LOG" runuser -u "$CO_USER" -- env $CO_ENV "$SYSPY" "$CO_HOME/train.py")
    fi
    if ! wait_for 60 test -f "$W/stage/cotenant.ready" && [ "$CO_USER" != root ]; then
        say "s4: co-tenant as $CO_USER never got its memory: $(tail -5 "$CO_LOG" | tr '\n' ' '); again as root"
        stop_group "$CO"; CO_USER=root
        CO=$(start_group "$CO_LOG" env $CO_ENV "$SYSPY" "$CO_HOME/train.py")
        wait_for 45 test -f "$W/stage/cotenant.ready" || say "s4: co-tenant never got its memory"
    fi
    say "s4: co-tenant ($CO_USER) pid $CO up"
    L=$W/logs/s4_server.log
    G=$(start_group "$L" $(TORCHRUN oom 29514))
    wait_for 75 grep -qiE "out of memory|OutOfMemoryError|ChildFailedError" "$L" || say "s4: no OOM seen"
    wait_for 40 bash -c "! kill -0 $G 2>/dev/null"   # torchrun tears the job down
    sleep 2
    investigate s4_cotenant "$L" "Our TP=2 relaunch died with CUDA out of memory on rank 1 while loading weights; same config ran yesterday. What is taking GPU 1?"
    stop_group "$G"; stop_group "$CO"; wait_for 30 gpu_idle; pack
fi

# -- s5: torch.compile autotune noise while a real job keeps running ------------------------------
if [[ " $GL_ONLY " == *" s5 "* ]]; then
    say "s5 start"
    L=$W/logs/s5_server.log
    G=$(start_group "$L" env CUDA_VISIBLE_DEVICES=0 "$SYSPY" "$W/srv/compile_noise.py")
    wait_for 90 grep -q "Capturing batches" "$L" || say "s5: never reached capture"
    sleep 3
    investigate s5_compile_noise "$L" "The log is full of OutOfMemoryError during torch.compile warmup. Did the server crash with OOM?"
    stop_group "$G"; wait_for 30 gpu_idle; pack
fi

# -- s6: the engine's core gone, its front end alive -------------------------------------------------
if [[ " $GL_ONLY " == *" s6 "* ]]; then
    say "s6 start"
    L=$W/logs/s6_server.log
    G=$(start_group "$L" env CUDA_VISIBLE_DEVICES=0 PYTHONPATH="$W/srv/pkg" "$SYSPY" -m sglang.launch_server --model-path /models/Qwen2.5-32B-Instruct --port 30000)
    wait_for 90 grep -q "Decode batch" "$L" || say "s6: the scheduler never logged"
    sleep 3
    S6=$(cat "$W/stage/scheduler.pid" 2>/dev/null)
    say "s6: kill -9 scheduler pid $S6 (main $G stays)"; kill -9 "$S6"
    sleep 5
    investigate s6_core_gone "$L" "Every chat request hangs but /health keeps answering 200. Is the server overloaded?"
    stop_group "$G"; wait_for 30 gpu_idle; pack
fi

# -- s7: a loader slower than the watch window --------------------------------------------------------
if [[ " $GL_ONLY " == *" s7 "* ]]; then
    say "s7 start"
    L=$W/logs/s7_server.log
    G=$(start_group "$L" env CUDA_VISIBLE_DEVICES=0 "$SYSPY" "$W/srv/serve_hf.py")
    wait_for 90 grep -q "1/30" "$L" || say "s7: the first shard never came"
    sleep 3
    investigate s7_slow_bar "$L" "Our transformers server has sat on Loading checkpoint shards 1/30 for ages. Is it hung?"
    stop_group "$G"; wait_for 30 gpu_idle; pack
fi

# -- s8: a scheduler left over from an earlier launch holds GPU 0 and the port ------------------------
if [[ " $GL_ONLY " == *" s8 "* ]]; then
    say "s8 start"
    rm -f "$W/stage/leftover.ready"
    env CUDA_VISIBLE_DEVICES=0 "$SYSPY" "$W/srv/leftover.py"
    wait_for 60 test -f "$W/stage/leftover.ready" || say "s8: the leftover never got its memory"
    LO=$(pgrep -f '^sglang::scheduler_TP0 -c import os, socket' | head -1)
    say "s8: leftover pid $LO, parent $(ps -o ppid= -p "$LO" 2>/dev/null | tr -d ' ')"
    L=$W/logs/s8_server.log
    "$SYSPY" "$W/srv/relaunch.py" > "$L" 2>&1; say "s8: relaunch exited $?"
    investigate s8_leftover "$L" "Relaunching our SGLang server after the last one was stopped: it exits right after loading. What is wrong?"
    kill -9 "$LO" 2>/dev/null; wait_for 30 gpu_idle; pack
fi

# -- s9: a loader reading its checkpoint off a slow disk ------------------------------------------------
if [[ " $GL_ONLY " == *" s9 "* ]]; then
    say "s9 start"
    CK=$W/stage/pytorch_model.bin
    dd if=/dev/urandom of="$CK" bs=16M count=$([ "$DRY" = 1 ] && echo 8 || echo 256) status=none
    L=$W/logs/s9_server.log
    G=$(start_group "$L" env CUDA_VISIBLE_DEVICES=0 "$SYSPY" "$W/srv/disk_loader.py" "$CK")
    wait_for 90 grep -q "Loading weights" "$L" || say "s9: the loader never started"
    sleep 5
    investigate s9_slow_disk "$L" "vLLM for a 13B model has printed nothing for 10 minutes after Loading weights and the GPU sits at 0%. Is it hung? Should I kill it?"
    stop_group "$G"; rm -f "$CK"; wait_for 30 gpu_idle; pack
fi

# -- s10: the same launch started twice into one log ----------------------------------------------------
if [[ " $GL_ONLY " == *" s10 "* ]]; then
    say "s10 start"
    L=$W/logs/s10_server.log; : > "$L"
    setsid env CUDA_VISIBLE_DEVICES=0 GL_MODE=hold72 PYTHONPATH="$W/pkg" "$SYSPY" -m sglang.launch_server --model-path /models/Llama-3.1-70B-Instruct --port 30000 >> "$L" 2>&1 < /dev/null &
    FIRST=$!; echo "$FIRST" >> "$W/stage/pgids"
    wait_for 90 grep -q "Load weight begin" "$L" || say "s10: the first instance never started"
    sleep 6
    env CUDA_VISIBLE_DEVICES=0 GL_MODE=oom PYTHONPATH="$W/pkg" "$SYSPY" -m sglang.launch_server --model-path /models/Llama-3.1-70B-Instruct --port 30000 >> "$L" 2>&1 < /dev/null
    say "s10: second instance exited $?; first instance pid $FIRST alive: $(kill -0 "$FIRST" 2>/dev/null && echo yes || echo no)"
    investigate s10_duplicate "$L" "Our supervisor restarted the SGLang server and the new instance died with CUDA out of memory while loading. Do we need a bigger GPU?"
    stop_group "$FIRST"; wait_for 30 gpu_idle; pack
fi

# -- s11: the log rotated under a running server ---------------------------------------------------------
if [[ " $GL_ONLY " == *" s11 "* ]]; then
    say "s11 start"
    L=$W/logs/s11/server.log; mkdir -p "$W/logs/s11"; rm -f "$W/stage/rotate.ready" "$W/stage/rotated"
    G=$(start_group "$L" env CUDA_VISIBLE_DEVICES=0 GL_MODE=rotate-oom PYTHONPATH="$W/pkg" "$SYSPY" -m sglang.launch_server --model-path /models/Llama-3.1-70B-Instruct --port 30000)
    wait_for 120 test -f "$W/stage/rotate.ready" || say "s11: the server never reached graph capture"
    mv "$L" "$L.1"
    printf '%s\n' "[$(date '+%F %T')] INFO:     127.0.0.1:50312 - \"GET /health HTTP/1.1\" 503 Service Unavailable" "[$(date '+%F %T')] INFO:     127.0.0.1:50318 - \"GET /health HTTP/1.1\" 503 Service Unavailable" > "$L"
    touch "$W/stage/rotated"
    wait_for 60 grep -q "Scheduler hit an exception" "$L.1" || say "s11: no OOM in server.log.1"
    sleep 1
    investigate s11_rotated "$L" "The SGLang server died during start-up; its log only shows health checks. Why did it die?"
    cp "$L.1" "$W/res/s11_rotated/server.log.1" 2>/dev/null
    stop_group "$G"; wait_for 30 gpu_idle; pack
fi

# -- s12: an env file whose device list expands to nothing -------------------------------------------
if [[ " $GL_ONLY " == *" s12 "* ]]; then
    say "s12 start"
    S12=$W/srv/s12; mkdir -p "$S12/logs"
    printf '%s\n' '# which GPUs this box gives us (set GPU_IDS before starting)' 'CUDA_VISIBLE_DEVICES=${GPU_IDS}' 'VLLM_LOGGING_LEVEL=INFO' > "$S12/gpu.env"
    cat > "$S12/serve.py" <<'PY'
import time, torch
print(f"INFO {time.strftime('%m-%d %H:%M:%S')} [api_server.py:1044] args: Namespace(subparser='serve', model_tag='/models/qwen', port=30000, tensor_parallel_size=1)", flush=True)
torch.zeros(1, device="cuda")
PY
    printf '%s\n' '#!/bin/bash' 'cd "$(dirname "$0")"' 'set -a' 'source ./gpu.env' 'set +a' "exec $SYSPY serve.py" > "$S12/start.sh"
    chmod +x "$S12/start.sh"
    L=$S12/logs/server.log
    env -u GPU_IDS bash "$S12/start.sh" > "$L" 2>&1; say "s12: start.sh exited $?"
    GL_EXTRA="--config $S12/start.sh" investigate s12_env_file "$L" "my launch via start.sh dies right away, why?"
    pack
fi

# -- s13: the operator's --log is a neighbour's --------------------------------------------------------
if [[ " $GL_ONLY " == *" s13 "* ]]; then
    say "s13 start"
    S13=$W/srv/s13; mkdir -p "$S13/run" "$S13/logs"
    cat > "$S13/neighbour.py" <<'PY'
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("0.0.0.0", 8000)); s.listen()
print("INFO 04-24 09:00:01 api_server.py:150] args: Namespace(host=None, port=8000, model='/models/base-7b', tensor_parallel_size=1)", flush=True)
print("INFO:     Application startup complete.", flush=True)
print("INFO:     Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)", flush=True)
while True:
    time.sleep(1)
PY
    cat > "$S13/sft.py" <<'PY'
import os, sys
print("INFO 04-26 10:14:33 api_server.py:150] args: Namespace(host=None, port=8005, model='/data/ft/sft-0426', tensor_parallel_size=1)", flush=True)
path = "/data/ft/sft-0426"
if not os.path.exists(os.path.join(path, "config.json")):
    raise OSError(f"{path} does not appear to have a file named config.json. Checkout 'https://huggingface.co/{path}/None' for available files.")
PY
    NB=$(start_group "$S13/logs/vllm-base.log" "$SYSPY" "$S13/neighbour.py")
    wait_for 20 grep -q "Uvicorn running" "$S13/logs/vllm-base.log" || say "s13: the neighbour never started"
    (cd "$S13/run" && nohup "$SYSPY" "$S13/sft.py" > nohup.out 2>&1); say "s13: the 8005 launch exited $?"
    investigate s13_wrong_log "$S13/logs/vllm-base.log" "I started our SFT model with vLLM on port 8005 an hour ago but nothing answers on 8005. The log looks normal. Why?"
    stop_group "$NB"; pack
fi

# -- s14: pivot watch on a real loader: is its ETA right? -------------------------------------------
if [[ " $GL_ONLY " == *" s14 "* ]]; then
    say "s14 start"
    S14=$W/srv/s14; mkdir -p "$S14"
    cat > "$S14/loader.py" <<'PY'
import random, sys, time
import torch
n = 40
random.seed(7)
print(f"[{time.strftime('%Y-%m-%d %H:%M:%S')}] server_args=ServerArgs(model_path='/models/Llama-3.1-70B-Instruct', port=30014, tp_size=1)", flush=True)
print(f"[{time.strftime('%Y-%m-%d %H:%M:%S')} TP0] Load weight begin. avail mem=139.10 GB", flush=True)
held, t0 = [], time.time()
for i in range(1, n + 1):
    x = torch.empty(256 * 1024 * 1024, dtype=torch.float32, pin_memory=True).uniform_()
    held.append(x.to("cuda"))          # 1 GiB host -> GPU, a shard's worth
    torch.cuda.synchronize()
    time.sleep(max(0.0, random.uniform(2.0, 4.0)))   # the rest of a shard's read and convert
    el = time.time() - t0
    left = el / i * (n - i)
    sys.stdout.write(f"\rLoading safetensors checkpoint shards: {i * 100 // n:3d}% Completed | {i}/{n} [{int(el)//60:02d}:{int(el)%60:02d}<{int(left)//60:02d}:{int(left)%60:02d}, {el / i:.2f}s/it]")
    sys.stdout.flush()
print(f"\n[{time.strftime('%Y-%m-%d %H:%M:%S')} TP0] Load weight end. mem usage={len(held)} GB", flush=True)
print(f"[{time.strftime('%Y-%m-%d %H:%M:%S')}] The server is fired up and ready to roll!", flush=True)
time.sleep(600)
PY
    L=$W/logs/s14_server.log
    G=$(start_group "$L" env CUDA_VISIBLE_DEVICES=0 "$SYSPY" "$S14/loader.py")
    mkdir -p "$W/res/s14_watch"
    timeout 400 $PIVOT watch --local --log "$L" --json --timeout 380 > "$W/res/s14_watch/outcome.json" 2> "$W/res/s14_watch/watch.stderr"
    say "s14: watch exited $?"
    "$PYBIN" - "$W/res/s14_watch/outcome.json" <<'PY' | tee -a "$W/res/driver.txt"
import json, statistics, sys
o = json.load(open(sys.argv[1]))
ready = o["elapsed_s"]
print(f"  status: {o['status']} after {ready:.1f} s | {o['detail'][:120]}")
errs = []
for e in o.get("etas", []):
    if e.get("eta_s") is None or e["done"] >= e["total"]:
        continue
    left = ready - e["elapsed_s"]
    if left <= 0:
        continue
    err = (e["eta_s"] - left) / left
    errs.append((e["done"] / e["total"], err))
for frac in (0.25, 0.5, 0.75):
    near = min(errs, key=lambda fe: abs(fe[0] - frac), default=None)
    if near:
        print(f"  ETA at {near[0]:.0%} of shards: off by {near[1]:+.0%} of the real time left")
if errs:
    later = [abs(e) for f, e in errs if f >= 0.2]
    print(f"  ETA error from 20% on: median {statistics.median(later):.0%}, max {max(later):.0%} ({len(later)} samples)")
PY
    stop_group "$G"; wait_for 30 gpu_idle; pack
fi

# -- s15: a rank waiting in NCCL's init for a peer that never starts ---------------------------------
if [[ " $GL_ONLY " == *" s15 "* ]]; then
    say "s15 start"
    L=$W/logs/s15_server.log
    # node 0's rank of a two-rank job (RANK=0 of WORLD_SIZE=2, as a launcher sets them): it waits
    # in init_process_group for rank 1 on a node that is never launched
    G=$(start_group "$L" env CUDA_VISIBLE_DEVICES=0 RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29515 "$SYSPY" "$W/srv/rank.py" inithang)
    wait_for 90 grep -q "Init torch distributed begin" "$L" || say "s15: the rank never started init"
    sleep 20
    investigate s15_init_hang "$L" "Our 2-node launch never comes up: node 0 printed its start lines and then nothing for minutes. Crashed, hung, or still loading?"
    stop_group "$G"; wait_for 30 gpu_idle; pack
fi

# -- wrap up ----------------------------------------------------------------------------------------
say "unrelated still alive: http=$(kill -0 "$UNREL_HTTP" 2>/dev/null && echo yes || echo no) sleep=$(kill -0 "$UNREL_SLEEP" 2>/dev/null && echo yes || echo no)"
for g in $(cat "$W/stage/pgids" 2>/dev/null); do stop_group "$g"; done
cp "$W/logs/"*.log "$W/res/" 2>/dev/null
pack
ls -la "$OUT"
