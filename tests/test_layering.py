"""The house's layering, read from the code's own imports (ast), so it cannot drift silently.

(a) No import circle between any two modules of Pivot's packages; an import inside a function
    or under TYPE_CHECKING counts too, since it only hides the circle from the interpreter.
(b) `store` is the ground floor of what is kept: it imports nothing from agent, loop or server.
(c) `tools` reaches hosts only: it imports nothing from agent, store, loop or server.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = (
    "agent",
    "store",
    "loop",
    "server",
    "tools",
    "evals",
    "bench",
    "watch",
    "cards",
    "prompts",
)


def _modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for pkg in PACKAGES:
        for path in (REPO / pkg).rglob("*.py"):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The module an import loads: the longest dotted prefix that is one of ours."""
    parts = name.split(".")
    while parts:
        dotted = ".".join(parts)
        if dotted in modules:
            return dotted
        parts.pop()
    return None


def _imports(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    is_pkg = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                anchor = anchor if is_pkg else anchor[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            # `from pkg import sub` loads the submodule; `from mod import name` loads mod
            names = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in modules]
            names = names or [base]
        for name in names:
            target = _resolve(name, modules)
            if target is not None and target != module:
                out.add(target)
    return out


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {m: _imports(m, p, modules) for m, p in modules.items()}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        m = stack.pop()
                        on_stack.discard(m)
                        comp.append(m)
                        if m == node:
                            break
                    if len(comp) > 1:
                        found.append(sorted(comp))
    return found


def _crossings(graph: dict[str, set[str]], room: str, forbidden: tuple[str, ...]) -> list[str]:
    return sorted(
        f"{m} -> {t}"
        for m, targets in graph.items()
        if m.split(".")[0] == room
        for t in targets
        if t.split(".")[0] in forbidden
    )


def test_no_import_circles() -> None:
    graph = _graph()
    circles = _circles(graph)
    detail = [
        " <-> ".join(c)
        + ": "
        + "; ".join(f"{m} -> {t}" for m in c for t in sorted(graph[m]) if t in c)
        for c in circles
    ]
    assert not circles, "import circles:\n" + "\n".join(detail)


def test_store_imports_nothing_above_it() -> None:
    assert _crossings(_graph(), "store", ("agent", "loop", "server")) == []


def test_tools_import_no_room_above_them() -> None:
    assert _crossings(_graph(), "tools", ("agent", "store", "loop", "server")) == []


def test_the_reader_sees_a_circle() -> None:
    """The checker itself: a planted two-module circle is found, a chain is not."""
    assert _circles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    assert _circles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
