"""Rules and knowledge after blind round 39 (scored before any change), each with a control
that must not trigger it: a fix is a general form or fact, never an answer keyed to one card."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent import script_cmd
from agent.facts import Facts, GpuFact
from agent.rules import causes, proof
from agent.rules.hang import gpus_here_cover
from agent.runner import investigate
from agent.settings import Settings
from agent.signatures import load_signatures, scan
from cards.model import IncidentCard
from cards.replay import ReplayHost
from tests.agent.test_rules import GPU_CLEAN, PS_HEADER
from tools import download_progress
from tools.download_progress import parse_du


def _labels(line: str) -> dict[str, str]:
    return {m.signature: m.label or "" for m in scan([line], load_signatures())}


# -- the launch's own readiness deadline is a setting, not a supervisor ----------------------------
def test_vllms_engine_ready_deadline_is_its_own_setting_not_a_supervisors() -> None:
    """vLLM's API servers give up after VLLM_ENGINE_READY_TIMEOUT_S waiting for the engine's
    first message; "Timed out waiting for engines" had matched the supervisor-readiness pattern
    ("timed out waiting for the engine"), so a cold first load from NFS read as killed from
    outside. Control: a launcher's own readiness deadline stays the supervisor's."""
    vllm = _labels(
        "(ApiServer_5 pid=463645) TimeoutError: Timed out waiting for engines to send initial "
        "message on input socket."
    )
    assert vllm.get("vllm-engine-ready-timeout") == "bad_launch_argument", vllm
    assert "supervisor-readiness-timeout" not in vllm, vllm
    wrapper = _labels("TimeoutError: SGLang server not ready within 300 seconds")
    assert wrapper.get("supervisor-readiness-timeout") == "killed_externally", wrapper


@pytest.mark.parametrize(
    ("line", "compiler"),
    [
        ("FileNotFoundError: [Errno 2] No such file or directory: 'nvcc'", True),
        (
            "FileNotFoundError: [Errno 2] No such file or directory: '/usr/local/cuda/bin/nvcc'",
            True,
        ),
        ("FileNotFoundError: [Errno 2] No such file or directory: 'ninja'", True),
        # controls: a missing model file or config is not a missing compiler
        ("FileNotFoundError: [Errno 2] No such file or directory: '/models/q/config.json'", False),
        ("FileNotFoundError: [Errno 2] No such file or directory: 'nvcc_wrapper.log'", False),
    ],
)
def test_a_jit_build_that_cannot_exec_its_compiler_is_a_dependency(
    line: str, compiler: bool
) -> None:
    """FlashInfer's sampler JIT on a cuda:*-runtime image: Python's subprocess says the compiler
    is missing the way the shell's "nvcc: not found" does."""
    got = _labels(line)
    assert (got.get("shell-jit-compiler-not-found") == "dependency_error") is compiler, got


def test_an_orderly_asgi_shutdown_is_a_stop_from_outside() -> None:
    got = _labels(
        "(APIServer pid=1) INFO 05-14 08:04:31 [launcher.py:101] Shutting down FastAPI HTTP server."
    )
    assert got.get("asgi-orderly-shutdown") == "killed_externally", got
    # control: the start-up line of the same server is no end
    assert "asgi-orderly-shutdown" not in _labels(
        "(APIServer pid=1) INFO:     Waiting for application startup."
    )


# -- the launch script's command -----------------------------------------------------------------
SCRIPT = [
    "#!/usr/bin/env bash",
    "set -euo pipefail",
    "export HF_HOME=/srv/ft/hf",
    "source /srv/ft/.venv/bin/activate",
    "exec ft serve --model org/big-model --tp 8 --port 8000 \\",
    "  >> /srv/ft/logs/serve.log 2>&1",
]


def test_the_command_a_launch_script_runs_is_read_and_matched() -> None:
    cmds = script_cmd.commands(SCRIPT)
    assert cmds == [["ft", "serve", "--model", "org/big-model", "--tp", "8", "--port", "8000"]]
    ps = "/srv/ft/.venv/bin/python /srv/ft/.venv/bin/ft serve --model org/big-model --tp 8 --port 8000"
    assert script_cmd.runs(cmds[0], ps)
    # controls: the same program serving another model, and a program that merely names it
    assert not script_cmd.runs(cmds[0], "/srv/ft/.venv/bin/ft serve --model org/other --tp 8")
    assert not script_cmd.runs(cmds[0], "vim /srv/ft/bin/ft.serve --model org/big-model")
    assert script_cmd.commands(["source x", "export A=1", "cd /srv", "echo hi there you"]) == []


def _card(files: dict[str, Any], ps: str, gpu: str, **host: Any) -> IncidentCard:
    return IncidentCard.model_validate(
        {
            "id": "made-up",
            "title": "t",
            "source": "test",
            "engine": "other",
            "symptom": "The log stopped and /health says loading. Hung?",
            "host": {"ps": ps, "nvidia_smi": gpu, "files": files, **host},
        }
    )


LOG = (
    "[2026-08-27 09:41:12] INFO  ft 0.6.2 starting: model=org/big-model tp=8 port=8000\n"
    "[2026-08-27 09:41:18] INFO  scheduler_0: preparing checkpoint org/big-model\n"
)


@pytest.mark.parametrize("model", ["org/big-model", "org/other-model"])
def test_an_engine_no_pattern_knows_is_alive_when_it_runs_the_scripts_command(
    tmp_path: Path, model: str
) -> None:
    """A server no engine pattern knows (an in-house `ft serve`) was called gone while it ran:
    the script the operator named says what it runs. Control: the same program serving another
    model is another launch, so this one's absence is not refuted."""
    ps = PS_HEADER + (
        "ftsvc      48211  0.4  0.3 9821444 1712320 ?     Sl   09:41   0:06 "
        f"/srv/ft/.venv/bin/python /srv/ft/.venv/bin/ft serve --model {model} --tp 8 --port 8000\n"
    )
    card = _card(
        {"/srv/ft/launch.sh": "\n".join(SCRIPT) + "\n", "/srv/ft/logs/serve.log": LOG},
        ps,
        GPU_CLEAN,
    )
    r = investigate(
        ReplayHost(card),
        card.symptom,
        settings=Settings(home=tmp_path / "h"),
        logs=["/srv/ft/logs/serve.log"],
        configs=["/srv/ft/launch.sh"],
    )
    assert r.root_cause != "killed_externally", r.summary
    alive = model == "org/big-model"
    assert ("killed_externally" in r.ruled_out) is alive, (r.ruled_out, r.hypotheses)


def _commands_card(commands: dict[str, Any]) -> IncidentCard:
    """A card whose host holds only these command outputs."""
    return IncidentCard.model_validate(
        {
            "id": "made-up",
            "title": "t",
            "source": "test",
            "engine": "vllm",
            "symptom": "s",
            "host": {"commands": commands},
        }
    )


# -- download progress seen by du when the listing does not move ---------------------------------
def test_du_parses_kib_and_human_units() -> None:
    assert parse_du("105906176\t/srv/hf/hub/models--o--m\n") == 105906176 * 1024
    assert parse_du("101G\t/srv/hf/hub/models--o--m\n") == 101 * 2**30
    assert parse_du("du: cannot access 'x': No such file or directory\n") is None


@pytest.mark.parametrize("grows", [True, False])
def test_a_hub_cache_that_grows_is_a_download_even_when_its_listing_looks_still(
    grows: bool,
) -> None:
    """The listing read at 0 s and again within the window may look the same (a card's snapshots,
    a blob written under a temporary name), while du of the model's directory grows. Control:
    neither grows: stalled."""
    blobs = "/srv/hf/hub/models--org--m/blobs/"
    ls = (
        "-rw-r--r-- 1 u u 3998803560 Aug 27 10:03 aaa\n"
        "-rw-r--r-- 1 u u 1412431872 Aug 27 10:06 bbb.incomplete\n"
    )
    card = _commands_card(
        {
            f"ls -l {blobs}": ls,
            "du -sk /srv/hf/hub/models--org--m": [
                {"at": 0, "text": "105906176\t/srv/hf/hub/models--org--m\n"},
                {
                    "at": 20,
                    "text": ("114294784" if grows else "105906176")
                    + "\t/srv/hf/hub/models--org--m\n",
                },
            ],
        }
    )
    res = download_progress.run(
        ReplayHost(card), download_progress.Args(model="org/m", caches=["/srv/hf/hub"])
    )
    assert res.downloading is grows, res.lines()
    assert res.cache_grew is grows
    if grows:
        assert res.growing_line.startswith("114294784"), res.growing_line


# -- the replay answers the question asked --------------------------------------------------------
def test_a_replayed_listener_query_is_not_answered_with_established_connections() -> None:
    card = _commands_card(
        {"ss -tnp state established '( dport = :443 )'": "Recv-Q Send-Q Local Address:Port\n"}
    )
    assert ReplayHost(card).run("ss -ltnp").rc is None  # not recorded: unknown, not "no listeners"
    # control: a recorded listener query answers a listener query
    card.host.commands["ss -ltnp 'sport = :5000'"] = "LISTEN 0 2048 0.0.0.0:5000 0.0.0.0:*\n"
    assert "LISTEN" in ReplayHost(card).run("ss -ltnp").stdout


# -- multi-node rendezvous -----------------------------------------------------------------------
def _obs(lines: list[str]) -> list[dict[str, Any]]:
    return [
        {"id": "o11", "tool": "config_read", "ok": True, "args": {}, "lines": lines, "data": {}}
    ]


NODE = (
    "python -m sglang.launch_server --model-path /m --tp 8 --dist-init-addr {a}:5000 "
    "--nnodes 2 --node-rank {r}"
)


def test_nodes_of_one_job_told_different_rendezvous_addresses() -> None:
    hit = causes.rendezvous_disagree(
        _obs([NODE.format(a="10.68.27.12", r=0), NODE.format(a="10.0.1.104", r=1)])  # type: ignore[arg-type]
    )
    assert hit is not None and {hit[3], hit[4]} == {"10.68.27.12:5000", "10.0.1.104:5000"}
    # controls: both nodes meet at rank 0's address; two single-node launches on other hosts
    same = [NODE.format(a="10.68.27.12", r=0), NODE.format(a="10.68.27.12", r=1)]
    assert causes.rendezvous_disagree(_obs(same)) is None  # type: ignore[arg-type]
    single = ["MASTER_ADDR=10.0.0.1 python train.py", "MASTER_ADDR=10.0.0.2 python train.py"]
    assert causes.rendezvous_disagree(_obs(single)) is None  # type: ignore[arg-type]


# -- a pod the kubelet evicted -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("line", "pod"),
    [
        (
            "2026-06-30T14:21:37Z  launcher-06-30-k7m2d phase=Failed reason=Evicted",
            "launcher-06-30-k7m2d",
        ),
        (
            "launcher-06-30-k7m2d       0/1     Evicted   0          19m   <none>",
            "launcher-06-30-k7m2d",
        ),
        ("vllm-0   0/1     OOMKilled   3          9m", "vllm-0"),
        # controls: a finished job's pod, a running one
        ("job-7f2c phase=Succeeded reason=Completed", None),
        ("vllm-0   1/1     Running   0          9m", None),
    ],
)
def test_a_pod_the_kubelet_ended_is_one_to_read(line: str, pod: str | None) -> None:
    assert proof.crashed_pod(line) == pod


# -- a placement group waiting for GPUs the host has ---------------------------------------------
WAIT = (
    "(EngineCore_DP0 pid=42066) INFO 05-12 14:08:27 [ray_utils.py:464] Waiting for creating a "
    "placement group of specs for 310 seconds. specs=[{'node:10.0.0.5': 0.001, 'GPU': 1.0}, "
    "{'GPU': 1.0}]."
)


@pytest.mark.parametrize(("gpus", "covered"), [(2, True), (1, False), (0, False)])
def test_a_wait_for_gpus_this_host_has_is_not_a_layout_asking_for_too_many(
    gpus: int, covered: bool
) -> None:
    """Ray registered no GPU on a two-GPU box (its accelerator detection took the box for a TPU
    host): the wait for two GPUs had proven "the layout asks for more GPUs than exist". Controls:
    a host with fewer GPUs than the bundles ask for is the layout's shortfall."""
    facts = Facts(
        gpus=[GpuFact(index=i, line=f"{i}, NVIDIA GeForce RTX 5090") for i in range(gpus)]
    )
    assert gpus_here_cover(facts, WAIT) is covered


# -- unified memory: a holder nvidia-smi cannot meter --------------------------------------------
FREE_LINE = (
    "(EngineCore_DP0 pid=97) ERROR 03-05 10:22:00 [core.py:866] ValueError: Free memory on "
    "device cuda:0 (96.84/121.69 GiB) on startup is less than desired GPU memory utilization "
    "(0.9, 109.52 GiB). Decrease GPU memory utilization or reduce GPU memory used by other "
    "processes."
)
OOM_LINE = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."


@pytest.mark.parametrize(
    ("line", "server", "possible"),
    [
        (FREE_LINE, [], True),  # the engine says the memory was taken before it started
        (OOM_LINE, [], False),  # control: an OOM of its own says nothing of who else holds it
        (FREE_LINE, [219877], False),  # control: the unmetered process is the launch itself
    ],
)
def test_a_compute_process_on_unified_memory_holds_what_nvidia_smi_cannot_meter(
    line: str, server: list[int], possible: bool
) -> None:
    """On a GB10 nvidia-smi prints [N/A] for the GPU's memory and every process's: Ollama's
    runner listed as a compute process counted as holding 0 MiB, so vLLM's "free memory on
    device ... is less than desired" could not be tied to a holder."""
    from agent.rules.memory import stale_gpu_possible

    facts = Facts(
        gpu_available=True,
        gpu_pids={219877: 0.0},
        gpu_pids_unmetered=[219877],
        ps_available=True,
        server_pids=server,
    )
    o = {"id": "o9", "tool": "log_tail", "ok": True, "args": {}, "data": {}, "lines": [line]}
    hits = [(o, m) for m in scan([line], load_signatures())]
    assert stale_gpu_possible(facts, hits) is possible  # type: ignore[arg-type]
