"""Rules added after blind round 25 (scored before any change), each with a control that must
not trigger it: a fix is a general form or fact, never an answer keyed to one card."""

from __future__ import annotations

from typing import Any

import pytest

from tests.agent.test_rules import GPU_CLEAN, PS_HEADER, PS_IDLE, _card, _run

INIT_OOM = (
    "(EngineCore_DP0 pid=7) INFO 05-08 10:38:17 [parallel_state.py:1391] rank 0 in world size 1\n"
    "(EngineCore_DP0 pid=7) ERROR 05-08 10:38:18 [core.py:1004] EngineCore failed to start.\n"
    "(EngineCore_DP0 pid=7) ERROR 05-08 10:38:18 [core.py:1004] Traceback (most recent call last):\n"
    '(EngineCore_DP0 pid=7) ERROR 05-08 10:38:18 [core.py:1004]   File "/v/vllm/v1/worker/gpu_worker.py", line 241, in {frame}\n'
    "(EngineCore_DP0 pid=7) ERROR 05-08 10:38:18 [core.py:1004]     self.x = {call}\n"
    "(EngineCore_DP0 pid=7) ERROR 05-08 10:38:18 [core.py:1004] torch.cuda.OutOfMemoryError: CUDA out of memory.\n"
)


@pytest.mark.parametrize(
    ("frame", "call", "label"),
    [
        ("init_device", "MemorySnapshot()", None),  # at device set-up: not the model's memory
        ("profile_run", "self.model(x)", "cuda_oom_runtime"),  # the control: the model ran
    ],
)
def test_an_oom_while_the_device_is_set_up_is_neither_weights_nor_runtime(
    tmp_path: Any, frame: str, call: str, label: str | None
) -> None:
    """A CUDA OOM raised while the device is being set up came before the launch loaded or ran
    anything: abstain, quoting the OOM line and how to tell the CUDA/torch build's own context
    from another process; an OOM in the model's own run stays a runtime OOM."""
    log = INIT_OOM.format(frame=frame, call=call)
    r = _run(_card({"/srv/vllm.log": log}, PS_IDLE, GPU_CLEAN), tmp_path)
    assert r.root_cause == label, (r.status, r.summary)
    if label is None:
        assert r.status == "insufficient_evidence"
        assert "CUDA out of memory" in r.summary and "set up" in r.summary


def test_memory_on_a_gpu_the_launch_was_not_given_is_not_its_holder(tmp_path: Any) -> None:
    """A neighbour's job on GPU 2 does not hold what a launch on GPU 0 (CUDA_VISIBLE_DEVICES=0)
    ran short of; the same job on GPU 0 does."""
    oom = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.95 GiB. GPU 0 has a total "
        "capacity of 79.10 GiB of which 1.02 GiB is free. Of the allocated memory 8.10 GiB is "
        "allocated by PyTorch.\n"
    )
    gpus = (
        "0, NVIDIA H100 80GB HBM3, 2 MiB, 81008 MiB, 81559 MiB, 0 %\n"
        "1, NVIDIA H100 80GB HBM3, 2 MiB, 81008 MiB, 81559 MiB, 0 %\n"
        "2, NVIDIA H100 80GB HBM3, 70211 MiB, 10797 MiB, 81559 MiB, 30 %\n"
    )
    table = (
        "+----------------------------------------------------------------------+\n"
        "| Processes:                                                           |\n"
        "|  GPU   GI   CI        PID   Type   Process name            GPU Memory |\n"
        "|=======================================================================|\n"
        "|    {gpu}   N/A  N/A      8841      C   python                  70200MiB |\n"
        "+----------------------------------------------------------------------+\n"
    )
    ps = PS_IDLE + (
        "bob       8841 30.0  2.0 912345 412345 ?      Sl   09:02   2:11 python main.py --port 8188\n"
    )
    for gpu, blamed in (("2", False), ("0", True)):
        card = _card(
            {"/srv/vllm.log": "INFO Loading weights\n" + oom},
            ps,
            gpus,
            env="CUDA_VISIBLE_DEVICES=0\n",
            nvidia_smi_full=table.format(gpu=gpu),
        )
        r = _run(card, tmp_path / gpu)
        stale = next(h for h in r.hypotheses if h.label == "stale_gpu_process")
        cited = any("8841" in e.line for e in stale.evidence)
        assert cited is blamed, (gpu, stale)


CUSTOM_AR = "Failed: Cuda error /workspace/csrc/custom_all_reduce.cuh:455 'invalid argument'\n"


@pytest.mark.parametrize(
    ("env", "error", "label"),
    [
        ("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n", CUSTOM_AR, "bad_launch_argument"),
        # controls: the setting alone is no failure; the error alone is not the setting's
        ("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n", "INFO ok\n", None),
        ("PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:512\n", CUSTOM_AR, None),
    ],
)
def test_a_setting_known_to_break_a_component_is_the_cause_of_its_error(
    tmp_path: Any, env: str, error: str, label: str | None
) -> None:
    """knowledge/conflicts.yaml: expandable segments break vLLM's custom all-reduce ("invalid
    argument" registering graph buffers); the setting, read from the launch's environment, is
    the cause, and the error its effect."""
    log = (
        "INFO 06-20 21:42:24 [custom_all_reduce.py:154] Registering 0 cuda graph addresses\n"
        + error
    )
    r = _run(_card({"/srv/vllm.log": log}, PS_IDLE, GPU_CLEAN, env=env), tmp_path)
    if label is not None:
        assert r.root_cause == label, (r.status, r.summary)
        assert any("expandable_segments" in e.line for e in r.evidence)
        assert "expandable_segments" in (r.next_step or "")
    else:
        assert r.root_cause != "bad_launch_argument" or not any(
            "expandable_segments" in e["line"] for e in r.evidence
        ), r.summary


@pytest.mark.parametrize(
    ("line", "label"),
    [
        (
            "ollama[3156712]: Error: mkdir /mnt/raid_disk/ollama: permission denied",
            "model_load_error",
        ),
        ("ollama[3156712]: Error: could not connect to ollama app, is it running?", None),
    ],
)
def test_ollama_that_cannot_reach_its_model_store_is_a_model_load_error(
    tmp_path: Any, line: str, label: str | None
) -> None:
    log = (
        "Feb 25 17:48:57 box systemd[1]: Started ollama.service - Ollama Service.\n"
        f"Feb 25 17:48:57 box {line}\n"
        "Feb 25 17:48:57 box systemd[1]: ollama.service: Main process exited, code=exited, "
        "status=1/FAILURE\n"
    )
    card = _card({"/var/log/ollama.log": log}, PS_IDLE, GPU_CLEAN)
    r = _run(card.model_copy(update={"engine": "other"}), tmp_path)
    assert r.root_cause == label, (r.status, r.summary)


@pytest.mark.parametrize(
    ("tail", "killed"),
    [
        (
            "INFO 2024-08-17 23:28:44,512 launcher:496: Gracefully shutting down vLLM server "
            "PID: 1221406\n[rank0]: KeyboardInterrupt\n"
            "ERROR 2024-08-17 23:28:54,541 launcher:144: vLLM failed to start up in 603.1 seconds\n",
            True,
        ),
        # the control: an exception of its own is no outside stop
        ("[rank0]: RuntimeError: shape mismatch in the attention kernel\n", False),
    ],
)
def test_a_launcher_giving_up_and_interrupting_the_server_is_an_outside_stop(
    tmp_path: Any, tail: str, killed: bool
) -> None:
    log = (
        "INFO 08-17 23:18:47 api_server.py:212] vLLM API server version 0.5.2.3\n"
        "INFO 08-17 23:20:33 model_runner.py:980] Capturing the model for CUDA graphs.\n"
        "[rank0]: Traceback (most recent call last):\n"
        '[rank0]:   File "/v/vllm/worker/model_runner.py", line 1000, in capture_model\n' + tail
    )
    r = _run(_card({"/home/u/gen.log": log}, PS_HEADER, GPU_CLEAN), tmp_path)
    assert (r.root_cause == "killed_externally") is killed, (r.status, r.summary)


PS_SHARED = PS_HEADER + (
    "kchen      48127 24.1  1.6 96011240 27760488 ?   Ssl  Mar29 1093:12 python3 -m "
    "sglang.launch_server --model-path /models/DeepSeek-V3.2 --tp 2 --port 30000\n"
    "kchen      48391 98.7  0.9 81230112 15922300 ?   Sl   Mar29 4410:55 sglang::scheduler_TP0\n"
    "svc-rag    51288 12.2  0.7 69210332 12004112 ?   Sl   Mar29  540:12 VLLM::Worker_TP0\n"
    "root       90334  1.1  0.6 40122876 10311432 ?   Ssl  10:02   0:31 python3 -m "
    "vllm.entrypoints.openai.api_server --model m/x --tensor-parallel-size 2 --port 8000\n"
    "root       90702  0.4  0.3 52330112 5411020 ?    Sl   10:03   0:12 VLLM::EngineCore\n"
    "root       90911  2.1  0.8 71022380 13840112 ?   Sl   10:03   0:41 VLLM::Worker_TP0\n"
    "root       90912  2.1  0.8 71022380 13839988 ?   Sl   10:03   0:41 VLLM::Worker_TP1\n"
)
STACK = (
    "Process 90911: VLLM::Worker_TP0\nPython v3.12.12 (/usr/bin/python3.12)\n\n"
    'Thread 90911 (active): "MainThread"\n'
    "    rendezvous (torch/distributed/_symmetric_memory/__init__.py:1991)\n"
    "    init_model_parallel_group (vllm/distributed/parallel_state.py:1128)\n"
)
NCCL_LOG = (
    "(Worker pid=481) INFO 03-30 10:03:21 [parallel_state.py:1234] world_size=2 rank=0 "
    "backend=nccl\n"
    "box:481:481 [0] NCCL INFO ncclCommInitRank comm 0x5585 rank 0 nranks 2 cudaDev 0 - Init START\n"
)


def test_a_containers_launch_is_its_own_processes_and_their_pids_are_read_on_the_machine(
    tmp_path: Any,
) -> None:
    """A container without ps, on a box shared with other users' servers: the launch is what
    the container's main process (State.Pid) and its user run, not a neighbour's sglang
    scheduler or another user's vLLM worker; a pid of the machine's table is dumped on the
    machine (where py-spy answers), not inside the container (where that pid does not exist)."""
    import json

    from agent.runner import investigate
    from agent.settings import Settings
    from cards.model import IncidentCard
    from cards.replay import ReplayHost
    from tools.container_host import ContainerHost

    inspect = json.dumps(
        [
            {
                "Id": "c4a9b7e1d2f0",
                "Name": "/vllm-x",
                "State": {"Status": "running", "Running": True, "Pid": 90334, "ExitCode": 0},
                "HostConfig": {"Runtime": "nvidia"},
                "Config": {"Image": "vllm/vllm-openai:v0.18.0", "Env": ["NCCL_DEBUG=INFO"]},
            }
        ]
    )
    card = IncidentCard.model_validate(
        {
            "id": "made-up",
            "title": "t",
            "source": "test",
            "engine": "vllm",
            "symptom": "my vLLM container prints nothing for 20 minutes, stuck?",
            "host": {
                "ps": PS_SHARED,
                "nvidia_smi": GPU_CLEAN,
                "commands": {"py-spy dump --pid 90911": STACK},
                "containers": {"vllm-x": {"inspect": inspect, "logs": NCCL_LOG}},
            },
        }
    )
    host = ContainerHost(ReplayHost(card), "vllm-x")
    r = investigate(host, card.symptom, settings=Settings(home=tmp_path / "h"))
    assert r.root_cause == "nccl_failure", (r.status, r.summary)
    assert any("rendezvous" in e.line for e in r.evidence)
    assert "48391" not in (r.next_step or "") and "51288" not in (r.next_step or "")


@pytest.mark.parametrize(("in_record", "found"), [(True, True), (False, False)])
def test_a_setting_is_read_from_the_pods_record_never_from_its_log(
    in_record: bool, found: bool
) -> None:
    """kubectl's pod record (its spec's Environment) sets the variable; the same text echoed by
    the process into its own log sets nothing."""
    from agent.rules.causes import setting_conflict
    from agent.state import Observation

    env = "      PYTORCH_CUDA_ALLOC_CONF:  expandable_segments:True"
    log = ["INFO starting", CUSTOM_AR.strip()]
    record = ["# kubectl describe pod p (state and events)", "    Last State:     Terminated"]
    lines = (
        ["# kubectl log of p ($ kubectl logs p)", *log, *record, env]
        if in_record
        else ["# kubectl log of p ($ kubectl logs p)", env, *log, *record]
    )
    obs = Observation(
        id="o1",
        tool="service_logs",
        args={},
        ok=True,
        lines=lines,
        data={},
        round=0,
    )
    assert (setting_conflict([obs]) is not None) is found
