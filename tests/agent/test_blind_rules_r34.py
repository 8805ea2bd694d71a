"""Rules and knowledge after blind round 34 (scored before any change), each with a control
that must not trigger it: a fix is a general form or fact, never an answer keyed to one card."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent.runner import investigate
from agent.settings import Settings
from cards.model import IncidentCard
from cards.replay import ReplayHost
from tests.agent.test_blind_rules_r33 import INSPECT
from tests.agent.test_rules import PS_HEADER, PS_IDLE, _card, _run
from tools.container_host import ContainerHost

SGLANG = (
    "[2025-10-22 10:26:49] server_args=ServerArgs(model_path='./reward-7b/', host='127.0.0.1', "
    "port=9316, tp_size=1)\n"
    "[2025-10-22 10:27:28] Load weight end. type=Qwen2VLForConditionalGeneration, "
    "dtype=torch.bfloat16, avail mem=63.48 GB, mem usage=15.10 GB.\n"
    "[2025-10-22 10:27:30] INFO:     Uvicorn running on http://127.0.0.1:9316 (Press CTRL+C to quit)\n"
    "[2025-10-22 10:29:28] Initialization failed. warmup error: Traceback (most recent call last):\n"
    '  File "/usr/lib/python3/site-packages/sglang/srt/entrypoints/http_server.py", line 1407, '
    "in _execute_server_warmup\n"
    "AssertionError: res=<Response [403]>, res.text='<html><head><title>403 Forbidden</title>'\n"
)
PROXY = "http_proxy=http://10.20.1.8:3128\nhttps_proxy=http://10.20.1.8:3128\n"


@pytest.mark.parametrize(
    ("env", "blamed"),
    [
        (PROXY + "no_proxy=.corp.example.com,10.20.0.0/16\n", True),
        # controls: the proxy skips the server's own address; no proxy at all
        (PROXY + "no_proxy=localhost,127.0.0.1\n", False),
        ("PATH=/usr/bin\n", False),
    ],
)
def test_a_warmup_answered_by_a_proxy_is_the_proxy_setting(
    tmp_path: Path, env: str, blamed: bool
) -> None:
    r = _run(_card({"/srv/reward/server.log": SGLANG}, PS_IDLE, "", env=env), tmp_path)
    said = "answered by an HTTP proxy" in r.summary
    assert said is blamed, (r.summary, r.hypotheses)
    if blamed:
        assert r.root_cause == "bad_launch_argument", r.summary
        assert any("<Response [403]>" in e.line for e in r.evidence), r.evidence


WRAPPER_LOG = (
    "[2026-06-30 08:00:00] restart requested (max-model-len 49152 -> 65536)\n"
    "vLLM did not become healthy in 180s - giving up\n"
)
ENGINE_LOG = (
    "(APIServer pid=1) INFO 06-30 08:00:08 [api_server.py:1898] vLLM API server version 0.20.1\n"
    "(EngineCore pid=212) INFO 06-30 08:02:43 [default_loader.py:308] Loading weights took 142.37 "
    "seconds\n"
    "(EngineCore pid=212) INFO 06-30 08:02:58 [backends.py:656] Dynamo bytecode transform time: "
    "12.81 s\n"
)
SERVING_PS = PS_HEADER + (
    "root           1  6.1  1.7 28403320 2271604 ?    Ssl  08:00   0:11 /usr/bin/python3 "
    "/usr/local/bin/vllm serve /models/q --host 0.0.0.0\n"
    "root         212 96.4 18.9 61834112 24011340 ?   Rl   08:00   2:56 VLLM::EngineCore\n"
)


@pytest.mark.parametrize(("named", "watched"), [("wrapper", True), ("engine", False)])
def test_a_wrapper_scripts_log_named_beside_a_running_container_watches_the_containers_log(
    tmp_path: Path, named: str, watched: bool
) -> None:
    """`--log restart.log --container X`: the file is a restart script's two lines, the
    engine's own log is the container's: that one is watched for growth. Control: a named file
    that is the engine's own log is the one watched."""
    path = "/var/log/app/restart.log" if named == "wrapper" else "/var/log/app/engine.log"
    text = WRAPPER_LOG if named == "wrapper" else ENGINE_LOG
    card = IncidentCard.model_validate(
        {
            "id": "ctr", "title": "t", "source": "test", "engine": "vllm",
            "symptom": "the restart script gave up, did vLLM crash?",
            "invocation": {"container": "serving", "log": path},
            "host": {
                "ps": PS_HEADER, "dmesg": "", "files": {path: text},
                "containers": {"serving": {"inspect": INSPECT % "serving", "logs": ENGINE_LOG,
                                           "ps": SERVING_PS}},
            },
        }
    )  # fmt: skip
    events: list[Any] = []
    investigate(
        ContainerHost(ReplayHost(card), "serving"),
        card.symptom,
        settings=Settings(home=tmp_path / "h"),
        on_event=events.append,
        logs=[path],
    )
    calls = " ".join(str(e) for e in events)
    assert ("container_logs {'watch_s'" in calls) is watched, calls[-3000:]


def _tail(path: str, lines: list[str]) -> dict[str, Any]:
    return {"id": "o1", "tool": "log_tail", "ok": True, "args": {"path": path}, "lines": lines,
            "data": {}}  # fmt: skip


def test_a_rotation_is_offered_only_when_the_read_lacks_its_launchs_start() -> None:
    """server.log read with its banner holds the whole run: server.log.1 is an earlier run's
    (a model session saw it offered at the top value). Control: a read without a start (the
    run began before the rename) still asks for the rotation."""
    from agent.checks import rotated_log

    paths = ["/srv/app/server.log", "/srv/app/server.log.1"]
    start = "INFO 05-08 00:41:30 [api_server.py:1043] vLLM API server version 0.9.0"
    body = "INFO 05-08 00:42:00 [loggers.py:116] Engine 000: Avg prompt throughput: 1.0 tokens/s"
    assert rotated_log([_tail(paths[0], [start, body])], paths) is None  # type: ignore[list-item]
    assert rotated_log([_tail(paths[0], [body])], paths) == paths[1]  # type: ignore[list-item]


def test_an_openshift_pod_named_as_crashed_by_a_harness_log_is_read_with_oc(
    tmp_path: Path,
) -> None:
    """A deploy harness's log says "Crashed container in pod: X"; the bastion has `oc`, no
    kubectl: the pod's previous container is read with oc, in its namespace, and its argparse
    error is the cause. Control: without the harness's line, no pod is read."""
    pod = "vllm-standalone-5c7d9f8b6d-kq2wz"
    harness = (
        "02:14:06 - Waiting for pods to be Ready (timeout=900s)\n"
        f"02:14:19 - Crashed container in pod: {pod}\n"
        "02:14:19 - ERROR: standup failed (standalone)\n"
    )
    commands = {
        "oc get pods -A --no-headers": f"bench   {pod}   0/1   CrashLoopBackOff   6 (2m ago)   8m\n",
        f"oc -n bench logs --tail=200 --previous {pod}": (
            "usage: vllm [-h] [-v] {chat,complete,serve,bench,collect-env,run-batch} ...\n"
            "vllm: error: unrecognized arguments: --disable-log-requests\n"
        ),
    }
    for text, read in ((harness, True), (harness.replace("Crashed container in pod: ", ""), False)):
        card = _card({"/work/bench/logs/standup.log": text}, PS_IDLE, "", commands=commands)
        card.symptom = "the standalone pod crashes a few seconds after it starts, why?"
        r = investigate(
            ReplayHost(card), card.symptom, settings=Settings(home=tmp_path / str(read)),
            logs=["/work/bench/logs/standup.log"],
        )  # fmt: skip
        cited = [e.line for e in r.evidence]
        if read:
            assert r.root_cause == "bad_launch_argument", r.summary
            assert any("unrecognized arguments" in c for c in cited), cited
        else:
            assert not any("unrecognized arguments" in c for c in cited), cited


SHM_ERR = (
    "NCCL WARN Error while creating shared memory segment /dev/shm/nccl-4f2a (size 9637888)\n"
    "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)\n"
)
DF_HEAD = "Filesystem      Size  Used Avail Use% Mounted on\n"
SHM_ROW = "tmpfs            24G  1.2M   24G   1% /dev/shm\n"
SHM_FULL = "shm              64M   62M  2.0M  97% /dev/shm\n"
ROOT_ROW = "/dev/nvme0n1p2  3.7T  1.4T  2.2T  39% /\n"


@pytest.mark.parametrize(
    ("df", "log", "by"),
    [
        # only /dev/shm known, and not full: IPC memory, nothing said of the disks
        (DF_HEAD + SHM_ROW, SGLANG, None),
        # a disk's row says it
        (DF_HEAD + ROOT_ROW + SHM_ROW, SGLANG, " /"),
        # /dev/shm is the one that ran out: the shortfall is shm's, not a disk's
        (DF_HEAD + SHM_FULL, SHM_ERR, "/dev/shm"),
    ],
)
def test_disk_full_is_refuted_by_a_disks_row_or_by_dev_shm_only_when_that_ran_out(
    tmp_path: Path, df: str, log: str, by: str | None
) -> None:
    card = _card({"/srv/app/server.log": log}, PS_IDLE, "", commands={"df -hP": df})
    card.symptom = "It died: is the disk full?"
    r = _run(card, tmp_path)
    h = next(h for h in r.hypotheses if h.label == "disk_full")
    cited = [e.line for e in h.against]
    if by is None:
        assert not cited, cited
    else:
        assert cited and all(c.endswith(by) for c in cited), cited


def test_a_read_that_failed_is_not_offered_again_with_the_same_arguments() -> None:
    """A model session saw py_stacks and the GPU watch offered again after each had failed
    ("not recorded"). Control: a read that succeeded may be offered again (the GPU re-read)."""
    from agent import checks
    from tools import gpu_status

    res = gpu_status.Result(
        host="h", gpus=[gpu_status.Gpu(index=0, memory_used_mib=70000, memory_total_mib=81559)]
    )
    gpu = {"id": "o1", "tool": "gpu_status", "args": {}, "lines": res.lines(),
           "data": res.model_dump(mode="json")}  # fmt: skip
    board: dict[str, Any] = {
        "stale_gpu_process": {"label": "stale_gpu_process", "status": "open", "score": 1.0}
    }
    ok = checks.options([{**gpu, "ok": True}], board, [])  # type: ignore[list-item]
    assert any(o.id == "gpu_recheck" for o in ok), [o.id for o in ok]
    failed = {**gpu, "ok": False, "data": {}, "lines": ["# not recorded"]}
    ok_then_failed = checks.options([{**gpu, "ok": True}, {**failed, "id": "o2"}], board, [])  # type: ignore[list-item]
    assert not any(o.id == "gpu_recheck" for o in ok_then_failed), [o.id for o in ok_then_failed]


def test_a_read_already_taken_is_offered_again_only_by_a_check_that_re_reads_on_purpose() -> None:
    """A model session saw reads it had just taken (py_stacks of the same pid, the packages
    probe) offered again at the top value; the GPU re-read is the one check whose point is the
    same read again (test above)."""
    from agent import checks

    board: dict[str, Any] = {
        "dependency_error": {"label": "dependency_error", "status": "open", "score": 1.0}
    }
    assert any(o.id == "versions" for o in checks.options([], board, []))
    probe = {"id": "o1", "tool": "packages", "args": {}, "ok": True, "lines": ["# torch 2.6"],
             "data": {}}  # fmt: skip
    assert not any(o.id == "versions" for o in checks.options([probe], board, []))  # type: ignore[list-item]
    recheck = next(c for c in checks.catalogue() if c["id"] == "gpu_recheck")
    assert recheck.get("repeat") is True


WARMUP = "[04/17/2026-22:44:12] [TRT-LLM] [I] [_torch  ] [RANK {r}] Run warmup with {n} tokens, include 0 generation tokens"
CAUGHT_OOM = (
    "[04/17/2026-22:44:14] [TRT-LLM] [W] [_torch  ] [RANK 0] Warmup with 32784 tokens failed with "
    "CUDA OOM, skipping it: CUDA out of memory. Tried to allocate 9.38 GiB. GPU 0 has a total "
    "capacity of 179.06 GiB of which 5.97 GiB is free."
)


def test_an_oom_line_that_names_its_phase_keeps_its_own_weight(tmp_path: Path) -> None:
    """ "Warmup ... CUDA out of memory" is both the OOM and its phase: the phase finding must not
    stand in for the OOM's own (deduplicated by line, it had taken the OOM's place at 1.0)."""
    log = "\n".join([*(WARMUP.format(r=r, n=32784) for r in range(2)), CAUGHT_OOM]) + "\n"
    r = _run(_card({"/srv/ctx.log": log}, PS_IDLE, ""), tmp_path)
    h = next(h for h in r.hypotheses if h.label == "cuda_oom_runtime")
    assert h.score >= 3.0, h
