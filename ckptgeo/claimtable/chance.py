"""What the study's rules give by chance: the event rules re-run on the study's own curves.

The claim table (:mod:`ckptgeo.claimtable.table`) judges each rate against a null built here from the same
event rules :func:`ckptgeo.analysis.analyze` applies (:mod:`ckptgeo.events.detect`), so a rule change there
moves the observed rate and its null together:

* :func:`status_at` -- a curve's status ("precursor", "synchronous", ...) had its run acquired at a given step;
* :func:`permutation_null` -- acquisition steps permuted across runs that share a checkpoint schedule, the
  rate recomputed each time: the null ``analyze`` gives a precursor rate
  (:func:`ckptgeo.events.acquisition_null.rate_null`);
* :func:`subsample_rates` -- the precursor rates again with every k-th checkpoint kept (spacing as a factor).

Nothing here reads or writes files.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from ckptgeo.events import acquisition_null
from ckptgeo.events import detect as ev
import ckptgeo.stats as stats

__all__ = ["Curve", "status_at", "events_at", "permutation_null", "subsample_rates", "SUBSAMPLE_FACTORS"]

#: keep every k-th checkpoint (the first and the last always kept) in the spacing table.
SUBSAMPLE_FACTORS = (1, 2, 4)


@dataclass(frozen=True)
class Curve:
    """One run's curve of one measure at one layer, with what its events need.

    Attributes
    ----------
    steps, values : ndarray of shape (n_checkpoints,)
        Training steps (sorted) and the measure's values there.
    acquisition_step : int or None
        The run's own acquisition step (None: not acquired).
    stratum : str
        Runs with the same stratum share a checkpoint schedule (their acquisition steps can be swapped):
        :func:`ckptgeo.events.acquisition_null.schedule` of the steps of the run's behaviour curve.
    kind : {"recovery", "change"}
        RankMe-like measures (collapse, then recovery onset) or others (onset of change).
    """

    steps: np.ndarray
    values: np.ndarray
    acquisition_step: int | None
    stratum: str
    kind: str = "recovery"


def _acquisition(steps: np.ndarray, step: int | None, rules) -> ev.Acquisition:
    """An acquisition placed at ``step`` of this schedule by ``rules`` (an
    :class:`~ckptgeo.events.rules.EventRules`); None: never acquired."""
    if step is None:
        return ev.acquisition_step(steps, np.zeros(len(steps)), threshold=0.5, window=rules.window)
    return rules.acquisition_at(steps, int(step))


def events_at(steps, values, acquisition_step: int | None, *, kind: str = "recovery", config=None):
    """The analysis's rule on one curve (:func:`ckptgeo.events.detect.curve_events`) against an acquisition
    at ``acquisition_step``; returns its ``CurveEvents``."""
    from ckptgeo.analysis.config import AnalysisConfig

    cfg = config or AnalysisConfig()
    s = np.asarray(steps, dtype=float)
    return cfg.curve_events(s, np.asarray(values, dtype=float), _acquisition(s, acquisition_step, cfg), kind=kind)


def status_at(steps, values, acquisition_step: int | None, *, kind: str = "recovery",
              config=None) -> str:
    """Status of a curve's onset against acquisition at ``acquisition_step``, by the analysis's rules.

    Parameters
    ----------
    steps, values : array-like of shape (n_checkpoints,)
    acquisition_step : int or None
        A step of ``steps`` (another run's acquisition, for a null), or None.
    kind : {"recovery", "change"}
        ``recovery``: collapse point before acquisition, then the recovery onset (RankMe); ``change``:
        onset of change (LLC, Hessian).
    config : AnalysisConfig, optional
        Window, recovery fraction, minimum collapse depth, resolution (default: ``AnalysisConfig()``).

    Returns
    -------
    str
        A :class:`ckptgeo.events.detect.Gap` status ("precursor", "synchronous", "unresolved", ...).

    Examples
    --------
    >>> s = np.arange(0, 100, 10)
    >>> v = np.array([20, 5, 5, 5, 15, 15, 15, 15, 15, 15.0])
    >>> status_at(s, v, 70), status_at(s, v, 30)
    ('precursor', 'unresolved')
    """
    return events_at(steps, values, acquisition_step, kind=kind, config=config).gap.status


def permutation_null(curves: Mapping[str, Curve], judged: Sequence[str], *, config=None,
                     n_permutations: int = stats.DEFAULT_N_PERMUTATIONS, seed: int = 0,
                     alternative: str = "greater") -> stats.PermutationResult | None:
    """Precursor rate of ``judged`` runs against acquisition steps permuted across runs of one schedule: the
    null ``ckptgeo analyze`` gives the same rate (:func:`ckptgeo.events.acquisition_null.rate_null`, outcome
    :func:`ckptgeo.events.acquisition_null.gap_at`).

    Every run of ``curves`` that acquired is a donor (its acquisition step can go to another run of its
    stratum); the statistic is the fraction of ``judged`` runs the rule calls a precursor at the acquisition
    step they are given. The identity gives the observed rate.

    Returns
    -------
    PermutationResult or None
        None with fewer than two judged runs that acquired.
    """
    pool = [m for m, c in curves.items() if c.acquisition_step is not None]
    judged_set = set(judged)

    def outcome(i: int, step: int) -> float:
        c = curves[pool[i]]
        gap = acquisition_null.gap_at(c.steps, c.values, step, kind=c.kind, config=config)
        return math.nan if gap is None else float(gap.precursor)

    return acquisition_null.rate_null(outcome, [curves[m].acquisition_step for m in pool],
                                      [curves[m].stratum for m in pool],
                                      [i for i, m in enumerate(pool) if m in judged_set], keys=pool,
                                      min_judged=acquisition_null.MIN_JUDGED,
                                      n_permutations=n_permutations, seed=seed, alternative=alternative)


def _every(n: int, k: int) -> np.ndarray:
    keep = list(range(0, n, k))
    if keep[-1] != n - 1:
        keep.append(n - 1)
    return np.asarray(keep)


def subsample_rates(curves: Mapping[str, Curve], accuracy: Mapping[str, tuple[np.ndarray, np.ndarray, float]],
                    hard: Callable[[str], bool], *, factors: Sequence[int] = SUBSAMPLE_FACTORS,
                    config=None) -> pd.DataFrame:
    """Precursor rates of hard and easy runs when only every k-th checkpoint had been saved.

    Acquisition is found again on the kept checkpoints of each run's accuracy curve (``accuracy[run] =
    (steps, accuracy, chance)``), then the RankMe status.

    Returns
    -------
    DataFrame
        One row per factor: ``factor``, ``checkpoints`` (median per run), ``hard_k``, ``hard_n``,
        ``hard_rate``, ``hard_low``, ``hard_high`` and the same for ``easy``.
    """
    from ckptgeo.analysis.config import AnalysisConfig

    cfg = config or AnalysisConfig()
    rows = []
    for k in factors:
        counts = {True: [0, 0], False: [0, 0]}
        lengths = []
        for m, c in curves.items():
            if m not in accuracy:
                continue
            s_acc, acc, chance = accuracy[m]
            keep = _every(len(s_acc), k)
            acq = cfg.acquisition(s_acc[keep], acc[keep], None if chance is None or math.isnan(chance) else chance)
            if not acq.acquired or acq.at_first_checkpoint:
                continue
            kc = _every(len(c.steps), k)
            lengths.append(len(kc))
            st = status_at(c.steps[kc], c.values[kc], acq.step, kind=c.kind, config=cfg)
            counts[hard(m)][0] += st == "precursor"
            counts[hard(m)][1] += 1
        row = {"factor": k, "checkpoints": float(np.median(lengths)) if lengths else math.nan}
        for name, flag in (("hard", True), ("easy", False)):
            r = stats.binomial_interval(*counts[flag])
            row |= {f"{name}_k": r.k, f"{name}_n": r.n, f"{name}_rate": r.rate, f"{name}_low": r.low,
                    f"{name}_high": r.high}
        rows.append(row)
    return pd.DataFrame(rows)
