"""What an empty container_logs result says: a search that found nothing is not an empty log."""

from __future__ import annotations

import pytest

from tools.container_logs import LogLine, Result


@pytest.mark.parametrize("pattern", ["NCCL WARN", None])
def test_a_search_with_no_match_says_so_not_that_the_container_printed_nothing(
    pattern: str | None,
) -> None:
    """A model session read "the container printed nothing" after `pattern=` matched no line
    and took it for an empty log (round 38). Control: a plain read of an empty log says so."""
    r = Result(host="h", cli="docker", container="trtllm", command="docker logs trtllm",
               pattern=pattern)  # fmt: skip
    text = "\n".join(r.lines())
    if pattern:
        assert "no line of the container's log matches 'NCCL WARN'" in text
        assert "printed nothing" not in text
    else:
        assert "# the container printed nothing" in text
    full = Result(host="h", cli="docker", container="trtllm", command="c", pattern=pattern,
                  entries=[LogLine(text="NCCL WARN x")])  # fmt: skip
    assert "NCCL WARN x" in full.lines()
