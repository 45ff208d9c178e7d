"""An interval for a statistic over (task, seed) groups by resampling groups: :func:`hierarchical_bootstrap`.

Seeded and deterministic; the budget is a count (``n_resamples``), never seconds. Nothing here reads or writes
files.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

from ckptgeo.errors import InvalidParameterError
from ckptgeo.stats.results import DEFAULT_CONFIDENCE, DEFAULT_N_RESAMPLES, BootstrapResult, check_confidence, check_count

__all__ = ["hierarchical_bootstrap"]


def hierarchical_bootstrap(frame, statistic: Callable[[object], float], *, levels: Sequence[str] = ("task", "seed"),
                           n_resamples: int = DEFAULT_N_RESAMPLES, seed: int = 0,
                           confidence: float = DEFAULT_CONFIDENCE) -> BootstrapResult:
    """A percentile interval for a statistic of grouped runs, resampling each level of the hierarchy.

    Draws the outermost groups (e.g. tasks) with replacement, then, within each drawn group, its subgroups
    (e.g. seeds) with replacement, and so on; the rows of the innermost groups drawn are kept whole. So the
    interval reflects both the spread between tasks and the spread between seeds of a task.

    Parameters
    ----------
    frame : pandas.DataFrame
        One row per observation (e.g. a run's event), with a column for each level.
    statistic : callable, ``DataFrame -> float``
        E.g. ``lambda d: d["precursor"].mean()``.
    levels : sequence of str, default=("task", "seed")
        Grouping columns, outermost first.
    n_resamples : int, default=999
    seed : int, default=0
    confidence : float in (0, 1), default=0.95

    Returns
    -------
    BootstrapResult
        NaN bounds for an empty frame.

    Raises
    ------
    InvalidParameterError
        A level is not a column of ``frame``; no levels; bad counts or confidence.

    Examples
    --------
    >>> import pandas as pd
    >>> d = pd.DataFrame({"task": list("aabb"), "seed": [0, 1, 0, 1], "x": [1.0, 1.0, 3.0, 3.0]})
    >>> r = hierarchical_bootstrap(d, lambda f: f["x"].mean(), n_resamples=200)
    >>> r.estimate, r.low, r.high
    (2.0, 1.0, 3.0)
    """
    levels = tuple(levels)
    if not levels:
        raise InvalidParameterError("The 'levels' parameter must name at least one column. Got ().",
                                    name="levels", value=levels)
    missing = [c for c in levels if c not in frame.columns]
    if missing:
        raise InvalidParameterError(f"hierarchical_bootstrap: no column {missing[0]!r} in the table (columns: "
                                    f"{', '.join(map(str, frame.columns))}).", name="levels", value=missing[0])
    n_resamples = check_count(n_resamples, "n_resamples")
    confidence = check_confidence(confidence)
    n_groups = tuple(int(frame.groupby(list(levels[:i + 1]), dropna=False).ngroups) for i in range(len(levels)))
    if len(frame) == 0:
        return BootstrapResult(math.nan, math.nan, math.nan, math.nan, n_resamples, confidence, int(seed), levels,
                               n_groups)
    estimate = float(statistic(frame))
    # a tree of row positions: {group: {subgroup: ... [positions]}}
    def tree(pos: np.ndarray, depth: int):
        if depth == len(levels):
            return pos
        keys = frame[levels[depth]].iloc[pos].to_numpy()
        order = sorted(set(keys.tolist()), key=lambda x: (str(type(x)), str(x)))
        return [tree(pos[keys == k], depth + 1) for k in order]

    root = tree(np.arange(len(frame)), 0)
    rng = np.random.default_rng(seed)

    def draw(node) -> list:
        if isinstance(node, np.ndarray):
            return [node]
        picks = rng.integers(0, len(node), size=len(node))
        return [part for i in picks for part in draw(node[i])]

    dist = np.empty(n_resamples, dtype=np.float64)
    for b in range(n_resamples):
        dist[b] = float(statistic(frame.iloc[np.concatenate(draw(root))]))
    finite = dist[np.isfinite(dist)]
    a = (1.0 - confidence) / 2.0
    lo, hi = (float(np.quantile(finite, a)), float(np.quantile(finite, 1.0 - a))) if finite.size else (math.nan,) * 2
    sd = float(finite.std(ddof=1)) if finite.size >= 2 else math.nan
    return BootstrapResult(estimate, lo, hi, sd, n_resamples, confidence, int(seed), levels, n_groups, dist)
