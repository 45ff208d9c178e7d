"""A rate with its interval: how many runs of how many, and what that count allows.

* :func:`binomial_interval`: a count of runs out of a number of runs with its Wilson (or Clopper-Pearson)
  interval, as a :class:`~ckptgeo.stats.results.Rate`.

Nothing here reads or writes files.
"""

from __future__ import annotations

import math

from ckptgeo.errors import InvalidParameterError
from ckptgeo.stats.results import DEFAULT_CONFIDENCE, Rate, check_confidence

__all__ = ["binomial_interval"]


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
