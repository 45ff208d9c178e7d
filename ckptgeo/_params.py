"""One declarative parameter check for every settings dataclass (scan, training, analysis, measures).

A field declares what it admits where it is declared (``admits=`` of :func:`ckptgeo._settings.setting`,
the base of every settings class). A class may instead list it in a class attribute, as scikit-learn's
estimators do (older plugin measures)::

    @dataclass(frozen=True)
    class HessianConfig:
        k: int = 5
        ncv: int | None = None
        which: str = "LA"

        _parameter_constraints = {
            "k": [Interval(int, 1, None)],
            "ncv": [Interval(int, 2, None), None],
            "which": [Options("LA", "LM")],
        }

:func:`validate_params` checks an instance against that table and raises
:class:`~ckptgeo.errors.InvalidParameterError` in one shape, *The 'k' parameter of hessian must be
an int in [1, inf). Got -1.* A field's value passes when it satisfies any of its constraints.
:func:`replace_params` sets fields by name (unknown names refused, listing the valid ones) and
validates; :func:`parse_value` turns command-line text into the field's type.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import numbers
import types
import typing
from collections.abc import Mapping
from typing import Any

from ckptgeo.errors import InvalidParameterError

__all__ = ["Interval", "Options", "NonEmptyStr", "Boolean", "validate_params", "replace_params", "parse_value",
           "describe", "constraints_of"]


class Interval:
    """Numbers of ``kind`` (``int`` or ``float``; a float interval admits ints, neither admits bools)
    between ``low`` and ``high`` (None: unbounded). ``closed`` says which ends belong to it:
    ``"both"`` (default), ``"left"``, ``"right"`` or ``"neither"``; an infinite end is always open.

    >>> str(Interval(int, 1, None)), str(Interval(float, 0, 1, closed="right"))
    ('an int in [1, inf)', 'a float in (0, 1]')
    >>> Interval(int, 1, None)(3), Interval(int, 1, None)(2.5), Interval(float, 0, 1)(True)
    (True, False, False)
    """

    def __init__(self, kind: type, low: float | None, high: float | None, *, closed: str = "both"):
        if kind not in (int, float) or closed not in ("both", "left", "right", "neither"):
            raise ValueError(f"Interval(kind={kind!r}, closed={closed!r}): kind must be int or float, closed one of "
                             "both, left, right, neither")
        self.kind, self.low, self.high, self.closed = kind, low, high, closed

    def __call__(self, value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, numbers.Real if self.kind is float else numbers.Integral):
            return False
        if isinstance(value, float) and math.isnan(value):
            return False
        left, right = self.closed in ("both", "left"), self.closed in ("both", "right")
        if self.low is not None and not (value >= self.low if left else value > self.low):
            return False
        return self.high is None or (value <= self.high if right else value < self.high)

    def __str__(self) -> str:
        left = "[" if self.low is not None and self.closed in ("both", "left") else "("
        right = "]" if self.high is not None and self.closed in ("both", "right") else ")"
        lo = "-inf" if self.low is None else repr(self.low)
        hi = "inf" if self.high is None else repr(self.high)
        return f"{'an int' if self.kind is int else 'a float'} in {left}{lo}, {hi}{right}"


class Options:
    """One of the given values (compared with ``==``).

    >>> str(Options("last", "mean"))
    "one of ['last', 'mean']"
    """

    def __init__(self, *options: Any):
        self.options = tuple(options)

    def __call__(self, value: Any) -> bool:
        return any(value == o and type(value) is type(o) for o in self.options)

    def __str__(self) -> str:
        return f"one of {list(self.options)}"


class _NonEmptyStr:
    def __call__(self, value: Any) -> bool:
        return isinstance(value, str) and bool(value.strip())

    def __str__(self) -> str:
        return "a non-empty str"


class _Boolean:
    def __call__(self, value: Any) -> bool:
        return isinstance(value, bool)

    def __str__(self) -> str:
        return "a bool"


#: A non-empty string (a parameter glob, a name).
NonEmptyStr = _NonEmptyStr()
#: True or False (not 0/1).
Boolean = _Boolean()


def _holds(constraint: Any, value: Any) -> bool:
    return value is None if constraint is None else bool(constraint(value))


def describe(constraints: list) -> str:
    """What a list of constraints admits, in words: ``"an int in [2, inf) or None"``."""
    words = ["None" if c is None else str(c) for c in constraints]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


def constraints_of(cls: Any) -> dict[str, list]:
    """What each field of the dataclass ``cls`` (or instance) admits: the ``admits`` of the fields declared
    with :func:`ckptgeo._settings.setting`, then any class-level ``_parameter_constraints`` mapping."""
    cls = cls if isinstance(cls, type) else type(cls)
    declared = {f.name: list(f.metadata["setting"].admits) for f in dataclasses.fields(cls)
                if "setting" in f.metadata and f.metadata["setting"].admits} if dataclasses.is_dataclass(cls) else {}
    return {**declared, **getattr(cls, "_parameter_constraints", {})}


def validate_params(obj: Any, *, owner: str, constraints: Mapping[str, list] | None = None) -> None:
    """Check every field of ``obj`` named in its ``_parameter_constraints`` (or ``constraints``).

    Parameters
    ----------
    obj : object
        A settings instance (usually a frozen dataclass).
    owner : str
        What the settings belong to, for the message (``"scan"``, ``"hessian"``, ``"TrainConfig"``).
    constraints : mapping of str to list, optional
        Field name -> admissible forms (:class:`Interval`, :class:`Options`, :data:`NonEmptyStr`,
        :data:`Boolean`, ``None`` for None); default :func:`constraints_of` ``obj`` (its fields' declared
        ``admits``).

    Raises
    ------
    InvalidParameterError
        A field satisfies none of its constraints: *The 'k' parameter of hessian must be an int in
        [1, inf). Got -1.* (``name`` and ``value`` set on the error).

    Examples
    --------
    >>> from dataclasses import dataclass
    >>> @dataclass(frozen=True)
    ... class Cfg:
    ...     k: int = 5
    ...     _parameter_constraints = {"k": [Interval(int, 1, None)]}
    >>> validate_params(Cfg(k=-1), owner="hessian")
    Traceback (most recent call last):
    ...
    ckptgeo.errors.InvalidParameterError: The 'k' parameter of hessian must be an int in [1, inf). Got -1.
    """
    for name, allowed in (constraints_of(obj) if constraints is None else constraints).items():
        value = getattr(obj, name)
        if not any(_holds(c, value) for c in allowed):
            raise InvalidParameterError(f"The {name!r} parameter of {owner} must be {describe(allowed)}. "
                                        f"Got {value!r}.", name=name, value=value)


def replace_params(obj: Any, options: Mapping[str, Any], *, owner: str) -> Any:
    """A copy of the dataclass ``obj`` with ``options`` set by field name, validated.

    Raises
    ------
    InvalidParameterError
        An option that is not a field (close names suggested, valid ones listed), or a value out of
        its constraints (see :func:`validate_params`).

    Examples
    --------
    >>> from dataclasses import dataclass
    >>> @dataclass(frozen=True)
    ... class Cfg:
    ...     k: int = 5
    ...     which: str = "LA"
    >>> replace_params(Cfg(), {"k": 3}, owner="hessian")
    Cfg(k=3, which='LA')
    >>> replace_params(Cfg(), {"kk": 3}, owner="hessian")
    Traceback (most recent call last):
    ...
    ckptgeo.errors.InvalidParameterError: Unknown option 'kk' of hessian. Did you mean: k? Valid options: k, which.
    """
    fields = [f.name for f in dataclasses.fields(obj)]
    for name in options:
        if name not in fields:
            close = difflib.get_close_matches(str(name), fields, n=3, cutoff=0.6)
            hint = f" Did you mean: {', '.join(close)}?" if close else ""
            valid = ", ".join(fields) if fields else "none (it takes no options)"
            raise InvalidParameterError(f"Unknown option {name!r} of {owner}.{hint} Valid options: {valid}.",
                                        name=str(name), value=options[name])
    new = dataclasses.replace(obj, **options)
    validate_params(new, owner=owner)
    return new


def _union_args(hint: Any) -> tuple:
    args = typing.get_args(hint)
    return args if args and typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)


def parse_value(cls: type, name: str, text: str) -> Any:
    """Command-line ``text`` as the type of field ``name`` of dataclass ``cls`` (``"3"`` -> 3 for an int,
    ``"none"`` -> None where None is allowed, ``"true"`` -> True for a bool, ``"a,b"`` -> a tuple).
    Text that does not parse is returned as is, so that validation names it in its message.

    >>> from dataclasses import dataclass
    >>> @dataclass(frozen=True)
    ... class Cfg:
    ...     k: int = 5
    ...     ncv: int | None = None
    ...     tol: float = 1e-3
    ...     centered: bool = False
    >>> [parse_value(Cfg, n, t) for n, t in [("k", "3"), ("ncv", "none"), ("tol", "0"), ("centered", "yes"),
    ...                                      ("k", "1.5"), ("other", "x")]]
    [3, None, 0.0, True, '1.5', 'x']
    """
    try:
        hint = typing.get_type_hints(cls).get(name)
    except Exception:  # an unresolvable annotation: leave the text to validation
        hint = None
    if hint is None:
        return text
    kinds = _union_args(hint)
    low = text.strip().lower()
    if type(None) in kinds and low in ("none", "null"):
        return None
    for kind in kinds:
        if kind is bool and low in ("true", "yes", "1", "on", "false", "no", "0", "off"):
            return low in ("true", "yes", "1", "on")
        if kind is int:
            try:
                return int(text)
            except ValueError:
                pass
        if kind is float:
            try:
                return float(text)
            except ValueError:
                pass
        if typing.get_origin(kind) is tuple:
            return tuple(p.strip() for p in text.split(",") if p.strip())
        if kind is str:
            return text
    return text
