"""The launch under investigation (agent/launch.py): named from its own reads, with every other
process on the box set aside as a bystander that no conclusion may rest on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent.facts import derive
from agent.launch import bystander_line, sourced_files
from agent.rules.guardrails import check_conclusion
from agent.runner import investigate
from agent.settings import Settings
from cards.model import Invocation, load_card
from cards.replay import ReplayHost

DATA = Path(__file__).resolve().parents[1] / "data" / "launch"
BLIND = Path(__file__).resolve().parents[2] / "evals" / "blind"


def _run(card: Any, tmp_path: Path, **kw: Any) -> Any:
    return investigate(ReplayHost(card), card.symptom, settings=Settings(home=tmp_path / "h"), **kw)


def _env_card(defined: bool) -> Any:
    card = load_card(DATA / "envfile-unset-gpu-ids.yaml")
    if defined:  # control: the variable is set in the same file, so the list is not empty
        files = dict(card.host.files)
        files["/opt/llm/gpu.env"] = "GPU_IDS=0,1\n" + files["/opt/llm/gpu.env"]
        card = card.model_copy(update={"host": card.host.model_copy(update={"files": files})})
    return card


def test_sourced_files_are_read_and_an_unset_device_list_is_named(tmp_path: Path) -> None:
    r = _run(_env_card(False), tmp_path, configs=["/opt/llm/start.sh"])
    assert r.root_cause == "bad_launch_argument"
    assert any(e.line == "CUDA_VISIBLE_DEVICES=${GPU_IDS}" for e in r.evidence), r.evidence
    assert "GPU_IDS" in r.next_step and "/opt/llm/gpu.env" in r.next_step
    assert r.launch and "/opt/llm/gpu.env" in r.launch["configs"]
    assert r.launch["anchor"].startswith("--config")


def test_control_a_defined_variable_is_not_blamed(tmp_path: Path) -> None:
    r = _run(_env_card(True), tmp_path, configs=["/opt/llm/start.sh"])
    assert not any(e.line == "CUDA_VISIBLE_DEVICES=${GPU_IDS}" for e in r.evidence)
    assert "is set nowhere" not in r.next_step


def test_sourced_file_forms() -> None:
    script = (
        "source ./gpu.env\n. /etc/llm/common.sh\ndocker run --env-file=/srv/vllm.env img\n"
        "EnvironmentFile=-/etc/default/vllm\nsource $HOME/x.env\n"
    )
    assert sourced_files(script, "/opt/llm") == [
        "/opt/llm/gpu.env",
        "/etc/llm/common.sh",
        "/srv/vllm.env",
        "/etc/default/vllm",
    ]


def test_login_lines_are_bystanders() -> None:
    assert bystander_line("Dec  1 10:00:01 box sshd[812]: Accepted publickey for bob from 10.0.0.9")
    assert not bystander_line("ERROR 07-15 08:41:44 [core.py:396] EngineCore failed to start.")
    # sshd's own stderr (the test sshd's -e log, a container's sshd): no syslog prefix
    assert bystander_line(
        "Accepted publickey for alice from 127.0.0.1 port 50312 ssh2: ED25519 SHA256:Qm3yRr2t"
    )
    assert bystander_line("Received disconnect from 127.0.0.1 port 50312:11: disconnected by user")
    assert not bystander_line("ERROR: Connection closed by peer [10.0.0.2]:29500")


def test_another_instance_of_the_launch_holds_the_memory_not_other_users_jobs(
    tmp_path: Path,
) -> None:
    card = load_card(BLIND / "round18" / "r18b-gpustack-orphan-vllm-duplicate.yaml")
    r = _run(card, tmp_path)
    assert r.root_cause == "stale_gpu_process"
    cited = " ".join(e.line for e in r.evidence)
    assert "848885" in cited and "3318802" not in cited  # liwei's LoRA job is a bystander
    assert r.launch and r.launch["duplicates"] == [848885]
    assert "this launch's own model" in r.next_step


def test_control_another_model_is_no_duplicate(tmp_path: Path) -> None:
    card = load_card(BLIND / "round18" / "r18b-gpustack-orphan-vllm-duplicate.yaml")
    ps = card.host.ps.replace("OpenGVLab/InternVL3-78B --trust", "OpenGVLab/InternVL2-8B --trust")
    card = card.model_copy(update={"host": card.host.model_copy(update={"ps": ps})})
    host = ReplayHost(card)
    r = investigate(host, card.symptom, settings=Settings(home=tmp_path / "h"))
    assert r.launch and r.launch["duplicates"] == []


def test_a_conclusion_on_bystanders_lines_alone_is_refused() -> None:
    from tests.agent.test_bystanders import LOG, OLD_KILL

    obs = [
        {
            "id": "o1",
            "tool": "log_tail",
            "ok": True,
            "args": {"path": "/l"},
            "lines": LOG.splitlines(),
            "data": {},
            "round": 0,
        },
        {
            "id": "o2",
            "tool": "dmesg",
            "ok": True,
            "args": {},
            "lines": OLD_KILL.splitlines(),
            "data": {},
            "round": 0,
        },
    ]
    from agent import kills

    facts = derive([])
    facts.dmesg_available = True
    facts.bystander_kills = kills.bystander_kills(obs)  # type: ignore[arg-type]
    assert OLD_KILL.strip() in facts.bystander_kills
    action = {
        "kind": "conclude",
        "label": "host_oom_killed",
        "confidence": 0.9,
        "evidence": [{"observation": "o2", "line": OLD_KILL.strip()}],
    }
    problems = check_conclusion(action, obs, facts)  # type: ignore[arg-type]
    assert any("bystanders" in p for p in problems), problems


def test_stacks_that_could_not_be_read_are_named_with_their_fix() -> None:
    from agent.nodes import _stacks_fix, unknowns

    obs = [
        {
            "id": "o9",
            "tool": "py_stacks",
            "ok": True,
            "args": {"pid": 4242},
            "lines": ["# pid 4242: State S (sleeping)"],
            "data": {
                "pid": 4242,
                "method": "proc",
                "py_spy_missing": True,
                "py_spy_error": "py-spy is not installed on gpu-box",
                "fix": "install py-spy on the host (pip install py-spy), then py-spy dump --pid 4242",
            },
            "round": 1,
        }
    ]
    said = " ".join(unknowns(obs))  # type: ignore[arg-type]
    assert "py-spy is not installed on gpu-box" in said and "pip install py-spy" in said
    assert "pip install py-spy" in _stacks_fix(obs)  # type: ignore[arg-type]
    obs[0]["data"] = {"pid": 4242, "method": "py-spy"}  # control: the stacks were read
    assert unknowns(obs) == [] and _stacks_fix(obs) == ""  # type: ignore[arg-type]


def _wrong_log_card(port: int) -> Any:
    card = load_card(DATA / "wrong-log-other-port.yaml")
    return card.model_copy(update={"symptom": card.symptom.replace("8005", str(port))})


def test_a_log_serving_another_port_is_set_aside_for_the_launchs_own(tmp_path: Path) -> None:
    card = _wrong_log_card(8005)
    r = _run(card, tmp_path, logs=["/data/logs/vllm-base.log"])
    assert r.root_cause == "model_load_error", (r.status, r.summary)
    assert any("config.json" in e.line for e in r.evidence)
    assert r.next_step.startswith("Note: /data/logs/vllm-base.log serves port 8000"), r.next_step
    assert "/home/ana/run/nohup.out" in r.next_step


def test_control_the_named_port_matches_the_log_so_it_stands(tmp_path: Path) -> None:
    r = _run(_wrong_log_card(8000), tmp_path, logs=["/data/logs/vllm-base.log"])
    assert "serves port" not in r.next_step
    assert r.root_cause != "model_load_error"


def test_a_scripts_own_log_target_is_looked_for_beside_it_and_above() -> None:
    from agent.launch import script_log_targets

    script = "torchrun --nproc_per_node=4 x.py --output_dir=out/ 2>&1 | tee logs/preprocess.log\n"
    [(name, dirs)] = script_log_targets(script, "/mnt/proj/scripts/preprocess/run.sh")
    assert name == "preprocess.log"
    assert "/mnt/proj/logs" in dirs and "/mnt/proj/scripts/preprocess/logs" in dirs
    assert script_log_targets("python serve.py > /var/log/llm/serve.log 2>&1\n", "/opt/a.sh") == [
        ("serve.log", ["/var/log/llm"])
    ]
    assert (
        script_log_targets("python serve.py > $LOG 2>&1\necho hi >/dev/null\n", "/opt/a.sh") == []
    )


def test_replayed_find_goes_no_deeper_than_a_live_one() -> None:
    from cards.model import IncidentCard

    card = IncidentCard.model_validate(
        {
            "id": "t",
            "title": "t",
            "source": "t",
            "engine": "vllm",
            "symptom": "s",
            "host": {"files": {"/home/u/a/b/c/d/deep.log": "x\n", "/home/u/top.log": "y\n"}},
        }
    )
    out = ReplayHost(card).run("find /home -maxdepth 3 -type f -name '*.log'").stdout
    assert "/home/u/top.log" in out and "deep.log" not in out
    # the shell's NAME=value prefix (find_logs runs `LC_ALL=C find ...`) names no program
    prefixed = ReplayHost(card).run("LC_ALL=C find /home -maxdepth 3 -type f -name '*.log'")
    assert prefixed.stdout == out


def _dead_launch_beside_a_held_gpu(holder_user: str) -> Any:
    """alice's vLLM launch on :8000 died (its fatal line in the log); another instance of the
    command, on :8001, runs on as alice (told apart by its port); `holder_user`'s sleeping
    python holds 20 GiB, the GPU idle."""
    from tests.agent.test_rules import PS_HEADER, _card

    ps = PS_HEADER + (
        "alice      6200  1.0  0.5 912345 412345 ?      Sl   09:02   0:03 python3 -m "
        "vllm.entrypoints.openai.api_server --model /models/llama-70b --port 8001\n"
        f"{holder_user:<8}   7001  0.0  0.4 812345 312345 ?      Sl   08:10   0:01 python3 "
        "train_lora.py --base /models/Qwen2.5-7B\n"
    )
    log = (
        "INFO 11-30 10:00:01 [api_server.py:1034] vLLM API server version 0.8.3\n"
        "INFO 11-30 10:00:01 [api_server.py:1044] args: Namespace(model='/models/llama-70b', "
        "port=8000, tensor_parallel_size=1)\n"
        "ERROR 11-30 10:00:09 [engine.py:400] RuntimeError: No CUDA GPUs are available\n"
    )
    apps = "pid, process_name, used_gpu_memory [MiB]\n7001, python3, 20480 MiB\n"
    gpu = "0, NVIDIA H100 80GB HBM3, 20480 MiB, 60528 MiB, 81559 MiB, 0 %\n"
    cmd = "nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv"
    card = _card({"/home/alice/logs/server.log": log}, ps, gpu, commands={cmd: apps})
    return card.model_copy(update={"invocation": Invocation(log="/home/alice/logs/server.log")})


@pytest.mark.parametrize(("user", "owner"), [("bob", "another user's job"), ("alice", "leftover")])
def test_another_users_idle_gpu_job_is_theirs_not_a_leftover(
    tmp_path: Path, user: str, owner: str
) -> None:
    """None of the launch's processes alive, its user is that of the other instance of its
    command: bob's idle job is bob's (never "kill" it); alice's own idle holder (control) stays
    a leftover of her earlier launch."""
    r = _run(_dead_launch_beside_a_held_gpu(user), tmp_path)
    holders = {g["pid"]: g["owner"] for g in r.launch["gpu"]}
    assert holders.get(7001) == owner, r.launch["gpu"]
    if user == "bob":
        assert "kill 7001" not in r.next_step and r.root_cause != "stale_gpu_process", r.next_step


def test_a_live_server_is_not_the_launch_whose_log_names_a_gone_writer(tmp_path: Path) -> None:
    """Triton's glog lines name their writer's pid (140610); it is gone. The tritonserver alive
    beside it (118220, another team's) did not write this log: another launch, never a member."""
    from cards.model import IncidentCard

    log = (
        "I1128 14:01:40.120331 140610 model_lifecycle.cc:461] loading: tensorrt_llm:1\n"
        "[TensorRT-LLM][INFO] Loaded engine size: 13824 MiB\n"
        "[TensorRT-LLM][ERROR] 1: [defaultAllocator.cpp::allocate::20] Error Code 1: Cuda Runtime (out of memory)\n"
        "E1128 14:01:47.331220 140610 model_lifecycle.cc:621] failed to load 'tensorrt_llm' version 1: "
        "Internal: unexpected error when creating modelInstanceState: [TensorRT-LLM][ERROR] CUDA "
        "runtime error in ::cudaMallocAsync(ptr, n, mCudaStream->get()): out of memory\n"
    )
    ps = (
        "USER         PID %CPU %MEM    VSZ   RSS TTY      STAT START   TIME COMMAND\n"
        "search    118220  3.1  2.0 60220110 5210330 ?    Sl   Nov27  41:10 /opt/tritonserver/bin/"
        "tritonserver --model-repository=/srv/search/repo --http-port 8000\n"
        "teamb     140211  0.0  0.0  10228  5400 pts/0    Ss   13:50   0:00 -bash\n"
    )
    gpu = "0, NVIDIA A100-SXM4-80GB, 76214 MiB, 5706 MiB, 81920 MiB, 0 %\n"

    def card(lines: str) -> IncidentCard:
        return IncidentCard.model_validate(
            {
                "id": "t",
                "title": "t",
                "source": "test",
                "engine": "trtllm",
                "symptom": "why?",
                "invocation": {"log": "/srv/teamb/triton.log"},
                "host": {"ps": ps, "nvidia_smi": gpu, "files": {"/srv/teamb/triton.log": lines}},
            }
        )

    from agent.runner import investigate
    from agent.settings import Settings
    from cards.replay import ReplayHost

    c = card(log)
    r = investigate(
        ReplayHost(c),
        c.symptom,
        settings=Settings(home=tmp_path / "h"),
        logs=["/srv/teamb/triton.log"],
    )
    assert 118220 not in [m["pid"] for m in (r.launch or {})["members"]], r.launch
    # control: a log that names no writer cannot say the live server is someone else's
    bare = "\n".join(ln for ln in log.splitlines() if not ln.startswith(("I1128", "E1128")))
    c2 = card(bare + "\n")
    r2 = investigate(
        ReplayHost(c2),
        c2.symptom,
        settings=Settings(home=tmp_path / "h2"),
        logs=["/srv/teamb/triton.log"],
    )
    assert 118220 in [m["pid"] for m in (r2.launch or {})["members"]], r2.launch


#: two copies of one command (a supervisor's restart beside the launch), pids at column 0
TWIN_PS = (
    "  PID  PPID USER     STAT ELAPSED %CPU %MEM   RSS COMMAND\n"
    "31714 31656 root     Ss         9  0.9  0.0 11284 /usr/bin/python3 -m sglang.launch_server "
    "--model-path /models/Llama-3.1-8B-Instruct --port 30000\n"
    "31715 31656 root     Ss         8  0.9  0.0 11284 /usr/bin/python3 -m sglang.launch_server "
    "--model-path /models/Llama-3.1-8B-Instruct --port 30000\n"
)


@pytest.mark.parametrize("from_raw", [True, False], ids=["tool-row", "pid-in-row"])
def test_a_members_ps_line_is_its_own_not_its_twins(from_raw: bool) -> None:
    """The launch writes the log (31715); its twin (31714, the same argv) writes another: the
    line shown and cited for the member is its own row, never the first row of that command."""
    from tools import processes

    procs = processes.parse_ps(TWIN_PS).procs
    processes.identify(procs, {31715: "/l/server.log", 31714: "other:/sup/server.log"})
    res = processes.Result(
        host="h", header=TWIN_PS.splitlines()[0], processes=procs, total=2, servers=[31714, 31715]
    )
    data = res.model_dump(mode="json")
    if not from_raw:  # an older recording: no raw row kept, found by its pid
        for p in data["processes"]:
            p["raw"] = ""
    obs = {"id": "o1", "tool": "processes", "ok": True, "args": {}, "round": 0}
    f = derive([{**obs, "lines": res.lines(), "data": data}])  # type: ignore[list-item]
    assert f.server_pids == [31715]
    assert f.procs[31715].startswith("31715 "), f.procs[31715]
    assert f.procs[31714].startswith("31714 "), f.procs[31714]


def test_a_setting_is_read_from_the_launchs_own_row_not_its_twins() -> None:
    """Both copies of the command name an unresolvable rendezvous host: the setting cited is the
    launch's own row (31715, the log's writer), never its twin's (31714, another log)."""
    from agent.rules.causes import cause_rules
    from tools import processes

    bad = "node-0.pivot-test.invalid"
    ps = TWIN_PS.replace("--port 30000", f"--port 30000 --dist-init-addr {bad}:5000")
    procs = processes.parse_ps(ps).procs
    processes.identify(procs, {31715: "/l/server.log", 31714: "other:/sup/server.log"})
    res = processes.Result(host="h", header=ps.splitlines()[0], processes=procs, total=2)
    err = (
        f"[W1202 05:22:09.000000000 socket.cpp:767] [c10d] The IPv6 network addresses of ({bad}, "
        "5000) cannot be retrieved (gai error: -2 - Name or service not known)."
    )
    refused = (
        "[W1202 05:22:09.000000000 socket.cpp:767] [c10d] The client socket has failed to "
        f"connect to [{bad}]:5000 (errno: 22 - Invalid argument)."
    )
    base = {"ok": True, "round": 0}
    obs = [
        {**base, "id": "o1", "tool": "processes", "args": {}, "lines": res.lines(),
         "data": res.model_dump(mode="json")},
        {**base, "id": "o2", "tool": "log_tail", "args": {"path": "/l/server.log"},
         "lines": [err, refused], "data": {"host": "h", "path": "/l/server.log", "size": 300}},
    ]  # fmt: skip
    f = derive(obs)  # type: ignore[arg-type]
    added: list[tuple[str, str]] = []
    cause_rules(f, obs, [], lambda label, kind, w, oid, line, why: added.append((oid, line)))
    rows = [line for oid, line in added if oid == "o1"]
    assert rows and all(r.startswith("31715 ") for r in rows), added


class _OwnedLogs(ReplayHost):
    """A replayed host whose `stat` names each log's owner, as a live one's does (a card records
    no owners: replay answers None, unknown)."""

    def __init__(self, card: Any, owner: str) -> None:
        super().__init__(card)
        self.owner = owner

    def read_tail(self, path: str, max_bytes: int = 256_000) -> Any:
        return super().read_tail(path, max_bytes).model_copy(update={"owner": self.owner})


@pytest.mark.parametrize(
    ("holder", "owner"), [("bob", "another user's job"), ("alice", "leftover")]
)
def test_with_nothing_of_the_engine_alive_the_logs_owner_is_the_launchs_user(
    tmp_path: Path, holder: str, owner: str
) -> None:
    """alice's launch died and no process of its engine runs: her log's owner says the launch
    was hers, so bob's idle 20 GiB job is bob's (never "kill" it); her own idle holder (control)
    stays her earlier launch's leftover."""
    card = _dead_launch_beside_a_held_gpu(holder)
    ps = "\n".join(ln for ln in card.host.ps.splitlines() if " 6200 " not in ln) + "\n"
    card = card.model_copy(update={"host": card.host.model_copy(update={"ps": ps})})
    host = _OwnedLogs(card, "alice")
    r = investigate(host, card.symptom, settings=Settings(home=tmp_path / "h"), logs=[
        "/home/alice/logs/server.log"
    ])  # fmt: skip
    holders = {g["pid"]: g["owner"] for g in r.launch["gpu"]}
    assert holders.get(7001) == owner, r.launch["gpu"]
    if holder == "bob":
        assert "kill 7001" not in r.next_step and r.root_cause != "stale_gpu_process", r.next_step


@pytest.mark.parametrize(
    ("config", "dup"), [("/srv/conf/server.yaml", True), ("/srv/b.yaml", False)]
)
def test_a_copy_of_the_command_naming_the_launchs_config_is_another_instance(
    config: str, dup: bool
) -> None:
    """The launch (dead) was `--config /srv/conf/server.yaml`; a live copy of that command (a
    supervisor's) names no model, only the config: it is another instance of the launch. A
    server given another config (control) is not."""
    from agent.launch import build
    from tools import processes

    ps = (
        "  PID  PPID USER     STAT ELAPSED %CPU %MEM   RSS COMMAND\n"
        "41714     1 alice    Ss         9  0.9  0.0 11284 /usr/bin/python3 -m "
        f"sglang.launch_server --config {config} --port 30000\n"
    )
    procs = processes.parse_ps(ps).procs
    processes.identify(procs, {41714: "other:/sup/server.log"})
    res = processes.Result(host="h", header=ps.splitlines()[0], processes=procs, total=1)
    log = "[2025-06-01 10:00:00] server_args=ServerArgs(model_path='/models/m', port=30000)"
    base = {"ok": True, "round": 0}
    obs = [
        {**base, "id": "o1", "tool": "processes", "args": {}, "lines": res.lines(),
         "data": res.model_dump(mode="json")},
        {**base, "id": "o2", "tool": "log_tail", "args": {"path": "/l/server.log"},
         "lines": [log], "data": {"host": "h", "path": "/l/server.log", "size": 90}},
        {**base, "id": "o3", "tool": "config_read", "args": {"path": "/srv/conf/server.yaml"},
         "lines": ["port: 30000"],
         "data": {"host": "h", "path": "/srv/conf/server.yaml", "format": "yaml"}},
    ]  # fmt: skip
    launch = build(obs, derive(obs), ["/l/server.log"])  # type: ignore[arg-type]
    assert launch.duplicates == ([41714] if dup else []), launch


DF_OTHERS_FULL = (
    "Filesystem      Size  Used Avail Use% Mounted on\n"
    "/dev/vda1       200G   80G  120G  40% /\n"
    "/dev/vdc       1000G 1000G     0 100% /var/lib/containers\n"
    "tmpfs            64G     0   64G   0% /dev/shm\n"
)


@pytest.mark.parametrize(("log", "ours"), [("/home/alice/logs/server.log", False),
                                           ("/var/lib/containers/alice/server.log", True)])  # fmt: skip
def test_a_full_mount_is_the_launchs_only_where_it_writes(log: str, ours: bool) -> None:
    """Another team's /var/lib/containers is full; the launch's log, model and temp files lie on
    a roomy /: that mount is not the launch's disk_full. Control: the launch logs onto it."""
    from agent.observe import call
    from tests.agent.test_rules import _card

    text = (
        "INFO 11-30 10:00:01 [api_server.py:1044] args: Namespace(model='/models/llama-70b', "
        "port=8000)\nERROR 11-30 10:00:09 [engine.py:400] RuntimeError: engine died\n"
    )
    card = _card({log: text}, "", "", commands={"df -hP": DF_OTHERS_FULL})
    host = ReplayHost(card)
    obs = []
    for i, (tool, args) in enumerate((("disk", {}), ("log_tail", {"path": log}))):
        ok, lines, data = call(host, tool, args)
        obs.append({"id": f"o{i}", "tool": tool, "ok": ok, "args": args, "lines": lines,
                    "data": data, "round": 0})  # fmt: skip
    f = derive(obs)  # type: ignore[arg-type]
    full = [m for m, _, _ in f.full_mounts]
    assert full == (["/var/lib/containers"] if ours else []), full


def _busy_box_without_a_log(loader: str = "") -> Any:
    """No --log: three other jobs' growing files come first in the listing (a test run's output,
    a neighbour's vLLM log, a build's output); the dead sglang launch's log is the fourth, and
    with `loader` another run's sglang loader's log (no error) at that path, listed before it."""
    from tests.agent.test_rules import PS_HEADER, _card
    from tests.live import staging as S

    ps = PS_HEADER + (
        "root      6200  1.0  0.5 912345 412345 ?      Sl   09:02   0:03 python3 -m "
        "vllm.entrypoints.openai.api_server --model /models/Qwen2.5-7B --port 8001\n"
        "alice     6300  9.0  0.1  12345  2345 ?       R    09:03   0:01 python3 "
        "/srv/ci/run_tests.py -x tests/\n"
    )
    neighbour = (
        "INFO 12-02 09:00:00 [api_server.py:1043] vLLM API server version 0.8.5\n"
        "INFO:     Uvicorn running on http://127.0.0.1:8001 (Press CTRL+C to quit)\n"
        "INFO 12-02 09:00:03 [loggers.py:116] Engine 000: Avg prompt throughput: 812.4 "
        "tokens/s, Running: 3 reqs\n"
    )
    files = {
        "/srv/ci/test-run.out": "tests/test_tokenizer.py::test_roundtrip[1] PASSED  [  1%]\n",
        "/srv/other/vllm-neighbour.log": neighbour,
        "/srv/build/make.out": "nvcc -c batch_prefill_sm90.cu -o batch_prefill_sm90.o\n",
    }
    if loader:
        bar = S.SHARD_BAR.format(pct=2, i=5, n=200, el="00:05", eta="03:15").lstrip("\r")
        files[loader] = S.startup() + bar + "\n"
    files["/srv/run/logs/server.log"] = S.startup() + S.LOADED.lstrip("\n") + S.JIT_TRACEBACK
    gpu = "0, NVIDIA H200, 0 MiB, 143771 MiB, 143771 MiB, 0 %\n"
    card = _card(files, ps, gpu)
    return card.model_copy(update={"symptom": "sglang died at start-up on the H200, why?"})


@pytest.mark.parametrize(
    "loader",
    ["", "/srv/pool/supervisor/server.log", "/srv/ci2/supervisor/server.log"],
    ids=["alone", "a-loader-found-first", "a-loader-read-first"],
)
def test_without_a_log_the_named_engines_log_is_found_beyond_the_newest(
    tmp_path: Path, loader: str
) -> None:
    """The operator names sglang; the newest logs are a test run's, a neighbour vLLM's and a
    build's: the sglang launch's own log is found among the others listed and its error is the
    verdict, the others' reads set aside (was: the neighbour's vLLM taken for the launch,
    `healthy`). "Died": of two sglang logs, the one whose launch ended in a fatal line is read,
    not a newer loader's."""
    r = _run(_busy_box_without_a_log(loader), tmp_path)
    assert r.root_cause in ("unsupported_gpu_arch", "dependency_error"), (r.root_cause, r.summary)
    from tests.live import staging as S

    assert S.JIT_FATAL in [e.line for e in r.evidence]
    assert "vllm-neighbour" not in " ".join(e.line for e in r.evidence)


def test_a_log_in_a_folder_of_tmp_reads_only_the_configs_of_that_folder(tmp_path: Path) -> None:
    """`--log /tmp/run7/server.log`: the configs beside it are /tmp/run7's, never every YAML
    under /tmp (another user's or another test's files); a config one level up from a project
    log (/srv/app/logs/ -> /srv/app/) still is."""
    from agent.launch import shared_dirs
    from cards.model import IncidentCard

    assert "/tmp/" in shared_dirs() and "/srv/app/" not in shared_dirs()
    log = "INFO 05-08 00:41:30 [api_server.py:1043] vLLM API server version 0.9.0\n"
    card = IncidentCard.model_validate(
        {
            "id": "made-up",
            "title": "t",
            "source": "test",
            "engine": "vllm",
            "symptom": "It died, why?",
            "host": {
                "ps": "USER PID %CPU %MEM VSZ RSS TTY STAT START TIME COMMAND\n",
                "files": {
                    "/tmp/run7/server.log": log,
                    "/tmp/run7/serve.yaml": "tensor-parallel-size: 2\n",
                    "/tmp/other-test/staged.yaml": "port: 9\n",
                    "/srv/app/logs/server.log": log,
                    "/srv/app/serve.yaml": "tensor-parallel-size: 2\n",
                },
            },
        }
    )
    for named, wanted, foreign in (
        ("/tmp/run7/server.log", "/tmp/run7/serve.yaml", "/tmp/other-test/staged.yaml"),
        ("/srv/app/logs/server.log", "/srv/app/serve.yaml", "/tmp/other-test/staged.yaml"),
    ):
        events: list[dict] = []  # type: ignore[type-arg]
        investigate(
            ReplayHost(card),
            card.symptom,
            settings=Settings(home=tmp_path / named.replace("/", "_")),
            on_event=events.append,
            logs=[named],
        )
        read = " ".join(str(e) for e in events if "config_read" in str(e))
        assert wanted in read, (named, read[:2000])
        assert foreign not in read, (named, read[:2000])
