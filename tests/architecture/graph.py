"""The project's import graph, read from source with `ast`: nothing is imported, Django is not needed.

Every import statement of every module is kept (module level, inside functions, under
`if TYPE_CHECKING:`, and `importlib.import_module("...")` with a literal name), resolved to an
absolute dotted name. `from pkg import name` resolves to the submodule `pkg.name` when that is a
module of the project, so that importing a sibling module through its package counts as an edge
to the sibling, not to the package's `__init__`.
"""
from __future__ import annotations

import ast
import functools
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Top-level packages whose modules are "project modules"; a missing one (an app not created yet) is skipped.
PROJECT_PACKAGES = ("gpuplane", "nodes", "scheduler", "lifecycle", "savings", "rollouts", "consolidation", "bench", "tests",
                    "gpuplane_cli")


@dataclass(frozen=True)
class Import:
    """One imported name of one import statement."""

    name: str  # absolute dotted name: "django.db.models", "nodes.models", "scheduler.core.types"
    target: str | None  # the project module it loads (`name` or its longest known prefix); None if external
    line: int
    in_function: bool  # inside a def: runs when called, not when the importer is imported
    type_checking: bool  # under `if TYPE_CHECKING:`: never runs

    def describe(self) -> str:
        """`name (line N, in a function)`, for failure messages."""
        where = [f"line {self.line}"]
        if self.in_function:
            where.append("in a function")
        if self.type_checking:
            where.append("under TYPE_CHECKING")
        return f"{self.name} ({', '.join(where)})"


@dataclass
class ImportGraph:
    """Modules by dotted name with their source paths, and each module's imports."""

    root: Path
    paths: dict[str, Path] = field(default_factory=dict)
    imports: dict[str, list[Import]] = field(default_factory=dict)

    def modules_under(self, package: str) -> list[str]:
        """The modules of `package` (itself included), sorted."""
        return sorted(m for m in self.paths if m == package or m.startswith(package + "."))

    def edges(self, *, include_type_checking: bool = False) -> dict[str, dict[str, Import]]:
        """module -> {imported project module: the first import that makes the edge}, no self-edges."""
        graph: dict[str, dict[str, Import]] = {module: {} for module in self.paths}
        for module, imports in self.imports.items():
            for imported in imports:
                if imported.target is None or imported.target == module:
                    continue
                if imported.type_checking and not include_type_checking:
                    continue
                graph[module].setdefault(imported.target, imported)
        return graph

    def relative(self, module: str) -> str:
        """The module's file relative to the repository root, for failure messages."""
        return str(self.paths[module].relative_to(self.root))


def module_name(root: Path, path: Path) -> str:
    """`nodes/cluster/base.py` -> `nodes.cluster.base`; `nodes/__init__.py` -> `nodes`."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


class _ImportCollector(ast.NodeVisitor):
    """Collects raw imports as (absolute module, imported names or None, line, in_function, type_checking)."""

    def __init__(self, module: str, is_package: bool) -> None:
        self.module = module
        self.is_package = is_package
        self.found: list[tuple[str, tuple[str, ...] | None, int, bool, bool]] = []
        self._function_depth = 0
        self._type_checking_depth = 0

    def _flags(self) -> tuple[bool, bool]:
        return self._function_depth > 0, self._type_checking_depth > 0

    def _visit_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        self._function_depth += 1
        self.generic_visit(node)
        self._function_depth -= 1

    visit_FunctionDef = _visit_function
    visit_AsyncFunctionDef = _visit_function
    visit_Lambda = _visit_function

    def visit_If(self, node: ast.If) -> None:
        if not _is_type_checking(node.test):
            self.generic_visit(node)
            return
        self.visit(node.test)
        self._type_checking_depth += 1
        for statement in node.body:
            self.visit(statement)
        self._type_checking_depth -= 1
        for statement in node.orelse:
            self.visit(statement)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.found.append((alias.name, None, node.lineno, *self._flags()))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = self._absolute(node.module, node.level)
        self.found.append((base, tuple(alias.name for alias in node.names), node.lineno, *self._flags()))

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name in ("import_module", "__import__") and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str) and not first.value.startswith("."):
                self.found.append((first.value, None, node.lineno, *self._flags()))
        self.generic_visit(node)

    def _absolute(self, module: str | None, level: int) -> str:
        if level == 0:
            return module or ""
        package = self.module.split(".") if self.is_package else self.module.split(".")[:-1]
        base = package[: len(package) - (level - 1)] if level > 1 else package
        return ".".join([*base, module] if module else base)


def _resolve(name: str, modules: set[str], project_packages: Iterable[str]) -> str | None:
    """The project module `name` loads: itself, else its longest prefix that is a module; None if external."""
    if name.split(".")[0] not in project_packages:
        return None
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def source_files(root: Path, packages: Iterable[str]) -> Iterator[Path]:
    """Every .py file under the given top-level packages of `root` (missing packages are skipped)."""
    for package in packages:
        directory = root / package
        if directory.is_dir():
            yield from sorted(directory.rglob("*.py"))


def build_graph(root: Path, packages: Iterable[str] = PROJECT_PACKAGES) -> ImportGraph:
    """Parse every module under `packages` of `root` and resolve its imports."""
    packages = tuple(packages)
    graph = ImportGraph(root=root)
    for path in source_files(root, packages):
        graph.paths[module_name(root, path)] = path
    modules = set(graph.paths)
    for module, path in graph.paths.items():
        collector = _ImportCollector(module, is_package=path.name == "__init__.py")
        collector.visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
        resolved: list[Import] = []
        for base, names, line, in_function, type_checking in collector.found:
            # `from pkg import name`: the submodule pkg.name when it is one, else an attribute of pkg.
            full_names = [base] if names is None else [
                f"{base}.{n}" if f"{base}.{n}" in modules else base for n in names
            ]
            for full in dict.fromkeys(full_names):
                resolved.append(Import(full, _resolve(full, modules, packages), line, in_function, type_checking))
        graph.imports[module] = resolved
    return graph


@functools.cache
def project_graph() -> ImportGraph:
    """The repository's graph, parsed once per test run."""
    return build_graph(ROOT)


def strongly_connected(edges: dict[str, dict[str, Import]]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one module, each sorted, in sorted order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for start in sorted(edges):
        if start in index:
            continue
        # Iterative DFS: (node, iterator over its successors).
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            advanced = False
            for successor in successors:
                if successor not in edges:
                    continue
                if successor not in index:
                    index[successor] = low[successor] = counter
                    counter += 1
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(edges[successor]))))
                    advanced = True
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return sorted(components)


def shortest_cycle(edges: dict[str, dict[str, Import]], component: list[str]) -> list[str]:
    """A shortest cycle through the component's first module, staying inside the component."""
    start, members = component[0], set(component)
    previous: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for successor in sorted(edges[node]):
            if successor == start:
                chain = [node]
                while chain[-1] != start:
                    chain.append(previous[chain[-1]])
                return [*reversed(chain), start]
            if successor in members and successor not in previous:
                previous[successor] = node
                queue.append(successor)
    raise AssertionError(f"no cycle through {start} in {component}")  # a component always has one


def describe_cycle(edges: dict[str, dict[str, Import]], cycle: list[str]) -> str:
    """`a -> b -> a`, then one line per edge saying where the import is."""
    lines = [" -> ".join(cycle)]
    for importer, imported in zip(cycle, cycle[1:]):
        lines.append(f"    {importer} imports {edges[importer][imported].describe()}")
    return "\n".join(lines)


def line_count(path: Path) -> int:
    """Lines in a source file, as `wc -l` counts them for a file that ends with a newline."""
    return len(path.read_text(encoding="utf-8").splitlines())
