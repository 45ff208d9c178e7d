"""Like-for-like leads: a geometric onset against behaviour's own onset under the same rule, per run and under the
within-schedule null.

A run's **lead** is accuracy's onset (:func:`ckptgeo.events.detect.accuracy_onset`: the first checkpoint at
which accuracy has risen a tenth of the way from chance to its maximum) minus the geometric onset (RankMe's
recovery onset, or a whole-model measure's onset of change, :func:`ckptgeo.events.detect.curve_events`), in
checkpoints of the geometric curve's grid and in steps. Positive: the geometry moved first. Both onsets are
known to their checkpoint only (each lies in the interval ending at its checkpoint), so a lead carries the
spacing before each onset (``geo_resolution_steps``, ``acc_resolution_steps``); in checkpoints it is exact to
+-1. A curve whose rule finds no onset gets its onset one past its last checkpoint (it never moved: the lowest
lead its grid allows), so a rank statistic keeps it.

The null (:class:`LeadMatrix`): run ``i``'s geometric curve against run ``j``'s behaviour, for every pair of
runs that share a checkpoint schedule (their ``stratum``). Permuting which behaviour goes with which curve
within a schedule keeps each curve's shape, its autocorrelation and the schedule, and breaks only the pairing;
the identity gives the observed leads. The claim rows (:mod:`ckptgeo.claimtable.rows.leads`) and ``analyze``
use this one null.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from ckptgeo.events import detect as ev

__all__ = ["Behaviour", "LeadMatrix", "lead_matrix", "grid_index"]


@dataclass(frozen=True)
class Behaviour:
    """One run's behaviour curve: ``steps``, ``values`` (accuracy, or the loss), ``chance`` (accuracy's baseline;
    NaN for the loss) and ``acquisition_step`` (None: not acquired)."""

    steps: np.ndarray
    values: np.ndarray
    chance: float
    acquisition_step: int | None
    rising: bool = True

    def onset(self, fraction: float) -> ev.Onset:
        """Its onset under the geometry's rule: accuracy from chance; the loss's first fall of ``fraction`` of
        its largest fall."""
        if self.rising:
            return ev.accuracy_onset(self.steps, self.values, None if math.isnan(self.chance) else self.chance,
                                     fraction=fraction)
        return ev.onset_of_change(self.steps, self.values, fraction=fraction)


def grid_index(grid: np.ndarray, step: float) -> int:
    """Index on ``grid`` of the first checkpoint at or after ``step`` (``len(grid)`` when after the last).

    Examples
    --------
    >>> grid_index(np.array([0, 10, 20]), 15), grid_index(np.array([0, 10, 20]), 20)
    (2, 2)
    """
    return int(np.searchsorted(np.asarray(grid, dtype=float), float(step), side="left"))


@dataclass(frozen=True)
class LeadMatrix:
    """Leads of every curve against every behaviour of its schedule.

    Attributes
    ----------
    models : list of str
        The pool: runs whose behaviour has an onset and that acquired (not at the first checkpoint).
    strata : list of str
        Each run's schedule.
    checkpoints, steps : ndarray of shape (n, n)
        ``[i, j]``: lead of run i's curve against run j's behaviour (NaN across schedules).
    geo_step, acc_step : ndarray of shape (n,)
        The observed onsets (NaN: none found; the lead then uses one past the last checkpoint).
    geo_resolution, acc_resolution : ndarray of shape (n,)
        Spacing before each observed onset, in steps (NaN at a first checkpoint).
    found : ndarray of bool, shape (n,)
        The geometric rule found an onset against the run's own behaviour.
    """

    models: list
    strata: list
    checkpoints: np.ndarray
    steps: np.ndarray
    geo_step: np.ndarray
    acc_step: np.ndarray
    geo_resolution: np.ndarray
    acc_resolution: np.ndarray
    found: np.ndarray

    def observed(self, unit: str = "checkpoints") -> np.ndarray:
        """The runs' own leads (the diagonal)."""
        return np.diag(self.checkpoints if unit == "checkpoints" else self.steps).copy()

    def excess(self) -> np.ndarray:
        """Per run: its own lead minus its mean lead against the other behaviours of its schedule (NaN when it
        is alone on its schedule), in checkpoints."""
        out = np.full(len(self.models), np.nan)
        for i in range(len(self.models)):
            others = [j for j in range(len(self.models)) if j != i and self.strata[j] == self.strata[i]]
            if others:
                out[i] = self.checkpoints[i, i] - float(np.mean(self.checkpoints[i, others]))
        return out


def _onset_index(grid: np.ndarray, onset: ev.Onset) -> tuple[float, float]:
    if onset.step is None:
        return float(len(grid)), float(grid[-1] + (grid[-1] - grid[-2] if len(grid) > 1 else 1))
    return float(grid_index(grid, onset.step)), float(onset.step)


def lead_matrix(curves: Mapping[str, object], behaviour: Mapping[str, Behaviour], *, config=None,
                judged: Sequence[str] | None = None, own_only: bool = False) -> LeadMatrix | None:
    """The :class:`LeadMatrix` of the runs in both ``curves`` (model -> :class:`ckptgeo.claimtable.chance.Curve`)
    and ``behaviour`` (model -> :class:`Behaviour`).

    Only pairs on one schedule (the curves' ``stratum``) are computed; the pool is every run whose behaviour
    has an onset and an acquisition after the first checkpoint (``judged`` restricts the rows computed, the
    columns stay the whole pool; ``own_only``: the diagonal only). Returns None without such a run.
    """
    from ckptgeo.analysis.config import AnalysisConfig

    cfg = config or AnalysisConfig()
    pool, onsets = [], {}
    for m in sorted(set(curves) & set(behaviour)):
        b = behaviour[m]
        if b.acquisition_step is None or len(b.steps) < 2 or b.acquisition_step <= float(np.min(b.steps)):
            continue
        o = b.onset(cfg.recovery)
        if o.step is None:
            continue
        pool.append(m)
        onsets[m] = o
    if not pool:
        return None
    rows = set(pool) if judged is None else set(judged) & set(pool)
    n = len(pool)
    strata = [curves[m].stratum for m in pool]
    ck, st = np.full((n, n), np.nan), np.full((n, n), np.nan)
    geo, acc = np.full(n, np.nan), np.full(n, np.nan)
    geo_res, acc_res, found = np.full(n, np.nan), np.full(n, np.nan), np.zeros(n, dtype=bool)
    acq_steps = np.array([float(behaviour[m].acquisition_step) for m in pool])
    acc_steps = np.array([float(onsets[m].step) for m in pool])
    strata_arr = np.asarray(strata, dtype=object)
    for i, m in enumerate(pool):
        c = curves[m]
        grid = np.asarray(c.steps, dtype=float)
        acc[i] = onsets[m].step
        acc_res[i] = np.nan if onsets[m].resolution_steps is None else onsets[m].resolution_steps
        if m not in rows or len(grid) < 2:
            continue
        cols = [i] if own_only else np.flatnonzero(strata_arr == strata[i]).tolist()
        acq_idx = np.searchsorted(grid, acq_steps[cols], side="left")
        acc_idx = np.searchsorted(grid, acc_steps[cols], side="left")
        values = np.asarray(c.values, dtype=float)
        seen: dict = {}   # the onset depends on the acquisition only through its index on this grid
        for k, j in enumerate(cols):
            key = 0 if c.kind == "change" else int(acq_idx[k])
            if key not in seen:
                e = cfg.curve_events(grid, values, cfg.acquisition_at(grid, int(acq_steps[j])), kind=c.kind).onset
                seen[key] = (e, *_onset_index(grid, e))
            e, g_idx, g_step = seen[key]
            ck[i, j] = acc_idx[k] - g_idx
            st[i, j] = acc_steps[j] - g_step
            if j == i:
                geo[i] = np.nan if e.step is None else e.step
                geo_res[i] = np.nan if e.resolution_steps is None else e.resolution_steps
                found[i] = e.step is not None
    return LeadMatrix(pool, strata, ck, st, geo, acc, geo_res, acc_res, found)
