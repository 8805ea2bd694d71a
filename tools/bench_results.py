"""Every number a serving benchmark reports, under one set of names.

`vllm bench serve --save-result` writes one JSON object (vllm/benchmarks/serve.py: throughputs,
`mean_/median_/std_/pNN_{ttft,tpot,itl,e2el}_ms`, `failed`, per-request `errors`); SGLang's
`bench_serving --output-file` appends one JSON line per run (`..._{ttft,tpot,itl}_ms`,
`..._e2e_latency_ms`, `concurrency`); anything else is read as a generic JSON object. Names are
made canonical so a plan says `p99_ttft_ms` or `mean_e2e_ms` whichever client measured it.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

Format = Literal["vllm", "sglang", "json"]

#: Units of the canonical names, for tables and chart axes.
UNITS = {"throughput": "tok/s", "request_throughput": "req/s", "request_goodput": "req/s"}

_RENAMES = (
    (re.compile(r"_e2el_ms$"), "_e2e_ms"),  # vLLM
    (re.compile(r"_e2e_latency_ms$"), "_e2e_ms"),  # SGLang
    (re.compile(r":$"), ""),  # an old vLLM wrote "request_goodput:"
)


def unit(name: str) -> str:
    if name.endswith("_ms"):
        return "ms"
    if name in ("duration", "duration_s"):
        return "s"
    if name in UNITS:
        return UNITS[name]
    return "tok/s" if name.endswith("throughput") or name.endswith("tokens_per_s") else ""


def last_json(text: str) -> dict[str, Any] | None:
    """The whole text as one JSON object, else its last line that is one (JSONL, logs)."""
    s = text.strip()
    if s.startswith("{"):
        try:
            obj = json.loads(s)
            if isinstance(obj, dict):
                return obj
        except json.JSONDecodeError:
            pass
    for line in reversed(s.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(obj, dict):
                return obj
    return None


def detect(obj: dict[str, Any]) -> Format:
    if any(k.endswith("_e2el_ms") for k in obj) or "total_token_throughput" in obj:
        return "vllm"
    if any(k.endswith("_e2e_latency_ms") for k in obj) or "total_output_tokens_retokenized" in obj:
        return "sglang"
    return "json"


def canonical(key: str) -> str:
    for pat, rep in _RENAMES:
        key = pat.sub(rep, key)
    return key


def normalize(obj: dict[str, Any]) -> dict[str, float]:
    """Every scalar number (nested keys dotted), renamed; `median_*` also as `p50_*`;
    `errors` counted from vLLM's per-request error list (or its `failed`)."""
    out: dict[str, float] = {}

    def walk(prefix: str, d: dict[str, Any]) -> None:
        for k, v in d.items():
            name = canonical(f"{prefix}{k}")
            if isinstance(v, bool) or v is None:
                continue
            if isinstance(v, int | float):
                out[name] = float(v)
            elif isinstance(v, dict):
                walk(f"{name}.", v)

    walk("", obj)
    for k in [k for k in out if k.startswith("median_")]:
        out.setdefault("p50_" + k.removeprefix("median_"), out[k])
    errs = obj.get("errors")
    if isinstance(errs, list):
        out["errors"] = float(sum(1 for e in errs if e))
    elif "failed" in out:
        out["errors"] = out["failed"]
    return out


def parse_results(text: str) -> dict[str, float]:
    """All metrics in a benchmark's output or result file ({} when there is no JSON)."""
    obj = last_json(text)
    return normalize(obj) if obj is not None else {}
