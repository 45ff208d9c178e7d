"""The import graph points down only and has no cycles (every ``ckptgeo`` import, those inside functions too); no
module imports another's private (``_name``) names; no module is over 600 lines."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: the layers, top (0) to bottom; a package imports only from layers strictly below its own (or from itself),
#: so two packages of one layer never import each other and the package graph has no cycles either
LAYER = {"__main__": -1, "cli": 0, "studies": 1, "claimtable": 1.5, "training": 2, "monitor": 3, "forecasting": 3.5,
         "engine": 4, "analysis": 4, "events": 4.3, "stats": 4.6, "sources": 5, "metrics": 5, "store": 5, "suites": 6}
BOTTOM = 7  # _registry, _params, _io, _threads, errors, constants, the package's __init__


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_nodes(tree: ast.AST):
    """Every node of ``tree`` except those under ``if TYPE_CHECKING:`` (imports only static readers follow: the
    facade's typed imports in ``ckptgeo/__init__.py``)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            typed = isinstance(child, ast.If) and isinstance(child.test, ast.Name) and child.test.id == "TYPE_CHECKING"
            if not typed:
                stack.append(child)


def _imports() -> dict[str, set[str]]:
    modules = {_module(p): p for p in (ROOT / "ckptgeo").rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        found = set()
        for node in _runtime_nodes(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("ckptgeo"):
                subs = {f"{node.module}.{a.name}" for a in node.names} & set(modules)
                found |= subs or {node.module}
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name.startswith("ckptgeo")}
        graph[name] = {m for m in found if m in modules and m != name}
    return graph


def _layer(module: str) -> tuple[int, str]:
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else ""
    return (LAYER[top], top) if top in LAYER else (BOTTOM, "")


def test_no_upward_imports():
    upward = [(m, t) for m, targets in _imports().items() for t in targets
              if _layer(t)[0] < _layer(m)[0] or (_layer(t)[0] == _layer(m)[0] and _layer(t)[1] != _layer(m)[1])]
    assert not upward, upward


def test_no_import_cycles():
    graph, state, cycles = _imports(), {}, []

    def visit(m, path):
        state[m] = "open"
        for t in sorted(graph[m]):
            if state.get(t) == "open":
                cycles.append(path[path.index(t):] + [t])
            elif t not in state:
                visit(t, path + [t])
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert not cycles, cycles


MAX_LINES = 600


def _private_imports(text: str, modules: set[str]) -> list[str]:
    """``from ckptgeo.x import _name`` where ``_name`` is not itself a module (the shared ``_io``, ``_params``,
    ``_settings`` ... modules are meant to be imported)."""
    found = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("ckptgeo"):
            found += [f"{node.module}.{a.name}" for a in node.names
                      if a.name.startswith("_") and not a.name.startswith("__")
                      and f"{node.module}.{a.name}" not in modules]
    return found


def test_the_private_import_check_finds_one():
    modules = {"ckptgeo._io", "ckptgeo.analysis.tables"}
    assert _private_imports("from ckptgeo.analysis.tables import _KEYS, model_size\nfrom ckptgeo import _io\n",
                            modules) == ["ckptgeo.analysis.tables._KEYS"]


def test_no_private_name_is_imported_across_modules():
    paths = {_module(p): p for p in (ROOT / "ckptgeo").rglob("*.py")}
    found = {name: hits for name, p in paths.items() if (hits := _private_imports(p.read_text(), set(paths)))}
    assert not found, f"make the name public (no leading _) or move it where it is used: {found}"


def test_no_module_is_over_600_lines():
    long = {str(p.relative_to(ROOT)): n for p in (ROOT / "ckptgeo").rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"split these (one concept per module, STYLE.md): {long}"
