"""Statistics that tell an event from chance: binomial intervals, nulls, bootstrap and rank tests.

Every rate ckptgeo reports (precursor rate, probe lead, top-down) is a count of runs out of a number of
runs; on its own it cannot say whether the rule found something or fired on noise. This module holds the
pieces that can:

* :func:`binomial_interval`: a rate with its Wilson (or Clopper-Pearson) interval.
* :func:`permutation_test`: a p-value for any statistic of runs under relabelling (acquisition times
  permuted across runs, optionally within strata); exact enumeration when the relabellings are few.
* :func:`circular_shift_test`: the same with each run's curve rolled by a random number of checkpoints.
* :func:`sign_flip_test`: the mean of independent units' values (settings, held-out groups) against zero.
* :func:`noise_curves` and :func:`false_positive_rate`: how often a detector fires on synthetic curves
  without any signal, at a given checkpoint schedule (the run's own).
* :func:`hierarchical_bootstrap`: an interval for a statistic over (task, seed) groups, resampling tasks,
  then seeds within each task.
* :func:`kendall_tau`: Kendall's tau-b with a permutation p-value and its ties counted.
* :func:`slope` and :func:`robust_noise_sd`: small helpers (least-squares slope, noise level of a curve).

Everything is seeded and deterministic: the same inputs and ``seed`` give the same numbers on any machine
and under any load; budgets are counts (``n_permutations``, ``n_resamples``, ``n_curves``), never seconds.
Nothing here reads or writes files.
"""

from __future__ import annotations

import itertools
import math
from typing import Callable, Sequence

import numpy as np

from ckptgeo.analysis.stat_types import (DEFAULT_CONFIDENCE, DEFAULT_N_NOISE_CURVES, DEFAULT_N_PERMUTATIONS,
                                         DEFAULT_N_RESAMPLES, BootstrapResult, KendallResult, PermutationResult, Rate,
                                         check_alternative, check_confidence, check_count)
from ckptgeo.errors import InvalidParameterError

__all__ = [
    "Rate", "PermutationResult", "BootstrapResult", "KendallResult",
    "binomial_interval", "permutation_test", "circular_shift_test", "sign_flip_test", "noise_curves",
    "false_positive_rate",
    "hierarchical_bootstrap", "kendall_tau", "slope", "robust_noise_sd", "p_value",
    "DEFAULT_CONFIDENCE", "DEFAULT_N_PERMUTATIONS", "DEFAULT_N_RESAMPLES", "DEFAULT_N_NOISE_CURVES",
]


# ------------------------------------------------------------------------------------------ rates

def binomial_interval(k: int, n: int, *, confidence: float = DEFAULT_CONFIDENCE, method: str = "wilson") -> Rate:
    """A rate ``k / n`` with its binomial confidence interval.

    Parameters
    ----------
    k : int
        Successes, ``0 <= k <= n``.
    n : int
        Trials, ``n >= 0``.
    confidence : float in (0, 1), default=0.95
    method : {"wilson", "exact"}, default="wilson"
        Wilson score interval (good coverage at small ``n``), or Clopper-Pearson ("exact", conservative),
        both from :meth:`scipy.stats.binomtest(...).proportion_ci <scipy.stats._result_classes.BinomTestResult>`.

    Returns
    -------
    Rate
        ``n == 0`` gives NaN rate and bounds.

    Raises
    ------
    InvalidParameterError
        ``k`` or ``n`` negative or ``k > n``; ``confidence`` outside (0, 1); unknown ``method``.

    Examples
    --------
    >>> r = binomial_interval(7, 10)
    >>> round(r.rate, 2), round(r.low, 3), round(r.high, 3)
    (0.7, 0.397, 0.892)
    """
    from scipy.stats import binomtest

    k, n = int(k), int(n)
    if n < 0 or k < 0 or k > n:
        raise InvalidParameterError(f"A rate needs 0 <= k <= n. Got k={k}, n={n}.", name="k", value=(k, n))
    confidence = check_confidence(confidence)
    if method not in ("wilson", "exact"):
        raise InvalidParameterError(f"The 'method' parameter must be 'wilson' or 'exact'. Got {method!r}.",
                                    name="method", value=method)
    if n == 0:
        return Rate(0, 0, math.nan, math.nan, math.nan, confidence, method)
    ci = binomtest(k, n).proportion_ci(confidence_level=confidence, method=method)
    return Rate(k, n, k / n, float(ci.low), float(ci.high), confidence, method)


# ------------------------------------------------------------------------------------------ permutation tests

def p_value(observed: float, null: np.ndarray, alternative: str, exact: bool) -> float:
    """The p of ``observed`` against the finite values of ``null`` (one-sided ``"less"`` / ``"greater"``, or
    two-sided), ties within 1e-12 counted as at least as extreme; Monte Carlo (``exact`` False): the observed value
    counted once among the null's, ``(1 + #) / (1 + n)``, never 0. NaN for a non-finite observation or no null."""
    if not math.isfinite(observed):
        return math.nan
    null = null[np.isfinite(null)]
    if null.size == 0:
        return math.nan
    tol = 1e-12 * max(1.0, abs(observed))
    ge = int(np.sum(null >= observed - tol))
    le = int(np.sum(null <= observed + tol))
    # exact: the identity is among the enumerated relabellings; Monte Carlo: count it once (never p = 0)
    num_ge, num_le, den = (ge, le, null.size) if exact else (ge + 1, le + 1, null.size + 1)
    if alternative == "greater":
        return num_ge / den
    if alternative == "less":
        return num_le / den
    return min(1.0, 2.0 * min(num_ge, num_le) / den)


def _summarise(observed: float, null: np.ndarray, alternative: str, exact: bool, seed: int) -> PermutationResult:
    finite = null[np.isfinite(null)]
    mean = float(finite.mean()) if finite.size else math.nan
    lo, hi = (float(np.quantile(finite, 0.025)), float(np.quantile(finite, 0.975))) if finite.size else (math.nan,) * 2
    return PermutationResult(float(observed), p_value(float(observed), null, alternative, exact), mean, lo, hi,
                             int(null.size), exact, int(seed), alternative, null)


def permutation_test(statistic: Callable[[np.ndarray], float], n: int, *, strata: Sequence | None = None,
                     n_permutations: int = DEFAULT_N_PERMUTATIONS, seed: int = 0,
                     alternative: str = "greater") -> PermutationResult:
    """A permutation p-value for a statistic of ``n`` runs under relabelling.

    The caller's ``statistic`` receives an ``order``: item ``i`` takes the label (e.g. the acquisition step)
    of item ``order[i]``. The identity order gives the observed value. With ``strata``, labels move only
    among items of the same stratum (e.g. runs of the same task or the same checkpoint schedule).

    Parameters
    ----------
    statistic : callable, ``order -> float``
        ``order`` is an int ndarray of shape (n,), a permutation of ``range(n)``. NaN results are dropped
        from the null.
    n : int
        Number of items (runs), >= 1.
    strata : sequence of shape (n,) or None, default=None
        A hashable label per item; relabelling stays within each label.
    n_permutations : int, default=999
        Random relabellings drawn. When the number of distinct relabellings (``n!``, or the product over
        strata) is at most this, every one is enumerated instead and the p-value is exact.
    seed : int, default=0
        Seed of :func:`numpy.random.default_rng`.
    alternative : {"greater", "less", "two-sided"}, default="greater"
        "greater": the observed statistic is larger than chance (e.g. a precursor rate above the null's).

    Returns
    -------
    PermutationResult

    Raises
    ------
    InvalidParameterError
        ``n`` or ``n_permutations`` < 1, ``strata`` of the wrong length, unknown ``alternative``.

    Notes
    -----
    Monte Carlo: ``p = (1 + #{T_perm >= T_obs}) / (1 + n_permutations)``, which is valid (never below the
    nominal level under the null) for a finite number of draws. A statistic with few distinct values (a rate
    over ten runs) gives a conservative p: P(p <= alpha) <= alpha.

    Examples
    --------
    >>> x = np.arange(8.0)
    >>> r = permutation_test(lambda order: float(np.corrcoef(x, x[order])[0, 1]), 8, seed=1)
    >>> r.p_value <= 0.002, r.exact
    (True, False)
    """
    n = check_count(n, "n")
    n_permutations = check_count(n_permutations, "n_permutations")
    alternative = check_alternative(alternative)
    if strata is None:
        groups = [np.arange(n)]
    else:
        labels = list(strata)
        if len(labels) != n:
            raise InvalidParameterError(f"'strata' must have one label per item. Got {len(labels)} for n={n}.",
                                        name="strata", value=len(labels))
        seen: dict = {}
        for i, lab in enumerate(labels):
            seen.setdefault(lab, []).append(i)
        groups = [np.asarray(v) for v in seen.values()]
    observed = float(statistic(np.arange(n)))
    total = math.prod(math.factorial(len(g)) for g in groups)
    if total <= n_permutations:
        null = []
        for combo in itertools.product(*(itertools.permutations(g.tolist()) for g in groups)):
            order = np.arange(n)
            for g, perm in zip(groups, combo):
                order[g] = perm
            null.append(float(statistic(order)))
        return _summarise(observed, np.asarray(null, dtype=np.float64), alternative, True, seed)
    rng = np.random.default_rng(seed)
    null = np.empty(n_permutations, dtype=np.float64)
    for b in range(n_permutations):
        order = np.arange(n)
        for g in groups:
            order[g] = g[rng.permutation(g.size)]
        null[b] = float(statistic(order))
    return _summarise(observed, null, alternative, False, seed)


def circular_shift_test(statistic: Callable[[np.ndarray], float], lengths: Sequence[int], *,
                        n_permutations: int = DEFAULT_N_PERMUTATIONS, seed: int = 0,
                        alternative: str = "greater") -> PermutationResult:
    """A p-value for a statistic of runs whose curves are each rolled by a random number of checkpoints.

    Rolling a curve keeps its shape and noise (autocorrelation included) but moves its events in time
    relative to the run's acquisition, which stays put: a null for "the geometry's events are placed
    relative to acquisition by chance".

    Parameters
    ----------
    statistic : callable, ``shifts -> float``
        ``shifts`` is an int ndarray of shape (n_runs,), ``0 <= shifts[i] < lengths[i]``: roll run ``i``'s
        curve by that many checkpoints (``numpy.roll``). All zeros gives the observed value.
    lengths : sequence of int, shape (n_runs,)
        Checkpoints per run (each >= 1).
    n_permutations : int, default=999
        Random shift vectors drawn; all of them are enumerated when there are at most this many.
    seed : int, default=0
    alternative : {"greater", "less", "two-sided"}, default="greater"

    Returns
    -------
    PermutationResult

    Raises
    ------
    InvalidParameterError
        An empty ``lengths`` or a length < 1; ``n_permutations`` < 1; unknown ``alternative``.

    Examples
    --------
    >>> r = circular_shift_test(lambda s: float(np.sum(s == 0)), [5, 5])
    >>> r.exact, r.n_permutations, round(r.p_value, 2)
    (True, 25, 0.04)
    """
    lengths = [int(x) for x in lengths]
    if not lengths or min(lengths) < 1:
        raise InvalidParameterError(f"'lengths' must be a non-empty list of ints >= 1. Got {lengths!r}.",
                                    name="lengths", value=lengths)
    n_permutations = check_count(n_permutations, "n_permutations")
    alternative = check_alternative(alternative)
    observed = float(statistic(np.zeros(len(lengths), dtype=np.int64)))
    if math.prod(lengths) <= n_permutations:
        null = np.asarray([float(statistic(np.asarray(s, dtype=np.int64)))
                           for s in itertools.product(*(range(k) for k in lengths))], dtype=np.float64)
        return _summarise(observed, null, alternative, True, seed)
    rng = np.random.default_rng(seed)
    hi = np.asarray(lengths, dtype=np.int64)
    null = np.asarray([float(statistic(rng.integers(0, hi))) for _ in range(n_permutations)], dtype=np.float64)
    return _summarise(observed, null, alternative, False, seed)


def sign_flip_test(values: Sequence[float], *, n_permutations: int = DEFAULT_N_PERMUTATIONS, seed: int = 0,
                   alternative: str = "greater") -> PermutationResult:
    """A p-value for the mean of independent units' values (one per unit: a setting's or a held-out group's mean
    difference) against zero, by flipping their signs.

    Parameters
    ----------
    values : sequence of float, shape (n_units,)
        One value per unit; NaN values are left out.
    n_permutations : int, default=999
        Random sign vectors drawn; all ``2 ** n_units`` are enumerated when there are at most this many (then the
        p is exact and never below ``2 ** -n_units``: 5 units are the fewest that can reach p < 0.05).
    seed : int, default=0
    alternative : {"greater", "less", "two-sided"}, default="greater"

    Returns
    -------
    PermutationResult
        NaN p for no finite value.

    Raises
    ------
    InvalidParameterError
        ``n_permutations`` < 1, unknown ``alternative``.

    Notes
    -----
    Valid where the units are independent and each is symmetric about 0 under the null (a unit's value is a
    difference of two forecasts' scores, whose labels could be swapped). Counting runs of one setting as units
    instead rejects far above alpha where the runs share their setting's geometry (docs/definitions.md).

    Examples
    --------
    >>> r = sign_flip_test([0.3, 0.2, 0.4, 0.1, 0.5])
    >>> r.exact, r.n_permutations, r.p_value
    (True, 32, 0.03125)
    >>> sign_flip_test([0.3, 0.2, 0.4, 0.1]).p_value   # 4 units: at best 1/16
    0.0625
    """
    n_permutations = check_count(n_permutations, "n_permutations")
    alternative = check_alternative(alternative)
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return PermutationResult(math.nan, math.nan, math.nan, math.nan, math.nan, 0, True, int(seed), alternative,
                                 np.empty(0))
    observed = float(v.mean())
    if 2 ** v.size <= n_permutations:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=v.size)))
        return _summarise(observed, signs @ v / v.size, alternative, True, seed)
    signs = np.where(np.random.default_rng(seed).random((n_permutations, v.size)) < 0.5, -1.0, 1.0)
    return _summarise(observed, signs @ v / v.size, alternative, False, seed)


# ------------------------------------------------------------------------------------------ noise

def noise_curves(steps: Sequence[float], *, n_curves: int = DEFAULT_N_NOISE_CURVES, seed: int = 0,
                 kind: str = "gaussian", level: float = 1.0, relative_sd: float = 0.05) -> np.ndarray:
    """Synthetic curves without any event, at a given checkpoint schedule.

    Parameters
    ----------
    steps : array-like of shape (n_checkpoints,)
        The schedule (training steps). Only its length matters for "gaussian"; "random_walk" scales each
        increment by the square root of the step spacing (a diffusion in training time).
    n_curves : int, default=200
    seed : int, default=0
    kind : {"gaussian", "random_walk"}, default="gaussian"
        "gaussian": ``level * (1 + relative_sd * e)``, ``e`` iid standard normal at each checkpoint.
        "random_walk": ``level * (1 + relative_sd * W)``, ``W`` a Brownian path in units of the run's length
        (its standard deviation is 1 at the last checkpoint).
    level : float, default=1.0
        The curve's mean level (e.g. the run's first RankMe value).
    relative_sd : float, default=0.05
        Noise standard deviation as a fraction of ``level`` (>= 0).

    Returns
    -------
    ndarray of shape (n_curves, n_checkpoints)

    Raises
    ------
    InvalidParameterError
        Unknown ``kind``, negative ``relative_sd``, ``n_curves`` < 1.

    Examples
    --------
    >>> noise_curves([0, 10, 20], n_curves=2, relative_sd=0.0)
    array([[1., 1., 1.],
           [1., 1., 1.]])
    """
    n_curves = check_count(n_curves, "n_curves")
    if kind not in ("gaussian", "random_walk"):
        raise InvalidParameterError(f"The 'kind' parameter must be 'gaussian' or 'random_walk'. Got {kind!r}.",
                                    name="kind", value=kind)
    if not (float(relative_sd) >= 0.0):
        raise InvalidParameterError(f"The 'relative_sd' parameter must be >= 0. Got {relative_sd!r}.",
                                    name="relative_sd", value=relative_sd)
    s = np.sort(np.asarray(steps, dtype=np.float64).reshape(-1))
    rng = np.random.default_rng(seed)
    e = rng.standard_normal((n_curves, s.size))
    if kind == "random_walk" and s.size:
        dt = np.diff(s, prepend=s[0])
        span = float(s[-1] - s[0]) or 1.0
        e[:, 0] = 0.0
        e = np.cumsum(e * np.sqrt(dt / span), axis=1)
    return float(level) * (1.0 + float(relative_sd) * e)


def false_positive_rate(detector: Callable[[np.ndarray, np.ndarray], bool], steps: Sequence[float], *,
                        n_curves: int = DEFAULT_N_NOISE_CURVES, seed: int = 0, kind: str = "gaussian",
                        level: float = 1.0, relative_sd: float = 0.05,
                        confidence: float = DEFAULT_CONFIDENCE) -> Rate:
    """How often a detector fires on curves without any event, at a given checkpoint schedule.

    Parameters
    ----------
    detector : callable, ``(steps, values) -> bool``
        The rule under test, e.g. "precursor before the acquisition step of this run" (close over the
        acquisition step). ``steps`` is the sorted schedule, ``values`` one synthetic curve.
    steps : array-like of shape (n_checkpoints,)
        The run's own schedule.
    n_curves, seed, kind, level, relative_sd
        As :func:`noise_curves`.
    confidence : float, default=0.95
        Coverage of the Wilson interval on the rate.

    Returns
    -------
    Rate
        ``k`` curves out of ``n_curves`` on which the detector fired.

    Examples
    --------
    >>> r = false_positive_rate(lambda s, v: bool(v[-1] > v[0]), [0, 1, 2, 3], n_curves=400)
    >>> 0.4 < r.rate < 0.6
    True
    """
    s = np.sort(np.asarray(steps, dtype=np.float64).reshape(-1))
    curves = noise_curves(s, n_curves=n_curves, seed=seed, kind=kind, level=level, relative_sd=relative_sd)
    k = int(sum(bool(detector(s, c)) for c in curves))
    return binomial_interval(k, curves.shape[0], confidence=confidence)


def robust_noise_sd(values: Sequence[float]) -> float:
    """The noise level of a curve from its checkpoint-to-checkpoint changes, robust to its trend and jumps.

    ``1.4826 * median(|diff - median(diff)|) / sqrt(2)``: the standard deviation of iid noise added to a
    smooth curve, from the median absolute deviation of first differences.

    Parameters
    ----------
    values : array-like of shape (n_checkpoints,)
        NaN values are dropped.

    Returns
    -------
    float
        NaN with fewer than three finite values.

    Examples
    --------
    >>> round(robust_noise_sd(np.random.default_rng(0).normal(5.0, 0.1, 4000)), 2)
    0.1
    """
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    v = v[np.isfinite(v)]
    if v.size < 3:
        return math.nan
    d = np.diff(v)
    return float(1.4826 * np.median(np.abs(d - np.median(d))) / math.sqrt(2.0))


# ------------------------------------------------------------------------------------------ bootstrap

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


# ------------------------------------------------------------------------------------------ rank tests

def _tau_b(x: np.ndarray, y: np.ndarray) -> float:
    dx = np.sign(x[:, None] - x[None, :])
    dy = np.sign(y[:, None] - y[None, :])
    iu = np.triu_indices(x.size, 1)
    dx, dy = dx[iu], dy[iu]
    n0 = dx.size
    nx, ny = n0 - int(np.sum(dx == 0)), n0 - int(np.sum(dy == 0))
    if nx == 0 or ny == 0:
        return math.nan
    return float(np.sum(dx * dy) / math.sqrt(nx * ny))


def kendall_tau(x: Sequence[float], y: Sequence[float], *, n_permutations: int = 9999, seed: int = 0,
                alternative: str = "two-sided") -> KendallResult:
    """Kendall's tau-b between ``x`` and ``y`` with a permutation p-value; ties counted and corrected for.

    Parameters
    ----------
    x, y : array-like of shape (n,)
        E.g. layer depth and the layer's collapse onset step. Pairs with a NaN are dropped.
    n_permutations : int, default=9999
        Random permutations of ``y``; with ``n! <= n_permutations`` every permutation is enumerated.
    seed : int, default=0
    alternative : {"two-sided", "greater", "less"}, default="two-sided"
        "less": tau below zero (e.g. onset falls with depth: deeper layers first, top-down).

    Returns
    -------
    KendallResult
        tau NaN (and p NaN) with fewer than two pairs or a constant input. With two pairs the exact p is
        never below 0.5 (two-sided 1.0): no order of two layers is evidence.

    Raises
    ------
    InvalidParameterError
        ``x`` and ``y`` of different lengths; bad counts or ``alternative``.

    Examples
    --------
    >>> r = kendall_tau([1, 2, 3, 4, 5], [50, 40, 30, 20, 10], alternative="less")
    >>> r.tau, round(r.p_value, 4), r.exact
    (-1.0, 0.0083, True)
    >>> r = kendall_tau([1, 1, 1, 2, 2, 2], [2.08, 2.22, 2.39, 3.30, 3.49, 3.32], alternative="greater")
    >>> round(r.tau, 2), r.p_value, r.min_p      # perfectly separated, and still p = 1/20
    (0.77, 0.05, 0.05)
    """
    xv = np.asarray(x, dtype=np.float64).reshape(-1)
    yv = np.asarray(y, dtype=np.float64).reshape(-1)
    if xv.shape != yv.shape:
        raise InvalidParameterError(f"'x' and 'y' must have the same length. Got {xv.size} and {yv.size}.",
                                    name="y", value=(xv.size, yv.size))
    n_permutations = check_count(n_permutations, "n_permutations")
    alternative = check_alternative(alternative)
    keep = np.isfinite(xv) & np.isfinite(yv)
    xv, yv = xv[keep], yv[keep]
    n = int(xv.size)
    iu = np.triu_indices(n, 1)
    tied_x = int(np.sum((xv[:, None] == xv[None, :])[iu]))
    tied_y = int(np.sum((yv[:, None] == yv[None, :])[iu]))
    tau = _tau_b(xv, yv) if n >= 2 else math.nan
    if math.isnan(tau):
        return KendallResult(math.nan, math.nan, n, tied_x, tied_y, False, 0, alternative)
    res = permutation_test(lambda order: _tau_b(xv, yv[order]), n, n_permutations=n_permutations, seed=seed,
                           alternative=alternative)
    along = np.empty_like(yv)
    along[np.argsort(xv, kind="stable")] = np.sort(yv)[::-1] if alternative == "less" else np.sort(yv)
    min_p = p_value(_tau_b(xv, along), res.null, alternative, res.exact)
    return KendallResult(tau, res.p_value, n, tied_x, tied_y, res.exact, res.n_permutations, alternative, min_p)


def slope(x: Sequence[float], y: Sequence[float]) -> float:
    """Least-squares slope of ``y`` on ``x`` (NaN pairs dropped); NaN with fewer than two distinct ``x``.

    Examples
    --------
    >>> slope([0, 1, 2], [1.0, 3.0, 5.0])
    2.0
    """
    xv = np.asarray(x, dtype=np.float64).reshape(-1)
    yv = np.asarray(y, dtype=np.float64).reshape(-1)
    if xv.shape != yv.shape:
        raise InvalidParameterError(f"'x' and 'y' must have the same length. Got {xv.size} and {yv.size}.",
                                    name="y", value=(xv.size, yv.size))
    keep = np.isfinite(xv) & np.isfinite(yv)
    xv, yv = xv[keep], yv[keep]
    if np.unique(xv).size < 2:
        return math.nan
    xc = xv - xv.mean()
    return float(np.sum(xc * (yv - yv.mean())) / np.sum(xc * xc))
