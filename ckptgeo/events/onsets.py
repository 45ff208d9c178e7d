"""Onsets on one curve: where a curve starts to change (:func:`onset_of_change`), where accuracy starts to rise
(:func:`accuracy_onset`), where a layer's RankMe falls to a fraction of its first value (:func:`collapse_onset`),
and where a probe first beats its control (:func:`probe_onset`).

Pure functions with the conventions of :mod:`ckptgeo.events.detect` (which re-exports them; import from there).
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ckptgeo.errors import InvalidParameterError
from ckptgeo.events.records import (DEFAULT_COLLAPSE_FRACTION, DEFAULT_RECOVERY, DEFAULT_WINDOW, FLAT_TOLERANCE,
                                    Onset, check_fraction, clean_curve, clean_error, found_onset)
from ckptgeo.stats.noise import robust_noise_sd

__all__ = ["onset_of_change", "held_departure", "accuracy_onset", "held_maximum", "format_level", "far_before",
           "collapse_onset", "probe_onset", "NOISE_RISE", "DEFAULT_FAR_ONSET"]

#: a rise of accuracy counts only when its held maximum stands more than this many noise standard deviations above
#: its format level (the noise: :func:`~ckptgeo.stats.noise.robust_noise_sd`, the jitter of the curve's own
#: checkpoint-to-checkpoint changes). On 40 checkpoints of iid Gaussian noise the held maximum stands 1.1 s.d. above
#: the median of the first three on average, and more than 3 in 2% of curves (20,000 curves, seed 0)
NOISE_RISE = 3.0
#: an accuracy onset in this first share of the checkpoints before acquisition lies far before it (:func:`far_before`)
DEFAULT_FAR_ONSET = 0.5


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


def held_maximum(acc: np.ndarray) -> tuple[float, int]:
    """The highest accuracy held at two consecutive checkpoints (the smaller of the two) and the index of the
    first checkpoint of the first pair that holds it; with two checkpoints, the second value and its index.

    Examples
    --------
    >>> held_maximum(np.array([0.5, 0.9, 0.5, 0.7, 0.8]))  # the spike at 0.9 is not held
    (0.7, 3)
    """
    if acc.size <= 2:
        return float(acc[-1]), acc.size - 1
    pair = np.minimum(acc[:-1], acc[1:])
    k = int(np.argmax(pair))
    return float(pair[k]), k


def format_level(acc: np.ndarray, chance: float, top: float, window: int) -> tuple[float, int]:
    """Accuracy's own level once it answers in the task's form: ``max(chance, first plateau)``, and the index of
    the checkpoint where that plateau starts.

    The checkpoints before accuracy first reaches the midpoint between ``chance`` and ``top`` are the ones before
    the rise. Answers of the right form arrive at the first of them whose accuracy is at least half their median
    (before it, accuracy sits near 0: the model does not yet answer in the task's form). The first plateau is
    the median accuracy of the ``window`` checkpoints from there (fewer where the rise comes sooner).

    Parameters
    ----------
    acc : ndarray of shape (n_checkpoints,)
        Finite accuracies in step order.
    chance : float
    top : float
        The held maximum (:func:`held_maximum`), above ``chance``.
    window : int

    Returns
    -------
    (float, int)
        The format level and the plateau's first index (0 when the rise starts at the first checkpoint).

    Examples
    --------
    >>> format_level(np.array([0.0, 0.0, 0.49, 0.6, 0.5, 0.52, 0.9, 1.0]), 0.5, 0.9, 3)  # format at index 2
    (0.5, 2)
    >>> format_level(np.array([0.0, 0.12, 0.11, 0.12, 0.3, 0.7, 0.9]), 0.0002, 0.7, 3)  # plateau above chance
    (0.12, 1)
    """
    mid = chance + 0.5 * (top - chance)
    h = int(np.argmax(acc >= mid - 1e-12))
    if h == 0:
        return chance, 0
    pre = acc[:h]
    start = int(np.argmax(pre >= 0.5 * float(np.median(pre)) - 1e-12))
    plateau = float(np.median(pre[start:start + window]))
    return max(chance, plateau), start


def accuracy_onset(steps: Sequence[float], acc: Sequence[float], chance: float | None = None, *,
                   fraction: float = DEFAULT_RECOVERY, window: int = DEFAULT_WINDOW,
                   acquisition: int | None = None) -> Onset:
    """Where accuracy's final rise starts: the capability, not the answer format.

    A run starts at accuracy 0 (it does not yet answer in the task's form), reaches its **format level** within
    a few steps (chance on a binary task, or the plateau of a trivial strategy: :func:`format_level`) and only
    later rises to what it acquires. The level to cross is ``base + fraction * (top - base)``, with ``base`` the
    format level and ``top`` the highest accuracy held at two consecutive checkpoints (:func:`held_maximum`).
    The onset is the first checkpoint of the stretch that stays at or above that level up to the end of the
    rise (the acquisition checkpoint; without one, the held maximum), and the stretch must last at least
    ``window`` checkpoints (or reach the last one). Noise around the format level that crosses the level before
    the final rise is not the onset, since accuracy falls below it again before the rise.

    Parameters
    ----------
    steps, acc : array-like of shape (n_checkpoints,)
    chance : float or None, default=None
        Chance accuracy (0.5 for a binary task); None or NaN: the first measured accuracy.
    fraction : float in (0, 1], default=0.1
        Share of the rise from the format level to the held maximum (the rules' ``recovery``).
    window : int >= 1, default=3
        Checkpoints of the first plateau and of the held stretch (the rules' acquisition ``window``).
    acquisition : int or None, default=None
        Acquisition step (:func:`~ckptgeo.events.detect.acquisition_step`); None: not acquired.

    Returns
    -------
    Onset
        ``level`` is the level crossed. status "no_data" with fewer than two measured checkpoints, "not_found"
        when accuracy never holds a level above its format level, or its final rise is not held ``window``
        checkpoints.

    Raises
    ------
    InvalidParameterError
        ``fraction`` outside (0, 1], ``window`` < 1, or mismatched lengths.

    Examples
    --------
    >>> o = accuracy_onset([0, 10, 20, 30, 40], [0.5, 0.52, 0.6, 0.9, 1.0], chance=0.5)
    >>> o.step, round(o.level, 3)
    (20, 0.558)
    >>> steps = [0, 1, 2, 4, 8, 16, 18, 36, 54, 72, 90, 108, 126]   # the format jump (steps 2-8) is not the onset
    >>> acc = [0.0, 0.0, 0.005, 0.485, 0.595, 0.5, 0.47, 0.53, 0.5, 0.62, 0.8, 0.9, 0.95]
    >>> accuracy_onset(steps, acc, 0.5, acquisition=90).step
    72
    """
    fraction = check_fraction(fraction, "recovery")
    if isinstance(window, bool) or not isinstance(window, (int, np.integer)) or window < 1:
        raise InvalidParameterError(f"The 'window' parameter must be an int in [1, inf). Got {window!r}.",
                                    name="window", value=window)
    s, a = clean_curve(steps, acc, "acc")
    if s.size < 2:
        return Onset(None, None, math.nan, "no_data", "fewer than two measured checkpoints")
    c = float(a[0]) if chance is None or not math.isfinite(float(chance)) else float(chance)
    top, k = held_maximum(a)
    if top - c <= FLAT_TOLERANCE:
        return Onset(None, None, math.nan, "not_found", f"accuracy never holds a level above {c:g}")
    base, _ = format_level(a, c, top, int(window))
    if top - base <= FLAT_TOLERANCE:
        return Onset(None, None, math.nan, "not_found", f"accuracy never holds a level above its format level "
                                                        f"{base:g}")
    jitter = robust_noise_sd(a)
    if top - base <= NOISE_RISE * jitter:
        return Onset(None, None, math.nan, "not_found", f"accuracy's rise above its format level {base:.3g} "
                                                        f"({top - base:.3g}) is within {NOISE_RISE:g} x its "
                                                        f"checkpoint-to-checkpoint noise ({jitter:.3g})")
    level = base + fraction * (top - base)
    above = a >= level - 1e-12
    end = k if acquisition is None else min(int(np.searchsorted(s, acquisition, side="left")), s.size - 1)
    if not above[end]:  # the acquisition checkpoint lies below the level (a format level above the threshold)
        later = np.nonzero(above[end:])[0]
        if later.size == 0:
            return Onset(None, None, level, "not_found", f"accuracy never reaches {level:.3g} after acquisition")
        end += int(later[0])
    below = np.nonzero(~above[:end])[0]
    i = max(1, int(below[-1]) + 1 if below.size else 1)
    held = int(np.argmax(~above[i:])) if not above[i:].all() else s.size - i
    if held < int(window) and i + held < s.size:
        return Onset(None, None, level, "not_found", f"accuracy holds {level:.3g} for {held} checkpoints, fewer "
                                                     f"than window={window}")
    return found_onset(s, i, level)


def far_before(steps: Sequence[float], onset_step: int | None, acquisition_step: int | None, *,
               fraction: float = DEFAULT_FAR_ONSET) -> bool | None:
    """Whether an accuracy onset lies far before its acquisition: in the first ``fraction`` of the checkpoints
    before it (onset index < ``fraction`` x acquisition index on the grid ``steps``).

    Parameters
    ----------
    steps : array-like of shape (n_checkpoints,)
        The accuracy grid (NaN steps dropped, sorted).
    onset_step, acquisition_step : int or None
    fraction : float in (0, 1], default=0.5

    Returns
    -------
    bool or None
        None when either event is missing.

    Examples
    --------
    >>> grid = [0, 1, 2, 4, 8, 16, 18, 36, 54, 72, 90]
    >>> far_before(grid, 8, 90), far_before(grid, 72, 90), far_before(grid, None, 90)
    (True, False, None)
    """
    fraction = check_fraction(fraction, "far_onset")
    if onset_step is None or acquisition_step is None:
        return None
    s = np.sort(np.asarray(steps, dtype=np.float64)[np.isfinite(np.asarray(steps, dtype=np.float64))])
    i_onset = int(np.searchsorted(s, float(onset_step), side="left"))
    i_acq = int(np.searchsorted(s, float(acquisition_step), side="left"))
    return bool(i_onset < fraction * i_acq)


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
