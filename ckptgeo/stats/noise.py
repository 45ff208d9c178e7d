"""How often a rule fires on curves that carry no event: one noise model for ``analyze`` and the claim table.

A detector (the precursor rule against a run's acquisition, or any rule ``(steps, values) -> bool``) is run on
synthetic curves at the run's own checkpoint schedule, built from the run's own curve in three ways:

``jitter``       measurement jitter: iid Gaussian around the curve's median with the standard deviation of
                 its checkpoint-to-checkpoint changes (:func:`ckptgeo.stats.noise.robust_noise_sd`, blind
                 to trend and jumps). It asks whether the rule fires on the wobble of a flat curve; since a
                 jitter is small against any real change, it rarely can (a collapse must fall ``min_drop``).
``iid``          noise at the curve's own variance: iid Gaussian with the curve's own mean and standard
                 deviation (trend included). A curve of this spread with no order in time.
``random_walk``  a random walk in training time from the curve's first value whose spread at the last
                 checkpoint is the curve's own standard deviation: smooth, trending curves with no event.

Only the last two can say whether a verdict is one that noise cannot give; the jitter rate is reported
beside them, under its own name. Each rate is a count of curves out of ``n_curves`` with its Wilson
interval, so rates of several runs pool by adding counts (:func:`pool`).

Everything is seeded (same inputs and seed, same rates on any machine); nothing here reads or writes files.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from ckptgeo.errors import InvalidParameterError
from ckptgeo.stats.intervals import binomial_interval
from ckptgeo.stats.results import DEFAULT_CONFIDENCE, DEFAULT_N_NOISE_CURVES, Rate, check_count

__all__ = ["noise_curves", "false_positive_rate", "robust_noise_sd", "NOISE_KINDS", "NoiseLevels", "NoiseRates", "noise_levels", "noise_curves_like", "noise_rates", "pool"]

# ------------------------------------------------------------------------------------------ white noise

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


# ------------------------------------------------------------------------------------------ noise models of a curve

#: the noise models, in the order they are reported.
NOISE_KINDS = ("jitter", "iid", "random_walk")


@dataclass(frozen=True)
class NoiseLevels:
    """The numbers a curve's noise copies are built from (units of the curve).

    ``median``, ``mean``, ``first``: the curve's median, mean and first finite value. ``jitter_sd``:
    :func:`~ckptgeo.stats.noise.robust_noise_sd` of the curve. ``own_sd``: its standard deviation (ddof=1).
    NaN where there are too few finite values (3 for ``jitter_sd``, 2 for ``own_sd``).
    """

    median: float
    mean: float
    first: float
    jitter_sd: float
    own_sd: float

    @property
    def jitter_relative_sd(self) -> float:
        """``jitter_sd / |median|`` (NaN at a zero median)."""
        return self.jitter_sd / abs(self.median) if self.median else math.nan

    @property
    def own_relative_sd(self) -> float:
        """``own_sd / |mean|`` (NaN at a zero mean)."""
        return self.own_sd / abs(self.mean) if self.mean else math.nan


@dataclass(frozen=True)
class NoiseRates:
    """How often a detector fired on each noise model (:func:`noise_rates`).

    ``jitter``, ``iid``, ``random_walk``: :class:`~ckptgeo.stats.results.Rate` (k curves of n with its
    interval), None where the model could not be built (too few checkpoints). ``levels``: what the curves
    were built from (None after :func:`pool`).
    """

    jitter: Rate | None
    iid: Rate | None
    random_walk: Rate | None
    levels: NoiseLevels | None = None

    def rate(self, kind: str) -> Rate | None:
        """The rate of noise model ``kind`` (one of :data:`NOISE_KINDS`)."""
        _check_kind(kind)
        return getattr(self, kind)


def _check_kind(kind: str) -> str:
    if kind not in NOISE_KINDS:
        raise InvalidParameterError(f"The 'kind' parameter must be one of {', '.join(NOISE_KINDS)}. Got {kind!r}.",
                                    name="kind", value=kind)
    return kind


def noise_levels(values: Sequence[float]) -> NoiseLevels:
    """Median, mean, first value, jitter and own standard deviation of a curve (NaN values dropped).

    Examples
    --------
    >>> lv = noise_levels([1.0, 3.0, 2.0, 4.0])
    >>> lv.median, lv.mean, lv.first, round(lv.own_sd, 4)
    (2.5, 2.5, 1.0, 1.291)
    """
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return NoiseLevels(math.nan, math.nan, math.nan, math.nan, math.nan)
    own = float(np.std(v, ddof=1)) if v.size > 1 else math.nan
    return NoiseLevels(float(np.median(v)), float(np.mean(v)), float(v[0]), robust_noise_sd(v), own)


def noise_curves_like(steps: Sequence[float], values: Sequence[float], kind: str, *,
                      n_curves: int = DEFAULT_N_NOISE_CURVES, seed: int = 0) -> np.ndarray | None:
    """``n_curves`` noise copies of one curve under noise model ``kind`` (module docstring), at its schedule.

    Parameters
    ----------
    steps, values : array-like of shape (n_checkpoints,)
        The curve; checkpoints with a NaN value are dropped, the rest sorted by step.
    kind : {"jitter", "iid", "random_walk"}
    n_curves : int, default=200
    seed : int, default=0

    Returns
    -------
    ndarray of shape (n_curves, n_measured) or None
        None with fewer than three measured checkpoints or a spread that is not finite.

    Raises
    ------
    InvalidParameterError
        Unknown ``kind``, ``n_curves`` < 1.

    Examples
    --------
    >>> noise_curves_like([0, 10, 20, 30], [5.0, 5.0, 5.0, 5.0], "iid", n_curves=2)
    array([[5., 5., 5., 5.],
           [5., 5., 5., 5.]])
    """
    _check_kind(kind)
    s = np.asarray(steps, dtype=np.float64).reshape(-1)
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    keep = np.isfinite(s) & np.isfinite(v)
    order = np.argsort(s[keep], kind="stable")
    s, v = s[keep][order], v[keep][order]
    if s.size < 3:
        return None
    lv = noise_levels(v)
    centre, sd, walk = {"jitter": (lv.median, lv.jitter_sd, "gaussian"), "iid": (lv.mean, lv.own_sd, "gaussian"),
                        "random_walk": (lv.first, lv.own_sd, "random_walk")}[kind]
    if not (math.isfinite(centre) and math.isfinite(sd)):
        return None
    unit = noise_curves(s, n_curves=n_curves, seed=seed, kind=walk, level=1.0, relative_sd=1.0) - 1.0
    return centre + sd * unit


def noise_rates(detector: Callable[[np.ndarray, np.ndarray], bool], steps: Sequence[float],
                values: Sequence[float], *, n_curves: int = DEFAULT_N_NOISE_CURVES, seed: int = 0,
                confidence: float = DEFAULT_CONFIDENCE, kinds: Sequence[str] = NOISE_KINDS) -> NoiseRates:
    """How often ``detector`` fires on noise copies of one curve, under each noise model.

    The one noise implementation of ckptgeo: ``analyze`` (the events table's ``jitter_fpr``, ``iid_fpr``,
    ``walk_fpr``) and the claim table call it.

    Parameters
    ----------
    detector : callable ``(steps, values) -> bool``
        The rule under test; ``steps`` is the curve's sorted measured schedule (int64), ``values`` one copy.
    steps, values : array-like of shape (n_checkpoints,)
        The run's own curve (its schedule and the levels of its noise).
    n_curves : int, default=200
        Copies per noise model.
    seed : int, default=0
        Every model draws from this seed (same seed, same copies).
    confidence : float, default=0.95
        Coverage of each Wilson interval.
    kinds : sequence of str, default=NOISE_KINDS
        The models to run; the others are None.

    Returns
    -------
    NoiseRates

    Raises
    ------
    InvalidParameterError
        Unknown kind, ``n_curves`` < 1.

    Examples
    --------
    >>> r = noise_rates(lambda s, v: bool(v[-1] > v[0]), [0, 1, 2, 3], [1.0, 2.0, 1.5, 3.0], n_curves=400)
    >>> 0.4 < r.iid.rate < 0.6, r.jitter.n
    (True, 400)
    """
    for kind in kinds:
        _check_kind(kind)
    s = np.asarray(steps, dtype=np.float64).reshape(-1)
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    keep = np.isfinite(s) & np.isfinite(v)
    grid = np.sort(s[keep]).astype(np.int64)
    out = {}
    for kind in kinds:
        curves = noise_curves_like(s, v, kind, n_curves=n_curves, seed=seed)
        if curves is None:
            continue
        k = int(sum(bool(detector(grid, c)) for c in curves))
        out[kind] = binomial_interval(k, curves.shape[0], confidence=confidence)
    return NoiseRates(out.get("jitter"), out.get("iid"), out.get("random_walk"), noise_levels(v[keep]))


def pool(rates: Sequence[NoiseRates | None], *, confidence: float = DEFAULT_CONFIDENCE) -> NoiseRates:
    """The rates of several curves (runs) pooled by adding their counts, each with its Wilson interval.

    Examples
    --------
    >>> a = NoiseRates(binomial_interval(1, 10), None, binomial_interval(5, 10))
    >>> b = NoiseRates(binomial_interval(3, 10), None, None)
    >>> p = pool([a, b, None])
    >>> (p.jitter.k, p.jitter.n), p.iid, (p.random_walk.k, p.random_walk.n)
    ((4, 20), None, (5, 10))
    """
    out = {}
    for kind in NOISE_KINDS:
        got = [r.rate(kind) for r in rates if r is not None and r.rate(kind) is not None]
        if got:
            out[kind] = binomial_interval(sum(r.k for r in got), sum(r.n for r in got), confidence=confidence)
    return NoiseRates(out.get("jitter"), out.get("iid"), out.get("random_walk"))
