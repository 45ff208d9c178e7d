"""Permutation tests whose units are settings: whole settings relabelled within strata, never single runs.

A **setting** is (task, level, size). Its seeds share the task's geometry and its timing, so they are replicates of
one piece of evidence, not independent ones: a test that permutes runs counts three pieces where there is one, and
on designs whose effects live at the setting level (seeds of a setting alike, nothing else) it rejects far above
alpha (issue 44: 14-22% where alpha is 5%).

* :func:`unit_orders` -- the relabellings: units exchanged within a stratum (a checkpoint schedule), the item at
  position ``k`` of unit ``A`` taking the label of the item at position ``k`` of the unit that replaces ``A``
  (cyclically where two units hold different numbers of items). Every relabelling is enumerated where there are at
  most ``n_permutations`` of them (the p is exact), else they are drawn.
* :func:`unit_permutation_test` -- a statistic of items against those relabellings. Its smallest possible p is
  :func:`smallest_p`: one over the relabellings of the units, however many items they hold.

Pure functions; nothing reads or writes files.
"""

from __future__ import annotations

import itertools
import math
from typing import Callable, Sequence

import numpy as np

from ckptgeo.stats.permutation import p_value
from ckptgeo.stats.results import PermutationResult

__all__ = ["unit_orders", "smallest_p", "unit_permutation_test"]


def _blocks(units: Sequence, strata: Sequence | None) -> list[list[np.ndarray]]:
    """Per stratum, the item indices of each unit (units in first-seen order, items in order)."""
    units = [str(u) for u in units]
    strata = ["" for _ in units] if strata is None else [str(s) for s in strata]
    out: dict = {}
    for i, (s, u) in enumerate(zip(strata, units)):
        out.setdefault(s, {}).setdefault((s, u), []).append(i)
    return [[np.asarray(v) for v in by.values()] for by in out.values()]


def _relabelled(blocks: list[list[np.ndarray]], perms: Sequence[Sequence[int]], n: int) -> np.ndarray:
    order = np.arange(n)
    for units, perm in zip(blocks, perms):
        for a, b in enumerate(perm):
            src, dst = units[b], units[a]
            order[dst] = src[np.arange(len(dst)) % len(src)]
    return order


def _count(blocks: list[list[np.ndarray]]) -> int:
    return math.prod(math.factorial(len(u)) for u in blocks)


def unit_orders(units: Sequence, strata: Sequence | None = None, *, n_permutations: int = 999,
                seed: int = 0) -> tuple[np.ndarray, bool]:
    """Relabellings of items that move whole units (settings) within strata (module docstring).

    Parameters
    ----------
    units : sequence of shape (n,)
        Each item's unit (its setting).
    strata : sequence of shape (n,), optional
        Each item's stratum (its checkpoint schedule); units move only within one. A unit spread over two
        strata is two units.
    n_permutations : int, default=999
        Relabellings drawn when there are more; at most this many: every one (the identity first).
    seed : int, default=0

    Returns
    -------
    orders : ndarray of int, shape (n_orders, n)
        Row ``b``: item ``i`` takes the label of item ``orders[b, i]``. Exact: row 0 is the identity.
    exact : bool
        Every relabelling was enumerated.

    Examples
    --------
    >>> o, exact = unit_orders(["a", "a", "b", "b"])
    >>> o.tolist(), exact
    ([[0, 1, 2, 3], [2, 3, 0, 1]], True)
    """
    n = len(units)
    blocks = _blocks(units, strata)
    if _count(blocks) <= n_permutations:
        combos = itertools.product(*(itertools.permutations(range(len(u))) for u in blocks))
        return np.asarray([_relabelled(blocks, c, n) for c in combos], dtype=int).reshape(-1, n), True
    rng = np.random.default_rng(seed)
    return np.asarray([_relabelled(blocks, [rng.permutation(len(u)) for u in blocks], n)
                       for _ in range(int(n_permutations))], dtype=int).reshape(-1, n), False


def smallest_p(units: Sequence, strata: Sequence | None = None, *, n_permutations: int = 999) -> float:
    """The smallest p-value a test over these units can give: one over the number of relabellings of the
    settings within strata when they are enumerated, ``1 / (n_permutations + 1)`` when drawn.

    >>> smallest_p(["a"] * 3 + ["b"] * 3 + ["c"] * 3)   # 9 runs, 3 settings: 3! relabellings
    0.16666666666666666
    """
    total = _count(_blocks(units, strata))
    return 1.0 / total if total <= n_permutations else 1.0 / (n_permutations + 1)


def unit_permutation_test(statistic: Callable[[np.ndarray], float], units: Sequence, strata: Sequence | None = None,
                          *, n_permutations: int = 999, seed: int = 0,
                          alternative: str = "greater") -> PermutationResult:
    """A permutation p-value for a statistic of runs, whole settings relabelled within strata.

    Parameters
    ----------
    statistic : callable, ``order -> float``
        As :func:`ckptgeo.stats.permutation_test`: item ``i`` takes the label of item ``order[i]``
        (the identity gives the observed value). NaN results are dropped from the null.
    units, strata, n_permutations, seed
        As :func:`unit_orders`.
    alternative : {"greater", "less", "two-sided"}, default="greater"

    Returns
    -------
    PermutationResult
        Exact (every relabelling, the identity among them): p = #{null >= observed} / #relabellings, never below
        :func:`smallest_p`; else (1 + #{null >= observed}) / (1 + n_permutations).

    Examples
    --------
    >>> x = np.repeat([0.0, 1.0, 2.0, 3.0], 3)                    # 4 settings of 3 seeds
    >>> r = unit_permutation_test(lambda o: float(np.corrcoef(x, x[o])[0, 1]), np.repeat(list("abcd"), 3))
    >>> round(r.p_value, 4), r.exact                               # 1 / 4!
    (0.0417, True)
    """
    orders, exact = unit_orders(units, strata, n_permutations=n_permutations, seed=seed)
    observed = float(statistic(np.arange(len(units))))
    null = np.asarray([float(statistic(o)) for o in orders], dtype=np.float64)
    finite = null[np.isfinite(null)]
    mean = float(finite.mean()) if finite.size else math.nan
    lo, hi = (float(np.quantile(finite, 0.025)), float(np.quantile(finite, 0.975))) if finite.size else (math.nan,) * 2
    return PermutationResult(observed, p_value(observed, null, alternative, exact), mean, lo, hi,
                             int(null.size), exact, int(seed), alternative, null)
