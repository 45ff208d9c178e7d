"""The records the statistical tests of :mod:`ckptgeo.stats` return (:class:`Rate`,
:class:`PermutationResult`, :class:`BootstrapResult`, :class:`KendallResult`), their budgets' defaults, and the
parameter checks they share. :mod:`ckptgeo.stats` re-exports every name here; import from there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ckptgeo.errors import InvalidParameterError

__all__ = [
    "DEFAULT_CONFIDENCE", "DEFAULT_N_PERMUTATIONS", "DEFAULT_N_RESAMPLES", "DEFAULT_N_NOISE_CURVES", "Rate",
    "PermutationResult", "BootstrapResult", "KendallResult", "check_count", "check_confidence", "check_alternative",
]

#: two-sided coverage of every interval unless stated.
DEFAULT_CONFIDENCE = 0.95
#: relabellings drawn by a permutation test (p-values resolve to 1 / (n + 1) = 0.001).
DEFAULT_N_PERMUTATIONS = 999
#: resamples drawn by the hierarchical bootstrap.
DEFAULT_N_RESAMPLES = 999
#: synthetic curves drawn per schedule for a false-positive rate.
DEFAULT_N_NOISE_CURVES = 200


@dataclass(frozen=True)
class Rate:
    """A count of successes out of trials, with its binomial interval.

    Attributes
    ----------
    k, n : int
        Successes and trials.
    rate : float
        ``k / n``; NaN when ``n == 0``.
    low, high : float
        The interval's bounds in [0, 1]; NaN when ``n == 0``.
    confidence : float
        Two-sided coverage, e.g. 0.95.
    method : {"wilson", "exact"}
        Wilson score interval, or Clopper-Pearson ("exact").
    """

    k: int
    n: int
    rate: float
    low: float
    high: float
    confidence: float
    method: str


@dataclass(frozen=True)
class PermutationResult:
    """A statistic against its distribution under relabelling.

    Attributes
    ----------
    statistic : float
        The observed value (identity relabelling).
    p_value : float
        ``(1 + #{null >= observed}) / (1 + n)`` for ``alternative="greater"`` (Monte Carlo), or the exact
        fraction over every relabelling when they were enumerated (the identity included). NaN when the
        observed statistic is NaN.
    null_mean : float
        Mean of the statistic under the null (NaN values dropped).
    null_low, null_high : float
        2.5% and 97.5% quantiles of the null.
    n_permutations : int
        Relabellings evaluated (all of them when ``exact``).
    exact : bool
        Every relabelling was enumerated.
    seed : int
    alternative : {"greater", "less", "two-sided"}
    null : ndarray of shape (n_permutations,)
        The statistic under each relabelling.
    """

    statistic: float
    p_value: float
    null_mean: float
    null_low: float
    null_high: float
    n_permutations: int
    exact: bool
    seed: int
    alternative: str
    null: np.ndarray = field(repr=False, compare=False, default_factory=lambda: np.empty(0))


@dataclass(frozen=True)
class BootstrapResult:
    """A statistic with its percentile interval from a (hierarchical) bootstrap.

    Attributes
    ----------
    estimate : float
        The statistic on the data as given.
    low, high : float
        Percentile interval at ``confidence`` (NaN values of resamples dropped).
    std : float
        Standard deviation of the resampled statistic.
    n_resamples : int
    confidence : float
    seed : int
    levels : tuple of str
        The grouping columns resampled, outermost first.
    n_groups : tuple of int
        Distinct groups at each level in the data.
    distribution : ndarray of shape (n_resamples,)
    """

    estimate: float
    low: float
    high: float
    std: float
    n_resamples: int
    confidence: float
    seed: int
    levels: tuple[str, ...]
    n_groups: tuple[int, ...]
    distribution: np.ndarray = field(repr=False, compare=False, default_factory=lambda: np.empty(0))


@dataclass(frozen=True)
class KendallResult:
    """Kendall's tau-b between two rankings, with a permutation p-value.

    Attributes
    ----------
    tau : float
        Tau-b (ties corrected); NaN with fewer than two pairs or a constant input.
    p_value : float
        Permutation p-value of ``tau`` (``y`` permuted against ``x``); exact when ``n! <= n_permutations``.
    n : int
        Pairs with both values finite.
    n_tied_x, n_tied_y : int
        Pairs of items tied in ``x`` and in ``y``.
    exact : bool
    n_permutations : int
        Relabellings evaluated.
    alternative : str
    min_p : float
        The smallest p-value this test could give these values: that of ``y`` arranged along ``x`` (against
        it for "less"), against the same null. At or above alpha no arrangement could reject: with 3 runs
        at each of 2 sizes the exact one-sided p is never below 1/20 = 0.05. NaN when ``tau`` is.
    """

    tau: float
    p_value: float
    n: int
    n_tied_x: int
    n_tied_y: int
    exact: bool
    n_permutations: int
    alternative: str
    min_p: float = math.nan


# ------------------------------------------------------------------------------------------ checks

def check_count(value, name: str, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or int(value) < low:
        raise InvalidParameterError(f"The {name!r} parameter must be an int in [{low}, inf). Got {value!r}.",
                                    name=name, value=value)
    return int(value)


def check_confidence(confidence) -> float:
    c = float(confidence)
    if not (0.0 < c < 1.0):
        raise InvalidParameterError(f"The 'confidence' parameter must be a float in (0, 1). Got {confidence!r}.",
                                    name="confidence", value=confidence)
    return c


def check_alternative(alternative: str) -> str:
    if alternative not in ("greater", "less", "two-sided"):
        raise InvalidParameterError("The 'alternative' parameter must be one of 'greater', 'less', 'two-sided'. "
                                    f"Got {alternative!r}.", name="alternative", value=alternative)
    return alternative
