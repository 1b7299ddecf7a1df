"""The package's import graph: no circle between modules, and every import between rooms points down.

A *room* is a subpackage (``precisionbot/checks``) or a root module (``precisionbot/fmt.py``). Every import is
counted, wherever it stands (top of the module, inside a function, under ``TYPE_CHECKING``): a circle hidden in
a function-level import is still a circle. ``FLOORS`` is the layering docs/architecture.md draws; a new room
fails here until it is given a floor, and an import from a lower floor to a higher one fails as an arrow back up.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "precisionbot"

FLOORS: dict[str, int] = {
    # the ground: no precisionbot imports
    "errors": 0,
    "fmt": 0,
    "untrusted": 0,
    # the environment variables' names, read and set on every floor
    "envvars": 0,
    # pure data and math, and the builtin engine (which knows nothing of precisionbot's checks)
    "metrics": 1,
    "results": 1,
    "builtin": 1,
    # what a run is configured with and talks to
    "config": 2,
    "corpus": 2,
    "engines": 2,
    # every verdict rule, pure: numbers and thresholds in, a verdict out
    "scoring": 3,
    # stores and the outside services
    "baselines": 4,
    "gh": 4,
    "buildkite": 5,
    "runners": 4,
    # which op: drives an engine's tensor dumper (engines) and reads its dumps
    "localize": 4,
    # the checks, then the report on their results
    "checks": 5,
    "report": 6,
    # the composition root
    "commands": 7,
    "cli": 8,
    "__main__": 9,
    "__init__": 0,
}


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


MODULES = _modules()


def _resolve(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(module: str, path: Path) -> Iterator[str]:
    """Every precisionbot module that ``module`` imports (relative imports resolved)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for target in targets:
            found = _resolve(target) if target.startswith("precisionbot") else None
            # Importing a name from one's own package's __init__ (``from precisionbot import __version__``) is
            # reading the package root, not an edge between rooms.
            if found is not None and found != module and found != "precisionbot":
                yield found


GRAPH = {m: set(_imports(m, p)) for m, p in MODULES.items()}


def room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan, iterative)."""
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
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_graph_is_read() -> None:
    # The walk must see the package, or every assertion below would hold vacuously.
    assert len(MODULES) > 100
    assert "precisionbot.checks.golden" in GRAPH["precisionbot.checks.suite"] | GRAPH["precisionbot.checks.registry"]
    assert sum(len(v) for v in GRAPH.values()) > 300


def test_no_import_circle_between_modules() -> None:
    assert _cycles(GRAPH) == []


def test_every_room_has_a_floor() -> None:
    assert {room(m) for m in MODULES} <= set(FLOORS)


def test_no_arrow_points_back_up() -> None:
    up = sorted(
        f"{a} -> {b}"
        for a, targets in GRAPH.items()
        for b in targets
        if room(a) != room(b) and FLOORS[room(a)] <= FLOORS[room(b)]
    )
    assert up == []


def test_scoring_is_pure() -> None:
    # The verdict rules read numbers and thresholds; nothing that talks to an engine, a store or GitHub.
    rooms = {room(b) for a, targets in GRAPH.items() if room(a) == "scoring" for b in targets} - {"scoring"}
    assert rooms <= {"errors", "fmt", "metrics", "results", "config"}


def test_verify_reaches_the_rules_only_through_scoring() -> None:
    # report/verify.py re-derives verdicts on the trusted side from a result directory that PR code wrote: it
    # must use the same rule functions as the checks (scoring), never the checks, the engines or the stores.
    rooms = {room(b) for b in GRAPH["precisionbot.report.verify"]}
    assert "scoring" in rooms
    assert not rooms & {"checks", "engines", "baselines"}


def test_the_composition_root_is_drawn() -> None:
    # cli imports every command module statically, so its arrows are in the graph the floors are checked on.
    commands = {m for m in MODULES if m.startswith("precisionbot.commands.")}
    assert {m for m in GRAPH["precisionbot.cli"] if m.startswith("precisionbot.commands.")} >= {
        m for m in commands if "def register(" in MODULES[m].read_text(encoding="utf-8")
    }


def test_no_private_name_crosses_modules() -> None:
    # A leading underscore says "this module's own": another module that imports it depends on what the owner
    # may change without notice. A name two modules share is public.
    crossing = sorted(
        f"{module}: {node.module}.{alias.name}"
        for module, path in MODULES.items()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("precisionbot")
        for alias in node.names
        if alias.name.startswith("_") and not alias.name.startswith("__")
    )
    assert crossing == []


def test_no_circle_between_rooms() -> None:
    rooms: dict[str, set[str]] = {}
    for a, targets in GRAPH.items():
        rooms.setdefault(room(a), set()).update(room(b) for b in targets if room(b) != room(a))
    assert _cycles(rooms) == []


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        ({"a": {"b"}, "b": {"a"}}, [["a", "b"]]),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
        ({"a": {"b"}, "b": set()}, []),
    ],
)
def test_the_circle_finder_finds_circles(graph: dict[str, set[str]], expected: list[list[str]]) -> None:
    assert _cycles(graph) == expected
