"""The general rules, each on a small realistic host made up in the test (not on any shipped card)."""

from __future__ import annotations

from typing import Any

from agent.runner import investigate
from agent.settings import Settings
from cards.model import IncidentCard
from cards.replay import ReplayHost

PS_HEADER = "USER         PID %CPU %MEM    VSZ   RSS TTY      STAT START   TIME COMMAND\n"
PS_IDLE = PS_HEADER + "root        412  0.0  0.0   7232  3968 pts/0    Ss   09:01   0:00 -bash\n"
PS_SERVER = PS_IDLE + (
    "root       5120 99.0  3.1 9123456 4123456 ?      Sl   09:02   2:11 python3 -m vllm.entrypoints.openai.api_server --model /models/llama-70b --port 8000\n"
)
GPU_CLEAN = "0, NVIDIA H100 80GB HBM3, 0 MiB, 81008 MiB, 81559 MiB, 0 %\n"
GPU_HELD = "0, NVIDIA H100 80GB HBM3, 70211 MiB, 10797 MiB, 81559 MiB, 0 %\n"
OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.95 GiB. GPU 0 has a total "
    "capacity of 79.10 GiB of which 1.02 GiB is free. Process 7001 has 68.55 GiB memory in use. "
    "Of the allocated memory 8.10 GiB is allocated by PyTorch."
)
LOADING = (
    "Loading safetensors checkpoint shards:  {p}% Completed | {n}/30 [00:{s:02d}<01:10,  2.1s/it]"
)


def _card(files: dict[str, Any], ps: str, gpu: str, **host: Any) -> IncidentCard:
    return IncidentCard.model_validate(
        {
            "id": "made-up",
            "title": "t",
            "source": "test",
            "engine": "vllm",
            "symptom": "It died, why?",
            "host": {"ps": ps, "nvidia_smi": gpu, "files": files, **host},
        }
    )


def _run(card: IncidentCard, tmp_path) -> Any:  # type: ignore[no-untyped-def]
    return investigate(ReplayHost(card), card.symptom, settings=Settings(home=tmp_path / "h"))


def test_old_crash_in_an_appended_log_does_not_decide_about_the_new_launch(tmp_path) -> None:  # type: ignore[no-untyped-def]
    old = f"$ python3 -m vllm.entrypoints.openai.api_server --model /models/llama-70b\nTraceback (most recent call last):\n{OOM}\n"
    new = "$ python3 -m vllm.entrypoints.openai.api_server --model /models/llama-70b --port 8000\nINFO Loading weights\n"
    snaps = [
        old + new + LOADING.format(p=10, n=3, s=6),
        old + new + LOADING.format(p=40, n=12, s=25),
    ]
    r = _run(_card({"/var/log/vllm/server.log": snaps}, PS_SERVER, GPU_HELD), tmp_path)
    assert r.root_cause == "still_starting", r.hypotheses


def test_exception_words_in_a_healthy_loading_log_are_not_a_crash(tmp_path) -> None:  # type: ignore[no-untyped-def]
    head = (
        "WARNING Ignore import error when loading vllm.model_executor.models.foo: Exception: not built for sm_90\n"
        "INFO Error rate limiter initialised (error_rate=0)\n"
    )
    snaps = [head + LOADING.format(p=10, n=3, s=6), head + LOADING.format(p=20, n=6, s=13)]
    r = _run(_card({"/workspace/logs/serve.log": snaps}, PS_SERVER, GPU_HELD), tmp_path)
    assert r.status == "concluded" and r.root_cause == "still_starting"
    assert "killed_externally" in r.ruled_out


def test_oom_is_blamed_on_a_leftover_only_when_another_pid_holds_the_gpu(tmp_path) -> None:  # type: ignore[no-untyped-def]
    log = {
        "/home/ml/serve.log": f"INFO Loading weights took 31.2 seconds\nTraceback (most recent call last):\n{OOM}\n"
    }
    apps = {
        "nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv": "pid, process_name, used_gpu_memory [MiB]\n7001, python3, 70200 MiB\n"
    }
    held = (
        PS_IDLE
        + "root       7001  0.0  1.0 9123456 1234567 ?      Sl   Nov28   0:41 python3 train_old.py\n"
    )
    r = _run(_card(log, held, GPU_HELD, commands=apps), tmp_path / "a")
    assert r.root_cause == "stale_gpu_process"
    r2 = _run(_card(log, PS_IDLE, GPU_CLEAN), tmp_path / "b")
    assert r2.root_cause == "cuda_oom_runtime"  # loading had finished: a runtime OOM
    assert "stale_gpu_process" in r2.ruled_out


def test_a_silent_death_is_the_oom_killer_only_if_dmesg_says_so(tmp_path) -> None:  # type: ignore[no-untyped-def]
    log = {
        "/var/log/vllm/server.log": "INFO Loading weights\n"
        + LOADING.format(p=60, n=18, s=40)
        + "\n"
    }
    dmesg = "[Sun Nov 29 09:03:12 2026] Out of memory: Killed process 5120 (python3) total-vm:912345kB, anon-rss:812345kB\n"
    r = _run(_card(log, PS_IDLE, GPU_CLEAN, dmesg=dmesg), tmp_path / "a")
    assert r.root_cause == "host_oom_killed"
    quiet = "[Sun Nov 29 08:00:01 2026] EXT4-fs (nvme0n1p1): mounted filesystem with ordered data mode\n"
    r2 = _run(_card(log, PS_IDLE, GPU_CLEAN, dmesg=quiet), tmp_path / "b")
    assert r2.root_cause == "killed_externally"
    assert "host_oom_killed" in r2.ruled_out and "still_starting" in r2.ruled_out


def test_a_spent_budget_ends_the_run_with_a_named_status(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from agent.settings import Budget

    log = {
        "/var/log/vllm/server.log": "INFO Loading weights\n"
        + LOADING.format(p=60, n=18, s=40)
        + "\n"
    }
    card = _card(log, PS_SERVER, GPU_HELD)
    tight = Settings(home=tmp_path / "h", budget=Budget(max_tool_calls=3))
    r = investigate(ReplayHost(card), card.symptom, settings=tight)
    assert r.status == "budget_exhausted" and r.root_cause is None


def test_a_server_that_logs_only_to_kubernetes_is_still_read(tmp_path) -> None:  # type: ignore[no-untyped-def]
    card = IncidentCard.model_validate(
        {
            "id": "k8s",
            "title": "t",
            "source": "test",
            "engine": "vllm",
            "symptom": "The pod keeps restarting. Why?",
            "host": {
                "ps": PS_IDLE,
                "nvidia_smi": GPU_CLEAN,
                "commands": {
                    "kubectl get pods --no-headers": "vllm-0   0/1   CrashLoopBackOff   4   9m\n",
                    "kubectl logs --tail=200 vllm-0": "INFO Loading weights took 31.2 seconds\nINFO Capturing cudagraphs\n"
                    + "Traceback (most recent call last):\n"
                    + OOM
                    + "\n",
                },
            },
        }
    )
    r = _run(card, tmp_path)
    assert r.root_cause == "cuda_oom_runtime"
    assert any("CUDA out of memory" in e.line for e in r.evidence)


def test_a_healthy_server_is_said_healthy_not_insufficient(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Up and fine is a status a script can read (`healthy`), not "could not tell"."""
    up = "INFO Loading weights took 31.2 seconds\nINFO:     Application startup complete.\nINFO:     Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)\n"
    card = _card(
        {
            "/var/log/vllm/server.log": [
                up,
                up + 'INFO:     127.0.0.1:50312 - "GET /health HTTP/1.1" 200 OK\n',
            ]
        },
        PS_SERVER,
        GPU_HELD,
    )
    r = _run(card, tmp_path)
    assert r.status == "healthy" and r.root_cause == "healthy", r.summary
    assert r.confidence >= 0.7
    assert any("Uvicorn running on" in e.line for e in r.evidence)
    assert "reported ready" in r.summary


def test_a_bind_error_is_backed_by_who_holds_the_port_now(tmp_path) -> None:  # type: ignore[no-untyped-def]
    log = {
        "/home/ai/serve.log": "INFO starting\nERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 4400): address already in use\n"
    }
    ss = 'State  Recv-Q Send-Q Local Address:Port Peer Address:Port Process\nLISTEN 0      2048         0.0.0.0:4400      0.0.0.0:*    users:(("python",pid=41208,fd=27))\n'
    r = _run(_card(log, PS_IDLE, GPU_CLEAN, commands={"ss -ltnp": ss}), tmp_path)
    assert r.root_cause == "port_in_use"
    hyp = next(h for h in r.hypotheses if h.label == "port_in_use")
    assert any("0.0.0.0:4400" in e.line and "pid=41208" in e.line for e in hyp.evidence)
