"""Which :class:`~ckptgeo.sources.protocol.CheckpointSource` a source spec opens: :data:`SOURCES`.

Every registered source is a subclass of :class:`~ckptgeo.sources.protocol.CheckpointSource` with two class
methods besides the interface::

    claims(spec: str) -> bool                       whether an unprefixed spec is meant for this source
    from_spec(spec: str, options) -> CheckpointSource   options: an instance of the class's ``options``

and an integer ``claim_order`` (lower is asked first; default 50). :func:`open_source` opens
``NAME:rest`` with source ``NAME`` when ``NAME`` is registered (``hub:EleutherAI/pythia-160m``,
``local:runs/x``); any other spec goes to the first source, by ``claim_order``, that claims it: the
local folder (``claim_order = 0``: an existing directory), then a family of repos (a list or brace
pattern of repo ids), then installed sources (entry-point group ``ckptgeo.sources``), then the Hub
(``claim_order = 100``: everything else, validated as a repo id).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ckptgeo._registry import Registry
from ckptgeo._settings import declared, parse_value, replace_params
from ckptgeo.errors import SourceNotFoundError
from ckptgeo.sources.protocol import CheckpointSource

__all__ = ["SOURCES", "open_source", "source_options"]


def _check_source(name: str, obj) -> None:
    if not (isinstance(obj, type) and issubclass(obj, CheckpointSource)):
        raise TypeError(f"a checkpoint source is a subclass of ckptgeo.sources.protocol.CheckpointSource with class "
                        f"methods claims(spec) and from_spec(spec, options); got {getattr(obj, '__qualname__', obj)!r}")


#: The checkpoint sources by name; installed packages add more through the ``ckptgeo.sources`` entry points.
SOURCES = Registry("source", "ckptgeo.sources", {
    "local": "ckptgeo.sources.local:LocalSource", "family": "ckptgeo.sources.family:FamilySource",
    "hub": "ckptgeo.sources.hub:HubSource"}, check=_check_source)


def source_options(cls: type[CheckpointSource], options: Mapping[str, Any] | None = None, **shared: Any):
    """The options of source class ``cls``: its ``options`` defaults, the ``shared`` settings it declares
    (the scan's ``step_pattern``, ``keep_cache``; a setting a source does not take is not its business, e.g.
    ``keep_cache`` for a folder), then ``options`` (every name must be one of its options), checked.

    Raises
    ------
    InvalidParameterError
        An option ``cls`` does not declare (its options listed), or a value outside what it admits.

    Examples
    --------
    >>> from ckptgeo.sources.local import LocalSource
    >>> source_options(LocalSource, keep_cache=True, step_pattern="^s([0-9]+)$")
    SourceOptions(step_pattern='^s([0-9]+)$')
    >>> source_options(LocalSource, {"cache_dir": "/x"})
    Traceback (most recent call last):
    ...
    ckptgeo.errors.InvalidParameterError: Unknown option 'cache_dir' of source LocalSource. Valid options: \
step_pattern.
    """
    fields = {f.name: s for f, s in declared(cls.options)}
    given = {k: v for k, v in shared.items() if k in fields and v is not None}
    given.update({k: parse_value(cls.options, k, v) if isinstance(v, str) else v for k, v in (options or {}).items()})
    given = {k: fields[k].coerce(v) if k in fields and fields[k].coerce and v is not None else v
             for k, v in given.items()}
    return replace_params(cls.options(), given, owner=f"source {cls.__name__}")


def open_source(spec: str | Path, *, step_pattern: str | None = None, keep_cache: bool = False,
                cache_dir: str | Path | None = None, options: Mapping[str, Any] | None = None) -> CheckpointSource:
    """Open the checkpoint source that ``spec`` names (rules in the module docstring).

    Parameters
    ----------
    spec : str or Path
        A folder of ``step{N}`` checkpoints, a Hub repo id, a family of them (``org/pythia-160m-seed{1..3}``),
        or ``NAME:rest`` for registered source ``NAME``.
    step_pattern : str, optional
        Regex reading the step from revision names; default: the built-in naming schemes
        (:mod:`ckptgeo.sources.naming`).
    keep_cache : bool, default=False
        Never evict what was downloaded (sources that download).
    cache_dir : path, optional
        Download cache (sources that download; default: the Hub client's).
    options : mapping, optional
        The source's own options by name (its ``options`` class: ``{"cache_dir": ...}`` for the Hub); a name it
        does not declare is refused.

    Raises
    ------
    SourceNotFoundError
        ``spec`` is neither an existing folder nor a valid repo id (e.g. a mistyped path), nor claimed by
        an installed source.
    InvalidParameterError
        An option the source does not take, or a value it does not admit.
    """
    shared = dict(step_pattern=step_pattern, keep_cache=keep_cache or None, cache_dir=cache_dir)
    text = str(spec)
    prefix, sep, rest = text.partition(":")
    if sep and prefix in SOURCES and not Path(text).expanduser().exists():
        cls = SOURCES.get(prefix)
        return cls.from_spec(rest, source_options(cls, options, **shared))
    classes = sorted((SOURCES.get(n) for n in SOURCES.names(sorted_=False)), key=lambda cls: cls.claim_order)
    for cls in classes:
        if cls.claims(text):
            return cls.from_spec(text, source_options(cls, options, **shared))
    raise SourceNotFoundError(f"{spec} is not claimed by any checkpoint source ({', '.join(SOURCES.names())}); "
                              f"prefix it with NAME: to choose one", path=text)
