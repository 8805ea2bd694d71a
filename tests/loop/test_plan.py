"""Plan validation: one knob per experiment unless `combined: true`; knob edits keep file style."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from loop.cli import DEMO_PLAN, prepare_demo
from loop.knobs import read_env, read_flags, set_env, set_flag
from loop.plan import Experiment, Plan
from tests.loop.conftest import make_plan


def test_two_knobs_refused_unless_combined(state: Path) -> None:
    with pytest.raises(ValidationError, match="touches 2 knobs"):
        Experiment(name="fewchan", env={"NCCL_MAX_NCHANNELS": "2"}, flags={"--tp": 2})
    both = Experiment(
        name="fewchan", env={"NCCL_MAX_NCHANNELS": "2", "NCCL_BUFFSIZE": "1"}, combined=True
    )
    assert set(both.change()) == {"env:NCCL_MAX_NCHANNELS", "env:NCCL_BUFFSIZE"}
    with pytest.raises(ValidationError, match="changes nothing"):
        Experiment(name="noop")
    with pytest.raises(ValidationError, match="touches 2 knobs"):
        make_plan(state, [{"name": "two", "flags": {"--a": 1, "--b": 2}}])


def test_plan_rejects_reserved_and_duplicate_names(state: Path) -> None:
    with pytest.raises(ValidationError, match="reserved"):
        make_plan(state, [{"name": "baseline", "flags": {"--a": 1}}])
    with pytest.raises(ValidationError, match="duplicate"):
        make_plan(state, [{"name": "x", "flags": {"--a": 1}}, {"name": "x", "flags": {"--b": 1}}])


def test_demo_plan_loads(tmp_path: Path) -> None:
    plan = prepare_demo(tmp_path)
    assert DEMO_PLAN.exists()
    assert plan.search and plan.search.trials >= 1
    assert any(e.combined for e in plan.experiments)
    assert "${" not in plan.model_dump_json()


@pytest.mark.parametrize(
    "text,want",
    [
        (
            'import os\nos.environ.setdefault("NCCL_BUFFSIZE", "16777216")\n',
            'os.environ.setdefault("NCCL_BUFFSIZE", "131072")',
        ),
        ("export NCCL_BUFFSIZE=16777216\n", "export NCCL_BUFFSIZE=131072"),
        ("NCCL_BUFFSIZE=16777216\nOTHER=1\n", "NCCL_BUFFSIZE=131072\nOTHER=1"),
    ],
)
def test_set_env_keeps_the_file_style(text: str, want: str) -> None:
    out = set_env(text, "NCCL_BUFFSIZE", "131072")
    assert want in out
    assert read_env(out)["NCCL_BUFFSIZE"] == "131072"
    assert set_env(out, "NCCL_BUFFSIZE", "16777216") == text  # round trip is byte exact
    added = set_env(text, "NCCL_PROTO", "LL")
    assert read_env(added)["NCCL_PROTO"] == "LL" and added.startswith(text)


def test_set_flag() -> None:
    cmd = "python -m x --port 1 --cuda-graph-max-bs 32 --flag"
    assert read_flags(set_flag(cmd, "--cuda-graph-max-bs", 16))["--cuda-graph-max-bs"] == "16"
    assert "--flag" not in set_flag(cmd, "--flag", False)
    assert read_flags(set_flag(cmd, "--new", True))["--new"] is True


def test_host_slots_on_one_machine_need_their_own_port_and_config(state: Path) -> None:
    plan = make_plan(state, [])
    data = plan.model_dump(mode="json")
    slot = {"target": "local", "config_file": "/tmp/b/sitecustomize.py", "port": 31002}
    data["hosts"] = [{"name": "a", "target": "local"}, {"name": "b", **slot}]
    with pytest.raises(ValidationError, match="must say \\{port\\}"):
        Plan.model_validate(data)  # a port override with nowhere to put it
    b = data["baseline"]
    b["launch"] = b["launch"].replace(str(plan.baseline.port), "{port}")
    b["ready_url"] = b["ready_url"].replace(str(plan.baseline.port), "{port}")
    b["benchmark"]["command"] = b["benchmark"]["command"].replace(str(plan.baseline.port), "{port}")
    two = Plan.model_validate(data)
    a_view, b_view = (two.for_host(s) for s in two.host_specs())
    assert f"--port {plan.baseline.port}" in a_view.baseline.launch
    assert "--port 31002" in b_view.baseline.launch and ":31002/" in b_view.baseline.ready_url
    assert "--port 31002" in b_view.baseline.benchmark.command
    assert b_view.baseline.config_file == "/tmp/b/sitecustomize.py"
    assert b_view.baseline.config_files == ["/tmp/b/sitecustomize.py"]
    data["hosts"][1]["port"] = plan.baseline.port
    with pytest.raises(ValidationError, match="share local"):
        Plan.model_validate(data)  # same port on one machine
    data["hosts"] = ["gpu1", "gpu2"]  # identical machines: names are enough
    assert [h.name for h in Plan.model_validate(data).host_specs()] == ["gpu1", "gpu2"]
