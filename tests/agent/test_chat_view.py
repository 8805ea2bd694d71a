"""How the chat wraps and styles one line: a table of cases, no terminal needed."""

from __future__ import annotations

import io

import pytest

from agent.chat_view import ChatView, line_style, wrap


@pytest.mark.parametrize(
    "line,lead,width,rows",
    [
        ("short", "pivot> ", 80, ["pivot> short"]),
        ("no terminal, no wrap " * 10, "pivot> ", None, ["pivot> " + "no terminal, no wrap " * 10]),
        ("aaa bbb ccc ddd", "pivot> ", 16, ["pivot> aaa bbb", "       ccc ddd"]),
        ("-    x = call(a, b)", "    ", 18, ["    -    x =", "         call(a,", "         b)"]),
        ("+y = f(one, two)", "    ", 14, ["    +y =", "     f(one,", "     two)"]),
    ],
)  # fmt: skip
def test_wrap_keeps_the_lines_indent(
    line: str, lead: str, width: int | None, rows: list[str]
) -> None:
    assert wrap(line, lead, width) == rows


@pytest.mark.parametrize(
    "kind,line,style",
    [("diff", "-a", "red"), ("diff", "+a", "green"), ("diff", "--- a", "bold"),
     ("diff", "@@ -1 +1 @@", "cyan"), ("diff", " same", "dim"), ("agent", "Root cause: x", "bold"),
     ("agent", "Next step: y", "")],
)  # fmt: skip
def test_line_style(kind: str, line: str, style: str) -> None:
    assert line_style(kind, line) == style  # type: ignore[arg-type]


def test_not_a_terminal_prints_plain_text() -> None:
    out = io.StringIO()
    ChatView(out).say("[red]not markup[/] " + "x" * 300 + "\nsecond", "pivot> ", "agent")
    assert out.getvalue() == "pivot> [red]not markup[/] " + "x" * 300 + "\n       second\n"
