"""Every relative link in README.md and docs/ names a file or folder that exists."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parent.parent
#: [text](target) and [text](target "title"); images too. Code spans are removed first.
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
CODE = re.compile(r"```.*?```|`[^`\n]*`", re.S)


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def broken_links(page: Path) -> list[str]:
    text = CODE.sub("", page.read_text(encoding="utf-8"))
    out = []
    for target in LINK.findall(text):
        if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL (http:, mailto:) or an anchor in the same page
        path = unquote(target.split("#", 1)[0])
        resolved = (ROOT / path.lstrip("/")) if path.startswith("/") else (page.parent / path)
        if not resolved.exists():
            out.append(f"{page.relative_to(ROOT)}: {target}")
    return out


def test_every_relative_link_resolves() -> None:
    broken = [b for p in pages() for b in broken_links(p)]
    assert not broken, "broken relative links:\n" + "\n".join(broken)


def test_the_checker_sees_a_broken_link(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    (tmp_path / "there.md").write_text("x")
    page.write_text(
        "[ok](there.md) [anchor](#a) [web](https://example.com) `[code](nowhere.md)`\n"
        "[gone](missing.md#part)\n"
    )
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        assert broken_links(page) == ["page.md: missing.md#part"]
    finally:
        ROOT = saved


def test_front_page_is_short() -> None:
    assert (ROOT / "README.md").stat().st_size <= 10 * 1024
