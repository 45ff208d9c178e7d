"""One registry mechanism for everything ckptgeo looks up by name: measures, checkpoint sources, suite
loaders and subcommands.

A :class:`Registry` knows its built-ins as ``"module:object"`` strings (or just ``"module"`` for a module
whose import registers the object through :meth:`Registry.register`), loaded on first use so that
``import ckptgeo`` and ``ckptgeo --help`` stay cheap, plus whatever installed packages declare in the
registry's Python entry-point group (``[project.entry-points."ckptgeo.metrics"]`` in their
``pyproject.toml``). A third-party package thus adds a measure, a source, a suite loader or a
subcommand without any change to ckptgeo.
"""

from __future__ import annotations

import difflib
import importlib
from importlib.metadata import entry_points
from typing import Any, Callable

from ckptgeo.errors import InvalidParameterError

__all__ = ["Registry", "unknown_name_message"]


def unknown_name_message(kind: str, name: str, available) -> str:
    """``Unknown measure 'rankmee'. Did you mean: rankme? Available: ...`` (the shape every lookup uses)."""
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
        calls :meth:`register` itself, as a measure's decorator does).

    Raises
    ------
    InvalidParameterError
        From :meth:`get`, for an unknown name (with close matches and the available names).
    ValueError
        From :meth:`register`, for a name registered twice with different objects (naming both).
    """

    def __init__(self, kind: str, group: str, builtins: dict[str, str]):
        self.kind, self.group = kind, group
        self._builtins = dict(builtins)
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
            raise ValueError(f"{self.kind} {name!r} is registered twice: {_origin(old)} and {_origin(obj)}")
        self._items[name] = obj
        return obj

    def _eps(self) -> dict[str, Any]:
        if self._entry_points is None:
            self._entry_points = {ep.name: ep for ep in entry_points(group=self.group)}
        return self._entry_points

    def names(self) -> list[str]:
        """Every name this registry can resolve, sorted (built-ins, entry points, registered)."""
        return sorted(set(self._builtins) | set(self._eps()) | set(self._items))

    def get(self, name: str) -> Any:
        """The object registered as ``name``, loading its module on first use."""
        if name not in self._items:
            target = self._builtins.get(name)
            if target is not None:
                module, _, attr = target.partition(":")
                loaded = importlib.import_module(module)
                if attr:
                    self.register(name, getattr(loaded, attr))
            elif name in self._eps():
                obj = self._eps()[name].load()
                if name not in self._items:  # a module-level entry point registers itself on import
                    self.register(name, obj)
        if name not in self._items:
            raise InvalidParameterError(unknown_name_message(self.kind, name, self.names()), name=self.kind,
                                        value=name)
        return self._items[name]

    def load_all(self) -> dict[str, Any]:
        """Every object, loaded: name -> object."""
        return {n: self.get(n) for n in self.names()}


def _origin(obj: Any) -> str:
    target = getattr(obj, "fn", obj)
    return f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', type(target).__name__)}"
