"""Rules and knowledge after blind round 44 (scored before any change), each with a control
that must not trigger it: a fix is a general form or fact, never an answer keyed to one card."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent.runner import investigate
from agent.settings import Settings
from cards.model import Invocation
from cards.replay import ReplayHost
from tests.agent.test_rules import PS_HEADER, _card

KV_SHORT = (
    "ValueError: The model's max seq len (32768) is larger than the maximum number of tokens "
    "that can be stored in KV cache (21488). Try increasing `gpu_memory_utilization` or "
    "decreasing `max_model_len` when initializing the engine."
)


def _dead_launch_beside_a_notebook(notebook_user: str, holder: str) -> Any:
    """root's vLLM launch died on its own KV-cache sizing check; nothing of it is alive and its
    log's owner is not recorded. `notebook_user`'s `holder` sleeps holding 3 GiB of an idle
    GPU; root reads the box (the process list's own `ps aux` row)."""
    ps = PS_HEADER + (
        f"{notebook_user:<8}   3190  0.4  5.1 31875404 3377120 ?    Ssl  Jul16   9:44 {holder}\n"
        "root       47012  0.0  0.0  10344  4128 pts/1    Ss   01:58   0:00 -bash\n"
        "root       48790  0.0  0.0  10076  3420 pts/1    R+   02:19   0:00 ps aux\n"
    )
    log = (
        "INFO 07-18 02:11:07 api_server.py:206] vLLM API server version 0.5.1\n"
        "INFO 07-18 02:11:09 model_runner.py:255] Loading model weights took 13.4966 GB\n"
        "INFO 07-18 02:11:21 gpu_executor.py:84] # GPU blocks: 1343, # CPU blocks: 2048\n"
        "[rank0]: Traceback (most recent call last):\n"
        '[rank0]:   File "/x/vllm/worker/worker.py", line 368, in raise_if_cache_size_invalid\n'
        "[rank0]:     raise ValueError(\n"
        f"[rank0]: {KV_SHORT}\n"
    )
    apps = "pid, process_name, used_gpu_memory [MiB]\n3190, python, 3234 MiB\n"
    gpu = "0, NVIDIA L4, 3242 MiB, 19410 MiB, 23034 MiB, 0 %\n"
    cmd = "nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv"
    card = _card({"/root/logs/serve.log": log}, ps, gpu, commands={cmd: apps})
    return card.model_copy(update={"invocation": Invocation(log="/root/logs/serve.log")})


@pytest.mark.parametrize(
    ("user", "holder", "stale"),
    [
        ("mluser", "/opt/conda/envs/rag/bin/python -m ipykernel_launcher -f k.json", False),
        # controls: the reader's own idle holder is a leftover of theirs; another account's
        # engine process may be the launch's own leftover under a scheduler's account
        ("root", "/opt/conda/envs/rag/bin/python -m ipykernel_launcher -f k.json", True),
        ("slurmu", "sglang::scheduler_DP0_TP0_EP0", True),
    ],
)
def test_another_users_notebook_is_theirs_when_nothing_says_who_ran_the_launch(
    tmp_path: Path, user: str, holder: str, stale: bool
) -> None:
    """Nothing of the launch is alive and its log's owner is unknown (a replayed card; a live
    host's stat names it): the one reading the box asks about their own launch, so another
    user's sleeping notebook kernel is that user's job, a co-tenant, not a leftover to kill, and
    the engine's own sizing error is the cause. A 3 GiB kernel had made `stale_gpu_process`."""
    card = _dead_launch_beside_a_notebook(user, holder)
    r = investigate(ReplayHost(card), card.symptom, settings=Settings(home=tmp_path / "h"))
    holders = {g["pid"]: g["owner"] for g in r.launch["gpu"]}
    if stale:
        assert holders.get(3190) == "leftover", r.launch["gpu"]
        assert r.root_cause == "stale_gpu_process", (r.root_cause, r.summary)
    else:
        assert holders.get(3190) == "another user's job", r.launch["gpu"]
        assert r.root_cause == "kv_cache_no_room", (r.root_cause, r.summary)
