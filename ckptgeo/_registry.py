"""One registry mechanism for everything ckptgeo looks up by name: measures, checkpoint sources, suite
loaders and subcommands.

A :class:`Registry` knows its built-ins as ``"module:object"`` strings (or just ``"module"`` for a module
whose import registers the object through :meth:`Registry.register`), or as a package every module of which
registers its own objects (the claim rows), loaded on first use so that
``import ckptgeo`` and ``ckptgeo --help`` stay cheap, plus whatever installed packages declare in the
registry's Python entry-point group (``[project.entry-points."ckptgeo.metrics"]`` in their
``pyproject.toml``). A third-party package thus adds a measure, a source, a suite loader or a
subcommand without any change to ckptgeo.

The registries::

    ckptgeo.metrics.registry.METRICS   group "ckptgeo.metrics"   MetricSpec (via @register_metric)
    ckptgeo.sources.registry.SOURCES   group "ckptgeo.sources"   a CheckpointSource class (claims/from_spec)
    ckptgeo.suites.items.LOADERS       group "ckptgeo.suites"    fn(spec: str) -> Suite
    ckptgeo.cli.COMMANDS               group "ckptgeo.commands"  add_parser(subparsers)
    ckptgeo.analysis.steps.STEPS       group "ckptgeo.analysis_steps"  Step (via @register_step)
    ckptgeo.claimtable.registry.CLAIMS group "ckptgeo.claims"  ClaimRow (via @register_claim; built-ins: every
                                                               module of the package ckptgeo.claimtable.rows)
    ckptgeo.analysis.figures.FIGURES   group "ckptgeo.figures"   Figure (via @register_figure)

Nothing is swallowed: a built-in that fails to import raises its own ``ImportError``; an entry point
that fails to load raises :class:`~ckptgeo.errors.PluginLoadError` naming the entry point and its
distribution, chained to the cause.
"""

from __future__ import annotations

import difflib
import importlib
import pkgutil
from importlib.metadata import entry_points
from typing import Any, Callable

from ckptgeo.errors import DuplicateNameError, InvalidParameterError, PluginLoadError

__all__ = ["Registry", "unknown_name_message"]


def unknown_name_message(kind: str, name: str, available) -> str:
    """``Unknown measure 'rankmee'. Did you mean: rankme? Available: ...`` (the shape every lookup uses).

    Examples
    --------
    >>> unknown_name_message("measure", "rankmee", ["rankme", "hessian"])
    "Unknown measure 'rankmee'. Did you mean: rankme? Available: hessian, rankme"
    """
    available = sorted(available)
    close = difflib.get_close_matches(name, available, n=3, cutoff=0.6)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    return f"Unknown {kind} {name!r}.{hint} Available: {', '.join(available)}"


class Registry:
    """Named objects of one kind, from built-ins, entry points and explicit registration.

    Parameters
    ----------
    kind : str
        What the objects are, for messages (``"measure"``, ``"source"``).
    group : str
        The entry-point group third-party packages declare their objects in (``"ckptgeo.metrics"``).
    builtins : dict of str to str
        Name -> ``"module:object"`` (the object is loaded and stored) or ``"module"`` (the module's import
        calls :meth:`register` itself, as a measure's decorator does). The dict's order is kept by
        :meth:`names`' ``sorted=False``.
    check : callable, optional
        ``check(name, obj)`` raises ``TypeError`` when ``obj`` is not an object of this kind (e.g. a
        measure entry point that points at an undecorated function).
    package : str, optional
        A package whose every module registers built-ins when imported (all are imported on first use of the
        registry); what they register counts as built-in, so a new built-in is a new function in one of its
        modules, or a new module, and no table names it.

    Raises
    ------
    InvalidParameterError
        From :meth:`get`, for an unknown name (with close matches and the available names).
    DuplicateNameError
        From :meth:`register` or :meth:`names`, for a name given two different targets (naming both).
    PluginLoadError
        From :meth:`get`, for an entry point that fails to import or registers nothing under its name.

    Examples
    --------
    >>> reg = Registry("colour", "example.colours", {})
    >>> reg.register("red", "#f00")
    '#f00'
    >>> reg.get("red"), reg.names()
    ('#f00', ['red'])
    """

    def __init__(self, kind: str, group: str, builtins: dict[str, str], *,
                 check: Callable[[str, Any], None] | None = None, package: str | None = None):
        self.kind, self.group = kind, group
        self._builtins = dict(builtins)
        self._check = check
        self._package = package
        self._items: dict[str, Any] = {}
        self._entry_points: dict[str, Any] | None = None

    def register(self, name: str, obj: Any = None) -> Any:
        """Register ``obj`` under ``name``; without ``obj``, return a decorator that does so."""
        if obj is None:
            def deco(target: Callable) -> Callable:
                self.register(name, target)
                return target
            return deco
        old = self._items.get(name)
        if old is not None and old is not obj and _origin(old) != _origin(obj):
            raise DuplicateNameError(f"{self.kind} {name!r} is registered twice: {_origin(old)} and {_origin(obj)}",
                                     name=name)
        self._items[name] = obj
        return obj

    def _load_package(self) -> None:
        """Import every module of the built-in package (once) and count what they registered as built-in."""
        if self._package is None:
            return
        package, self._package = self._package, None
        for info in pkgutil.iter_modules(importlib.import_module(package).__path__):
            importlib.import_module(f"{package}.{info.name}")
        for name, obj in self._items.items():
            module = _origin(obj).rsplit(".", 1)[0]
            if module.startswith(package + "."):
                self._builtins.setdefault(name, module)

    def _eps(self) -> dict[str, Any]:
        """The entry points of :attr:`group` by name (read once per process)."""
        self._load_package()
        if self._entry_points is None:
            found: dict[str, Any] = {}
            for ep in entry_points(group=self.group):
                other = found.get(ep.name)
                if other is not None and other.value != ep.value:
                    raise DuplicateNameError(f"{self.kind} {ep.name!r} is declared twice in entry-point group "
                                             f"{self.group!r}: {_ep_origin(other)} and {_ep_origin(ep)}", name=ep.name)
                if ep.name in self._builtins:
                    raise DuplicateNameError(f"{self.kind} {ep.name!r} is registered twice: built-in "
                                             f"{self._builtins[ep.name]} and {_ep_origin(ep)}", name=ep.name)
                found[ep.name] = ep
            self._entry_points = found
        return self._entry_points

    def names(self, *, sorted_: bool = True) -> list[str]:
        """Every name this registry can resolve (built-ins, entry points, registered), without loading any (but the
        modules of a built-in package, whose import is how their names are known).

        Sorted, or with ``sorted_=False`` in the order built-ins, entry points, registered."""
        self._load_package()
        names = list(dict.fromkeys([*self._builtins, *self._eps(), *self._items]))
        return sorted(names) if sorted_ else names

    def __contains__(self, name: str) -> bool:
        self._load_package()
        return name in self._items or name in self._builtins or name in self._eps()

    def get(self, name: str) -> Any:
        """The object registered as ``name``, loading its module on first use."""
        self._load_package()
        if name not in self._items:
            if name in self._builtins:
                self._load_builtin(name)
            elif name in self._eps():
                self._load_entry_point(name)
            else:
                raise InvalidParameterError(unknown_name_message(self.kind, name, self.names()), name=self.kind,
                                            value=name)
        return self._items[name]

    def _load_builtin(self, name: str) -> None:
        module, _, attr = self._builtins[name].partition(":")
        loaded = importlib.import_module(module)  # an ImportError here is ckptgeo's own: it propagates
        if attr:
            self.register(name, getattr(loaded, attr))
        if name not in self._items:
            raise LookupError(f"built-in {self.kind} {name!r}: importing {module} registered no {self.kind} of "
                              f"that name (a bug in ckptgeo)")
        self._validate(name, self._items[name], self._builtins[name])

    def _load_entry_point(self, name: str) -> None:
        ep = self._eps()[name]
        try:
            obj = ep.load()
        except Exception as err:
            raise PluginLoadError(f"cannot load {self.kind} {name!r} from {_ep_origin(ep)}: "
                                  f"{type(err).__name__}: {err}; fix or uninstall that package",
                                  name=name, entry_point=ep.value) from err
        if name not in self._items and ":" in ep.value:
            self.register(name, obj)  # "module:object" names the object; a bare module registers itself
        if name not in self._items:
            raise PluginLoadError(f"{_ep_origin(ep)} registered no {self.kind} named {name!r}; its module must "
                                  f"register one under the entry point's name", name=name, entry_point=ep.value)
        self._validate(name, self._items[name], _ep_origin(ep))

    def _validate(self, name: str, obj: Any, origin: str) -> None:
        if self._check is None:
            return
        try:
            self._check(name, obj)
        except TypeError as err:
            self._items.pop(name, None)
            raise PluginLoadError(f"{self.kind} {name!r} from {origin} is not usable: {err}", name=name,
                                  entry_point=origin) from err

    def load_all(self) -> dict[str, Any]:
        """Every object, loaded: name -> object, sorted by name."""
        return {n: self.get(n) for n in self.names()}


def _origin(obj: Any) -> str:
    target = getattr(obj, "fn", obj)
    return f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', type(target).__name__)}"


def _ep_origin(ep) -> str:
    dist = getattr(ep, "dist", None)
    where = f" (distribution {dist.name} {dist.version})" if dist is not None else ""
    return f"entry point {ep.name} = {ep.value} in group {ep.group}{where}"
