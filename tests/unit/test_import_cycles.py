"""No import cycle among cellgate's modules (issue 30), computed from the source with ``ast``.

The graph has one node per module of the host (``gate/``), the kernel (``kernel/``), the extensions
(``extensions/``) and the JupyterLab server extension (``labextension/``), and an edge for every import of one
of them by another: absolute and relative, ``import a.b`` and ``from a import b`` (to ``a.b`` when ``b`` is a
submodule, else to ``a``), at module level or inside a function (a lazy import is still a dependency: it only
moves the failure to the first call). An import names its module only, not the packages above it: running
``a/__init__.py`` first is Python's doing, not a dependency the importer chose.

Imports under ``if TYPE_CHECKING:`` count. They do not run, but they are dependencies all the same: mypy and a
reader follow them, import-linter (grimp) counts them too so the two checks agree, the lazy faces
(``cellgate.gate``, ``cellgate.gate.ext``) show their real, run-time dependencies only there, and a cycle hidden
behind ``TYPE_CHECKING`` is one that breaks the day a name is needed at run time (a pydantic field, a
``get_type_hints``) or is worked around with ``Any``. Imports through ``importlib`` with a computed name are not
seen (the faces' mappings): their ``TYPE_CHECKING`` twins are.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# folder on sys.path -> the top-level package under it
SOURCES = {"gate": "cellgate/gate", "kernel": "cellgate/kernel", "extensions": "cellgate/extensions",
           "labextension": "cellgate_jupyterlab"}

# Cycles allowed for now (none since issue 30's rooms landed). An entry is an import edge (importer, imported)
# taken out of the graph; one that no longer exists fails the test, so the lists only shrink.
KNOWN: dict[tuple[str, str], str] = {}
# The same between rooms (a subpackage taken whole; a top-level module is a room of its own).
KNOWN_ROOMS: dict[tuple[str, str], str] = {}

def module_name(path: Path, base: Path) -> str:
    parts = list(path.relative_to(base).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def find_modules(sources: Mapping[Path, str]) -> dict[str, Path]:
    """Every module under each ``base / package`` of ``sources``: dotted name -> file."""
    found: dict[str, Path] = {}
    for base, package in sources.items():
        for path in sorted((base / package).rglob("*.py")):
            if "__pycache__" not in path.parts:
                found[module_name(path, base)] = path
    return found


def imported(module: str, path: Path, known: Iterable[str]) -> Iterator[str]:
    """The modules of ``known`` that ``module`` (at ``path``) imports, anywhere in its source."""
    names = set(known)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")  # level 1 is the package itself, each further level one up
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in names else base for a in node.names]
        else:
            continue
        for target in targets:
            if target in names and target != module:
                yield target


def import_graph(modules: Mapping[str, Path]) -> dict[str, set[str]]:
    return {name: set(imported(name, path, modules)) for name, path in modules.items()}


def strongly_connected(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components, iteratively (no recursion limit); each component sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work = [(root, iter(sorted(graph[root])))]
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(sorted(component))
    return components


def cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    return sorted(c for c in strongly_connected(graph) if len(c) > 1)


def describe(component: list[str], graph: Mapping[str, set[str]], what: str = "modules") -> str:
    members = set(component)
    edges = sorted(f"{a} -> {b}" for a in component for b in graph[a] & members)
    return f"{len(component)} {what}: " + "; ".join(edges)


def room(module: str) -> str:
    """The room a module is in: ``cellgate.gate.calls.policy`` -> ``cellgate.gate.calls``; a face is its own."""
    parts = module.split(".")
    return ".".join(parts[:3] if parts[0] == "cellgate" else parts[:1])


def rooms(graph: Mapping[str, set[str]]) -> dict[str, set[str]]:
    collapsed: dict[str, set[str]] = {}
    for importer, targets in graph.items():
        collapsed.setdefault(room(importer), set()).update(room(t) for t in targets if room(t) != room(importer))
    return collapsed


def cellgate_graph() -> dict[str, set[str]]:
    """The graph of every source folder's modules; it must hold each folder's package and their imports (a graph
    walked over nothing, a moved folder or a parser that sees no import, has no cycle and proves nothing)."""
    graph = import_graph(find_modules({ROOT / base: package for base, package in SOURCES.items()}))
    for package in SOURCES.values():
        top = package.replace("/", ".")
        inside = [name for name in graph if name == top or name.startswith(f"{top}.")]
        assert inside and any(graph[name] for name in inside), f"the graph has no module or import of {top}"
    assert len(graph) >= 100 and sum(map(len, graph.values())) >= 300, (len(graph), sum(map(len, graph.values())))
    return graph


def without_known(graph: dict[str, set[str]], known: Mapping[tuple[str, str], str]) -> dict[str, set[str]]:
    stale = [edge for edge in known if edge[1] not in graph.get(edge[0], set())]
    assert not stale, f"these allow-listed imports are gone (a cycle was broken): remove them from the list: {stale}"
    return {importer: targets - {t for i, t in known if i == importer} for importer, targets in graph.items()}


def test_no_import_cycle_among_cellgates_modules() -> None:
    graph = without_known(cellgate_graph(), KNOWN)
    found = cycles(graph)
    assert not found, "import cycles (modules that import each other; break one edge):\n" + "\n".join(
        describe(c, graph) for c in found)


def test_no_import_cycle_among_the_rooms() -> None:
    """config imports calls.policy while calls.sources imports config is no cycle of modules, but one of rooms."""
    graph = without_known(rooms(cellgate_graph()), KNOWN_ROOMS)
    assert len(graph) >= 10 and sum(map(len, graph.values())) >= 20, graph  # rooms, and imports between them
    found = cycles(graph)
    assert not found, "rooms that import each other (break one edge):\n" + "\n".join(
        describe(c, graph, "rooms") for c in found)


def test_the_graph_sees_every_kind_of_import(tmp_path: Path) -> None:
    """Control: a planted cycle through each form of import is found, and an acyclic package passes."""
    pkg = tmp_path / "planted"
    (pkg / "sub").mkdir(parents=True)
    files = {
        "__init__.py": "",
        "a.py": "from planted import b\n",  # from-import of a submodule
        "b.py": "from .sub import c\n",  # relative, of a submodule
        "sub/__init__.py": "",
        "sub/c.py": "def f():\n    from ..d import thing\n",  # in a function, relative two levels up, of a name
        "d.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import planted.e\nthing = 1\n",
        "e.py": "import planted.a\n",  # plain import closes the loop a -> b -> sub.c -> d -> e -> a
        "alone.py": "import planted\nimport os\n",  # to the package and outside: no cycle
    }
    for name, text in files.items():
        (pkg / name).write_text(text)
    graph = import_graph(find_modules({tmp_path: "planted"}))
    assert graph["planted.sub.c"] == {"planted.d"}
    assert graph["planted.alone"] == {"planted"}
    assert cycles(graph) == [["planted.a", "planted.b", "planted.d", "planted.e", "planted.sub.c"]]
    (pkg / "e.py").write_text("")
    assert cycles(import_graph(find_modules({tmp_path: "planted"}))) == []


def test_tarjan_separates_components() -> None:
    graph = {"a": {"b"}, "b": {"a", "c"}, "c": {"d"}, "d": {"c"}, "e": {"e", "a"}}
    assert cycles(graph) == [["a", "b"], ["c", "d"]]  # two loops joined one way; a self-import is not a cycle here
