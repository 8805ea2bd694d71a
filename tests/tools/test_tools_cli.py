"""`pivot tools`: through typer's CliRunner and once as a real subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent.cli import full_app

app = full_app()

ROOT = Path(__file__).resolve().parents[2]
FUSION_LOG = "/data/eagle3/synth_100k/logs/nccl_exp_1b_fewchan_fusion.log"
runner = CliRunner()


def _card() -> str:
    for base in (ROOT / "evals" / "incidents",):
        p = base / "seed-sglang-fusion-sm120-jit.yaml"
        if p.exists():
            return str(p)
    pytest.skip("seed card not found")


def test_list_shows_every_registered_tool() -> None:
    from tools.registry import TOOLS

    res = runner.invoke(app, ["tools", "list"])
    assert res.exit_code == 0, res.output
    for name in TOOLS:
        assert name in res.output
    assert "config_apply [changes the host]" in res.output


def test_log_tail_replay_json() -> None:
    res = runner.invoke(
        app, ["tools", "log_tail", "--replay", _card(), "--path", FUSION_LOG, "--json"]
    )
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert (
        "RuntimeError: No supported CUDA architectures found for major versions [9, 10]."
        in data["tail"]
    )


def test_rich_rendering_and_arg_pairs(tmp_path: Path) -> None:
    log = tmp_path / "s.log"
    log.write_text("a\nERROR one\nb\n")
    res = runner.invoke(
        app,
        [
            "tools",
            "log_search",
            "--local",
            "-a",
            f"path={log}",
            "-a",
            "pattern=ERROR",
            "--context",
            "0",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "ERROR one" in res.output.splitlines()


def test_failures_exit_nonzero_with_the_fix() -> None:
    res = runner.invoke(app, ["tools", "log_tail", "--local", "--path", "/no/such.log"])
    assert res.exit_code == 1 and "# fix:" in res.output
    bad = runner.invoke(app, ["tools", "log_tail", "--local", "--lines", "0", "--path", "/x"])
    assert bad.exit_code == 2
    neither = runner.invoke(app, ["tools", "log_tail", "--path", "/x"])
    assert neither.exit_code == 2


def test_changing_tool_needs_yes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "serve.env"
    cfg.write_text("NCCL_ALGO=Tree\n")
    monkeypatch.setenv("PIVOT_SNAPSHOT_DIR", str(tmp_path / "store"))
    base = ["tools", "config_apply", "--local", "--path", str(cfg), "-a", "set.NCCL_ALGO=Ring"]
    refused = runner.invoke(app, base)
    assert refused.exit_code == 3 and "--yes" in refused.output
    assert cfg.read_text() == "NCCL_ALGO=Tree\n"
    done = runner.invoke(app, [*base, "--yes", "--json"])
    assert done.exit_code == 0, done.output
    assert cfg.read_text() == "NCCL_ALGO=Ring\n"
    back = runner.invoke(app, ["tools", "config_revert", "--local", "--path", str(cfg), "--yes"])
    assert back.exit_code == 0 and cfg.read_text() == "NCCL_ALGO=Tree\n"


def test_real_subprocess() -> None:
    pivot = Path(sys.executable).parent / "pivot"
    if not pivot.exists():
        pivot = ROOT / ".venv" / "bin" / "pivot"
    out = subprocess.run(
        [
            str(pivot),
            "tools",
            "log_tail",
            "--replay",
            _card(),
            "--path",
            FUSION_LOG,
            "--lines",
            "5",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["ok"] and data["size"] > 0 and len(data["tail"]) == 5
