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
* **Every event has an uncertainty from the checkpoint grid**: an event found at checkpoint ``s_i`` happened
  somewhere in ``(s_{i-1}, s_i]``. Each result carries the spacing before it (``resolution_steps``) and after
  it (``spacing_after``); :class:`Gap` turns them into an interval on the gap and calls a gap that does not
  exceed one spacing ``synchronous`` or ``unresolved``, never a precursor.

The rules' defaults, and why (all recorded in the events table by :func:`ckptgeo.analysis.analyze`):

* :data:`DEFAULT_MIN_DROP` = 0.25: a collapse must take RankMe at least 25% below its first value. The
  collapses the precursor claim is about are deep (the CPU pilot of SPEC.md: 43 -> 2.8, 9 -> 3.4, 9 -> 4.5,
  i.e. 50-93% drops), while the checkpoint-to-checkpoint jitter of RankMe over a few hundred items is a few
  percent of its value; 0.25 is half the shallowest collapse seen and many times the jitter, so a 0.1% dip
  (which counted with the old ``min_drop=0``) is no longer a collapse, and a real one is never missed.
* :data:`DEFAULT_RESOLUTION_CHECKPOINTS` = 1: an onset one checkpoint before acquisition is one spacing of
  the grid away, which noise in either curve can make or unmake; it is ``unresolved``, not a precursor.
* Acquisition needs :data:`DEFAULT_WINDOW` = 3 checkpoints above threshold; a curve above threshold only at
  its last one or two checkpoints is ``censored`` (right-censored: its acquisition lies at or after
  ``censored_step``, or never), not ``never_acquired``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ckptgeo.errors import InvalidParameterError

__all__ = [
    "DEFAULT_ACC_THRESHOLD", "DEFAULT_WINDOW", "DEFAULT_RECOVERY", "DEFAULT_COLLAPSE_FRACTION", "DEFAULT_MIN_DROP",
    "DEFAULT_RESOLUTION_CHECKPOINTS", "Acquisition", "Collapse", "Onset", "Gap", "CurveEvents",
    "acquisition_threshold", "acquisition_step", "acquisition_at", "collapse_point", "recovery_onset",
    "onset_of_change", "accuracy_onset", "collapse_onset", "probe_onset", "precursor_gap", "curve_events",
]

#: accuracy an acquired capability must exceed (SPEC.md); see :func:`acquisition_threshold` for chance.
DEFAULT_ACC_THRESHOLD = 0.5
#: consecutive checkpoints accuracy must stay above the threshold.
DEFAULT_WINDOW = 3
#: fraction of the drop (or departure) a curve must regain (or move) for an onset.
DEFAULT_RECOVERY = 0.1
#: fraction of its first value a layer's RankMe must fall to for its collapse onset.
DEFAULT_COLLAPSE_FRACTION = 0.5
#: fall, as a fraction of its first value, that RankMe must exceed for a collapse (module docstring: why 0.25).
DEFAULT_MIN_DROP = 0.25
#: a gap of at most this many checkpoints (and at most one spacing in steps) is not a precursor.
DEFAULT_RESOLUTION_CHECKPOINTS = 1
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
    status : {"acquired", "censored", "never_acquired", "no_data"}
        "censored": accuracy is above the threshold at the last checkpoints, fewer than ``window`` of them,
        so the confirmation window is cut off by the end of the run (right-censored).
    reason : str or None
        Why there is no step, or a note (acquisition at the first checkpoint).
    resolution_steps : int or None
        Spacing between the acquisition checkpoint and the measured checkpoint before it: the
        capability arrived somewhere in that interval. None at the first checkpoint.
    at_first_checkpoint : bool
        Acquired already at the first measured checkpoint (nothing before it can precede it).
    spacing_after : int or None
        Spacing to the next measured checkpoint (None at the last one).
    censored_step : int or None
        Status "censored" only: the first checkpoint of the run above threshold cut off by the end.
    grid : tuple of int
        The measured (cleaned, sorted) steps of the accuracy curve; gaps are counted in checkpoints on it.
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
    spacing_after: int | None = None
    censored_step: int | None = None
    grid: tuple[int, ...] = field(default=(), repr=False, compare=False)

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
    spacing_after : int or None
        Spacing to the measured checkpoint after the onset (None at the last checkpoint).
    """

    step: int | None
    index: int | None
    level: float
    status: str
    reason: str | None = None
    resolution_steps: int | None = None
    spacing_after: int | None = None


@dataclass(frozen=True)
class Gap:
    """Whether an onset precedes acquisition by more than the checkpoint grid can blur, and by how much.

    Attributes
    ----------
    precursor : bool
        Status "precursor": the onset lies before acquisition by more than the resolution.
    gap_steps : int or None
        ``acquisition step - onset step`` (negative when the onset lags); None unless both exist and
        acquisition is not at the first checkpoint.
    resolution_steps : int or None
        The larger of the spacings before acquisition and before the onset: each event lies somewhere in
        the interval ending at its checkpoint, so a gap no larger than this could be zero.
    status : str
        "precursor" (``gap_steps > resolution_steps`` and ``gap_checkpoints > resolution_checkpoints``),
        "unresolved" (non-zero, but within the resolution), "synchronous" (gap 0), "lagging" (the onset
        follows acquisition by more than the resolution), "no_onset", "acquired_at_start", "censored"
        (acquisition right-censored), "never_acquired", "no_data".
    reason : str or None
    gap_checkpoints : int or None
        Checkpoints of the accuracy grid in ``(onset, acquisition]`` (negated when the onset lags).
    gap_low_steps, gap_high_steps : int or None
        Interval on the gap from the grid: acquisition in ``(a_prev, a]`` and onset in ``(o_prev, o]`` give
        a gap in ``(a_prev - o, a - o_prev)``. A missing spacing (an event at a first checkpoint) leaves
        that side None.
    resolution_checkpoints : int
        The rule's setting (:data:`DEFAULT_RESOLUTION_CHECKPOINTS`).
    """

    precursor: bool
    gap_steps: int | None
    resolution_steps: int | None
    status: str
    reason: str | None = None
    gap_checkpoints: int | None = None
    gap_low_steps: int | None = None
    gap_high_steps: int | None = None
    resolution_checkpoints: int = DEFAULT_RESOLUTION_CHECKPOINTS


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


def _spacing_after(s: np.ndarray, i: int | None) -> int | None:
    if i is None or i >= s.size - 1:
        return None
    return int(s[i + 1] - s[i])


def _found(s: np.ndarray, i: int, level: float, reason: str | None = None) -> "Onset":
    return Onset(int(s[i]), i, level, "found", reason, _spacing(s, i), _spacing_after(s, i))


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
        fewer than ``window`` checkpoints is right-censored: status "censored", ``step`` None,
        ``censored_step`` its first checkpoint (the run ended before the window could confirm it).
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
    grid = tuple(int(x) for x in s)
    if s.size == 0:
        return Acquisition(None, None, thr, window, chance_f, "no_data", "no measured checkpoint", grid=grid)
    above = a > thr
    n = s.size
    for i in range(n - window + 1):
        if above[i:i + window].all():
            note = "acquired at the first measured checkpoint" if i == 0 else None
            return Acquisition(int(s[i]), i, thr, window, chance_f, "acquired", note, _spacing(s, i), i == 0,
                               _spacing_after(s, i), grid=grid)
    tail = 0
    while tail < n and above[n - 1 - tail]:
        tail += 1
    if tail:
        reason = (f"right-censored: accuracy exceeds {thr:g} at the last {tail} checkpoint(s) (from step "
                  f"{int(s[n - tail])}), fewer than window={window}; the run ended before it could be confirmed")
        return Acquisition(None, None, thr, window, chance_f, "censored", reason, censored_step=int(s[n - tail]),
                           grid=grid)
    reason = f"accuracy never stays above {thr:g} for {window} consecutive checkpoints (max {a.max():.3g})"
    return Acquisition(None, None, thr, window, chance_f, "never_acquired", reason, grid=grid)


def acquisition_at(steps: Sequence[float], step: int, *, threshold: float = DEFAULT_ACC_THRESHOLD,
                   window: int = DEFAULT_WINDOW, chance: float | None = None) -> Acquisition:
    """An acquisition placed at a given step of a schedule, for nulls (a permuted or synthetic acquisition).

    Parameters
    ----------
    steps : array-like of shape (n_checkpoints,)
        The schedule (NaN and order handled as everywhere in this module).
    step : int
        The acquisition step; it is moved to the first checkpoint at or after it.
    threshold, window, chance
        Recorded on the result only.

    Returns
    -------
    Acquisition
        status "acquired" (``at_first_checkpoint`` when it lands on the first checkpoint), or "censored"
        when ``step`` lies after the last checkpoint.

    Examples
    --------
    >>> a = acquisition_at([0, 10, 20, 30], 15)
    >>> a.step, a.index, a.resolution_steps, a.spacing_after
    (20, 2, 10, 10)
    """
    s, _ = _clean(steps, np.zeros(np.asarray(steps).size))
    grid = tuple(int(x) for x in s)
    i = int(np.searchsorted(s, step, side="left"))
    if i >= s.size:
        return Acquisition(None, None, float(threshold), int(window), chance, "censored",
                           f"step {step} after the last checkpoint", censored_step=int(step), grid=grid)
    return Acquisition(int(s[i]), i, float(threshold), int(window), chance, "acquired", None, _spacing(s, i), i == 0,
                       _spacing_after(s, i), grid=grid)


def _before(s: np.ndarray, acquisition: int | None) -> int:
    """Number of leading checkpoints strictly before the acquisition step (all when None)."""
    return s.size if acquisition is None else int(np.searchsorted(s, acquisition, side="left"))


def collapse_point(steps: Sequence[float], values: Sequence[float], acquisition: int | None = None, *,
                   min_drop: float = DEFAULT_MIN_DROP) -> Collapse:
    """The collapse: the minimum of a RankMe curve before acquisition, and its floor.

    Parameters
    ----------
    steps : array-like of shape (n_checkpoints,)
    values : array-like of shape (n_checkpoints,)
        RankMe (effective dimensions) per checkpoint; NaN marks a missing checkpoint.
    acquisition : int or None, default=None
        Acquisition step: only checkpoints strictly before it are searched. None (never acquired):
        the whole curve.
    min_drop : float in [0, 1), default=0.25
        The drop (first value - floor) must exceed this fraction of the first value for a collapse to
        count (:data:`DEFAULT_MIN_DROP`; the module docstring says why 0.25). 0: any fall below the
        first value beyond float noise (:data:`FLAT_TOLERANCE`, 1e-6 of it).

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
    return _found(s, collapse.index + 1 + int(later[0]), level)


def onset_of_change(steps: Sequence[float], values: Sequence[float], *,
                    fraction: float = DEFAULT_RECOVERY, baseline: float | None = None) -> Onset:
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
    baseline : float or None, default=None
        Where departures are measured from; None: the first value. Accuracy uses its chance level
        (:func:`accuracy_onset`), so a binary task starts from 0.5, not 0. The onset is searched from the
        second checkpoint on either way.

    Returns
    -------
    Onset
        status "no_data" with fewer than two measured checkpoints, "not_found" when the measure never
        departs from its baseline.

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
    base = float(v[0]) if baseline is None or not math.isfinite(float(baseline)) else float(baseline)
    dev = v - base
    k = int(np.argmax(np.abs(dev)))
    if abs(dev[k]) <= FLAT_TOLERANCE * max(abs(base), 1e-12):
        what = "its first value" if baseline is None else f"its baseline {base:g}"
        return Onset(None, None, math.nan, "not_found", f"the measure never moves from {what}")
    sign = 1.0 if dev[k] > 0 else -1.0
    need = fraction * abs(dev[k])
    level = float(base + sign * need)
    hit = np.nonzero(sign * dev[1:] >= need)[0]
    if hit.size == 0:  # only the first checkpoint departs (possible with a baseline)
        return Onset(None, None, level, "not_found", "only the first checkpoint departs from the baseline")
    return _found(s, 1 + int(hit[0]), level)


def accuracy_onset(steps: Sequence[float], acc: Sequence[float], chance: float | None = None, *,
                   fraction: float = DEFAULT_RECOVERY) -> Onset:
    """Accuracy's own onset of change, under the rule the geometry's onsets follow, measured from chance.

    The first checkpoint (after the first) at which accuracy has risen ``fraction`` of the way from chance
    to its maximum over the run: ``acc - chance >= fraction * (max(acc) - chance)``. Comparing a geometric
    onset with this one compares like with like; comparing it with acquisition (a threshold crossing,
    :func:`acquisition_step`) compares an onset with a midpoint.

    Parameters
    ----------
    steps, acc : array-like of shape (n_checkpoints,)
    chance : float or None, default=None
        Chance accuracy (0.5 for a binary task); None or NaN: the first measured accuracy.
    fraction : float in (0, 1], default=0.1

    Returns
    -------
    Onset
        status "not_found" when accuracy never rises above chance (a fall counts as no onset).

    Examples
    --------
    >>> o = accuracy_onset([0, 10, 20, 30, 40], [0.5, 0.52, 0.6, 0.9, 1.0], chance=0.5)
    >>> o.step, o.level
    (20, 0.55)
    """
    fraction = _check_fraction(fraction, "recovery")
    s, a = _clean(steps, acc, "acc")
    if s.size < 2:
        return Onset(None, None, math.nan, "no_data", "fewer than two measured checkpoints")
    base = float(a[0]) if chance is None or not math.isfinite(float(chance)) else float(chance)
    rise = float(a[1:].max()) - base
    if rise <= FLAT_TOLERANCE:
        return Onset(None, None, math.nan, "not_found", f"accuracy never rises above {base:g}")
    level = base + fraction * rise
    return _found(s, 1 + int(np.nonzero(a[1:] >= level - 1e-12)[0][0]), level)


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
    return _found(s, 1 + int(hit[0]), level)


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
    note = None if tested else "no p-values recorded: onset by the margin alone"
    return _found(s, int(hit[0]), float(margin), note)


def _count_between(grid: tuple[int, ...], lo: int, hi: int) -> int:
    """Checkpoints of ``grid`` in (lo, hi]."""
    g = np.asarray(grid, dtype=np.int64)
    return int(np.searchsorted(g, hi, side="right") - np.searchsorted(g, lo, side="right"))


def precursor_gap(acquisition: Acquisition, onset: Onset, *,
                  resolution_checkpoints: int = DEFAULT_RESOLUTION_CHECKPOINTS) -> Gap:
    """Whether ``onset`` precedes ``acquisition`` by more than the grid's resolution, with the gap's interval.

    Parameters
    ----------
    acquisition : Acquisition
    onset : Onset
        A recovery onset (RankMe), onset of change (other measures) or accuracy's own onset.
    resolution_checkpoints : int, default=1
        A gap of at most this many checkpoints (of the accuracy grid) is ``unresolved``, not a precursor.

    Returns
    -------
    Gap
        ``gap_steps = acquisition.step - onset.step``; resolution = the larger spacing before either event.
        "precursor" needs ``gap_steps > resolution_steps`` and ``gap_checkpoints > resolution_checkpoints``;
        "lagging" the mirror image; a gap of 0 is "synchronous" and anything else in between "unresolved".
        Acquisition at the first checkpoint is "acquired_at_start" (nothing measured before it could precede
        it); a right-censored acquisition is "censored"; neither has a gap.

    Raises
    ------
    InvalidParameterError
        ``resolution_checkpoints`` < 0.

    Examples
    --------
    >>> acq = acquisition_step([0, 10, 20, 30, 40, 50], [0, 0, 0, 0.9, 0.9, 0.9])
    >>> g = precursor_gap(acq, onset_of_change([0, 10, 20, 30], [5, 5, 9, 9]))
    >>> g.precursor, g.gap_steps, g.gap_checkpoints, g.status
    (False, 10, 1, 'unresolved')
    >>> g = precursor_gap(acq, onset_of_change([0, 10, 20, 30], [5, 9, 9, 9]))
    >>> g.precursor, g.gap_steps, g.gap_checkpoints, (g.gap_low_steps, g.gap_high_steps), g.status
    (True, 20, 2, (10, 30), 'precursor')
    """
    if isinstance(resolution_checkpoints, bool) or int(resolution_checkpoints) != resolution_checkpoints \
            or resolution_checkpoints < 0:
        raise InvalidParameterError("The 'resolution_checkpoints' parameter must be an int in [0, inf). Got "
                                    f"{resolution_checkpoints!r}.", name="resolution_checkpoints",
                                    value=resolution_checkpoints)
    rc = int(resolution_checkpoints)
    res_a = acquisition.resolution_steps
    if acquisition.status == "no_data":
        return Gap(False, None, None, "no_data", acquisition.reason, resolution_checkpoints=rc)
    if acquisition.status == "censored":
        return Gap(False, None, None, "censored", acquisition.reason, resolution_checkpoints=rc)
    if not acquisition.acquired:
        return Gap(False, None, None, "never_acquired", acquisition.reason, resolution_checkpoints=rc)
    if acquisition.at_first_checkpoint:
        return Gap(False, None, None, "acquired_at_start",
                   f"acquired at the first measured checkpoint (step {acquisition.step})", resolution_checkpoints=rc)
    if onset.step is None:
        return Gap(False, None, res_a, "no_onset", onset.reason, resolution_checkpoints=rc)
    a, o = int(acquisition.step), int(onset.step)
    gap = a - o
    res = max(x for x in (res_a, onset.resolution_steps, 0) if x is not None)
    grid = acquisition.grid or (a,)
    n_ckpt = _count_between(grid, o, a) if gap >= 0 else -_count_between(grid, a, o)
    low = None if res_a is None else a - res_a - o
    high = None if onset.resolution_steps is None else a - (o - onset.resolution_steps)
    if gap == 0:
        status = "synchronous"
    elif gap > res and n_ckpt > rc:
        status = "precursor"
    elif -gap > res and -n_ckpt > rc:
        status = "lagging"
    else:
        status = "unresolved"
    reason = None
    if status == "unresolved":
        reason = (f"gap of {gap} steps ({n_ckpt} checkpoint(s)) is within the resolution ({res} steps, "
                  f"{rc} checkpoint(s)): the order of the two events is not resolved by this grid")
    return Gap(status == "precursor", gap, res, status, reason, n_ckpt, low, high, rc)


@dataclass(frozen=True)
class CurveEvents:
    """Everything :func:`curve_events` finds on one geometry curve against one acquisition.

    Attributes
    ----------
    kind : {"recovery", "change"}
        RankMe-like curves: collapse then recovery onset; others: onset of change.
    collapse : Collapse or None
        None for kind "change".
    onset : Onset
    gap : Gap
    """

    kind: str
    collapse: Collapse | None
    onset: Onset
    gap: Gap

    @property
    def precursor(self) -> bool:
        """The gap's verdict: a resolved precursor."""
        return self.gap.precursor


def curve_events(steps: Sequence[float], values: Sequence[float], acquisition: Acquisition, *,
                 kind: str = "recovery", min_drop: float = DEFAULT_MIN_DROP, recovery: float = DEFAULT_RECOVERY,
                 resolution_checkpoints: int = DEFAULT_RESOLUTION_CHECKPOINTS) -> CurveEvents:
    """The whole precursor rule on one curve: collapse and recovery (or onset of change), then the gap.

    The one place the rule is composed, used by :func:`ckptgeo.analysis.analyze`, the live monitor and the
    nulls (:mod:`ckptgeo.analysis.stats`: permuted acquisitions, noise curves), so all of them test the same
    detector.

    Parameters
    ----------
    steps, values : array-like of shape (n_checkpoints,)
    acquisition : Acquisition
        From :func:`acquisition_step` (the run's accuracy) or :func:`acquisition_at` (a null's).
    kind : {"recovery", "change"}, default="recovery"
    min_drop, recovery, resolution_checkpoints
        As :func:`collapse_point`, :func:`recovery_onset` (also the fraction of :func:`onset_of_change`) and
        :func:`precursor_gap`.

    Returns
    -------
    CurveEvents

    Examples
    --------
    >>> acq = acquisition_step(range(8), [0, 0, 0, 0, 0, 0.9, 0.9, 0.9])
    >>> curve_events(range(8), [40, 10, 3, 9, 20, 30, 30, 30], acq).gap.status
    'precursor'
    """
    if kind == "recovery":
        col = collapse_point(steps, values, acquisition.step, min_drop=min_drop)
        onset = recovery_onset(steps, values, col, recovery=recovery)
    elif kind == "change":
        col, onset = None, onset_of_change(steps, values, fraction=recovery)
    else:
        raise InvalidParameterError(f"The 'kind' parameter must be 'recovery' or 'change'. Got {kind!r}.",
                                    name="kind", value=kind)
    return CurveEvents(kind, col, onset, precursor_gap(acquisition, onset, resolution_checkpoints=resolution_checkpoints))
