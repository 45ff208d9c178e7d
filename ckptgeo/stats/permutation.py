"""Tests that tell an event from chance by relabelling: permutation, circular-shift and rank tests.

Every rate ckptgeo reports (precursor rate, probe lead, top-down) is a count of runs out of a number of
runs; on its own it cannot say whether the rule found something or fired on noise. This module holds the tests
that relabel the runs:

* :func:`permutation_test`: a p-value for any statistic of runs under relabelling (acquisition times
  permuted across runs, optionally within strata); exact enumeration when the relabellings are few.
* :func:`circular_shift_test`: the same with each run's curve rolled by a random number of checkpoints.
* :func:`kendall_tau`: Kendall's tau-b with a permutation p-value and its ties counted.
* :func:`p_value`: the Monte Carlo (or exact) p of an observed statistic against its null draws;
  :func:`slope`: a least-squares slope.

Intervals are :mod:`ckptgeo.stats.intervals`, the bootstrap :mod:`ckptgeo.stats.bootstrap`, noise nulls
:mod:`ckptgeo.stats.noise`, the result records :mod:`ckptgeo.stats.results`.

Everything is seeded and deterministic: the same inputs and ``seed`` give the same numbers on any machine
and under any load; budgets are counts (``n_permutations``), never seconds. Nothing here reads or writes files.
"""

from __future__ import annotations

import itertools
import math
from typing import Callable, Sequence

import numpy as np

from ckptgeo.errors import InvalidParameterError
from ckptgeo.stats.results import (DEFAULT_N_PERMUTATIONS, KendallResult, PermutationResult, check_alternative,
                                   check_count)

__all__ = ["permutation_test", "circular_shift_test", "kendall_tau", "slope", "p_value"]


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
