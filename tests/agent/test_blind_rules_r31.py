"""Rules and knowledge after blind round 31 (scored before any change), each with a control
that must not trigger it: a fix is a general form or fact, never an answer keyed to one card."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    ("line", "signature"),
    [
        ("ValueError: The configured object store size (20.240216064 GB) exceeds /dev/shm size "
         "(10.73741824 GB). This will harm performance. Consider deleting files in /dev/shm or "
         "increasing its size with --shm-size in Docker.", "ray-object-store-exceeds-dev-shm"),
        ("2023-07-03 03:27:55,911 WARNING services.py:1826 -- WARNING: The object store is using "
         "/tmp instead of /dev/shm because /dev/shm has only 67108864 bytes available. This will "
         "harm performance!", None),
    ],
)  # fmt: skip
def test_ray_refusing_an_object_store_larger_than_shm_is_fatal(
    line: str, signature: str | None
) -> None:
    """ray.init raises when the object store it is configured for exceeds /dev/shm (above
    10 GB): the container's --shm-size. The control: below that Ray falls back to /tmp with a
    warning and runs on."""
    from agent.signatures import scan

    fatal = {m.signature for m in scan([line]) if m.strength == "fatal"}
    assert ("ray-object-store-exceeds-dev-shm" in fatal) is bool(signature), fatal
