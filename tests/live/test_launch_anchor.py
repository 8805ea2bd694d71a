"""The launch, not the box (issue 20), live over the real test sshd beside unrelated jobs: the
operator's --log may be a file the server no longer writes, and the port is the launch's own.

Each test fails with its change off: without the rotation check the fresh `server.log` (two
probe lines) is all Pivot reads; without the launch's own port the holder named is whatever
process on the box has a `--port` first."""

from __future__ import annotations

import json
import pwd
import subprocess
import time
from pathlib import Path

import pytest

from tests.live import staging as S

# `scene`: the verdict tests' busy box (the staged server beside unrelated jobs), shared
from tests.live.test_verdicts_live import Scene, assert_concluded, scene  # noqa: F401

PROBES = (
    '[2025-06-01 11:43:00] INFO:     127.0.0.1:50312 - "GET /health HTTP/1.1" 503 Service Unavailable\n'
    '[2025-06-01 11:43:05] INFO:     127.0.0.1:50318 - "GET /health HTTP/1.1" 503 Service Unavailable\n'
)


def _rotate(log: Path, scene: Scene) -> None:  # noqa: F811
    """logrotate's copy-less rename: the writer keeps its descriptor on the renamed file."""
    log.rename(log.with_name(log.name + ".1"))
    log.write_text(PROBES)
    log.chmod(0o644)
    scene.stage.chown(log)


@pytest.mark.parametrize("alive", [False, True], ids=["server-dead", "server-alive"])
def test_a_rotated_log_is_followed_to_the_file_the_server_wrote(scene: Scene, alive: bool) -> None:  # noqa: F811
    log = scene.stage.logs / "server.log"
    script = [["out", S.startup()], ["out", S.LOADED.lstrip("\n")], ["sleep", 2.0]]
    script += [["out", S.OOM_BLOCK]]
    if not alive:
        script.append(["exit", 1])
    proc = scene.stage.start_server(script, log, S.SERVER_ARGS)
    time.sleep(0.8)  # the launch is under way, then the log is rotated under it
    _rotate(log, scene)
    S.wait_for(lambda: S.OOM_FATAL.encode() in log.with_name("server.log.1").read_bytes(), 15)
    if not alive:
        assert proc.wait(timeout=15) == 1

    v = scene.investigate([log], "the server died during start-up, why?")

    assert_concluded(v, "cuda_oom_runtime", "gpu_oom_weights")
    cited = [e["line"] for e in v.report["evidence"]]
    assert S.OOM_FATAL in cited, cited
    assert not any("GET /health" in c for c in cited), cited
    if alive:
        assert "server.log.1" in v.report["next_step"], v.report["next_step"]
    scene.assert_bystanders_untouched(v)


# -- the operator's --log is a neighbour's (gpu_live.sh s13, here over the test sshd) ----------
SFT = "/data/ft/sft-0426"
SFT_FATAL = (
    f"OSError: {SFT} does not appear to have a file named config.json. Checkout "
    f"'https://huggingface.co/{SFT}/None' for available files."
)
SFT_LINES = f"""\
INFO 04-26 10:14:33 api_server.py:150] args: Namespace(host=None, port=8005, model='{SFT}', tensor_parallel_size=1)
Traceback (most recent call last):
  File "/usr/local/lib/python3.12/dist-packages/transformers/utils/hub.py", line 470, in cached_files
    raise OSError(
{SFT_FATAL}
"""


def test_a_neighbours_log_given_as_the_launchs_is_set_aside(scene: Scene) -> None:  # noqa: F811
    """The operator passes the log of the other user's server (alive, serving its own port) and
    says the launch was on 8005; that launch wrote run/nohup.out and died. Its own error is the
    verdict, the neighbour's log is named as not its log, and none of its lines is cited."""
    scene.stage.duplicate_each_launch = False
    theirs = scene.stage.root / "other" / "vllm-neighbour.log"
    S.wait_for(lambda: b"Uvicorn running" in theirs.read_bytes(), 10, "the neighbour's start")
    run = scene.stage.root / "run"
    run.mkdir(mode=0o755)
    scene.stage.chown(run)
    args = ["--model-path", SFT, "--port", "8005"]
    proc = scene.stage.start_server([["out", SFT_LINES], ["exit", 1]], run / "nohup.out", args)
    assert proc.wait(timeout=20) == 1

    v = scene.investigate(
        [theirs],
        "I started our SFT model with vLLM on port 8005 an hour ago but nothing answers on "
        "8005. The log looks normal. Why?",
    )

    assert_concluded(v, "model_load_error")
    cited = [e["line"] for e in v.report["evidence"]]
    assert SFT_FATAL in cited, cited
    assert not any("Avg prompt throughput" in c or "Uvicorn" in c for c in cited), cited
    step = v.report["next_step"]
    assert f"{theirs} serves port" in step and str(run / "nohup.out") in step, step
    scene.assert_bystanders_untouched(v)


# -- an env file whose device list expands to nothing (gpu_live.sh s12, over the test sshd) ------
NO_GPU = "RuntimeError: No CUDA GPUs are available"
NO_GPU_LINES = f"""\
INFO 12-02 02:47:32 [api_server.py:1044] args: Namespace(subparser='serve', model_tag='/models/qwen', port=30000, tensor_parallel_size=1)
Traceback (most recent call last):
  File "/srv/s12/serve.py", line 3, in <module>
    torch.zeros(1, device="cuda")
  File "/usr/local/lib/python3.12/dist-packages/torch/cuda/__init__.py", line 478, in _lazy_init
    torch._C._cuda_init()
{NO_GPU}
"""


def test_an_env_files_empty_device_list_is_read_and_shown(scene: Scene) -> None:  # noqa: F811
    """start.sh sources gpu.env, whose CUDA_VISIBLE_DEVICES=${GPU_IDS} expands to nothing
    (GPU_IDS unset); the server then finds no GPU. Given --config start.sh, the env file is
    opened and its line is the cause shown."""
    srv = scene.stage.root / "srv"
    env = scene.stage.file(
        "srv/gpu.env",
        b"# which GPUs this box gives us (set GPU_IDS before starting)\n"
        b"CUDA_VISIBLE_DEVICES=${GPU_IDS}\nVLLM_LOGGING_LEVEL=INFO\n",
    )
    start = scene.stage.file(
        "srv/start.sh",
        (
            "#!/bin/bash\n"
            'cd "$(dirname "$0")"\n'
            "set -a\nsource ./gpu.env\nset +a\n"
            f"exec {S.PY} -m sglang.launch_server --model-path /models/qwen --port 30000\n"
        ).encode(),
        mode=0o755,
    )
    log = scene.stage.logs / "server.log"
    uid, gid = pwd.getpwnam(scene.stage.user)[2:4]
    with log.open("ab") as fh:
        rc = subprocess.run(
            ["bash", str(start)],
            env=scene.stage.env(
                FAKE_SERVER_SCRIPT=json.dumps([["out", NO_GPU_LINES], ["exit", 1]])
            ),
            stdout=fh,
            stderr=subprocess.STDOUT,
            user=uid,
            group=gid,
            timeout=20,
        ).returncode
    log.chmod(0o644)
    assert rc == 1 and srv.is_dir()

    v = scene.investigate(
        [log], "my launch via start.sh dies right away, why?", "--config", str(start)
    )

    assert_concluded(v, "bad_launch_argument")
    cited = [e["line"] for e in v.report["evidence"]]
    assert "CUDA_VISIBLE_DEVICES=${GPU_IDS}" in cited and NO_GPU in cited, cited
    assert str(env) in v.report["next_step"], v.report["next_step"]
    assert str(env) in v.report["launch"]["configs"], v.report["launch"]
    scene.assert_bystanders_untouched(v)


# -- yesterday's rotated log beside today's launch (blind round 26) ---------------------------
def test_yesterdays_rotated_failure_is_not_todays_launch(scene: Scene) -> None:  # noqa: F811
    """server.log.1 ended yesterday on a CUDA OOM; today's server.log starts a launch of its own
    that is loading its shards, alive. Yesterday's error says nothing about today's launch: the
    verdict is that it is still starting, no line of server.log.1 is cited, and the note says the
    rotation is an earlier run's."""
    log = scene.stage.logs / "server.log"
    old = log.with_name("server.log.1")
    yesterday = S.startup().replace("2025-06-01", "2025-05-31") + S.OOM_BLOCK.replace(
        "2025-06-01", "2025-05-31"
    )
    old.write_text(yesterday)
    old.chmod(0o644)
    scene.stage.chown(old)
    script = [["out", S.startup(import_warning=False)], ["loop", S.SHARD_BAR, 0.5, 400]]
    scene.stage.start_server(script, log, S.SERVER_ARGS)
    S.wait_for(lambda: b"| 3/400" in log.read_bytes(), 10, "three shards")

    v = scene.investigate([log, old], "the server is stuck loading again like yesterday, why?")

    assert_concluded(v, "still_starting")
    old_lines = set(yesterday.splitlines())
    cited = [e["line"] for e in v.report["evidence"]]
    assert not any(c in old_lines for c in cited), cited
    assert "earlier run" in v.report["next_step"], v.report["next_step"]
    scene.assert_bystanders_untouched(v)


# -- Ray Serve's proxy is up, its replica never placed (round 27, live) ------------------------
RAY_PROXY = (
    "2024-03-24 03:17:24,893\tINFO worker.py:1715 -- Connected to Ray cluster. View the dashboard "
    "at 127.0.0.1:8265\n"
    "(ProxyActor pid=1631) INFO 2024-03-24 03:17:27,349 proxy 172.17.0.2 proxy.py:1357 - Starting "
    "HTTP server on node: 4a3b8b62 listening on port 8000\n"
    "(ProxyActor pid=1631) INFO:     Started server process [1631]\n"
)
RAY_WAIT = (
    '(ServeController pid=1684) {{"levelname": "WARNING", "message": "deployment_state.py:2152 - '
    "Deployment 'VLLMDeployment:amazon--LightGPT' in application 'ray-llm' 1 replicas that have "
    "taken more than 30s to be scheduled. This may be due to waiting for the cluster to auto-scale "
    "or for a runtime environment to be installed. Resources required for each replica: "
    '[{{\\"CPU\\": 1.0, \\"accelerator_type_a10\\": 0.01, \\"GPU\\": 0.1}}], total resources '
    'available: {{}}. ({i})"}}\n'
)


def test_a_serve_proxy_up_beside_a_replica_never_placed_is_no_healthy_server(
    scene: Scene,  # noqa: F811
) -> None:
    """A Ray Serve launch whose proxy's uvicorn is up while the controller says, again and again,
    that the model's replica cannot be placed: not healthy (the proxy's ready line is not the
    model's), not still starting (a log that grows only by the wait notice is no progress), the
    unschedulable replica, citing the controller's line; the busy box's jobs untouched."""
    log = scene.stage.logs / "serve-run.log"
    scene.stage.start_server([["out", RAY_PROXY], ["loop", RAY_WAIT, 0.5, 2000]], log)
    S.wait_for(lambda: b"(3)" in log.read_bytes(), 15, "three wait notices")

    v = scene.investigate([log], "stuck at the replica step for 8 minutes: still downloading?")

    assert_concluded(v, "bad_launch_argument")
    cited = [e["line"] for e in v.report["evidence"]]
    assert any("to be scheduled" in c for c in cited), cited
    assert not any("Started server process" in c for c in cited), cited
    scene.assert_bystanders_untouched(v)


# -- yesterday's unknown error in server.log.1 beside a server serving today (round 28, live) ---
YESTERDAYS_UNKNOWN = """\
[2025-05-31 18:04:27 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py", line 2871, in run_scheduler_process
    scheduler = Scheduler(
ValueError: Frobnicator refused the widget count for this checkpoint.
"""
TODAY_SERVING = (
    "[2025-06-01 10:00:20] INFO:     Application startup complete.\n"
    "[2025-06-01 10:00:20] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)\n"
    "[2025-06-01 10:00:21] The server is fired up and ready to roll!\n"
    '[2025-06-01 10:00:30] INFO:     127.0.0.1:51102 - "POST /generate HTTP/1.1" 200 OK\n'
)


def test_yesterdays_unknown_error_in_a_rotation_is_not_held_against_a_serving_launch(
    scene: Scene,  # noqa: F811
) -> None:
    """server.log.1 ended yesterday on an error no signature knows; today's server.log starts
    a launch of its own that came up, listens on its port and served a request. Yesterday's
    words are no fatal line of this launch (they pointed the rulebook at a label before) and no
    error the proof holds against "healthy": healthy, citing the line that says where it
    listens, none of server.log.1."""
    log = scene.stage.logs / "server.log"
    old = log.with_name("server.log.1")
    yesterday = S.startup(import_warning=False).replace("2025-06-01", "2025-05-31") + (
        YESTERDAYS_UNKNOWN
    )
    old.write_text(yesterday)
    old.chmod(0o644)
    scene.stage.chown(old)
    script = [
        ["out", S.startup(import_warning=False) + S.LOADED],
        ["bind", S.PORT],
        ["out", TODAY_SERVING],
    ]
    scene.stage.start_server(script, log, S.SERVER_ARGS)
    S.wait_for(lambda: b"POST /generate" in log.read_bytes(), 10, "a served request")

    v = scene.investigate([log, old], "it crashed yesterday with some ValueError, is it ok now?")

    assert v.report["status"] == "healthy", v.report["summary"]
    cited = [e["line"] for e in v.report["evidence"]]
    assert not any(c in set(yesterday.splitlines()) for c in cited), cited
    assert any("Uvicorn running on http://0.0.0.0:30000" in c for c in cited), cited
    scene.assert_bystanders_untouched(v)


def test_a_harness_log_that_names_the_servers_log_is_followed(scene: Scene) -> None:  # noqa: F811
    """The operator names a test harness's log (it launched the server, polled /health and gave
    up with its own TimeoutError); the server wrote its own log, named in the harness's line,
    and died there of a CUDA OOM. That log is read and its error is the verdict, not the
    harness's timeout (before: the harness log alone, "ends without an error of its own")."""
    log = scene.stage.logs / "sglang-smoke.log"
    proc = scene.stage.start_server(
        [["out", S.startup()], ["out", S.OOM_BLOCK], ["exit", 1]], log, S.SERVER_ARGS
    )
    assert proc.wait(timeout=15) == 1
    harness = scene.stage.logs / "ladder.log"
    harness.write_text(
        "2025-06-01 11:40:00 [ladder] run smoke: model=Qwen/Qwen2.5-1.5B-Instruct\n"
        f"2025-06-01 11:40:00 [ladder] launched server pid={proc.pid}, log={log}\n"
        "2025-06-01 11:55:00 [ladder] FAIL smoke: TimeoutError: server did not become healthy "
        "at http://127.0.0.1:30000/health within 900s\n"
    )
    harness.chmod(0o644)
    scene.stage.chown(harness)

    v = scene.investigate([harness], "the smoke ladder keeps timing out, why?")

    assert_concluded(v, "cuda_oom_runtime", "gpu_oom_weights")
    cited = [e["line"] for e in v.report["evidence"]]
    assert S.OOM_FATAL in cited, cited
    scene.assert_bystanders_untouched(v)
