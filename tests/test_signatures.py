"""The failure-signature knowledge base: it loads, covers the taxonomy, and classifies real lines.

The line table lives in tests/data/signature_lines.yaml (real lines from the H200 captures, the
shared incident cards and public issue threads). The H200 capture files themselves are scanned
where the shared folder is present, so the knowledge base is held to the bytes a host printed.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
import yaml

from agent.signatures import KB_DIR, Match, Signature, SignatureFile, load_signatures, scan
from cards.model import load_card
from cards.taxonomy import LABELS

DATA = Path(__file__).parent / "data" / "signature_lines.yaml"
FIXTURES = Path(__file__).parent / "fixtures" / "h200"  # real H200 captures, copied in
RANK = {"fatal": 4, "strong": 3, "weak": 2, "progress": 1, "ready": 1}


def _table() -> dict:
    return yaml.safe_load(DATA.read_text(encoding="utf-8"))


def _strongest(hits: list[Match]) -> tuple[str | None, set[str | None]]:
    """Top strength among the hits and the set of labels that reach it."""
    if not hits:
        return None, set()
    top = max(RANK[h.strength] for h in hits)
    tops = [h for h in hits if RANK[h.strength] == top]
    strengths = {h.strength for h in tops}
    strength = "fatal" if "fatal" in strengths else sorted(strengths)[0]
    return strength, {h.label for h in tops}


def test_every_file_loads_and_examples_match() -> None:
    files = sorted((KB_DIR / "signatures").glob("*.yaml"))
    assert {f.stem for f in files} >= {
        "sglang",
        "vllm",
        "trtllm",
        "torch_cuda",
        "nccl",
        "host",
        "python_deps",
        "progress",
        "generic",
    }
    for f in files:
        parsed = SignatureFile.model_validate(yaml.safe_load(f.read_text(encoding="utf-8")))
        assert parsed.signatures, f"{f.name} is empty"
    sigs = load_signatures()
    assert len(sigs) >= 150
    for s in sigs:
        assert all(s.matches(ex) for ex in s.examples), s.id
        assert s.source.startswith("https://"), f"{s.id}: source must be a public URL"
        assert s.meaning.strip(), f"{s.id}: meaning is empty"
        if s.strength in ("fatal", "strong"):
            assert s.next_step.strip(), f"{s.id}: a deciding signature needs a next step"


def test_schema_rejects_an_example_that_does_not_match() -> None:
    with pytest.raises(ValueError, match="example does not match"):
        Signature(
            id="bad",
            label="port_in_use",
            strength="fatal",
            patterns=["Address already in use"],
            examples=["Connection refused"],
        )


def test_every_label_has_three_deciding_signatures() -> None:
    sigs = load_signatures()
    for label in LABELS:
        if label == "still_starting":
            # No single line proves "still starting" (process alive + log advancing does);
            # the label is served by progress signatures instead, counted here.
            n = sum(1 for s in sigs if s.strength == "progress")
        elif label == "healthy":
            # nor "healthy": the process alive and its own ready line with no error after it;
            # served by the ready signatures
            n = sum(1 for s in sigs if s.strength == "ready")
        else:
            n = sum(1 for s in sigs if s.label == label and s.strength in ("fatal", "strong"))
        assert n >= 3, f"{label}: only {n} fatal/strong signatures"


def test_every_engine_has_signatures() -> None:
    sigs = load_signatures()
    # every engine a public card names (the registry's engines in use) and NCCL
    cards = Path(__file__).resolve().parents[1] / "evals" / "incidents"
    used = {load_card(p).engine for p in cards.glob("*.yaml")} - {"other"}
    assert {"sglang", "vllm", "trtllm", "torch"} <= used
    for engine in sorted(used | {"nccl"}):
        n = sum(1 for s in sigs if engine in s.engines)
        assert n >= 5, f"{engine}: only {n} signatures"
    assert sum(1 for s in sigs if s.strength == "ready") >= 3


def test_real_lines_get_the_expected_strongest_label() -> None:
    rows = _table()["lines"]
    assert len(rows) >= 60
    wrong: list[str] = []
    for row in rows:
        hits = scan([row["line"]])
        strength, labels = _strongest(hits)
        hit_labels = {h.label for h in hits}
        if strength != row["strength"] or labels != {row["label"]}:
            wrong.append(f"{row['line'][:90]!r}: got {strength} {labels}")
        for extra in row.get("also", []):
            if extra not in hit_labels:
                wrong.append(f"{row['line'][:90]!r}: missing {extra}")
        for absent in row.get("none", []):
            if absent in hit_labels:
                wrong.append(f"{row['line'][:90]!r}: must not hit {absent}")
        if row.get("progress") and not any(h.strength == "progress" for h in hits):
            wrong.append(f"{row['line'][:90]!r}: no progress hit")
    assert not wrong, "\n".join(wrong)


def test_harmless_lines_never_decide() -> None:
    for line in _table()["negatives"]:
        deciding = [h for h in scan([line]) if h.strength in ("fatal", "strong")]
        assert not deciding, f"{line!r} -> {[h.signature for h in deciding]}"


def test_h200_captures() -> None:
    def lines(name: str) -> list[str]:
        text = (FIXTURES / name).read_text(encoding="utf-8", errors="replace")
        return re.split(r"\r\n|\r|\n", text)

    # A healthy NCCL run with NCCL_DEBUG=INFO (incl. "Failed to initialize NET plugin IB").
    for name in ("nccl-init.default.log", "nccl-init.fewchan.log", "nccl-init.bogus-env.log"):
        deciding = [h for h in scan(lines(name)) if h.strength in ("fatal", "strong")]
        assert not deciding, f"{name}: {[h.line for h in deciding]}"

    stale = scan(lines("cuda-oom.stale-process.log"))
    assert {(h.label, h.strength) for h in stale} >= {
        ("cuda_oom_runtime", "fatal"),
        ("stale_gpu_process", "strong"),
        ("gpu_oom_weights", "strong"),
    }
    too_big = {(h.label, h.strength) for h in scan(lines("cuda-oom.too-big.log"))}
    assert ("cuda_oom_runtime", "fatal") in too_big
    assert not any(label == "stale_gpu_process" for label, _ in too_big)

    assert ("port_in_use", "fatal") in {
        (h.label, h.strength) for h in scan(lines("port-in-use.log"))
    }

    bar = scan(lines("loading-progress.cr.log"))
    assert bar and all(h.strength in ("progress", "strong") for h in bar)
    assert not any(h.strength == "fatal" for h in bar)


def test_scan_of_5000_lines_completes() -> None:
    sample = [row["line"] for row in _table()["lines"]] + _table()["negatives"]
    noise = [
        "INFO 05-08 00:41:43 [gpu_model_runner.py:1347] step 12 took 3.1 ms " + "x" * 200,
        "vm:563:563 [0] NCCL INFO Channel 12/64 : 0",
        # A carriage-return progress bar read as one line (1,800 characters), as loaders write it.
        "".join(
            f"\rLoading safetensors checkpoint shards: {p:3d}% Completed | {p * 64 // 100}/64"
            " [00:20<00:50,  1.2it/s]"
            for p in range(0, 100, 5)
        ),
        "Loading safetensors checkpoint shards:  40% Completed | 25/64 [00:20<00:50,  1.2it/s]",
    ]
    lines = (sample + noise * 20) * (5000 // (len(sample) + 80) + 1)
    lines = lines[:5000]
    start = time.perf_counter()
    hits = scan(lines)
    elapsed = time.perf_counter() - start
    assert len(lines) == 5000 and hits
    print(f"scan of 5000 lines x {len(load_signatures())} signatures: {elapsed:.2f} s")
