"""The experiment is what the plan says: environment, launch line, reproduce command, combos."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from loop import launcher
from loop.experiment import reproduce
from loop.knobs import read_flags, set_flag
from loop.report import compatible
from store.ledger.base import ExperimentRow
from tests.loop.conftest import make_plan
from tools.local_host import LocalHost


def test_the_server_gets_the_plan_env_and_the_allow_list_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's night: NCCL_MAX_NCHANNELS exported in the shell silently won over the
    experiment's setdefault. A real launch, a real environment read back from /proc."""
    monkeypatch.setenv("NCCL_MAX_NCHANNELS", "16")
    monkeypatch.setenv("PIVOT_SHELL_ONLY", "leak")
    log = str(tmp_path / "env.log")
    res = launcher.start(
        LocalHost(),
        "sleep 30",
        str(tmp_path),
        {"FROM_PLAN": "yes"},
        log,
        f"envtest-{time.monotonic_ns()}",
        inherit_env=["PATH", "HOME", "NOT_SET_ANYWHERE"],
    )
    assert res.ok and res.pid
    try:
        raw = b""
        for _ in range(50):
            raw = Path(f"/proc/{res.pid}/environ").read_bytes()
            if b"FROM_PLAN" in raw:
                break
            time.sleep(0.05)
        env = dict(kv.split("=", 1) for kv in raw.decode().split("\0") if "=" in kv)
        assert env["FROM_PLAN"] == "yes" and env["PATH"] == os.environ["PATH"]
        assert "NCCL_MAX_NCHANNELS" not in env and "PIVOT_SHELL_ONLY" not in env
        assert "NOT_SET_ANYWHERE" not in env  # an unset allowed name stays unset, not empty
        assert set(env) <= {"FROM_PLAN", "PATH", "HOME", "PIVOT_RUN_ID", "PWD", "SHLVL", "_"}
    finally:
        launcher.stop(LocalHost(), res.pid, None, grace_s=0.5)


@pytest.mark.parametrize(
    "command,flag,value,want",
    [
        ("vllm serve --enforce-eager MODEL --port 8000", "--enforce-eager", False,
         "vllm serve MODEL --port 8000"),
        ("vllm serve --enforce-eager MODEL --port 8000", "--enforce-eager", None,
         "vllm serve MODEL --port 8000"),
        ("vllm serve MODEL --max-num-seqs 64 --port 8000", "--max-num-seqs", 128,
         "vllm serve MODEL --port 8000 --max-num-seqs 128"),
        ("python -m sglang.launch_server --enable-mixed-chunk /m --tp 2", "--enable-mixed-chunk",
         False, "python -m sglang.launch_server /m --tp 2"),
        ("vllm serve MODEL --port=8000", "--port", 9000, "vllm serve MODEL --port 9000"),
    ],
)  # fmt: skip
def test_flag_edits_keep_positional_arguments(
    command: str, flag: str, value: object, want: str
) -> None:
    assert set_flag(command, flag, value) == want  # type: ignore[arg-type]


def test_read_flags_does_not_take_the_model_for_a_switch_value() -> None:
    assert read_flags("vllm serve --enforce-eager MODEL --port 8000") == {
        "--enforce-eager": True,
        "--port": "8000",
    }


def test_reproduce_command_is_complete(state: Path) -> None:
    plan = make_plan(state, [{"name": "bs16", "flags": {"--cuda-graph-max-bs": 16}}])
    cmd = reproduce(plan, {"flag:--cuda-graph-max-bs": 16})
    assert cmd.startswith(f'cd {plan.baseline.workdir} && env -i PATH="$PATH"')
    assert f"PYTHONPATH={plan.baseline.env['PYTHONPATH']}" in cmd
    assert "EMULATOR_GPU_ARCH=sm120" in cmd
    assert cmd.endswith("--cuda-graph-max-bs 16")


def _kept(name: str, gain: float, **change: object) -> ExperimentRow:
    return ExperimentRow(
        id=name, night_id="n", seq=1, name=name, kind="ranked", change=change, gain=gain,
        status="kept",
    )  # fmt: skip


def test_only_compatible_kept_changes_are_combined() -> None:
    rows = [
        _kept("ch-4", 30.0, **{"env:NCCL_MAX_NCHANNELS": "4"}),
        _kept("ch-8", 20.0, **{"env:NCCL_MAX_NCHANNELS": "8"}),
        _kept("bs-16", 10.0, **{"flag:--cuda-graph-max-bs": 16}),
    ]
    chosen, left_out = compatible(rows)
    assert [r.name for r in chosen] == ["ch-4", "bs-16"]
    assert left_out == ["ch-8 (sets env:NCCL_MAX_NCHANNELS otherwise)"]


@pytest.mark.parametrize(
    "text,says",
    [
        ("name: x\nbaseline: {launch: a, port: 1, ready_url: u, benchmark: {command: b}}\n",
         "no objective"),
        ("name: x\nconstraints: ['p99 under 5']\n", "baseline: Field required"),
        ("name: [unclosed\n", "not valid YAML"),
    ],
)  # fmt: skip
def test_plan_errors_are_one_clear_line(text: str, says: str, tmp_path: Path) -> None:
    import subprocess
    import sys

    from tests.loop.conftest import REPO

    plan = tmp_path / "bad.yaml"
    plan.write_text(text)
    res = subprocess.run(
        [sys.executable, "-m", "agent.cli", "loop", "run", str(plan), "--state", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"pivot loop: {plan}"), res.stderr
    assert says in lines[0] and "Traceback" not in res.stderr
