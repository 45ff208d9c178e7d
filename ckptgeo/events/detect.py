"""Events on one training curve: acquisition, collapse, recovery, onsets, and the precursor gap.

Pure functions over a curve given as ``steps`` (training steps, one per checkpoint) and
``values`` (the measure at each step). No I/O and no tables: :mod:`ckptgeo.analysis.pipeline`
applies them to every (model, suite, metric, layer) of a dataset.

Conventions shared by every function here (docs/definitions.md#events):

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
  collapses the precursor claim is about are deep (docs/definitions.md#rankme's pilot: 43 -> 2.8, 9 -> 3.4, 9 -> 4.5,
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
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ckptgeo.events.records import (DEFAULT_ACC_THRESHOLD, DEFAULT_COLLAPSE_FRACTION, DEFAULT_MIN_DROP,
                                          DEFAULT_RECOVERY, DEFAULT_RESOLUTION_CHECKPOINTS, DEFAULT_WINDOW,
                                          FLAT_TOLERANCE, Acquisition, Collapse, Gap, Onset, check_fraction,
                                          clean_curve, clean_error, found_onset, spacing_after, spacing_before)
from ckptgeo.events.onsets import accuracy_onset, collapse_onset, onset_of_change, probe_onset
from ckptgeo.errors import InvalidParameterError

__all__ = [
    "DEFAULT_ACC_THRESHOLD", "DEFAULT_WINDOW", "DEFAULT_RECOVERY", "DEFAULT_COLLAPSE_FRACTION", "DEFAULT_MIN_DROP",
    "DEFAULT_RESOLUTION_CHECKPOINTS", "Acquisition", "Collapse", "Onset", "Gap", "CurveEvents",
    "acquisition_threshold", "acquisition_step", "acquisition_at", "collapse_point", "recovery_onset",
    "onset_of_change", "accuracy_onset", "collapse_onset", "probe_onset", "precursor_gap", "curve_events",
]


def acquisition_threshold(threshold: float | None = None, chance: float | None = None) -> float:
    """The accuracy threshold of docs/definitions.md#acquisition.

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
    s, a = clean_curve(steps, acc, "acc")
    grid = tuple(int(x) for x in s)
    if s.size == 0:
        return Acquisition(None, None, thr, window, chance_f, "no_data", "no measured checkpoint", grid=grid)
    above = a > thr
    n = s.size
    for i in range(n - window + 1):
        if above[i:i + window].all():
            note = "acquired at the first measured checkpoint" if i == 0 else None
            return Acquisition(int(s[i]), i, thr, window, chance_f, "acquired", note, spacing_before(s, i), i == 0,
                               spacing_after(s, i), grid=grid)
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
    s, _ = clean_curve(steps, np.zeros(np.asarray(steps).size))
    grid = tuple(int(x) for x in s)
    i = int(np.searchsorted(s, step, side="left"))
    if i >= s.size:
        return Acquisition(None, None, float(threshold), int(window), chance, "censored",
                           f"step {step} after the last checkpoint", censored_step=int(step), grid=grid)
    return Acquisition(int(s[i]), i, float(threshold), int(window), chance, "acquired", None, spacing_before(s, i), i == 0,
                       spacing_after(s, i), grid=grid)


def _before(s: np.ndarray, acquisition: int | None) -> int:
    """Number of leading checkpoints strictly before the acquisition step (all when None)."""
    return s.size if acquisition is None else int(np.searchsorted(s, acquisition, side="left"))


def collapse_point(steps: Sequence[float], values: Sequence[float], acquisition: int | None = None, *,
                   min_drop: float = DEFAULT_MIN_DROP, error: Sequence[float] | None = None) -> Collapse:
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
    error : array-like of shape (n_checkpoints,), optional
        Half-width of each value's measurement interval (RankMe's, from resampling the items; NaN: none).
        The drop must also exceed the first value's and the floor's errors together: the two intervals
        must not overlap.

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
    s, v = clean_curve(steps, values)
    err = clean_error(steps, values, error)
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
    if err is not None and drop <= err[0] + err[idx]:
        return Collapse(None, None, math.nan, first, math.nan, "no_collapse",
                        f"drop {drop:.3g} within the measurement error of the first value and the floor "
                        f"({err[0]:.3g} + {err[idx]:.3g})")
    return Collapse(int(s[idx]), idx, floor, first, drop, "collapsed")


def recovery_onset(steps: Sequence[float], values: Sequence[float], collapse: Collapse, *,
                   recovery: float = DEFAULT_RECOVERY, error: Sequence[float] | None = None) -> Onset:
    """The first checkpoint after the collapse at which RankMe regained a fraction of its drop.

    Parameters
    ----------
    steps, values : array-like of shape (n_checkpoints,)
        The same RankMe curve :func:`collapse_point` was given.
    collapse : Collapse
    recovery : float in (0, 1], default=0.1
        Fraction of the drop (first value - floor) to regain.
    error : array-like of shape (n_checkpoints,), optional
        As :func:`collapse_point`: the rise above the floor must also exceed the onset's and the floor's
        errors together.

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
    recovery = check_fraction(recovery, "recovery")
    if collapse.index is None:
        return Onset(None, None, math.nan, "no_data", f"no collapse: {collapse.reason}")
    s, v = clean_curve(steps, values)
    err = clean_error(steps, values, error)
    level = collapse.floor + recovery * collapse.drop
    ok = v[collapse.index + 1:] >= level
    if err is not None:
        ok &= v[collapse.index + 1:] - collapse.floor > err[collapse.index + 1:] + err[collapse.index]
    later = np.nonzero(ok)[0]
    if later.size == 0:
        return Onset(None, None, level, "not_found",
                     f"RankMe never regains {recovery:g} of its drop (level {level:.3g}) after step {collapse.step}")
    return found_onset(s, collapse.index + 1 + int(later[0]), level)


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
                 resolution_checkpoints: int = DEFAULT_RESOLUTION_CHECKPOINTS,
                 error: Sequence[float] | None = None) -> CurveEvents:
    """The whole precursor rule on one curve: collapse and recovery (or onset of change), then the gap.

    The one place the rule is composed, used by :func:`ckptgeo.analysis.analyze`, the live monitor and the
    nulls (:mod:`ckptgeo.stats`: permuted acquisitions, noise curves), so all of them test the same
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
    error : array-like of shape (n_checkpoints,), optional
        Half-width of each value's measurement interval (``(value_high - value_low) / 2`` of the geometry
        table): a collapse, recovery or onset of change must exceed it (:func:`collapse_point`).

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
        col = collapse_point(steps, values, acquisition.step, min_drop=min_drop, error=error)
        onset = recovery_onset(steps, values, col, recovery=recovery, error=error)
    elif kind == "change":
        col, onset = None, onset_of_change(steps, values, fraction=recovery, error=error)
    else:
        raise InvalidParameterError(f"The 'kind' parameter must be 'recovery' or 'change'. Got {kind!r}.",
                                    name="kind", value=kind)
    return CurveEvents(kind, col, onset, precursor_gap(acquisition, onset, resolution_checkpoints=resolution_checkpoints))
