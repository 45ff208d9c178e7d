"""Events on one training curve: acquisition, collapse, recovery, onsets, and the precursor gap.

Pure functions over a curve given as ``steps`` (training steps, one per checkpoint) and
``values`` (the measure at each step). No I/O and no tables: :mod:`ckptgeo.analysis.summary`
applies them to every (model, suite, metric, layer) of a dataset.

Conventions shared by every function here (SPEC.md, "Precursor-gap analysis"):

* A **missing checkpoint** is a NaN (or inf) value, or a step absent from ``steps``. NaN points are
  dropped before anything is computed, so "the next checkpoint" means the next one *measured*; a
  hole in the steps widens the reported resolution instead of breaking the result.
* Inputs may come in any order; they are sorted by step. Two values at the same step raise
  :class:`~ckptgeo.errors.InvalidParameterError` (aggregate duplicates first).
* **Ties** resolve to the first occurrence (the earliest step): the collapse is the first checkpoint
  holding the minimum, a departure the first holding the largest distance.
* Nothing here raises on the shape of a curve: an empty curve, acquisition at the first checkpoint,
  a curve that never acquires, never collapses, or never recovers each returns a result with a
  ``status`` and a human-readable ``reason``; its step fields are ``None``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ckptgeo.errors import InvalidParameterError

__all__ = [
    "DEFAULT_ACC_THRESHOLD", "DEFAULT_WINDOW", "DEFAULT_RECOVERY", "DEFAULT_COLLAPSE_FRACTION",
    "Acquisition", "Collapse", "Onset", "Gap",
    "acquisition_threshold", "acquisition_step", "collapse_point", "recovery_onset", "onset_of_change",
    "collapse_onset", "probe_onset", "precursor_gap",
]

#: accuracy an acquired capability must exceed (SPEC.md); see :func:`acquisition_threshold` for chance.
DEFAULT_ACC_THRESHOLD = 0.5
#: consecutive checkpoints accuracy must stay above the threshold.
DEFAULT_WINDOW = 3
#: fraction of the drop (or departure) a curve must regain (or move) for an onset.
DEFAULT_RECOVERY = 0.1
#: fraction of its first value a layer's RankMe must fall to for its collapse onset.
DEFAULT_COLLAPSE_FRACTION = 0.5
#: relative change below which a curve counts as flat: float noise (e.g. layer 0 read at a token that is
#: the same for every item has RankMe 1.0 +- 1e-13 at every step), not a collapse or an onset.
FLAT_TOLERANCE = 1e-6


@dataclass(frozen=True)
class Acquisition:
    """When accuracy crossed its threshold for good.

    Attributes
    ----------
    step : int or None
        The acquisition step (training steps); None when not acquired.
    index : int or None
        Position of that checkpoint in the cleaned (sorted, NaN-free) curve.
    threshold : float
        The accuracy threshold actually used (after the chance rule).
    window : int
        Consecutive checkpoints required above the threshold.
    chance : float or None
        The chance level given, if any.
    status : {"acquired", "never_acquired", "no_data"}
    reason : str or None
        Why there is no step, or a note (acquisition at the first checkpoint).
    resolution_steps : int or None
        Spacing between the acquisition checkpoint and the measured checkpoint before it: the
        capability arrived somewhere in that interval. None at the first checkpoint.
    at_first_checkpoint : bool
        Acquired already at the first measured checkpoint (nothing before it can precede it).
    """

    step: int | None
    index: int | None
    threshold: float
    window: int
    chance: float | None
    status: str
    reason: str | None = None
    resolution_steps: int | None = None
    at_first_checkpoint: bool = False

    @property
    def acquired(self) -> bool:
        """True when an acquisition step was found."""
        return self.step is not None


@dataclass(frozen=True)
class Collapse:
    """The minimum of a RankMe curve before acquisition.

    Attributes
    ----------
    step, index : int or None
        Where the minimum (first occurrence) lies; None when there is no collapse.
    floor : float
        RankMe at the minimum (the collapse floor); NaN when there is no collapse.
    first_value : float
        RankMe at the first measured checkpoint; NaN for an empty curve.
    drop : float
        ``first_value - floor`` (>= 0); NaN when there is no collapse.
    status : {"collapsed", "no_collapse", "no_data"}
    reason : str or None
    """

    step: int | None
    index: int | None
    floor: float
    first_value: float
    drop: float
    status: str
    reason: str | None = None


@dataclass(frozen=True)
class Onset:
    """A first checkpoint at which a curve crossed a level (recovery, change, collapse, probe).

    Attributes
    ----------
    step, index : int or None
        The checkpoint; None when the level is never crossed.
    level : float
        The value that had to be reached (NaN when undefined).
    status : {"found", "not_found", "no_data"}
    reason : str or None
    resolution_steps : int or None
        Spacing to the measured checkpoint before the onset (None at the first checkpoint).
    """

    step: int | None
    index: int | None
    level: float
    status: str
    reason: str | None = None
    resolution_steps: int | None = None


@dataclass(frozen=True)
class Gap:
    """Whether an onset precedes acquisition, and by how many steps.

    Attributes
    ----------
    precursor : bool
        The onset lies strictly before acquisition.
    gap_steps : int or None
        ``acquisition step - onset step`` (negative when the onset lags); None unless both exist and
        acquisition is not at the first checkpoint.
    resolution_steps : int or None
        The checkpoint spacing at acquisition (:attr:`Acquisition.resolution_steps`).
    status : {"precursor", "synchronous", "lagging", "no_onset", "acquired_at_start", "never_acquired", "no_data"}
    reason : str or None
    """

    precursor: bool
    gap_steps: int | None
    resolution_steps: int | None
    status: str
    reason: str | None = None


def _clean(steps: Sequence[float], values: Sequence[float], name: str = "values") -> tuple[np.ndarray, np.ndarray]:
    """Sorted steps (int64) and finite values (float64), NaN/inf points dropped."""
    s = np.asarray(steps, dtype=np.float64).reshape(-1)
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    if s.shape != v.shape:
        raise InvalidParameterError(
            f"'steps' and '{name}' must have the same length. Got {s.size} steps and {v.size} {name}.",
            name="steps", value=(s.size, v.size))
    keep = np.isfinite(s) & np.isfinite(v)
    s, v = s[keep], v[keep]
    order = np.argsort(s, kind="stable")
    s, v = s[order], v[order]
    if s.size > 1 and np.any(np.diff(s) == 0):
        dup = s[1:][np.diff(s) == 0]
        raise InvalidParameterError(
            f"'steps' must be unique; step {int(dup[0])} appears more than once. Aggregate duplicate "
            "checkpoints (e.g. their mean) before computing events.", name="steps", value=int(dup[0]))
    return s.astype(np.int64), v


def _spacing(s: np.ndarray, i: int | None) -> int | None:
    if i is None or i <= 0:
        return None
    return int(s[i] - s[i - 1])


def _check_fraction(value: float, name: str) -> float:
    value = float(value)
    if not (0.0 < value <= 1.0):
        raise InvalidParameterError(f"The {name!r} parameter must be a float in (0, 1]. Got {value!r}.",
                                    name=name, value=value)
    return value


def acquisition_threshold(threshold: float | None = None, chance: float | None = None) -> float:
    """The accuracy threshold SPEC.md prescribes.

    Parameters
    ----------
    threshold : float or None, default=None
        An explicit threshold, used as given. None means 0.5, unless chance is 0.5 or more.
    chance : float or None, default=None
        The task's chance accuracy. When ``threshold`` is None and ``chance >= 0.5`` (parity, a two-way
        comparison), the threshold is halfway between chance and 1.

    Returns
    -------
    float

    Raises
    ------
    InvalidParameterError
        ``threshold`` outside [0, 1).

    Examples
    --------
    >>> acquisition_threshold(), acquisition_threshold(chance=0.5), acquisition_threshold(0.6, chance=0.5)
    (0.5, 0.75, 0.6)
    """
    if threshold is not None:
        threshold = float(threshold)
        if not (0.0 <= threshold < 1.0):
            raise InvalidParameterError(
                f"The 'acc_threshold' parameter must be a float in [0, 1). Got {threshold!r}.",
                name="acc_threshold", value=threshold)
        return threshold
    if chance is not None and math.isfinite(float(chance)) and float(chance) >= 0.5:
        return (float(chance) + 1.0) / 2.0
    return DEFAULT_ACC_THRESHOLD


def acquisition_step(steps: Sequence[float], acc: Sequence[float], threshold: float | None = None,
                     window: int = DEFAULT_WINDOW, chance: float | None = None) -> Acquisition:
    """The first checkpoint at which accuracy exceeds the threshold and stays above it.

    Parameters
    ----------
    steps : array-like of shape (n_checkpoints,)
        Training steps.
    acc : array-like of shape (n_checkpoints,)
        Accuracy in [0, 1] at each step; NaN marks a missing checkpoint (dropped).
    threshold : float or None, default=None
        Accuracy must be strictly greater than this. None: 0.5, or ``(chance + 1) / 2`` when
        ``chance >= 0.5`` (see :func:`acquisition_threshold`).
    window : int, default=3
        Number of consecutive measured checkpoints, starting at the acquisition step, that must all
        be above the threshold. A run above the threshold that reaches the end of the curve with
        fewer than ``window`` checkpoints does not count (status "never_acquired", reason says so).
    chance : float or None, default=None
        Chance accuracy of the task.

    Returns
    -------
    Acquisition

    Raises
    ------
    InvalidParameterError
        ``window`` < 1, ``threshold`` outside [0, 1), lengths differ, or a step repeats.

    Notes
    -----
    step_acq = min { s_i : acc_j > threshold for j = i .. i + window - 1 }.

    References
    ----------
    Billa, "The Geometric Anatomy of Capability Acquisition in Transformers", arXiv:2602.15997.

    Examples
    --------
    >>> a = acquisition_step([0, 10, 20, 30, 40, 50], [0.1, 0.6, 0.2, 0.7, 0.8, 0.9])
    >>> a.step, a.resolution_steps, a.status
    (30, 10, 'acquired')
    """
    if isinstance(window, bool) or int(window) != window or window < 1:
        raise InvalidParameterError(f"The 'window' parameter must be an int in [1, inf). Got {window!r}.",
                                    name="window", value=window)
    window = int(window)
    thr = acquisition_threshold(threshold, chance)
    chance_f = None if chance is None or not math.isfinite(float(chance)) else float(chance)
    s, a = _clean(steps, acc, "acc")
    if s.size == 0:
        return Acquisition(None, None, thr, window, chance_f, "no_data", "no measured checkpoint")
    above = a > thr
    n = s.size
    for i in range(n - window + 1):
        if above[i:i + window].all():
            note = "acquired at the first measured checkpoint" if i == 0 else None
            return Acquisition(int(s[i]), i, thr, window, chance_f, "acquired", note, _spacing(s, i), i == 0)
    tail = 0
    while tail < n and above[n - 1 - tail]:
        tail += 1
    if tail:
        reason = (f"accuracy exceeds {thr:g} only at the last {tail} checkpoint(s) (from step "
                  f"{int(s[n - tail])}), fewer than window={window}")
    else:
        reason = f"accuracy never stays above {thr:g} for {window} consecutive checkpoints (max {a.max():.3g})"
    return Acquisition(None, None, thr, window, chance_f, "never_acquired", reason)


def _before(s: np.ndarray, acquisition: int | None) -> int:
    """Number of leading checkpoints strictly before the acquisition step (all when None)."""
    return s.size if acquisition is None else int(np.searchsorted(s, acquisition, side="left"))


def collapse_point(steps: Sequence[float], values: Sequence[float], acquisition: int | None = None, *,
                   min_drop: float = 0.0) -> Collapse:
    """The collapse: the minimum of a RankMe curve before acquisition, and its floor.

    Parameters
    ----------
    steps : array-like of shape (n_checkpoints,)
    values : array-like of shape (n_checkpoints,)
        RankMe (effective dimensions) per checkpoint; NaN marks a missing checkpoint.
    acquisition : int or None, default=None
        Acquisition step: only checkpoints strictly before it are searched. None (never acquired):
        the whole curve.
    min_drop : float, default=0.0
        Minimum drop, as a fraction of the first value, for a collapse to count. 0 (SPEC.md): any
        fall below the first value beyond float noise (:data:`FLAT_TOLERANCE`, 1e-6 of it).

    Returns
    -------
    Collapse
        status "no_collapse" when fewer than two checkpoints precede acquisition or the minimum is the
        first value (the curve never fell below where it started), "no_data" for an empty curve.

    Examples
    --------
    >>> c = collapse_point([0, 10, 20, 30, 40], [40.0, 10.0, 3.0, 3.0, 20.0], acquisition=40)
    >>> c.step, c.floor, c.drop
    (20, 3.0, 37.0)
    """
    s, v = _clean(steps, values)
    if s.size == 0:
        return Collapse(None, None, math.nan, math.nan, math.nan, "no_data", "no measured checkpoint")
    first = float(v[0])
    m = _before(s, acquisition)
    if m < 2:
        why = ("acquisition at or before the first measured checkpoint" if m == 0
               else "only one measured checkpoint before acquisition")
        return Collapse(None, None, math.nan, first, math.nan, "no_collapse", why)
    idx = int(np.argmin(v[:m]))  # first occurrence on ties
    floor = float(v[idx])
    drop = first - floor
    if idx == 0 or drop <= max(float(min_drop), FLAT_TOLERANCE) * abs(first):
        why = ("never falls below its first value before acquisition" if idx == 0
               else f"drop {drop:.3g} below min_drop={min_drop:g} of the first value {first:.3g}")
        return Collapse(None, None, math.nan, first, math.nan, "no_collapse", why)
    return Collapse(int(s[idx]), idx, floor, first, drop, "collapsed")


def recovery_onset(steps: Sequence[float], values: Sequence[float], collapse: Collapse, *,
                   recovery: float = DEFAULT_RECOVERY) -> Onset:
    """The first checkpoint after the collapse at which RankMe regained a fraction of its drop.

    Parameters
    ----------
    steps, values : array-like of shape (n_checkpoints,)
        The same RankMe curve :func:`collapse_point` was given.
    collapse : Collapse
    recovery : float in (0, 1], default=0.1
        Fraction of the drop (first value - floor) to regain.

    Returns
    -------
    Onset
        Searched over every checkpoint after the collapse, also after acquisition (a lagging recovery).
        status "no_data" when there is no collapse, "not_found" when RankMe never climbs back to
        ``floor + recovery * drop``.

    Examples
    --------
    >>> c = collapse_point([0, 10, 20, 30, 40], [40.0, 10.0, 3.0, 3.0, 20.0], acquisition=40)
    >>> o = recovery_onset([0, 10, 20, 30, 40], [40.0, 10.0, 3.0, 3.0, 20.0], c)
    >>> o.step, round(o.level, 2)
    (40, 6.7)
    """
    recovery = _check_fraction(recovery, "recovery")
    if collapse.index is None:
        return Onset(None, None, math.nan, "no_data", f"no collapse: {collapse.reason}")
    s, v = _clean(steps, values)
    level = collapse.floor + recovery * collapse.drop
    later = np.nonzero(v[collapse.index + 1:] >= level)[0]
    if later.size == 0:
        return Onset(None, None, level, "not_found",
                     f"RankMe never regains {recovery:g} of its drop (level {level:.3g}) after step {collapse.step}")
    i = collapse.index + 1 + int(later[0])
    return Onset(int(s[i]), i, level, "found", None, _spacing(s, i))


def onset_of_change(steps: Sequence[float], values: Sequence[float], *,
                    fraction: float = DEFAULT_RECOVERY) -> Onset:
    """The first checkpoint at which a measure moved a fraction of the way to its largest departure.

    For measures that may rise or fall (gradient ranks, Hessian, LLC, ...): the largest departure is
    the checkpoint of the whole curve farthest from the first value (first occurrence on ties), and the
    onset is the first checkpoint that moved ``fraction`` of that distance in the same direction. The
    scale is the whole run's, not only the part before acquisition: with few checkpoints before
    acquisition (whole-model measures are costly, so measured sparsely) a scale taken there alone makes
    any wobble at the one checkpoint before acquisition an onset, and every run a "precursor".

    Parameters
    ----------
    steps, values : array-like of shape (n_checkpoints,)
    fraction : float in (0, 1], default=0.1

    Returns
    -------
    Onset
        status "no_data" with fewer than two measured checkpoints, "not_found" when the measure never
        departs from its first value.

    Examples
    --------
    >>> o = onset_of_change([0, 1, 2, 3, 4], [1.0, 1.05, 2.0, 5.0, 9.0])
    >>> o.step, o.level
    (2, 1.8)
    """
    fraction = _check_fraction(fraction, "recovery")
    s, v = _clean(steps, values)
    if s.size < 2:
        return Onset(None, None, math.nan, "no_data", "fewer than two measured checkpoints")
    dev = v - v[0]
    k = int(np.argmax(np.abs(dev)))
    if abs(dev[k]) <= FLAT_TOLERANCE * max(abs(float(v[0])), 1e-12):
        return Onset(None, None, math.nan, "not_found", "the measure never moves from its first value")
    sign = 1.0 if dev[k] > 0 else -1.0
    need = fraction * abs(dev[k])
    level = float(v[0] + sign * need)
    i = 1 + int(np.nonzero(sign * dev[1:] >= need)[0][0])  # exists: k itself qualifies
    return Onset(int(s[i]), i, level, "found", None, _spacing(s, i))


def collapse_onset(steps: Sequence[float], values: Sequence[float], *,
                   fraction: float = DEFAULT_COLLAPSE_FRACTION) -> Onset:
    """The first checkpoint at which a layer's RankMe falls to ``fraction`` of its first value.

    Used to order layers for top-down propagation (minima are broad troughs; this onset is sharp).

    Parameters
    ----------
    steps, values : array-like of shape (n_checkpoints,)
    fraction : float in (0, 1], default=0.5

    Returns
    -------
    Onset
        status "not_found" when the curve never falls that far, "no_data" when empty or the first
        value is not positive.

    Examples
    --------
    >>> collapse_onset([0, 5, 10, 15], [40.0, 30.0, 20.0, 5.0]).step
    10
    """
    fraction = _check_fraction(fraction, "collapse_fraction")
    s, v = _clean(steps, values)
    if s.size == 0 or not v[0] > 0:
        return Onset(None, None, math.nan, "no_data", "empty curve or non-positive first value")
    level = fraction * float(v[0])
    hit = np.nonzero(v[1:] <= level)[0]
    if hit.size == 0:
        return Onset(None, None, level, "not_found", f"never falls to {fraction:g} of its first value")
    i = 1 + int(hit[0])
    return Onset(int(s[i]), i, level, "found", None, _spacing(s, i))


def probe_onset(steps: Sequence[float], accuracy: Sequence[float], control_accuracy: Sequence[float], *,
                chance: Sequence[float] | float | None = None, p_value: Sequence[float] | None = None,
                margin: float = 0.1, alpha: float = 0.05) -> Onset:
    """The first checkpoint at which a probe beats the better of chance and its control, significantly.

    A checkpoint counts when ``accuracy - max(chance, control_accuracy) >= margin`` and its
    ``p_value < alpha`` (the probe's own test, see :func:`ckptgeo.metrics.probe.fold_test`). Beating
    the control alone is not enough: a probe fitted to shuffled labels can score below the majority
    class, and a probe at chance would then "beat" it.

    Parameters
    ----------
    steps : array-like of shape (n_checkpoints,)
    accuracy, control_accuracy : array-like of shape (n_checkpoints,)
        Probe and control cross-validated accuracy; a NaN in either drops the checkpoint (not measured).
    chance : float or array-like of shape (n_checkpoints,), optional
        Majority-class rate; None or NaN: the control alone is the baseline.
    p_value : array-like of shape (n_checkpoints,), optional
        One-sided p-value per checkpoint; a NaN there is not significant. None (datasets written before
        probes recorded one): the margin alone decides, and the onset's ``reason`` says so.
    margin : float, default=0.1
        Required lead over the baseline (a 1e-12 tolerance absorbs rounding).
    alpha : float, default=0.05
        Significance level.

    Returns
    -------
    Onset
        ``level`` is the margin. status "no_data" when no checkpoint was measured (every accuracy NaN):
        "not measured", which is not "no onset".

    Examples
    --------
    >>> probe_onset([0, 10, 20], [0.5, 0.55, 0.7], [0.5, 0.5, 0.5], p_value=[0.5, 0.2, 0.01]).step
    20
    >>> probe_onset([0, 10], [0.3, 0.3], [0.17, 0.17], chance=0.28, p_value=[0.6, 0.6]).status
    'not_found'
    """
    acc = np.asarray(accuracy, dtype=np.float64).reshape(-1)
    ctl = np.asarray(control_accuracy, dtype=np.float64).reshape(-1)
    if acc.shape != ctl.shape:
        raise InvalidParameterError(
            f"'accuracy' and 'control_accuracy' must have the same length. Got {acc.size} and {ctl.size}.",
            name="control_accuracy", value=(acc.size, ctl.size))
    ch = np.broadcast_to(np.asarray(np.nan if chance is None else chance, dtype=np.float64), acc.shape)
    baseline = np.where(np.isfinite(ch), np.fmax(ctl, ch), ctl)
    measured = np.isfinite(acc) & np.isfinite(ctl)
    tested = p_value is not None
    if tested:
        p = np.asarray(p_value, dtype=np.float64).reshape(-1)
        if p.shape != acc.shape:
            raise InvalidParameterError(f"'p_value' must have one value per checkpoint. Got {p.size} for "
                                        f"{acc.size}.", name="p_value", value=p.size)
        significant = np.where(np.isfinite(p), p, 1.0) < float(alpha)
    else:
        significant = np.ones(acc.shape, dtype=bool)
    lead = acc - baseline
    # the measured checkpoints, sorted by step: _clean on their positions in the input
    s, pos = _clean(steps, np.where(measured, np.arange(acc.size, dtype=np.float64), np.nan), "accuracy")
    if s.size == 0:
        return Onset(None, None, float(margin), "no_data", "no checkpoint with a measured probe")
    pos = pos.astype(np.int64)
    hit = np.nonzero((lead[pos] >= float(margin) - 1e-12) & significant[pos])[0]
    if hit.size == 0:
        why = f"probe never beats max(chance, control) by {margin:g}"
        why += f" with p < {alpha:g}" if tested else ""
        return Onset(None, None, float(margin), "not_found", f"{why} (best lead {lead[pos].max():+.3g})")
    i = int(hit[0])
    note = None if tested else "no p-values recorded: onset by the margin alone"
    return Onset(int(s[i]), i, float(margin), "found", note, _spacing(s, i))


def precursor_gap(acquisition: Acquisition, onset: Onset) -> Gap:
    """Whether ``onset`` precedes ``acquisition``, and the gap in steps.

    Parameters
    ----------
    acquisition : Acquisition
    onset : Onset
        A recovery onset (RankMe) or onset of change (other measures).

    Returns
    -------
    Gap
        Acquisition at the first checkpoint is censored: status "acquired_at_start", not a precursor,
        no gap (nothing measured before it could precede it).

    Examples
    --------
    >>> acq = acquisition_step([0, 10, 20, 30, 40, 50], [0, 0, 0, 0.9, 0.9, 0.9])
    >>> g = precursor_gap(acq, onset_of_change([0, 10, 20, 30], [5, 5, 9, 9]))
    >>> g.precursor, g.gap_steps, g.resolution_steps, g.status
    (True, 10, 10, 'precursor')
    """
    res = acquisition.resolution_steps
    if acquisition.status == "no_data":
        return Gap(False, None, None, "no_data", acquisition.reason)
    if not acquisition.acquired:
        return Gap(False, None, None, "never_acquired", acquisition.reason)
    if acquisition.at_first_checkpoint:
        return Gap(False, None, None, "acquired_at_start",
                   f"acquired at the first measured checkpoint (step {acquisition.step})")
    if onset.step is None:
        return Gap(False, None, res, "no_onset", onset.reason)
    gap = int(acquisition.step - onset.step)
    status = "precursor" if gap > 0 else ("synchronous" if gap == 0 else "lagging")
    return Gap(gap > 0, gap, res, status)
