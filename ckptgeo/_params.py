"""Declarative checks of a metric's config, run once at the metric's entry point.

A table maps each field to ``(kind, low, high)`` or ``("choice", options)``; a failed check raises
:class:`~ckptgeo.errors.InvalidParameterError` in the shape *The 'k' parameter of hessian must be an
int in [1, inf). Got 0.*
"""

from __future__ import annotations

import math
from typing import Any

from ckptgeo.errors import InvalidParameterError

__all__: list[str] = []


def _describe(kind: str, low: float, high: float) -> str:
    lo = "-inf" if low == -math.inf else repr(low)
    hi = "inf" if high == math.inf else repr(high)
    left = "(" if low == -math.inf else "["
    right = ")" if high == math.inf else "]"
    return f"{'an int' if kind == 'int' else 'a float'} in {left}{lo}, {hi}{right}"


def check_config(config: Any, table: dict[str, tuple], *, metric: str) -> None:
    """Check each field of ``config`` named in ``table``.

    ``table[field]`` is ``("int", low, high)``, ``("float", low, high)`` (both inclusive),
    ``("choice", (a, b, ...))`` or ``("str", None, None)``; a trailing ``"optional"`` admits ``None``.

    Raises
    ------
    InvalidParameterError
        A value of the wrong type, out of range or not among the choices.
    """
    for name, rule in table.items():
        value = getattr(config, name)
        optional = rule[-1] == "optional"
        if value is None and optional:
            continue
        kind = rule[0]
        if kind == "choice":
            if value not in rule[1]:
                raise InvalidParameterError(
                    f"The {name!r} parameter of {metric} must be one of {list(rule[1])}. Got {value!r}.",
                    name=name, value=value)
            continue
        if kind == "str":
            if not isinstance(value, str) or not value.strip():
                raise InvalidParameterError(
                    f"The {name!r} parameter of {metric} must be a non-empty str. Got {value!r}.",
                    name=name, value=value)
            continue
        low, high = rule[1], rule[2]
        ok_type = (isinstance(value, int) and not isinstance(value, bool)) if kind == "int" else (
            isinstance(value, (int, float)) and not isinstance(value, bool))
        if not ok_type or not (low <= value <= high) or (kind == "float" and math.isnan(value)):
            none = " or None" if optional else ""
            raise InvalidParameterError(
                f"The {name!r} parameter of {metric} must be {_describe(kind, low, high)}{none}. Got {value!r}.",
                name=name, value=value)
