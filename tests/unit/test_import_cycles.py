"""No import circle anywhere in ``multikafka`` (every distribution's part,
imports under ``TYPE_CHECKING`` and inside functions included): a module
that needs another's names and is needed by it is one module, or two that
a third brings together. The graph is grimp's, as ``make layers`` sees it."""

from __future__ import annotations

import grimp

import multikafka  # noqa: F401  (joins every distribution's folder into multikafka.__path__)


def circles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph.modules):
        if root in index:
            continue
        # iterative depth-first search: (module, its imports not visited yet)
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, edges = work[-1]
            w = next(edges, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.find_modules_directly_imported_by(w)))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_circles_are_found() -> None:
    """The check itself: a graph with a circle and one without."""
    graph = grimp.ImportGraph()
    for m in ("p", "p.a", "p.b", "p.c"):
        graph.add_module(m)
    graph.add_import(importer="p.a", imported="p.b")
    graph.add_import(importer="p.b", imported="p.c")
    assert circles(graph) == []
    graph.add_import(importer="p.c", imported="p.a")
    assert circles(graph) == [["p.a", "p.b", "p.c"]]


def test_no_module_of_multikafka_imports_itself_round_a_circle() -> None:
    graph = grimp.build_graph("multikafka", "pyspark_multikafka")
    assert len(graph.modules) > 100
    assert circles(graph) == []
