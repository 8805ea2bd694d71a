"""Fuzz the text cleaners and config parsers: random, binary, truncated input never crashes."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tools.config_read import effective, parse_config
from tools.log_tail import parse_tail
from tools.textclean import clean_bytes, clean_lines, strip_ansi

EXAMPLES = int(os.environ.get("PIVOT_FUZZ_EXAMPLES", "200"))
fuzz = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
noisy_text = st.text(
    alphabet=st.sampled_from(list("ab %|#=\n\r\t\x1b[]();0123456789\x07\\") + ["\x00", "é", "█"]),
    max_size=400,
)


@fuzz
@given(noisy_text, st.booleans())
def test_clean_lines_never_crashes_and_keeps_text_verbatim(text: str, partial: bool) -> None:
    out = clean_lines(text, partial_start=partial)
    stripped = strip_ansi(text)
    for line in out.lines:
        assert "\r" not in line and "\n" not in line and "\x1b" not in line
        assert line in stripped  # every kept character is what the host printed


@fuzz
@given(st.binary(max_size=2000), st.booleans(), st.integers(min_value=0, max_value=50))
def test_binary_and_truncated_bytes(data: bytes, partial: bool, n: int) -> None:
    clean_bytes(data, partial_start=partial)
    assert len(parse_tail(data, n, partial).lines) <= n
    cut = data[: len(data) // 2]
    clean_bytes(cut, partial_start=True)


@fuzz
@given(
    st.lists(st.integers(min_value=0, max_value=100), min_size=1, max_size=200),
    st.sampled_from(
        ["RuntimeError: boom", "torch.OutOfMemoryError: CUDA out of memory", "NCCL WARN x"]
    ),
)
def test_error_after_progress_always_survives(steps: list[int], error: str) -> None:
    bar = "".join(f"\rLoading shards: {s:3d}%|{'#' * (s // 10)}| {s}/100" for s in steps)
    for sep in ("\n", ""):
        out = clean_lines(bar + sep + error + "\n").lines
        assert any(error in ln for ln in out)
        assert len(out) <= 2


@fuzz
@given(
    st.one_of(
        noisy_text,
        st.text(max_size=300),
        st.binary(max_size=300).map(lambda b: b.decode("latin-1")),
    ),
    st.sampled_from(
        ["/x/sitecustomize.py", "/x/.env", "/x/run.sh", "/x/c.yaml", "/x/c.json", "/x/cfg"]
    ),
)
def test_config_parser_never_crashes(text: str, path: str) -> None:
    fmt, sources, err = parse_config(path, text)
    effective(sources)
    for s in sources:
        assert isinstance(s.key, str) and isinstance(s.value, str)


@fuzz
@given(st.text(max_size=300))
def test_truncated_real_configs(cut_at: str) -> None:
    script = (
        '#!/bin/bash\nexport NCCL_DEBUG=INFO\nCMD="python -m vllm.entrypoints.openai.api_server \\\n'
        "  --port 8000 --model 'x y'\"\nimport os\nos.environ.setdefault('A', \"b\")\nk: [1, {a: 2}]\n"
    )
    n = len(cut_at) % (len(script) + 1)
    for path in ("/a/s.sh", "/a/sitecustomize.py", "/a/c.yaml", "/a/c.json"):
        parse_config(path, script[:n])
