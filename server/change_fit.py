"""Whether the change an approval proposes is the report's next step, and if not, why not.

The rulebook offers a reversible fix (restore a config from its known-good copy) after the
diagnosis, whatever the diagnosis says to do next; so the page said "the change for this next
step is below" while the next step raised `--mem-fraction-static` and the change restored
`sitecustomize.py`. This says which it is, in words made only of the report's and the request's
own fields, so the person approving knows what approving does and does not do.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from store.records import ApprovalRequest


class ChangeFit(BaseModel):
    """`agrees`: the next step names what the change touches; `why`: one or two sentences."""

    agrees: bool
    why: str


def _targets(args: dict[str, Any]) -> list[str]:
    """What the change acts on, as a person would name it: files by path and base name, and any
    other plain value (a pid, a unit) except the free-text reason."""
    out: list[str] = []
    for key, value in args.items():
        if key == "reason" or not isinstance(value, (str, int)) or isinstance(value, bool):
            continue
        text = str(value).strip()
        if not text:
            continue
        out.append(text)
        if "/" in text:
            out.append(text.rstrip("/").rsplit("/", 1)[-1])
    return out


def _quoted(text: str, limit: int = 240) -> str:
    """The whole next step, cut at a word only when long: its first sentence alone often
    holds only the check and not the fix ("Check ...; then raise --mem-fraction-static")."""
    text = " ".join(text.split()).rstrip(".")
    if len(text) <= limit:
        return text
    return text[: limit - 1].rsplit(" ", 1)[0] + "…"


def _what(req: ApprovalRequest) -> str:
    path, source = req.args.get("path"), req.args.get("copy_from") or req.args.get("src")
    if isinstance(path, str) and isinstance(source, str):
        return f"restores {path} from {source}"
    if isinstance(path, str):
        return f"changes {path}"
    return f"runs {req.tool}"


def change_fit(req: ApprovalRequest, next_step: str, root_cause: str | None) -> ChangeFit:
    step = next_step.strip()
    low = step.lower()
    if step and any(t.lower() in low for t in _targets(req.args) if len(t) > 2):
        return ChangeFit(agrees=True, why="The change below carries out this next step.")
    cause = f" about {root_cause}" if root_cause else ""
    because = req.reason.strip().rstrip(".") or "its arguments say what it does"
    if not step:
        return ChangeFit(
            agrees=False,
            why=f"The report names no next step; the change below {_what(req)} because {because}.",
        )
    return ChangeFit(
        agrees=False,
        why=f"The change below is not this next step. The next step{cause} says: "
        f"{_quoted(step)}. The change {_what(req)} instead, because {because}. "
        "Approving it does not do the next step.",
    )
