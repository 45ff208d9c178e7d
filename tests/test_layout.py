"""The import graph points down only and has no cycles (every ``ckptgeo`` import, those inside functions too, and every
module a ``"module"`` / ``"module:object"`` string names, as the registries and ``importlib`` load them); no module
imports the facade (``from ckptgeo import ...``) or another's private (``_name``) names; every package has a layer;
``analysis/`` keeps one name per job."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: the layers, top (0) to bottom; a package imports only from layers strictly below its own (or from itself),
#: so two packages of one layer never import each other and the package graph has no cycles either. The facade
#: (``ckptgeo/__init__.py``) and ``__main__`` sit above everything.
LAYER = {"__main__": -1, "": -1, "cli": 0, "studies": 1, "claimtable": 1.5, "training": 2, "monitor": 3,
         "forecasting": 3.5, "engine": 4, "analysis": 4, "events": 4.3, "stats": 4.6, "sources": 5, "metrics": 5,
         "store": 5, "suites": 6}
BOTTOM = 7  # the shared modules directly under ckptgeo/: _registry, _settings, _params, _io, _threads, _version, errors, constants
#: a string constant that is a module path, optionally with ":object" (a registry's built-in, an importlib target)
MODULE_STRING = re.compile(r"^(ckptgeo(?:\.\w+)+)(?::\w+)?$")


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module(p): p for p in (ROOT / "ckptgeo").rglob("*.py")}


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


def _edges(text: str, modules) -> tuple[set[str], set[str]]:
    """(modules imported, modules named by a string) of one module's source."""
    imported, named = set(), set()
    for node in _runtime_nodes(ast.parse(text)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("ckptgeo"):
            subs = {f"{node.module}.{a.name}" for a in node.names} & set(modules)
            imported |= subs or {node.module}
        elif isinstance(node, ast.Import):
            imported |= {a.name for a in node.names if a.name.startswith("ckptgeo")}
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and (m := MODULE_STRING.match(node.value)):
            named.add(m.group(1))
    return imported, named


def _graphs() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """The import graph, and the graph of modules named by strings (both restricted to ckptgeo's modules)."""
    modules = _modules()
    imports, strings = {}, {}
    for name, path in modules.items():
        imported, named = _edges(path.read_text(), modules)
        imports[name] = {m for m in imported if m in modules and m != name}
        strings[name] = {m for m in named if m in modules and m != name}
    return imports, strings


def _layer(module: str) -> tuple[float, str]:
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else ""
    if len(parts) == 2 and (ROOT / "ckptgeo" / f"{top}.py").is_file() and top != "__main__":
        return BOTTOM, ""
    return LAYER[top], top


def _upward(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    return [(m, t) for m, targets in graph.items() for t in targets
            if _layer(t)[0] < _layer(m)[0] or (_layer(t)[0] == _layer(m)[0] and _layer(t)[1] != _layer(m)[1])]


def test_every_package_has_a_layer():
    packages = {p.name for p in (ROOT / "ckptgeo").iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    assert packages - set(LAYER) == set(), "give the new package a layer in LAYER (and CONTRIBUTING's order)"


def test_no_upward_imports():
    imports, _ = _graphs()
    upward = _upward(imports)
    assert not upward, upward


def test_no_module_names_a_higher_layer_by_string():
    """A registry's built-in table or an importlib call naming a higher package is an upward import that runs
    later: the higher package registers itself instead."""
    _, strings = _graphs()
    upward = _upward(strings)
    assert not upward, upward


def test_the_string_check_sees_registry_tables():
    modules = {"ckptgeo.forecasting.tables": None, "ckptgeo.analysis.steps": None}
    text = 'PACKAGE_STEPS = {"forecast": "ckptgeo.forecasting.tables"}\nX = "ckptgeo.analysis.steps:STEPS"\n'
    assert _edges(text, modules)[1] == {"ckptgeo.forecasting.tables", "ckptgeo.analysis.steps"}
    assert _upward({"ckptgeo.analysis.steps": {"ckptgeo.forecasting.tables"}}) == [
        ("ckptgeo.analysis.steps", "ckptgeo.forecasting.tables")]


def test_no_import_cycles():
    """Cycles of imports (a registry and the module that registers into it name each other by string by design:
    the string edge is checked for direction above, not here)."""
    graph, state, cycles = _graphs()[0], {}, []

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


def _facade_imports(text: str) -> list[str]:
    return [", ".join(a.name for a in node.names) for node in ast.walk(ast.parse(text))
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "ckptgeo"]


def test_no_module_imports_the_facade():
    """``from ckptgeo import x`` inside the package reaches the facade, which sits above every layer: import the
    module that defines ``x`` (``from ckptgeo._version import __version__``, ``import ckptgeo.constants as constants``)."""
    assert _facade_imports("from ckptgeo import __version__\nfrom ckptgeo._version import __version__\n") == [
        "__version__"]
    found = {str(p.relative_to(ROOT)): hits for p in (ROOT / "ckptgeo").rglob("*.py")
             if (hits := _facade_imports(p.read_text()))}
    assert not found, found


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
    modules = {"ckptgeo._io", "ckptgeo.analysis.inputs"}
    assert _private_imports("from ckptgeo.analysis.inputs import _KEYS, with_defaults\nfrom ckptgeo import _io\n",
                            modules) == ["ckptgeo.analysis.inputs._KEYS"]


def test_no_private_name_is_imported_across_modules():
    paths = _modules()
    found = {name: hits for name, p in paths.items() if (hits := _private_imports(p.read_text(), set(paths)))}
    assert not found, f"make the name public (no leading _) or move it where it is used: {found}"


def _near_synonyms(names: list[str]) -> list[tuple[str, str]]:
    """Pairs of module names one of which is the other plus a word (``summary`` / ``summary_tables``,
    ``stats`` / ``stat_types``): two rooms a newcomer cannot tell apart."""
    stem = {n: n.rstrip("s") for n in names}
    return [(a, b) for a in names for b in names if a != b
            and (b.startswith(stem[a] + "_") or b.endswith("_" + stem[a]) or b.endswith("_" + a))
            and not b.startswith("builtin_")]


def test_the_synonym_check_finds_one():
    assert _near_synonyms(["summary", "summary_tables", "config"]) == [("summary", "summary_tables")]
    assert _near_synonyms(["stats", "stat_types", "event_table", "events"]) == [("stats", "stat_types"),
                                                                               ("events", "event_table")]


def test_analysis_keeps_one_name_per_job():
    """``analysis/`` is the DataFrame pipeline over a dataset: a handful of modules, none a variant of another's
    name (the events of one curve are ``events/``, the statistics ``stats/``). ``builtin_steps`` is the table of
    ``steps``' built-ins, by name."""
    names = sorted(p.stem for p in (ROOT / "ckptgeo" / "analysis").glob("*.py") if p.stem != "__init__")
    assert len(names) <= 14, names
    assert _near_synonyms(names) == [], names
