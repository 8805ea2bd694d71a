"""`pivot` starts without the graph machinery: investigate overlaps its first reads with that
import (agent.observe.Prefetch), and every other command skips it. A top-level import of the
runner in any CLI module undoes both, so it is caught here, not by a stopwatch."""

from __future__ import annotations

import subprocess
import sys


def test_importing_the_cli_does_not_load_langgraph() -> None:
    code = "import sys, agent.cli; print(sorted(m for m in sys.modules if m.startswith(('langgraph', 'agent.runner'))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
