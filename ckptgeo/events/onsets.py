"""Onsets on one curve: where a curve starts to change (:func:`onset_of_change`), where accuracy starts to rise
(:func:`accuracy_onset`), where a layer's RankMe falls to a fraction of its first value (:func:`collapse_onset`),
and where a probe first beats its control (:func:`probe_onset`).

Pure functions with the conventions of :mod:`ckptgeo.events.detect` (which re-exports them; import from there).
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ckptgeo.events.records import (DEFAULT_COLLAPSE_FRACTION, DEFAULT_RECOVERY, FLAT_TOLERANCE, Onset,
                                          check_fraction, clean_curve, clean_error, found_onset)
from ckptgeo.errors import InvalidParameterError

__all__ = ["onset_of_change", "held_departure", "accuracy_onset", "collapse_onset", "probe_onset"]


def onset_of_change(steps: Sequence[float], values: Sequence[float], *,
                    fraction: float = DEFAULT_RECOVERY, baseline: float | None = None,
                    error: Sequence[float] | None = None) -> Onset:
    """The first checkpoint at which a measure moved a fraction of the way to its largest held departure.

    For measures that may rise or fall (gradient ranks, Hessian, LLC, the task loss, ...): the scale is the
    largest departure from the first value that the curve **holds at two consecutive checkpoints** (the
    smaller of the two, same direction), so one point cannot set it: a single spike (a Hessian eigenvalue of
    14,006 at one step during a loss spike) neither sets the scale nor hides a real onset behind it. The
    onset is the first checkpoint that moved ``fraction`` of that scale in the same direction, and, where
    ``error`` is given, by more than its own and the baseline's measurement error. The scale is the whole
    run's, not only the part before acquisition: with few checkpoints before acquisition (whole-model
    measures are costly, so measured sparsely) a scale taken there alone makes any wobble at the one
    checkpoint before acquisition an onset, and every run a "precursor".

    Parameters
    ----------
    steps, values : array-like of shape (n_checkpoints,)
    fraction : float in (0, 1], default=0.1
    baseline : float or None, default=None
        Where departures are measured from; None: the first value. Accuracy uses its chance level
        (:func:`accuracy_onset`), so a binary task starts from 0.5, not 0. The onset is searched from the
        second checkpoint on either way.
    error : array-like of shape (n_checkpoints,), optional
        Half-width of each value's measurement interval (NaN: none). A departure no larger than the sum of
        the checkpoint's and the first checkpoint's errors is not an onset.

    Returns
    -------
    Onset
        status "no_data" with fewer than two measured checkpoints, "not_found" when the measure never
        departs from its baseline, holds no departure for two checkpoints, or never departs beyond its error.
        With two measured checkpoints the one departure is the scale.

    Examples
    --------
    >>> o = onset_of_change([0, 1, 2, 3, 4], [1.0, 1.05, 2.0, 5.0, 9.0])  # scale 4: held at steps 3 and 4
    >>> o.step, o.level
    (2, 1.4)
    >>> onset_of_change(range(7), [1.0, 1.0, 3.0, 3.0, 50.0, 3.0, 3.0]).step  # the spike at 4 sets no scale
    2
    """
    fraction = check_fraction(fraction, "recovery")
    s, v = clean_curve(steps, values)
    err = clean_error(steps, values, error)
    if s.size < 2:
        return Onset(None, None, math.nan, "no_data", "fewer than two measured checkpoints")
    base = float(v[0]) if baseline is None or not math.isfinite(float(baseline)) else float(baseline)
    dev = v - base
    if np.abs(dev).max() <= FLAT_TOLERANCE * max(abs(base), 1e-12):
        what = "its first value" if baseline is None else f"its baseline {base:g}"
        return Onset(None, None, math.nan, "not_found", f"the measure never moves from {what}")
    held = held_departure(dev)
    k = int(np.argmax(np.abs(held)))
    if abs(held[k]) <= FLAT_TOLERANCE * max(abs(base), 1e-12):
        return Onset(None, None, math.nan, "not_found", "no departure is held at two consecutive checkpoints")
    sign = 1.0 if held[k] > 0 else -1.0
    need = fraction * abs(held[k])
    level = float(base + sign * need)
    ok = sign * dev[1:] >= need
    if err is not None:
        ok &= sign * dev[1:] > err[1:] + (err[0] if baseline is None else 0.0)
    hit = np.nonzero(ok)[0]
    if hit.size == 0:  # only the first checkpoint departs (possible with a baseline), or all within the error
        why = ("no departure beyond its measurement error" if err is not None and (sign * dev[1:] >= need).any()
               else "only the first checkpoint departs from the baseline")
        return Onset(None, None, level, "not_found", why)
    return found_onset(s, 1 + int(hit[0]), level)


def held_departure(dev: np.ndarray) -> np.ndarray:
    """Per checkpoint i, the departure held at i and i + 1: the one of smaller size where both have the same
    sign, else 0 (the last checkpoint pairs with the one before). With two checkpoints, ``dev`` itself."""
    if dev.size <= 2:
        return dev.copy()
    a, b = dev[:-1], dev[1:]
    pair = np.where(np.sign(a) == np.sign(b), np.where(np.abs(a) <= np.abs(b), a, b), 0.0)
    return np.append(pair, pair[-1])


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
    fraction = check_fraction(fraction, "recovery")
    s, a = clean_curve(steps, acc, "acc")
    if s.size < 2:
        return Onset(None, None, math.nan, "no_data", "fewer than two measured checkpoints")
    base = float(a[0]) if chance is None or not math.isfinite(float(chance)) else float(chance)
    rise = float(a[1:].max()) - base
    if rise <= FLAT_TOLERANCE:
        return Onset(None, None, math.nan, "not_found", f"accuracy never rises above {base:g}")
    level = base + fraction * rise
    return found_onset(s, 1 + int(np.nonzero(a[1:] >= level - 1e-12)[0][0]), level)


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
    fraction = check_fraction(fraction, "collapse_fraction")
    s, v = clean_curve(steps, values)
    if s.size == 0 or not v[0] > 0:
        return Onset(None, None, math.nan, "no_data", "empty curve or non-positive first value")
    level = fraction * float(v[0])
    hit = np.nonzero(v[1:] <= level)[0]
    if hit.size == 0:
        return Onset(None, None, level, "not_found", f"never falls to {fraction:g} of its first value")
    return found_onset(s, 1 + int(hit[0]), level)


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
    s, pos = clean_curve(steps, np.where(measured, np.arange(acc.size, dtype=np.float64), np.nan), "accuracy")
    if s.size == 0:
        return Onset(None, None, float(margin), "no_data", "no checkpoint with a measured probe")
    pos = pos.astype(np.int64)
    hit = np.nonzero((lead[pos] >= float(margin) - 1e-12) & significant[pos])[0]
    if hit.size == 0:
        why = f"probe never beats max(chance, control) by {margin:g}"
        why += f" with p < {alpha:g}" if tested else ""
        return Onset(None, None, float(margin), "not_found", f"{why} (best lead {lead[pos].max():+.3g})")
    note = None if tested else "no p-values recorded: onset by the margin alone"
    return found_onset(s, int(hit[0]), float(margin), note)
