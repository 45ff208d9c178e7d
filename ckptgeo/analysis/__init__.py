"""Precursor-gap analysis: when each capability arrived, and whether the geometry moved first.

* :mod:`ckptgeo.analysis.events`: pure functions over one curve (acquisition, collapse, recovery,
  onsets, precursor gap).
* :mod:`ckptgeo.analysis.summary`: :func:`analyze` over a whole dataset, writing ``events/`` and
  ``summary/`` tables.
* :mod:`ckptgeo.analysis.stats`: binomial intervals, permutation and circular-shift tests, the
  detector's false-positive rate on noise, hierarchical bootstrap, Kendall's tau.

Importing this package is cheap; :func:`analyze` and friends load on first use.
"""

from __future__ import annotations

import importlib

__all__ = ["analyze", "Analysis", "AnalysisConfig", "events_text", "events", "summary", "stats"]

_LAZY = {"analyze": "summary", "Analysis": "summary", "AnalysisConfig": "summary", "events_text": "summary",
         "events": None, "summary": None, "stats": None}


def __getattr__(name: str):
    if name in _LAZY:
        mod = importlib.import_module(f".{_LAZY[name] or name}", __name__)
        return mod if _LAZY[name] is None else getattr(mod, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
