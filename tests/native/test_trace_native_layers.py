"""The reading layer's imports (issue 39): ``nsysan/trace`` has no import circle and imports nothing
above it (analyses, rules, the analysis, the report, the command line); ``nsysan/_native`` (the C
extension and its numpy twins) and ``nsysan/_atomic`` import nothing of nsysan but ``_native``
itself, so every layer may use them. Imports are read from the source with ``ast``, function-level
ones included (a lazy import is still an edge)."""

from __future__ import annotations

import ast
from pathlib import Path

import nsysan

PKG = Path(nsysan.__file__).resolve().parent
ABOVE = ("nsysan.analyses", "nsysan.rules", "nsysan.analysis", "nsysan.report", "nsysan.cli", "nsysan.pipeline",
         "nsysan.cluster", "nsysan.compare")


def _modules() -> dict[str, Path]:
    out = {}
    for p in PKG.rglob("*.py"):
        parts = list(p.relative_to(PKG.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The nsysan modules ``name`` imports (``from pkg import mod`` names the module, else the package)."""
    pkg = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("nsysan"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")[:len(pkg.split(".")) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod.startswith("nsysan"):
                found.update(f"{mod}.{a.name}" if f"{mod}.{a.name}" in modules else mod for a in node.names)
    return {m for m in found if m != name}


def _graph(prefix: str) -> dict[str, set[str]]:
    modules = _modules()
    return {m: _imports(m, p, modules) for m, p in modules.items() if m == prefix or m.startswith(prefix + ".")}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle among the graph's own modules, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph[m] & graph.keys()):
            if state.get(n) == 1:
                return stack[stack.index(n):] + [n]
            if n not in state and (found := visit(n)) is not None:
                return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m)) is not None:
            return found
    return None


def test_trace_has_no_import_circle():
    assert _cycle(_graph("nsysan.trace")) is None


def test_trace_imports_nothing_above_it():
    up = {(m, n) for m, deps in _graph("nsysan.trace").items() for n in deps
          if any(n == a or n.startswith(a + ".") for a in ABOVE)}
    assert up == set()


def test_native_and_atomic_import_nothing_of_nsysan_but_native():
    graph = {**_graph("nsysan._native"), **_graph("nsysan._atomic")}
    assert set(graph) >= {"nsysan._native", "nsysan._native.search", "nsysan._native.windows", "nsysan._atomic"}
    assert {(m, n) for m, deps in graph.items() for n in deps if not n.startswith("nsysan._native")} == set()


def test_the_walk_sees_a_circle_and_a_function_level_import():
    """The walk itself: a circle through a function-level import is found."""
    assert _cycle({"a": {"b"}, "b": {"a"}}) == ["a", "b", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
    modules = _modules()
    lazy = _imports("nsysan.trace", modules["nsysan.trace"], modules)  # PEP 562: imports inside __getattr__
    assert "nsysan.trace.load" in lazy
