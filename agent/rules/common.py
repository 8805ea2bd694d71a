"""What the rule families share: signature weights, OOM and worker shapes, memory labels.

The numbers come from agent/knowledge/thresholds.yaml; the patterns are the shapes the rules
look for in lines the tools printed.
"""

from __future__ import annotations

import re

from agent.thresholds import THRESHOLDS
from tools import engines

#: signature weights and the cap on repeated strong lines: agent/knowledge/thresholds.yaml
WEIGHT = THRESHOLDS.signature_weight.model_dump()
STRONG_CAP = THRESHOLDS.strong_cap  # repeated warnings must not outweigh one fatal line
WEAK_CAP = THRESHOLDS.weak_cap  # repeated notices must not make a label supported
F = THRESHOLDS.fact
PHASE_PREFIX = "phase-"  # knowledge/signatures: lines that tell which start-up phase ran
OOM_LABELS = {"gpu_oom_weights", "cuda_oom_runtime"}
TORCH_HELD = re.compile(r"([\d.]+) ([GM]iB) is allocated by PyTorch")
ALLOC = re.compile(r"Tried to allocate ([\d.]+) ([GM]iB).*?total capac\w* of ([\d.]+) ([GM]iB)")
#: Signatures that name "Process N" in an OOM: N is often the server itself, so they do not
#: by themselves make other holders suspects.
OOM_NAMES_A_PID = {"cuda-oom-other-process-holds-memory"}
#: Worker processes of a multi-process server (what outlives a crashed or removed launch).
WORKER = engines.worker_pattern()  # tools/engines.yaml common.worker_words
OTHER_PROC_MEM = re.compile(r"Process (\d+) has ([\d.]+) ([GM]iB) memory in use")
EXCEPTION_LINE = re.compile(r"\b[A-Z]\w*(?:Error|Exception): ")
#: nvidia-smi failures that look like the hardware itself (not a driver/library mismatch)
HW_ERROR = re.compile(
    r"(?i)unknown error|ERR!|fallen off|GPU is lost|not responding|Unable to determine the device handle"
)
MEMORY_LABELS = {"gpu_oom_weights", "cuda_oom_runtime", "kv_cache_no_room", "stale_gpu_process"}
#: Phase labels that place an OOM (weights loading, after weights, KV-cache sizing).
MEMORY_PHASES = {"gpu_oom_weights", "cuda_oom_runtime", "kv_cache_no_room"}
