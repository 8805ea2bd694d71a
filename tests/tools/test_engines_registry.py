"""The engine registry (tools/engines.yaml) is the one place an engine is described.

Every question another module asks about engines (is this unit a server, is this script line a
launch, where does a launch start in a log, which signatures apply, what may a card say) is
answered from the registry; a guard test keeps engine-name alternations out of the code.
"""

from __future__ import annotations

import re
from pathlib import Path

from tools import engines

ROOT = Path(__file__).resolve().parents[2]


def test_server_names_come_from_every_engine_and_the_common_words() -> None:
    pat = engines.server_name_pattern()
    for name in ("vllm-openai", "sglang-router", "tritonserver-0", "ollama", "my-llm-svc"):
        assert pat.search(name), name
    assert not pat.search("postgres-14")


def test_launch_lines_and_launch_markers_come_from_the_registry() -> None:
    line = engines.launch_line_pattern()
    assert line.search("exec vllm serve m --port 8000")
    assert line.search("python3 -m sglang.launch_server")
    assert not line.search("echo done")
    markers = engines.launch_patterns()
    # every engine's own markers, then the common ones, each once
    assert "server_args=ServerArgs\\(" in markers and "\\bargs: Namespace\\(" in markers
    assert len(markers) == len(set(markers))


def test_a_catch_all_engine_has_no_signatures_of_its_own() -> None:
    assert engines.signature_engine("sglang") == "sglang"
    assert engines.signature_engine("custom") is None
    assert engines.signature_engine("emulator") is None
    assert engines.signature_engine(None) is None
    assert "custom" not in engines.card_engines() and "other" in engines.card_engines()


def test_a_capture_is_guessed_by_the_names_it_mentions() -> None:
    assert engines.guess_engine(["python -m vllm.entrypoints.openai.api_server"]) == "vllm"
    assert engines.guess_engine(["tritonserver --model-repository=/m"]) == "trtllm"
    assert engines.guess_engine(["nothing here"]) == "other"


def test_the_emulator_of_the_loop_is_known_where_it_now_lives() -> None:
    m = engines.classify("python -m loop.emulator --port 30000 --model-path /m")
    assert (m.engine, m.role) == ("emulator", "main")
    assert engines.classify("python -m loop.emulator --bench-client --port 1").engine is None


def test_no_module_writes_its_own_engine_alternation() -> None:
    """`sglang|vllm` (in any order) in code is a second registry that will drift."""
    two = re.compile(r"(?i)(?:sglang|vllm|trtllm|tensorrt_llm)\|(?:sglang|vllm|trtllm|tensorrt)")
    offenders = []
    for pkg in ("agent", "tools", "evals"):
        for py in (ROOT / pkg).rglob("*.py"):
            for n, ln in enumerate(py.read_text(encoding="utf-8").splitlines(), 1):
                if two.search(ln):
                    offenders.append(f"{py.relative_to(ROOT)}:{n}: {ln.strip()}")
    assert not offenders, "\n".join(offenders)
