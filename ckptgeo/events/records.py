"""The records the event rules return (:class:`Acquisition`, :class:`Collapse`, :class:`Onset`, :class:`Gap`),
the rules' defaults, and the curve conventions every rule shares.

The conventions (missing checkpoints, order, ties, the grid's uncertainty) and why each default is what it is
are in :mod:`ckptgeo.events.detect`, which re-exports every name here; import from there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ckptgeo.errors import InvalidParameterError

__all__ = [
    "DEFAULT_ACC_THRESHOLD", "DEFAULT_WINDOW", "DEFAULT_RECOVERY", "DEFAULT_COLLAPSE_FRACTION", "DEFAULT_MIN_DROP",
    "DEFAULT_RESOLUTION_CHECKPOINTS", "FLAT_TOLERANCE", "Acquisition", "Collapse", "Onset", "Gap", "clean_curve",
    "spacing_before", "spacing_after", "found_onset", "check_fraction",
]

#: accuracy an acquired capability must exceed (docs/definitions.md#acquisition); :func:`acquisition_threshold`
#: for chance.
DEFAULT_ACC_THRESHOLD = 0.5
#: consecutive checkpoints accuracy must stay above the threshold.
DEFAULT_WINDOW = 3
#: fraction of the drop (or departure) a curve must regain (or move) for an onset.
DEFAULT_RECOVERY = 0.1
#: fraction of its first value a layer's RankMe must fall to for its collapse onset.
DEFAULT_COLLAPSE_FRACTION = 0.5
#: fall, as a fraction of its first value, that RankMe must exceed for a collapse (:mod:`ckptgeo.events.detect`: why 0.25).
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


def clean_curve(steps: Sequence[float], values: Sequence[float], name: str = "values") -> tuple[np.ndarray, np.ndarray]:
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


def clean_error(steps: Sequence[float], values: Sequence[float], error: Sequence[float] | None) -> np.ndarray | None:
    """``error`` (a half-width per checkpoint, e.g. RankMe's interval) aligned with :func:`clean_curve`'s
    output: the same points dropped and the same order; NaN (not measured) counts as 0. None stays None."""
    if error is None:
        return None
    s = np.asarray(steps, dtype=np.float64).reshape(-1)
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    e = np.asarray(error, dtype=np.float64).reshape(-1)
    if e.shape != v.shape:
        raise InvalidParameterError(f"'error' must have one value per checkpoint. Got {e.size} for {v.size}.",
                                    name="error", value=e.size)
    keep = np.isfinite(s) & np.isfinite(v)
    e = e[keep][np.argsort(s[keep], kind="stable")]
    return np.where(np.isfinite(e), np.abs(e), 0.0)


def spacing_before(s: np.ndarray, i: int | None) -> int | None:
    if i is None or i <= 0:
        return None
    return int(s[i] - s[i - 1])


def spacing_after(s: np.ndarray, i: int | None) -> int | None:
    if i is None or i >= s.size - 1:
        return None
    return int(s[i + 1] - s[i])


def found_onset(s: np.ndarray, i: int, level: float, reason: str | None = None) -> "Onset":
    return Onset(int(s[i]), i, level, "found", reason, spacing_before(s, i), spacing_after(s, i))


def check_fraction(value: float, name: str) -> float:
    value = float(value)
    if not (0.0 < value <= 1.0):
        raise InvalidParameterError(f"The {name!r} parameter must be a float in (0, 1]. Got {value!r}.",
                                    name=name, value=value)
    return value

