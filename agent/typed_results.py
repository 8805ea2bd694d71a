"""An observation's data read back as its tool's typed result, or a loud error.

Observations carry the tool's result dumped to JSON (`agent/observe.call`), so they can be
stored, replayed and sent to a browser. Code that draws conclusions from them (agent/facts.py)
reads that dump back through the tool's own `Result` model, found on the tool's registry spec,
instead of guessing key names: when a tool renames a field, the reader fails here with the
field's path rather than quietly finding nothing and calling a live server dead.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import ValidationError

from agent.state import Observation
from tools.base import ToolResult
from tools.registry import TOOLS

R = TypeVar("R", bound=ToolResult)


class ResultShapeError(ValueError):
    """An observation's data is not the typed result its tool returns (a renamed or unknown
    field, a wrong type): the code that dumped it and the code reading it disagree."""


def typed(o: Observation, expect: type[R]) -> R:
    """`o["data"]` validated into the registry's result model of `o["tool"]`.

    `expect` is the model the caller reads (for type checking); it must be the tool's own.
    Unknown keys fail at every depth, not only at the top where `ToolResult` forbids them:
    pydantic ignores a nested model's extra keys, which is exactly how a renamed field of a
    GPU row or a process record would vanish.
    """
    spec = TOOLS.get(o["tool"])
    where = f"observation {o['id']} ({o['tool']})"
    if spec is None:
        raise ResultShapeError(f"{where}: no tool of that name is registered")
    if not issubclass(spec.result, expect):
        raise ResultShapeError(
            f"{where}: read as {expect.__module__}.{expect.__name__}, but the tool returns "
            f"{spec.result.__module__}.{spec.result.__name__}"
        )
    try:
        res = spec.result.model_validate(o["data"])
    except ValidationError as exc:
        errs = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise ResultShapeError(f"{where}: its data is not a {o['tool']} result: {errs}") from exc
    unknown = _unknown_keys(o["data"], res.model_dump(mode="json"), "")
    if unknown:
        raise ResultShapeError(
            f"{where}: its data has fields the {o['tool']} result does not: {', '.join(unknown)}"
        )
    return res  # type: ignore[return-value]  # issubclass(spec.result, expect) checked above


def _unknown_keys(data: Any, dumped: Any, path: str) -> list[str]:
    """Keys of `data` that re-dumping the validated model dropped (a dump of the same model
    loses none), with their dotted paths."""
    out: list[str] = []
    if isinstance(data, dict) and isinstance(dumped, dict):
        for k, v in data.items():
            if k not in dumped:
                out.append(f"{path}{k}")
            else:
                out += _unknown_keys(v, dumped[k], f"{path}{k}.")
    elif isinstance(data, list) and isinstance(dumped, list) and len(data) == len(dumped):
        for i, (a, b) in enumerate(zip(data, dumped, strict=True)):
            out += _unknown_keys(a, b, f"{path}{i}.")
    return out
