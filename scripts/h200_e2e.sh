#!/usr/bin/env bash
# Real-GPU end-to-end check of `pivot investigate --local`, run on a lent H200 through the
# device tool (see the README). Three launches that fail (or not) for real on the GPU:
#   A. a leftover process holds 100 GiB, the next launch OOMs      -> stale_gpu_process
#   B. a clean GPU, the "weights" want 200 GiB                      -> gpu_oom_weights
#   C. the server is alive and still printing shard progress         -> still_starting
# Reports (JSON) and the real nvidia-smi go to $OUT. Needs wheels in .whl/ (no network there).
set -u
OUT=${OUT:-/tmp/pivot-e2e}; rm -rf /tmp/e2e; mkdir -p "$OUT" /tmp/e2e/logs
python3 -m venv --system-site-packages /tmp/e2e/venv >/dev/null
/tmp/e2e/venv/bin/pip install -q --no-index --no-deps .whl/*.whl 2>&1 | tail -2
export PYTHONPATH=$PWD PIVOT_HOME=/tmp/e2e/home
PIVOT="/tmp/e2e/venv/bin/python -m agent.cli"

# A: leftover holder + OOM
python3 -c "import torch,time; x=torch.empty(100*2**30,dtype=torch.uint8,device='cuda'); open('/tmp/e2e/held','w').close(); time.sleep(600)" &
HOLDER=$!
for i in $(seq 1 60); do [ -f /tmp/e2e/held ] && break; sleep 0.5; done
python3 -c "import torch; print('Load weight begin. avail mem=39.2 GB', flush=True); w=torch.empty(80*2**30,dtype=torch.uint8,device='cuda')" > /tmp/e2e/logs/server_a.log 2>&1
nvidia-smi > "$OUT/nvidia-smi.txt"
$PIVOT investigate --local --json --log /tmp/e2e/logs/server_a.log "Relaunch died with CUDA out of memory right at load. Is something else on the GPU?" > "$OUT/report_a.json" 2>> "$OUT/live.txt"
kill $HOLDER; wait $HOLDER 2>/dev/null; sleep 2

# B: clean GPU, too-big weights
python3 -c "import torch; print('loading weights: want 200 GiB on one GPU', flush=True); w=torch.empty(200*2**30,dtype=torch.uint8,device='cuda')" > /tmp/e2e/logs/server_b.log 2>&1
nvidia-smi >> "$OUT/nvidia-smi.txt"
$PIVOT investigate --local --json --log /tmp/e2e/logs/server_b.log "It dies with OOM at start. Zombie holding the GPU?" > "$OUT/report_b.json" 2>> "$OUT/live.txt"

# C: alive and still loading
mkdir -p /tmp/e2e/srv && cat > /tmp/e2e/srv/server.py <<'PY'
import time, torch
x = torch.empty(20 * 2**30, dtype=torch.uint8, device="cuda")
for i in range(400):
    print(f"\rLoading safetensors checkpoint shards: {i // 4:3d}% Completed | {i // 4}/100", end="", flush=True)
    time.sleep(0.25)
PY
python3 /tmp/e2e/srv/server.py > /tmp/e2e/logs/server_c.log 2>&1 &
SRV=$!
sleep 8
$PIVOT investigate --local --json --log /tmp/e2e/logs/server_c.log "Readiness probe gave up after 5 s. Did it crash?" > "$OUT/report_c.json" 2>> "$OUT/live.txt"
kill $SRV; wait $SRV 2>/dev/null
$PIVOT tools gpu_status --local --json > "$OUT/gpu_status.json" 2>&1
python3 - "$OUT" <<'PY'
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
for k in "abc":
    p = out / f"report_{k}.json"
    try:
        r = json.loads(p.read_text())
        print(k, r["status"], r["root_cause"], "ruled_out:", r["ruled_out"], "| evidence:", [e["line"][:90] for e in r["evidence"][:2]])
    except Exception as exc:
        print(k, "no report:", exc, (out / "live.txt").read_text()[-800:])
PY
