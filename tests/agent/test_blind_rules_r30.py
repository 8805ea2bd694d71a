"""Rules and knowledge after blind round 30 (scored before any change), each with a control
that must not trigger it: a fix is a general form or fact, never an answer keyed to one card."""

from __future__ import annotations

from typing import Any

import pytest

from tests.agent.test_rules import GPU_CLEAN, PS_IDLE, _card

CI_LOG = (
    "+ MODEL=Qwen/Qwen3-8B\n"
    "+ CUDA_VISIBLE_DEVICES=0 python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B "
    "--port 30000 --host 127.0.0.1\n"
    "Waiting for http://127.0.0.1:30000/health (timeout 300s) ... 240s\n"
    "ERROR: server http://127.0.0.1:30000 not healthy after 300s\n"
    'Stage "Run SGLang sanity" failed with exit code 1\n'
)
SCRIPT = (
    "#!/bin/bash\nset -x\n"
    'CUDA_VISIBLE_DEVICES=0 python3 -m sglang.launch_server --model-path "$MODEL" --port 30000 '
    "--host 127.0.0.1 > ci_logs/sglang_prefill.log 2>&1 &\n"
)
SERVER = (
    "[2026-07-28 12:55:41] server_args=ServerArgs(model_path='Qwen/Qwen3-8B', port=30000)\n"
    "[2026-07-28 12:55:59] Scheduler hit an exception: Traceback (most recent call last):\n"
    '  File "/x/flashinfer/jit/cpp_ext.py", line 329, in run_ninja\n'
    "FileNotFoundError: [Errno 2] No such file or directory: 'ninja'\n"
)


@pytest.mark.parametrize("traced", [True, False])
def test_a_ci_logs_shell_trace_is_the_scripts_and_its_servers_logs_are_read(
    tmp_path: Any, traced: bool
) -> None:
    """A CI job's log (`set -x`) traces the launch command (`+ python3 -m sglang...`) and ends on
    its own health-check timeout; the trace is the script's, not a launch the log prints, so the
    log the script redirects the server to is read and its error is the cause, not the
    timeout. The control: a log that prints the server's own banner is a launch's log, and the
    sweep reads nothing else (a later round may still choose to)."""
    from agent.runner import investigate
    from agent.settings import Settings
    from cards.replay import ReplayHost

    # the control's log prints the server's own banner: it is a launch's log, not a wrapper's
    given = CI_LOG if traced else SERVER.splitlines()[0] + "\n" + CI_LOG
    files = {
        "/builds/p/ci_logs/run_sanity.log": given,
        "/builds/p/ci_logs/sglang_prefill.log": SERVER,
        "/builds/p/.gitlab/test_sanity.sh": SCRIPT,
    }
    card = _card(files, PS_IDLE, GPU_CLEAN)
    events: list[Any] = []
    r = investigate(
        ReplayHost(card),
        card.symptom,
        settings=Settings(home=tmp_path / "h"),
        logs=["/builds/p/ci_logs/run_sanity.log"],
        configs=["/builds/p/.gitlab/test_sanity.sh"],
        on_event=events.append,
    )
    reads = [
        e.data["args"].get("path")
        for e in events
        if e.type == "observation" and e.data.get("tool") == "log_tail" and e.data["round"] == 0
    ]
    assert ("/builds/p/ci_logs/sglang_prefill.log" in reads) is traced, reads
    if traced:
        assert r.root_cause == "dependency_error", r.summary


@pytest.mark.parametrize(
    ("line", "signature"),
    [
        ("[Sun Jan 11 09:47:30 2026] NVRM: nvAssertOkFailedNoLog: Assertion failed: Reset "
         "required [NV_ERR_RESET_REQUIRED] (0x00000062) returned from status @ kernel_channel.c:2874",
         "nvrm-reset-required"),
        ("[Sun Jan 11 09:47:30 2026] NVRM: GPU at PCI:0000:ab:00: GPU-4a28de72 reset completed",
         None),
        ("[Thu Apr 16 03:21:07 2026] VLLM::Worker_TP[2291873]: segfault at 32b5f3a08 ip "
         "00007f3c1a2b4e21 sp 00007ffd6c1b2f00 error 4 in libvgpu.so[7f3c1a28a000+5c000]",
         "vgpu-interposer-segfault"),
        ("[Thu Apr 16 03:21:07 2026] python3[2291873]: segfault at 0 ip 00007f3c1a2b4e21 sp "
         "00007ffd6c1b2f00 error 4 in libcuda.so.550.127.05[7f3c1a28a000+5c000]",
         None),
        ("allocate memory : Please set max locked memory (ulimit -l) to 'unlimited' (current: "
         "8192 kbytes)", "ucx-memlock-limit"),
        ("max locked memory       (kbytes, -l) 8192", None),
    ],
)  # fmt: skip
def test_driver_vgpu_and_ucx_messages_name_their_cause(line: str, signature: str | None) -> None:
    """A GPU the driver says must be reset is a hardware fault; a crash inside the vGPU sharer's
    libvgpu.so is that library's; UCX asking for an unlimited memlock is the launch's limit.
    Controls: a reset that completed, a segfault elsewhere, `ulimit -a`'s own line."""
    from agent.signatures import scan

    ours = {"nvrm-reset-required", "vgpu-interposer-segfault", "ucx-memlock-limit"}
    hit = {m.signature for m in scan([line])} & ours
    assert hit == ({signature} if signature else set()), hit


@pytest.mark.parametrize(
    ("line", "remote"),
    [
        ("(EngineCore_DP0 pid=1834702) (RayWorkerWrapper pid=2211873, ip=192.168.10.220) INFO "
         "06-08 14:02:50 [parallel_state.py:1207] world_size=8 rank=2 local_rank=0 "
         "distributed_init_method=tcp://127.0.0.1:35517 backend=nccl", True),
        ("(EngineCore_DP0 pid=1834702) (RayWorkerWrapper pid=2211873) INFO 06-08 14:02:50 "
         "[parallel_state.py:1207] world_size=2 rank=1 local_rank=1 "
         "distributed_init_method=tcp://127.0.0.1:35517 backend=nccl", False),
        ("(RayWorkerWrapper pid=2211873, ip=192.168.10.220) INFO 06-08 14:02:50 "
         "[parallel_state.py:1207] world_size=8 rank=2 local_rank=0 "
         "distributed_init_method=tcp://192.168.10.219:35517 backend=nccl", False),
    ],
)  # fmt: skip
def test_a_rank_on_another_node_sent_to_loopback_is_the_layouts_fault(
    line: str, remote: bool
) -> None:
    """A Ray actor's line tagged with another node's ip and a rendezvous at 127.0.0.1: that
    rank waits at its own loopback and never meets the others (a data-parallel group spread
    over Ray nodes without Ray's backend). Controls: a local actor (no ip tag) at 127.0.0.1 is
    a single node's normal rendezvous; a remote actor told the head's address is right."""
    from agent.rules.causes import remote_rank_at_loopback

    obs: Any = [
        {"id": "o1", "tool": "log_tail", "args": {"path": "/l"}, "ok": True,
         "lines": [line], "data": {}}
    ]  # fmt: skip
    assert (remote_rank_at_loopback(obs) is not None) is remote
