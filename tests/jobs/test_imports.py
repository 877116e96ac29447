"""jobs/ imports no module of its own that imports it back, at module level or inside a function: a cycle
hides which module owns a rule and breaks when either is imported first. Read from the source (ast), nothing
imported."""

from __future__ import annotations

import ast
from pathlib import Path

import jobs

PACKAGE = Path(jobs.__file__).parent


def _imported(tree: ast.AST, modules: set[str]) -> set[str]:
    """The jobs modules a file imports anywhere in it (`import jobs.x`, `from jobs.x import ...`,
    `from jobs import x`)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[1] for alias in node.names if alias.name.startswith("jobs.")}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module is not None:
            if node.module == "jobs":
                found |= {alias.name for alias in node.names}
            elif node.module.startswith("jobs."):
                found.add(node.module.split(".")[1])
    return found & modules


def _graph() -> dict[str, set[str]]:
    files = {path.stem: path for path in PACKAGE.glob("*.py") if path.stem != "__init__"}
    return {name: _imported(ast.parse(path.read_text()), set(files)) - {name} for name, path in files.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as the modules along it (first repeated last), or None."""
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> list[str] | None:
        if name in path:
            return path[path.index(name):] + [name]
        if name in done:
            return None
        for imported in sorted(graph[name]):
            if (found := visit(imported, [*path, name])) is not None:
                return found
        done.add(name)
        return None

    return next((c for name in sorted(graph) if (c := visit(name, [])) is not None), None)


def test_the_jobs_package_has_no_import_cycle() -> None:
    graph = _graph()
    assert {"embedding", "multivector", "windows", "local"} <= set(graph)  # the files were read
    assert "options" in graph["embedding"]  # and their imports
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_a_cycle_is_found() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
