"""A skip for a missing real component fails the run in CI and stays a skip elsewhere."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CASES = """
import pytest

def test_needs_sshd():
    pytest.skip("a real OpenSSH sshd cannot start here: no /usr/sbin/sshd")

@pytest.mark.skipif(True, reason="Debian chromium not installed")
def test_needs_chromium():
    pass

def test_unrelated_skip():
    pytest.skip("this card holds no answer text outside its host section")
"""


def _run(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_cases.py").write_text(CASES)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "tests.strict_skips", "-p", "no:cacheprovider",
         "--rootdir", str(tmp_path), str(tmp_path / "test_cases.py")],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120,
    )  # fmt: skip


def test_in_ci_a_missing_component_fails_and_other_skips_stay(tmp_path: Path) -> None:
    res = _run(tmp_path, "1")
    assert res.returncode == 1, res.stdout
    # a skip in a test body fails it; a skip at setup (skipif, a fixture) errors it
    assert "1 failed" in res.stdout and "1 error" in res.stdout, res.stdout
    assert "1 skipped" in res.stdout, res.stdout
    assert "a required real component is missing in CI" in res.stdout


def test_outside_ci_the_skips_stay_skips(tmp_path: Path) -> None:
    res = _run(tmp_path, None)
    assert res.returncode == 0, res.stdout
    assert "3 skipped" in res.stdout, res.stdout


def test_every_real_component_the_suite_starts_is_named() -> None:
    from tests.strict_skips import REQUIRED

    for reason in (
        "a real prometheus-alertmanager cannot start here: not installed",
        "a real PostgreSQL cannot start here",
        "Debian chromium not installed",
    ):
        assert REQUIRED.search(reason), reason
    assert not REQUIRED.search("this card holds no answer text outside its host section")
