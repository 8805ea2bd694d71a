"""Rules and knowledge after blind round 31 (scored before any change), each with a control
that must not trigger it: a fix is a general form or fact, never an answer keyed to one card."""

from __future__ import annotations

from typing import Any

import pytest

from tests.agent.test_rules import _card


@pytest.mark.parametrize(
    ("line", "signature"),
    [
        ("ValueError: The configured object store size (20.240216064 GB) exceeds /dev/shm size "
         "(10.73741824 GB). This will harm performance. Consider deleting files in /dev/shm or "
         "increasing its size with --shm-size in Docker.", "ray-object-store-exceeds-dev-shm"),
        ("2023-07-03 03:27:55,911 WARNING services.py:1826 -- WARNING: The object store is using "
         "/tmp instead of /dev/shm because /dev/shm has only 67108864 bytes available. This will "
         "harm performance!", None),
    ],
)  # fmt: skip
def test_ray_refusing_an_object_store_larger_than_shm_is_fatal(
    line: str, signature: str | None
) -> None:
    """ray.init raises when the object store it is configured for exceeds /dev/shm (above
    10 GB): the container's --shm-size. The control: below that Ray falls back to /tmp with a
    warning and runs on."""
    from agent.signatures import scan

    fatal = {m.signature for m in scan([line]) if m.strength == "fatal"}
    assert ("ray-object-store-exceeds-dev-shm" in fatal) is bool(signature), fatal


@pytest.mark.parametrize("alive", [True, False])
def test_a_proven_healthy_launch_explains_away_the_suspects_nothing_points_at(
    tmp_path: Any, alive: bool
) -> None:
    """Alive, its own ready line, requests served, no error since: the worry is explained, so
    suspects the operator raised with nothing pointing at them (a /dev/shm too small for the
    collective they fear) are ruled out, as a proven cause rules them out, quoting the ready
    line (blind round 31). The control: the same log with the launch gone is no healthy
    verdict, and nothing is ruled out for being explained by one."""
    from tests.agent.test_rules import GPU_HELD, PS_IDLE, PS_SERVER, _run

    up = (
        "INFO Loading weights took 31.2 seconds\nINFO:     Application startup complete.\n"
        "INFO:     Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)\n"
    )
    served = up + 'INFO:     127.0.0.1:50312 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
    card = _card(
        {"/var/log/vllm/server.log": [up, served]}, PS_SERVER if alive else PS_IDLE, GPU_HELD
    )
    card.symptom = "It answers slowly at times: is it stuck on an NCCL collective?"
    r = _run(card, tmp_path)
    assert (r.status == "healthy") is alive, r.summary
    assert ("shm_too_small" in r.ruled_out) is alive, r.ruled_out


@pytest.mark.parametrize(
    ("line", "arch", "wrapper"),
    [
        ("[05/23/2025-09:15:19] [TRT-LLM] [RANK 0] [E] Failed to initialize executor on rank 0: "
         "Unsupported SM version for FP8 block scaling GEMM", True, False),
        ("RuntimeError: Executor worker returned error", False, True),
        ("[TensorRT-LLM][INFO] Detected SM version 89 (compute capability 8.9)", False, False),
    ],
)  # fmt: skip
def test_trtllm_names_the_sm_it_lacks_and_its_proxy_error_is_a_wrapper(
    line: str, arch: bool, wrapper: bool
) -> None:
    """TensorRT-LLM's kernels refuse an SM they have no build for (unsupported_gpu_arch), and
    its proxy's closing "Executor worker returned error" only says a worker failed: the rank's
    own error above it is the cause (it was read as model_load_error). The control: the SM
    version printed at start-up is neither."""
    from agent import proof
    from agent.signatures import scan

    fatal = {m.signature for m in scan([line]) if m.strength == "fatal"}
    assert ("trtllm-unsupported-sm-version" in fatal) is arch, fatal
    assert proof.is_wrapper(line) is wrapper
