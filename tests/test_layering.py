"""The layering of DESIGN §2 ("rules of the house"), checked on the sources (issue 16 item 8).

Every module under ``src/sparksub`` is parsed with ``ast`` -- never imported -- and every import it makes
is read: at module level and inside functions (a deferred import is still a dependency), relative ones
resolved against the module's package, ``importlib.import_module("…")`` with a literal name included.
The rules:

(a) only ``sparksub.runtime`` and ``sparksub.jvm`` import ``pyspark`` or ``py4j``;
(b) the planner imports neither the operators nor the runtime or the engine facade;
(c) the pure layers (``operators``, ``planner``, ``grammar``) import none of ``runtime``, ``engine``, ``jvm``;
(d) production code imports no test module (the oracles and strategies under ``tests/``);
(e) no import cycle among sparksub's modules.

A violation names the file and line of the import; a cycle names its modules and the import that closes
each step.  ``test_the_checker_catches_each_kind`` feeds the checker a synthetic package with one
violation of each kind, so that an empty report here means a clean tree, not a blind checker.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
TESTS = ROOT / "tests"
PACKAGE = "sparksub"

#: the only packages that may talk to Spark (a)
SPARK_PACKAGES = ("sparksub.runtime", "sparksub.jvm")
SPARK_MODULES = ("pyspark", "py4j")
#: the layers that must not reach the Spark side (c); the planner must not reach the operators either (b)
PURE_PACKAGES = ("sparksub.operators", "sparksub.planner", "sparksub.grammar")
SPARK_SIDE = ("sparksub.runtime", "sparksub.engine", "sparksub.control", "sparksub.jvm")
PLANNER_FORBIDDEN = ("sparksub.operators", "sparksub.runtime", "sparksub.engine", "sparksub.control")


@dataclass(frozen=True)
class Source:
    """One module's text: its dotted ``name``, the ``path`` a report shows, whether it is a package's
    ``__init__`` (relative imports resolve against the package itself, not its parent)."""
    name: str
    path: str
    text: str
    is_package: bool = False


@dataclass(frozen=True)
class Import:
    """``module`` (at ``path:line``) imports ``target``: a known module when the name resolves to one
    (``from sparksub.planner import ir`` -> ``sparksub.planner.ir``), else the name as written."""
    module: str
    target: str
    path: str
    line: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.module} imports {self.target}"


def within(name: str, packages) -> bool:
    """Whether the dotted ``name`` is one of ``packages`` or inside one."""
    return any(name == p or name.startswith(p + ".") for p in packages)


def load_sources(src: Path = SRC, package: str = PACKAGE) -> dict[str, Source]:
    """Every module of ``package`` under ``src`` by dotted name."""
    out = {}
    for path in sorted((src / package).rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if is_package else parts)
        out[name] = Source(name, str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path),
                           path.read_text(encoding="utf-8"), is_package)
    return out


def _absolute(source: Source, node: ast.ImportFrom) -> str:
    """The module an ``ImportFrom`` names, a relative one resolved (``from ..x import y`` in ``a.b.c``
    -> ``a.x``)."""
    if not node.level:
        return node.module or ""
    package = source.name.split(".") if source.is_package else source.name.split(".")[:-1]
    if node.level - 1 > len(package) - 1:
        raise ValueError(f"{source.path}:{node.lineno}: relative import beyond the top-level package")
    base = package[:len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _literal_import(node: ast.Call) -> str | None:
    """The name in ``importlib.import_module("x")`` / ``import_module("x")`` / ``__import__("x")``."""
    f = node.func
    called = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
    if called in ("import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant) \
            and isinstance(node.args[0].value, str):
        return node.args[0].value
    return None


def find_imports(sources: dict[str, Source]) -> list[Import]:
    """Every import of every module, at any depth of its syntax tree."""
    out = []
    for source in sources.values():
        for node in ast.walk(ast.parse(source.text, filename=source.path)):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _absolute(source, node)
                # ``from pkg import mod`` imports the module pkg.mod; ``from mod import name`` only mod
                names = [f"{base}.{a.name}" if f"{base}.{a.name}" in sources else base for a in node.names]
            elif isinstance(node, ast.Call) and _literal_import(node):
                names = [_literal_import(node)]
            else:
                continue
            out += [Import(source.name, name, source.path, node.lineno) for name in dict.fromkeys(names)]
    return sorted(out, key=lambda i: (i.path, i.line, i.target))


def spark_outside_runtime(imports: list[Import]) -> list[str]:
    """(a) pyspark / py4j imported outside runtime/ and jvm/."""
    return [f"{i}: pyspark and py4j belong in runtime/ or jvm/" for i in imports
            if within(i.target, SPARK_MODULES) and not within(i.module, SPARK_PACKAGES)]


def planner_reaching_down(imports: list[Import]) -> list[str]:
    """(b) the planner importing the operators, the runtime or the engine."""
    return [f"{i}: the planner plans; it never imports operators, runtime or the engine" for i in imports
            if within(i.module, ("sparksub.planner",)) and within(i.target, PLANNER_FORBIDDEN)]


def pure_reaching_spark(imports: list[Import]) -> list[str]:
    """(c) operators, planner and grammar importing runtime, engine or jvm."""
    return [f"{i}: operators, planner and grammar are pure; runtime, engine and jvm build on them" for i in imports
            if within(i.module, PURE_PACKAGES) and within(i.target, SPARK_SIDE)]


def test_module_names(tests: Path = TESTS) -> set[str]:
    """The names a test module can be imported by: ``cayuga_reference``, ``oracles.cayuga_reference``,
    ``tests.oracles.cayuga_reference`` (the test run puts tests/operators and tests/oracles on sys.path)."""
    names = {"tests"}
    for path in tests.rglob("*.py"):
        parts = ("tests",) + path.relative_to(tests).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names |= {".".join(parts[i:]) for i in range(len(parts))}
    return names


def production_importing_tests(imports: list[Import], test_names: set[str]) -> list[str]:
    """(d) a sparksub module importing a test module (an oracle must stay independent of the code)."""
    return [f"{i}: production code never imports a test module" for i in imports
            if any(i.target == n or i.target.startswith(n + ".") for n in test_names)]


def dependency_graph(imports: list[Import], modules) -> dict[str, dict[str, Import]]:
    """module -> {module it imports: the first such import}, among ``modules``; an import of a name that is
    not a module (``from sparksub.jvm import EXTENSION_CLASS``) counts for the nearest enclosing module."""
    graph: dict[str, dict[str, Import]] = {m: {} for m in modules}
    for i in imports:
        target = i.target
        while target and target not in graph:
            target = target.rpartition(".")[0]
        if target and target != i.module and i.module in graph:
            graph[i.module].setdefault(target, i)
    return graph


def strongly_connected(graph: dict[str, dict]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one module (iterative: no recursion limit)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
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
                    out.append(sorted(component))
    return out


def _cycle_through(graph: dict[str, dict[str, Import]], component: list[str]) -> list[Import]:
    """One cycle inside ``component``, from its first module back to it (breadth-first: a shortest one)."""
    start, members = component[0], set(component)
    came_from: dict[str, Import] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w, imp in sorted(graph[v].items()):
                if w not in members or w in came_from:
                    continue
                came_from[w] = imp
                if w == start:
                    path, at = [], start
                    while True:
                        path.append(came_from[at])
                        at = came_from[at].module
                        if at == start:
                            return path[::-1]
                nxt.append(w)
        frontier = nxt
    raise AssertionError(f"no cycle in the component {component}")  # pragma: no cover - Tarjan says there is


def import_cycles(imports: list[Import], modules) -> list[str]:
    """(e) the import cycles among ``modules``: each strongly connected component, with one of its cycles
    spelled out import by import."""
    graph = dependency_graph(imports, modules)
    out = []
    for component in strongly_connected(graph):
        steps = "; ".join(str(i) for i in _cycle_through(graph, component))
        out.append(f"import cycle among {', '.join(component)}: {steps}")
    return out


def violations(sources: dict[str, Source], test_names: set[str]) -> dict[str, list[str]]:
    """Every rule's violations, by rule."""
    imports = find_imports(sources)
    return {"a: pyspark/py4j outside runtime and jvm": spark_outside_runtime(imports),
            "b: planner importing operators/runtime/engine": planner_reaching_down(imports),
            "c: pure layers importing runtime/engine/jvm": pure_reaching_spark(imports),
            "d: production importing test modules": production_importing_tests(imports, test_names),
            "e: import cycles": import_cycles(imports, sources)}


test_module_names.__test__ = False  # a helper named test_*, not a test


# ---- the tree as it is --------------------------------------------------------------------------------

def _report(found: list[str]) -> str:
    return "\n".join(found)


def test_the_sources_follow_the_layering():
    found = violations(load_sources(), test_module_names())
    assert not any(found.values()), "\n\n".join(f"{rule}:\n{_report(v)}" for rule, v in found.items() if v)


def test_the_checker_reads_the_real_tree():
    """Not vacuous on the real sources: the modules, their deferred imports and the oracles are seen."""
    sources = load_sources()
    imports = find_imports(sources)
    assert {"sparksub.engine", "sparksub.runtime.groups", "sparksub.planner.classifier",
            "sparksub.operators.events.nfa"} <= set(sources)
    seen = {(i.module, i.target) for i in imports}
    assert ("sparksub.engine", "sparksub.planner.classifier") in seen                    # module level
    assert ("sparksub.jvm.bridge", "sparksub.runtime.range_join") in seen                # in a method
    assert ("sparksub.runtime.session", "pyspark.sql") in seen                            # in a function
    assert {"cayuga_reference", "oracles.cayuga_reference", "duckdb_oracle", "filter_oracle",
            "range_join_oracle", "event_strategies"} <= test_module_names()


# ---- the checker on a synthetic package ------------------------------------------------------------------

def _synthetic(modules: dict[str, str]) -> dict[str, Source]:
    return {name.removesuffix(".__init__"): Source(name.removesuffix(".__init__"), f"{name}.py", text,
                                                   name.endswith(".__init__"))
            for name, text in modules.items()}


def test_the_checker_catches_each_kind():
    sources = _synthetic({
        "sparksub.__init__": "",
        "sparksub.engine": "from sparksub.planner import ir\n",
        "sparksub.runtime.__init__": "",
        "sparksub.runtime.groups": "import pyspark.sql\nfrom py4j.protocol import Py4JJavaError\n",  # allowed
        "sparksub.jvm.bridge": "def f():\n    from pyspark.sql import DataFrame\n",                   # allowed
        "sparksub.planner.__init__": "",
        "sparksub.planner.ir": "X = 1\n",
        "sparksub.planner.logical": ("def late():\n"
                                     "    from .classifier import NAMES\n"            # (e), deferred, relative
                                     "    return NAMES\n"),
        "sparksub.planner.classifier": ("from sparksub.planner.logical import late\n"
                                        "from ..operators.topk import core\n"          # (b), relative
                                        "import pyspark\n"),                            # (a)
        "sparksub.operators.__init__": "",
        "sparksub.operators.topk.core": "from sparksub.engine import Engine\n",          # (c)
        "sparksub.grammar.events": ("import importlib\n"
                                    "def g():\n"
                                    "    return importlib.import_module('sparksub.jvm.bridge')\n"),  # (c)
        "sparksub.listing": "def h():\n    from oracles.cayuga_reference import run\n",              # (d)
        "sparksub.cli": "from py4j import java_gateway\nimport duckdb_oracle\n",          # (a), (d)
    })
    found = violations(sources, {"tests", "oracles", "oracles.cayuga_reference", "cayuga_reference",
                                 "duckdb_oracle"})
    where = {rule[0]: sorted(v.split(": ", 1)[0] for v in vs) for rule, vs in found.items()}
    assert where["a"] == ["sparksub.cli.py:1", "sparksub.planner.classifier.py:3"]
    assert where["b"] == ["sparksub.planner.classifier.py:2"]
    assert where["c"] == ["sparksub.grammar.events.py:3", "sparksub.operators.topk.core.py:1"]
    assert where["d"] == ["sparksub.cli.py:2", "sparksub.listing.py:2"]
    assert len(found["e: import cycles"]) == 1
    cycle = found["e: import cycles"][0]
    assert cycle.startswith("import cycle among sparksub.planner.classifier, sparksub.planner.logical:")
    assert "sparksub.planner.logical.py:2" in cycle and "sparksub.planner.classifier.py:1" in cycle


def test_the_checker_resolves_names():
    """Relative imports from a package's ``__init__`` and from a module; ``from pkg import module`` as the
    module; a name from a module as that module; a three-module cycle through a package ``__init__``."""
    sources = _synthetic({
        "sparksub.__init__": "from .a import b\n",
        "sparksub.a.__init__": "from . import b\nfrom .b import VALUE\n",
        "sparksub.a.b": "from ..c import thing\n",
        "sparksub.c": "import sparksub\n",
    })
    seen = {(i.module, i.target) for i in find_imports(sources)}
    assert seen == {("sparksub", "sparksub.a.b"), ("sparksub.a", "sparksub.a.b"), ("sparksub.a.b", "sparksub.c"),
                    ("sparksub.c", "sparksub")}
    cycles = import_cycles(find_imports(sources), sources)
    assert len(cycles) == 1 and cycles[0].startswith("import cycle among sparksub, sparksub.a.b, sparksub.c:")
