"""Rules and knowledge after blind round 40 (scored before any change), each with a control
that must not trigger it: a fix is a general form or fact, never an answer keyed to one card."""

from __future__ import annotations

import pytest

from agent.facts import Facts, GpuFact
from agent.rules import proof
from agent.rules.causes import unknown_model_type
from agent.rules.hang import pinned_gpus
from agent.signatures import load_signatures, scan


def _sigs(lines: list[str]) -> list[tuple[str, str | None]]:
    return [(m.signature, m.label) for m in scan(lines, load_signatures())]


SLOTS = [
    "There are not enough slots available in the system to satisfy the 2",
    "slots that were requested by the application:",
    "  /usr/bin/python3",
    "mpi4py.MPI.Exception: MPI_ERR_SPAWN: could not spawn processes",
]


def test_too_few_mpi_slots_is_the_cause_and_the_failed_spawn_its_consequence() -> None:
    """trtllm-serve --tp_size 2 on a 2-core VM: Open MPI counted 2 slots, the singleton parent
    held one, and the spawn failed. The spawn error read as a broken MPI (dependency_error)."""
    got = _sigs(SLOTS)
    assert ("openmpi-not-enough-slots", "bad_launch_argument") in got, got
    assert not [s for s, _ in got if s == "trtllm-mpi-spawn-failed"], got
    # control: a spawn failure with no slot shortage before it stays the MPI runtime's
    alone = _sigs(SLOTS[3:])
    assert ("trtllm-mpi-spawn-failed", "dependency_error") in alone, alone


@pytest.mark.parametrize(
    ("line", "label"),
    [
        (
            "RuntimeError: [TensorRT-LLM Error][CutlassFp4GemmRunner][GEMM Dispatch] Arch "
            "unsupported for CUTLASS FP4 GEMM",
            "unsupported_gpu_arch",
        ),
    ],
)
def test_a_cutlass_kernel_without_this_arch_is_the_gpus_not_a_flags(line: str, label: str) -> None:
    """An NVFP4 checkpoint on Hopper: the words "unsupported" had pointed at a launch flag."""
    assert (("trtllm-cutlass-arch-unsupported", label)) in _sigs([line])
    assert proof.label_hint("ValueError: GPU arch unsupported by this kernel") == label
    # control: an unsupported dtype or option is still the launch's
    assert proof.label_hint("ValueError: dtype float8 unsupported for this op") != label


def test_ray_serves_http_proxy_up_is_not_the_model_ready() -> None:
    """Ray 2.6 tags its proxy's uvicorn lines "(HTTPProxyActor pid=N)" (later "(ProxyActor")":
    the proxy is up before any replica loads, so it said "healthy" while the replica downloaded
    its weights."""
    proxy = "(HTTPProxyActor pid=4234) INFO:     Started server process [4234]"
    assert not [s for s, _ in _sigs([proxy]) if s.startswith("ready")], _sigs([proxy])
    # control: the server's own uvicorn line is its readiness
    assert [s for s, _ in _sigs(["INFO:     Started server process [1]"]) if s.startswith("ready")]


def _gpu(i: int, util: float) -> GpuFact:
    return GpuFact(index=i, used_mib=30000.0, total_mib=46068.0, util_pct=util, line=f"{i}, L40S")


def _ps_obs(cmd: str) -> list[dict]:  # type: ignore[type-arg]
    return [{"id": "o2", "tool": "processes", "ok": True, "args": {}, "data": {}, "lines": [cmd]}]


@pytest.mark.parametrize(("tp", "idle_left"), [(2, False), (4, True)])
def test_idle_gpus_beside_a_launch_whose_ranks_all_compute_are_another_jobs(
    tp: int, idle_left: bool
) -> None:
    """SGLang TP=2 busy with one long prefill on GPUs 0-1 while a neighbour's reranker idles on
    GPUs 2-3: "GPU 0 pinned while a peer sits idle" had made it an NCCL hang. Control: a TP=4
    launch with two GPUs idle does have idle ranks."""
    facts = Facts(gpus=[_gpu(0, 100), _gpu(1, 100), _gpu(2, 0), _gpu(3, 0)])
    cmd = f"root 60433 0.4 0.8 1 1 ? Ssl Sep25 5:46 python3 -m sglang.launch_server --tp {tp}"
    pinned, idle = pinned_gpus(facts, _ps_obs(cmd))  # type: ignore[arg-type]
    assert len(pinned) == 2
    assert bool(idle) is idle_left


def _hit(line: str):  # type: ignore[no-untyped-def]
    o = {"id": "o9", "tool": "log_tail", "ok": True, "args": {}, "data": {}, "lines": [line]}
    return [(o, m) for m in scan([line], load_signatures())]


def test_a_model_type_no_transformers_release_knows_is_no_version_to_upgrade() -> None:
    """Triton's VILA postprocessing pointed tokenizer_dir at the VILA root (model_type
    llava_llama): "upgrade transformers" cannot help, the path is not a plain checkpoint.
    Control: a type transformers knows (qwen3) is an old version's."""
    msg = (
        "ValueError: The checkpoint you are trying to load has model type `{t}` but Transformers "
        "does not recognize this architecture. This could be because of an issue with the "
        "checkpoint, or because your version of Transformers is out of date."
    )
    hit = unknown_model_type(_hit(msg.format(t="llava_llama")))
    assert hit is not None and hit[2] == "llava_llama"
    assert unknown_model_type(_hit(msg.format(t="qwen3"))) is None


@pytest.mark.parametrize(
    ("before", "after", "possible"),
    [("82.94 GiB", "90.17 GiB", True), ("90.17 GiB", "82.94 GiB", False)],
)
def test_memory_freed_under_the_profiler_was_another_processs(
    before: str, after: str, possible: bool
) -> None:
    """A cron-started embedding container held 7 GiB of the GPU when vLLM started and exited
    during its profiling run: vLLM's own numbers (more free memory after than before) prove
    another process held it, though nvidia-smi no longer shows it. Control: less free memory
    after than before is vLLM's own allocation, not someone else's."""
    from agent.rules.memory import stale_gpu_possible

    line = (
        "AssertionError: Error in memory profiling. Initial free memory "
        f"{before}, current free memory {after}. This happens when other processes sharing the "
        "same container release GPU memory while vLLM is profiling during initialization."
    )
    facts = Facts(gpu_available=True, ps_available=True, server_pids=[])
    assert stale_gpu_possible(facts, _hit(line)) is possible
