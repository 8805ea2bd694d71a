"""How `pivot chat` prints: colour when the terminal has it, diffs highlighted, and long lines
wrapped under their own indentation instead of the terminal's column 0.

A terminal wraps a long line at column 0, so a wrapped diff line or log quote loses the indent
that says what it belongs to; here a line longer than the terminal is wrapped at a space and
every continuation starts under the line's text (a diff line's code, not its `+`). Output that is
not a terminal (a pipe, a test's StringIO) is left as plain, unwrapped text.

Host text is data: it is printed as `rich.text.Text`, never parsed as markup.
"""

from __future__ import annotations

import re
import textwrap
from typing import Literal, TextIO

from rich.console import Console
from rich.text import Text

Kind = Literal["agent", "step", "note", "diff", "plain"]

LEAD_STYLE: dict[Kind, str] = {
    "agent": "bold cyan",
    "step": "dim",
    "note": "yellow",
    "diff": "",
    "plain": "",
}

#: The leading marker and indentation a continuation line hangs under.
HANG = re.compile(r"[+\-]?\s*")


def line_style(kind: Kind, line: str) -> str:
    """The style of one line: diff lines by their marker, the root cause in bold."""
    if kind == "diff":
        if line.startswith(("+++", "---")):
            return "bold"
        if line.startswith("+"):
            return "green"
        if line.startswith("-"):
            return "red"
        if line.startswith("@@"):
            return "cyan"
        return "dim"
    if line.startswith(("Root cause:", "Still ")):
        return "bold"
    if line.startswith(("Ruled out", "Ruling out")):
        return "dim"
    return ""


def wrap(line: str, lead: str, width: int | None) -> list[str]:
    """`lead + line`, wrapped at `width` with continuations under the line's own text."""
    if width is None or len(lead) + len(line) <= width:
        return [lead + line]
    hang = HANG.match(line)
    extra = len(hang.group()) if hang else 0
    indent = " " * min(len(lead) + extra, width // 2)
    w = textwrap.TextWrapper(
        width=width,
        initial_indent=lead,
        subsequent_indent=indent,
        break_on_hyphens=False,
        expand_tabs=False,
        replace_whitespace=False,
    )
    return w.wrap(line) or [lead]


class ChatView:
    """Writes the chat's lines to `out`; colour and wrapping only when `out` is a terminal."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.console = Console(file=out, highlight=False, markup=False, emoji=False)
        self.colour = self.console.is_terminal and self.console.color_system is not None

    def width(self) -> int | None:
        # one column short: a line that fills the last column can leave the cursor hanging
        return max(20, self.console.width - 1) if self.console.is_terminal else None

    def say(self, text: str, lead: str, kind: Kind = "plain") -> None:
        pad = " " * len(lead)
        width = self.width()
        for i, line in enumerate(text.splitlines() or [""]):
            rows = wrap(line, lead if i == 0 else pad, width)
            style = line_style(kind, line)
            for j, row in enumerate(rows):
                self._row(row, len(lead) if i == 0 and j == 0 else 0, kind, style)
        self.out.flush()

    def _row(self, row: str, lead_len: int, kind: Kind, style: str) -> None:
        if not self.colour:
            self.out.write(row + "\n")
            return
        text = Text(row[:lead_len], style=LEAD_STYLE[kind])
        text.append(row[lead_len:], style=style)
        self.console.print(text, soft_wrap=True, crop=False)
