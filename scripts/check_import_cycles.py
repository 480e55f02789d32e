"""Fails when djqueue's modules import each other in a cycle (imports inside functions
count too). import-linter's layers contract orders the packages; this checks the
modules within them. Prints each cycle found."""

from __future__ import annotations

import sys

import grimp

sys.path.insert(0, ".")  # run from the repository root


def cycles(package: str) -> list[list[str]]:
    graph = grimp.build_graph(package)
    modules = sorted(m for m in graph.modules if m.startswith(package))
    edges = {m: sorted(i for i in graph.find_modules_directly_imported_by(m)
                       if i.startswith(package)) for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(module: str) -> None:  # Tarjan's strongly connected components
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for other in edges[module]:
            if other not in index:
                connect(other)
                low[module] = min(low[module], low[other])
            elif other in on_stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for module in modules:
        if module not in index:
            connect(module)
    return found


if __name__ == "__main__":
    found = cycles("djqueue")
    for component in found:
        print("import cycle among:", ", ".join(component))
    print(f"{len(found)} import cycle(s) among djqueue's modules.")
    sys.exit(1 if found else 0)
