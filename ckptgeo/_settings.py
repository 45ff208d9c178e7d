"""The one way a settings dataclass declares its fields: scan, training, analysis, measure and source options.

Each field is declared once, with :func:`setting`: its default (the dataclass field's), what values it admits,
its description, and optionally its command-line flag. Everything else is derived from that declaration::

    from dataclasses import dataclass
    from ckptgeo._settings import Interval, setting

    @dataclass(frozen=True)
    class HessianConfig:
        k: int = setting(5, "Eigenvalues computed.", admits=(Interval(int, 1, None),))
        ncv: int | None = setting(None, "Lanczos basis size.", admits=(Interval(int, 2, None), None))

* :func:`~ckptgeo._params.validate_params` and :func:`~ckptgeo._params.replace_params` check a field against
  its ``admits`` (the one message shape: *The 'k' parameter of hessian must be an int in [1, inf). Got -1.*);
* :func:`settings_doc` writes the numpydoc entries of the fields (type, choices, default, description);
* :func:`flag_keywords` gives the ``argparse`` keywords of a field's flag (type, default, choices, help) and
  :func:`add_flags` adds the flags of a class to a parser;
* :func:`defaults` and :func:`declared` list the fields for records and tests.

An owner that needs more per field than :class:`Setting` holds subclasses it (the scan's
:class:`~ckptgeo.engine.config.ScanSetting` adds how a setting enters the config hash; the training run's
``TrainSetting`` whether it belongs to a study's shared recipe) and passes ``cls=`` to :func:`setting`.
A class may still list constraints in a ``_parameter_constraints`` mapping (older plugin measures do);
they are checked beside the declared ones.

The constraint forms (:class:`Interval`, :class:`Options`, :data:`NonEmptyStr`, :data:`Boolean`) and the
checks are those of :mod:`ckptgeo._params`, re-exported here so that a settings module imports one place.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import textwrap
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ckptgeo._params import (Boolean, Interval, NonEmptyStr, Options, constraints_of, describe, parse_value,
                             replace_params, validate_params)

__all__ = ["Setting", "setting", "declared", "defaults", "settings_doc", "with_settings_doc", "flag_keywords",
           "add_flags", "Interval", "Options", "NonEmptyStr", "Boolean", "validate_params", "replace_params",
           "parse_value", "constraints_of", "describe", "flat_settings"]

#: the key of a field's metadata that holds its :class:`Setting`
KEY = "setting"


@dataclass(frozen=True)
class Setting:
    """How one settings field is documented, checked and set from the command line (its type and default
    are the dataclass field's).

    Attributes
    ----------
    doc : str
        Its description (numpydoc entry of :func:`settings_doc`).
    admits : tuple
        What values pass, as :mod:`ckptgeo._params` forms (``Interval``, ``Options``; ``None`` admits None);
        empty: not checked by :func:`~ckptgeo._params.validate_params`.
    kind : str
        Its numpydoc type where the annotation does not say it (``"int or str"``); choices come from ``admits``.
    coerce : callable, optional
        Turns what a Python caller may pass into what the field holds (``"40GB"`` -> bytes, a list -> tuple).
    flag : str, optional
        Its command-line flag; None: a Python-only setting.
    help : str
        The flag's ``--help`` text (``%(default)s`` reads the default).
    action : {"store", "store_true", "append"}
        The flag's argparse action.
    metavar : str, optional
        The flag's metavar.
    text : type, optional
        What argparse parses the flag's text as, when not the field's type (``str`` for a size in bytes).
    choices : tuple, optional
        The flag's choices where ``admits`` does not give them as :class:`Options`.
    """

    doc: str = ""
    admits: tuple = ()
    kind: str = ""
    coerce: Callable[[Any], Any] | None = None
    flag: str | None = None
    help: str = ""
    action: str = "store"
    metavar: str | None = None
    text: type | None = None
    choices: tuple | None = None


def setting(default: Any = dataclasses.MISSING, doc: str = "", *, cls: type[Setting] = Setting, **declaration) -> Any:
    """A dataclass field with ``default`` (none: a required field), declared by ``cls(doc=doc, **declaration)``.

    >>> @dataclass(frozen=True)
    ... class Cfg:
    ...     k: int = setting(5, "Eigenvalues.", admits=(Interval(int, 1, None),), flag="--k")
    >>> [(f.name, s.flag) for f, s in declared(Cfg)], defaults(Cfg)
    ([('k', '--k')], {'k': 5})
    >>> validate_params(Cfg(k=0), owner="hessian")
    Traceback (most recent call last):
    ...
    ckptgeo.errors.InvalidParameterError: The 'k' parameter of hessian must be an int in [1, inf). Got 0.
    """
    return dataclasses.field(default=default, metadata={KEY: cls(doc=doc, **declaration)})


def declared(cls: type) -> list[tuple[dataclasses.Field, Setting]]:
    """The fields of dataclass ``cls`` declared with :func:`setting`, in order, each with its :class:`Setting`."""
    return [(f, f.metadata[KEY]) for f in dataclasses.fields(cls) if KEY in f.metadata]


def defaults(cls: type) -> dict[str, Any]:
    """``{field: default}`` of the fields of ``cls`` that have a default."""
    return {f.name: f.default for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}


def _kind(s: Setting, hint: Any) -> str:
    options = [a for a in s.admits if isinstance(a, Options)]
    if options:
        return "{" + ", ".join(json.dumps(o) for o in options[0].options) + "}"
    if s.kind:
        return s.kind
    kinds = [k for k in typing.get_args(hint) or (hint,) if k is not type(None)]
    return " or ".join(getattr(k, "__name__", str(k)) for k in kinds)


def settings_doc(cls: type, *, indent: int = 4) -> str:
    """The numpydoc entries of the declared fields of ``cls``: type, choices, default and description.

    >>> @dataclass(frozen=True)
    ... class Cfg:
    ...     which: str = setting("LA", "Which end of the spectrum.", admits=(Options("LA", "LM"),))
    >>> print(settings_doc(Cfg, indent=0), end="")
    which : {"LA", "LM"}, default="LA"
        Which end of the spectrum.
    """
    hints, pad = typing.get_type_hints(cls), " " * indent
    lines = []
    for f, s in declared(cls):
        default = "" if f.default is dataclasses.MISSING else ", optional" if f.default is None else \
            f", default={json.dumps(f.default) if isinstance(f.default, str) else repr(f.default)}"
        lines.append(f"{pad}{f.name} : {_kind(s, hints[f.name])}{default}")
        lines += textwrap.wrap(s.doc, 116 - indent, initial_indent=pad + "    ", subsequent_indent=pad + "    ",
                               break_on_hyphens=False)
    return "\n".join(lines) + "\n"


def with_settings_doc(doc: str | None, cls: type) -> str | None:
    """``doc`` with its line ``{settings}`` replaced by :func:`settings_doc` of ``cls`` (at that line's indent)."""
    if not doc:
        return doc
    lines = doc.split("\n")
    i = next(i for i, line in enumerate(lines) if line.strip() == "{settings}")
    indent = len(lines[i]) - len(lines[i].lstrip())
    return "\n".join(lines[:i]) + "\n" + settings_doc(cls, indent=indent) + "\n".join(lines[i + 1:])


def flag_keywords(cls: type, field: dataclasses.Field, s: Setting, **fill: str) -> dict[str, Any]:
    """The ``argparse.add_argument`` keywords of ``field``'s flag: ``dest`` (the field), its declared help
    (``{name}`` filled from ``fill``), action, metavar (default: the flag's name), and for a stored value its
    type (the field's, or ``text``), default and choices (from an :class:`Options` it admits, or ``choices``)."""
    hint = typing.get_type_hints(cls)[field.name]
    kwargs: dict[str, Any] = {"dest": field.name, "help": s.help.format(**fill) if fill else s.help}
    if s.metavar:
        kwargs["metavar"] = s.metavar
    if s.action != "store":
        kwargs["action"] = s.action
        return kwargs
    kinds = [k for k in typing.get_args(hint) or (hint,) if k in (int, float)]
    text = s.text or (kinds[0] if kinds else None)
    options = [a.options for a in s.admits if isinstance(a, Options)]
    choices = list(options[0]) if options else list(s.choices) if s.choices else None
    kwargs["default"] = None if field.default is dataclasses.MISSING else field.default
    if not s.metavar and not choices:
        kwargs["metavar"] = s.flag.lstrip("-").replace("-", "_").upper() if s.flag else None
    if text not in (None, str):
        kwargs["type"] = text
    if choices:
        kwargs["choices"] = choices
    return kwargs


def add_flags(parser: argparse.ArgumentParser, cls: type, *, only: Callable[[Setting], bool] | None = None,
              **fill: str) -> list[str]:
    """Add the flag of every field of ``cls`` declared with one (and passing ``only``) to ``parser``;
    returns the names of those fields, in order."""
    names = []
    for f, s in declared(cls):
        if s.flag is None or (only is not None and not only(s)):
            continue
        parser.add_argument(s.flag, **flag_keywords(cls, f, s, **fill))
        names.append(f.name)
    return names


def flat_settings(tree, prefix: str = "") -> dict:
    """Nested recorded settings (``runs/<hash>.json``) as one level of dotted keys: what tells two runs apart
    (:func:`ckptgeo.analysis.view.run_labels`, a scan's note on the dataset's other runs).

    >>> flat_settings({"metrics": {"hessian": {"max_seconds": 90.0}}, "seed": 0})
    {'metrics.hessian.max_seconds': 90.0, 'seed': 0}
    """
    out = {}
    for k, v in tree.items():
        if isinstance(v, dict):
            out.update(flat_settings(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out
