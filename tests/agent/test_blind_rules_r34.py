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
