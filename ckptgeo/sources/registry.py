"""Which :class:`~ckptgeo.sources.protocol.CheckpointSource` a source spec opens: :data:`SOURCES`.

Every registered source is a class with two class methods besides the protocol::

    claims(spec: str) -> bool          whether an unprefixed spec is meant for this source
    from_spec(spec: str, *, step_pattern, keep_cache, cache_dir) -> CheckpointSource

and an integer ``claim_order`` (lower is asked first; default 50). :func:`open_source` opens
``NAME:rest`` with source ``NAME`` when ``NAME`` is registered (``hub:EleutherAI/pythia-160m``,
``local:runs/x``); any other spec goes to the first source, by ``claim_order``, that claims it: the
local folder (``claim_order = 0``: an existing directory), then a family of repos (a list or brace
pattern of repo ids), then installed sources (entry-point group ``ckptgeo.sources``), then the Hub
(``claim_order = 100``: everything else, validated as a repo id).
"""

from __future__ import annotations

from pathlib import Path

from ckptgeo._registry import Registry
from ckptgeo.errors import SourceNotFoundError
from ckptgeo.sources.protocol import CheckpointSource

__all__ = ["SOURCES", "open_source"]


def _check_source(name: str, obj) -> None:
    missing = [m for m in ("claims", "from_spec") if not callable(getattr(obj, m, None))]
    if missing:
        raise TypeError(f"a checkpoint source class needs class methods claims(spec) and from_spec(spec, ...); "
                        f"{getattr(obj, '__qualname__', obj)!r} lacks {', '.join(missing)}")


#: The checkpoint sources by name; installed packages add more through the ``ckptgeo.sources`` entry points.
SOURCES = Registry("source", "ckptgeo.sources", {
    "local": "ckptgeo.sources.local:LocalSource", "family": "ckptgeo.sources.family:FamilySource",
    "hub": "ckptgeo.sources.hub:HubSource"}, check=_check_source)


def open_source(spec: str | Path, *, step_pattern: str | None = None, keep_cache: bool = False,
                cache_dir: str | Path | None = None) -> CheckpointSource:
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

    Raises
    ------
    SourceNotFoundError
        ``spec`` is neither an existing folder nor a valid repo id (e.g. a mistyped path), nor claimed by
        an installed source.
    """
    options = dict(step_pattern=step_pattern, keep_cache=keep_cache, cache_dir=cache_dir)
    text = str(spec)
    prefix, sep, rest = text.partition(":")
    if sep and prefix in SOURCES and not Path(text).expanduser().exists():
        return SOURCES.get(prefix).from_spec(rest, **options)
    classes = sorted((SOURCES.get(n) for n in SOURCES.names(sorted_=False)),
                     key=lambda cls: getattr(cls, "claim_order", 50))
    for cls in classes:
        if cls.claims(text):
            return cls.from_spec(text, **options)
    raise SourceNotFoundError(f"{spec} is not claimed by any checkpoint source ({', '.join(SOURCES.names())}); "
                              f"prefix it with NAME: to choose one", path=text)
