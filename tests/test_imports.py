"""The package's import structure: no module cycles, every module importable, no imports hidden in functions.

The graph is read from the source with ``ast`` (no module is executed to build it): an edge A -> B for every
import of B that runs when A is imported (module level, including ``try``/``if`` blocks, but not
``if TYPE_CHECKING:`` blocks, which never run). Imports inside functions are not edges: they are the subject of
the third check, because a function-level import is how a cycle hides (it fails only when the function runs).
"""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "dlrmsim"

# Optional heavy packages: imported inside the function that needs them, so that a user without them (or a
# command that does not use them) never pays their import. Submodules count (``torch.distributed``).
OPTIONAL_HEAVY = ("torch", "torchrec", "fbgemm_gpu", "dask", "distributed", "plotly", "kaleido")
# dlrmsim modules that import an optional heavy package at module level: importing one is importing that package.
HEAVY_MODULES = {"dlrmsim.calibration.ops.torch_ops": "torch"}


def _is_cli(module: str) -> bool:
    """The root CLI and each subsystem's cli.py: their commands import their subsystem lazily, so that
    ``dlrmsim --help`` and one command do not load every subsystem (tests/test_cli.py checks what they load)."""
    return module == "dlrmsim.cli" or module.endswith(".cli")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    """Every module of the package (``__main__`` left out: importing it runs the CLI)."""
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py")) if p.name != "__main__.py"}


MODULES = _modules()


@dataclass(frozen=True)
class ImportSite:
    module: str  # the importing module
    target: str  # the module imported (a dlrmsim module, or the top-level name of another package)
    line: int
    function: str | None  # the enclosing function, None at module level


def _resolve(module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The modules an import statement loads: for a dlrmsim name, the deepest dlrmsim module it names."""
    is_package = MODULES.get(module, Path()).name == "__init__.py"
    names: list[str] = []
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
        bases = names
    else:
        if node.level:
            package = module.split(".") if is_package else module.split(".")[:-1]
            base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
        else:
            base = node.module or ""
        bases = [base]
        names = [f"{base}.{alias.name}" for alias in node.names]
    out = []
    for name in names:
        if not name.startswith("dlrmsim"):
            out.append(name)
            continue
        parts = name.split(".")
        while parts and ".".join(parts) not in MODULES:
            parts.pop()
        out.append(".".join(parts) if parts else bases[0])
    return list(dict.fromkeys(out))


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _sites(module: str, path: Path) -> list[ImportSite]:
    tree = ast.parse(path.read_text(), filename=str(path))
    sites: list[ImportSite] = []

    def visit(node: ast.AST, function: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and function is None and _is_type_checking(child):
                for sub in child.orelse:  # the else branch runs
                    visit(sub, function)
                continue
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                name = getattr(child, "name", "<lambda>")
                visit(child, name if function is None else f"{function}.{name}")
                continue
            if isinstance(child, ast.Import | ast.ImportFrom):
                sites.extend(ImportSite(module, target, child.lineno, function) for target in _resolve(module, child))
            visit(child, function)

    visit(tree, None)
    return sites


SITES = [site for module, path in MODULES.items() for site in _sites(module, path)]


def import_graph() -> dict[str, set[str]]:
    """Module-level import edges between dlrmsim modules."""
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for s in SITES:
        if s.function is None and s.target in MODULES and s.target != s.module:
            graph[s.module].add(s.target)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as [a, b, ..., a], or None (iterative depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for start in sorted(graph):
        if state.get(start):
            continue
        path = [start]
        stack = [iter(sorted(graph[start]))]
        state[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            elif not state.get(nxt):
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(graph[nxt])))
    return None


def dependency_order(graph: dict[str, set[str]]) -> list[str]:
    """Modules with every module they import before them (the graph is acyclic)."""
    order: list[str] = []
    done: set[str] = set()

    def visit(m: str) -> None:
        if m in done:
            return
        done.add(m)
        for dep in sorted(graph[m]):
            visit(dep)
        order.append(m)

    for m in sorted(graph):
        visit(m)
    return order


def _importable(module: str) -> bool:
    heavy = HEAVY_MODULES.get(module)
    return heavy is None or importlib.util.find_spec(heavy) is not None


def function_level_offenders() -> list[ImportSite]:
    """Imports inside functions that the rule does not allow: only optional heavy packages (and the dlrmsim modules
    that import one at module level) and the CLI's lazy sub-commands may be imported inside a function."""
    out = []
    for s in SITES:
        if s.function is None:
            continue
        top = s.target.split(".")[0]
        if top in OPTIONAL_HEAVY or s.target in HEAVY_MODULES:
            continue
        if _is_cli(s.module) and s.target.startswith("dlrmsim"):
            continue
        out.append(s)
    return out


# --- the checks --------------------------------------------------------------------------------------------------


def test_the_graph_reader_sees_the_package() -> None:
    # because a reader that found no modules or no edges would pass every check below
    graph = import_graph()
    assert len(graph) > 50 and sum(len(v) for v in graph.values()) > 100
    assert "dlrmsim.config" in graph["dlrmsim.calibration.schema"]  # a known module-level edge
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_the_module_import_graph_is_acyclic() -> None:
    # because a cycle makes a module's importability depend on which module of the cycle is imported first
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_every_module_imports_in_a_fresh_interpreter() -> None:
    # because a module that only imports after some other module ran is broken for the user who imports it first;
    # imported in dependency order, a failure names the first module that cannot load
    order = [m for m in dependency_order(import_graph()) if _importable(m)]
    code = (
        "import importlib, sys\n"
        f"for name in {order!r}:\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except Exception as exc:\n"
        "        print(f'{name}: {type(exc).__name__}: {exc}')\n"
        "        sys.exit(1)\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize("module", [m for m in MODULES if _importable(m)])
def test_each_module_imports_alone(module: str) -> None:
    # because importing a module first, with nothing else loaded, is what finds an import that works only by order
    res = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]


def test_no_function_level_imports_outside_the_allow_list() -> None:
    # because an import inside a function hides a cycle until the function runs; lists every offender at once
    offenders = function_level_offenders()
    lines = [f"{MODULES[s.module].relative_to(ROOT)}:{s.line} in {s.function}(): import {s.target}" for s in offenders]
    assert not offenders, f"{len(offenders)} function-level imports (move them to module level):\n" + "\n".join(lines)
