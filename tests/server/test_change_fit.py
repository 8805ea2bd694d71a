"""change_fit: the proposed change and the next step agree, or the words say why they differ."""

from __future__ import annotations

import pytest

from server.change_fit import change_fit
from store.records import ApprovalRequest

RESTORE = ApprovalRequest(
    id="a1",
    session_id="s1",
    tool="config_apply",
    args={
        "path": "/usr/lib/python3.12/sitecustomize.py",
        "copy_from": "/usr/lib/python3.12/sitecustomize.py.known-good",
        "reason": "restore /usr/lib/python3.12/sitecustomize.py.known-good",
    },
    reason="/usr/lib/python3.12/sitecustomize.py differs from its known-good copy "
    "/usr/lib/python3.12/sitecustomize.py.known-good; restoring it undoes the one change",
)
MEM_FRACTION = (
    'Check "Load weight end ... avail mem" in the log and nvidia-smi for other holders; then '
    "raise --mem-fraction-static (e.g. 0.85-0.9), lower --context-length."
)


@pytest.mark.parametrize(
    ("next_step", "agrees"),
    [
        ("Restore sitecustomize.py from its known-good copy, then relaunch.", True),
        ("Restore /usr/lib/python3.12/sitecustomize.py and relaunch.", True),
        (MEM_FRACTION, False),
        ("", False),
        # the reason's own words ("restore") are not a target: no false agreement
        ("Restore the default launch flags.", False),
    ],
)
def test_agrees_only_when_the_next_step_names_what_the_change_touches(
    next_step: str, agrees: bool
) -> None:
    assert change_fit(RESTORE, next_step, "kv_cache_no_room").agrees is agrees


def test_a_different_change_says_both_and_why() -> None:
    fit = change_fit(RESTORE, MEM_FRACTION, "kv_cache_no_room")
    assert "is not this next step" in fit.why
    assert (
        "kv_cache_no_room" in fit.why
        and "avail mem" in fit.why
        and "--mem-fraction-static" in fit.why
    )
    assert "restores /usr/lib/python3.12/sitecustomize.py from" in fit.why
    assert "differs from its known-good copy" in fit.why
    assert "does not do the next step" in fit.why
    assert "for this next step is below" not in fit.why


def test_no_next_step_and_a_change_without_a_file() -> None:
    fit = change_fit(RESTORE, "", None)
    assert fit.why.startswith("The report names no next step")
    kill = ApprovalRequest(id="a2", session_id="s1", tool="kill_process", args={"pid": 4242},
                           reason="pid 4242 holds 70 GiB on GPU 0")  # fmt: skip
    assert change_fit(kill, "Kill pid 4242, then relaunch.", "stale_gpu_process").agrees
    other = change_fit(kill, "Lower --gpu-memory-utilization.", "stale_gpu_process")
    assert not other.agrees and "runs kill_process" in other.why
