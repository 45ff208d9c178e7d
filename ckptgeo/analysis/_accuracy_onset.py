"""Draft of accuracy's onset of its final rise (issue 48); moves into ``ckptgeo/events/onsets.py`` once that
package exists."""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ckptgeo.analysis.event_types import (DEFAULT_RECOVERY, DEFAULT_WINDOW, FLAT_TOLERANCE, Onset, check_fraction,
                                          clean_curve, found_onset)
from ckptgeo.analysis.stats import robust_noise_sd
from ckptgeo.errors import InvalidParameterError

#: a rise counts only when the held maximum stands more than this many noise standard deviations above the format
#: level (the noise: :func:`~ckptgeo.analysis.stats.robust_noise_sd`, the jitter of the curve's own checkpoint-to-
#: checkpoint changes): the largest of 40 checkpoints of pure noise held at two is about 1.5 of them
NOISE_RISE = 3.0

__all__ = ["accuracy_onset", "format_level", "held_maximum"]


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
        Acquisition step (:func:`~ckptgeo.analysis.events.acquisition_step`); None: not acquired.

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
