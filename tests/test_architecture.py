"""The house rules of docs/ARCHITECTURE.md, measured from the code's own imports (module level and inside
functions alike): how deep ``predictor.compile`` reaches and how large a module or class grows."""

from __future__ import annotations

import ast
import functools

from test_layout import PACKAGE, ROOT, _imports, _module

ENTRY = "predictor.runtime.compile"  # where predictor.compile is defined
MAX_DEPTH = 5
MAX_MODULE_LINES = 400
MAX_CLASS_LINES = 250


def _graph() -> dict[str, set[str]]:
    """Each package module -> the package modules it imports (a dotted name is cut back to the module it names)."""
    files = {_module(p): p for p in PACKAGE.rglob("*.py")}
    graph = {}
    for name, path in files.items():
        found = set()
        for target in _imports(path):
            while target and target not in files:
                target = target.rpartition(".")[0]
            if target and target != name and not name.startswith(target + "."):
                found.add(target)
        graph[name] = found
    return graph


def _depths(graph: dict[str, set[str]], start: str) -> dict[str, int]:
    """Each module reachable from ``start`` -> the longest import chain that reaches it (the graph is acyclic)."""
    @functools.cache
    def below(node: str) -> int:
        return max((1 + below(t) for t in graph[node]), default=0)

    reach, todo = {start}, [start]
    while todo:
        for t in graph[todo.pop()] - reach:
            reach.add(t)
            todo.append(t)
    return {m: below(m) for m in reach}


# import circles: tests/test_readable_project.py::test_no_import_circles (the whole project, this package included)


def test_the_graph_reader_measures_a_chain():
    assert _depths({"a": {"b", "c"}, "b": {"c"}, "c": set()}, "a") == {"a": 2, "b": 1, "c": 0}


def _longest_chain() -> tuple[int, list[str]]:
    graph = _graph()
    depth = _depths(graph, ENTRY)[ENTRY]
    chain, node = [ENTRY], ENTRY
    while graph[node]:
        node = max(graph[node], key=lambda t: _depths(graph, t)[t])
        chain.append(node)
    return depth, chain


def test_predictor_compile_reaches_no_module_more_than_five_imports_deep():
    depth, chain = _longest_chain()
    assert depth <= MAX_DEPTH, " -> ".join(chain)


def test_the_depth_reader_names_the_longest_chain():
    depth, chain = _longest_chain()
    assert chain[0] == ENTRY and len(chain) == depth + 1


def test_no_module_over_400_lines():
    long = {str(p.relative_to(ROOT)): n for p in sorted(PACKAGE.rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert long == {}


def test_no_class_over_250_lines():
    long = {f"{p.relative_to(ROOT)}:{node.name}": node.end_lineno - node.lineno + 1
            for p in sorted(PACKAGE.rglob("*.py")) for node in ast.walk(ast.parse(p.read_text()))
            if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > MAX_CLASS_LINES}
    assert long == {}
