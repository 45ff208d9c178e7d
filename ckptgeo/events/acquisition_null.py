"""The one permutation null of a rate judged against acquisition, shared by ``ckptgeo analyze`` (the
``precursor_rates`` tables) and the claim table (:mod:`ckptgeo.claimtable.chance`, the order and probe rows).

A run's **checkpoint schedule** (:func:`schedule`) is the set of steps at which its behaviour was measured; runs
whose step grids are identical share a schedule, and acquisition steps are exchangeable only among them.
:func:`rate_null` permutes the acquisition steps of the pool (every run that acquired: each is a donor) within
schedules and recomputes the rate of the **judged** runs (a subset of the pool, e.g. one difficulty class) at
the acquisition step each is given; the identity gives the observed rate. A permuted acquisition never leaves
its schedule, so it always falls on a checkpoint the run measured: an acquisition taken from another grid
would have to be moved onto this one, and one after its last checkpoint would count as "not a precursor" and
pull the null down.

:func:`gap_at` is the rule's outcome at a given acquisition step (the precursor gap of
:meth:`ckptgeo.events.rules.EventRules.curve_events`), the outcome both callers permute.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

from ckptgeo.events import detect as ev
from ckptgeo.events.rules import EventRules
import ckptgeo.stats as stats

__all__ = ["MIN_JUDGED", "schedule", "gap_at", "rate_null"]

#: a rate of fewer judged runs is not tested (one run has nothing to be compared with)
MIN_JUDGED = 2


def schedule(steps: Sequence[float]) -> str:
    """The checkpoint schedule of a run: its finite measured steps, sorted and unique, as one string (the
    stratum label).

    Examples
    --------
    >>> schedule([20, 0, 10, 10, float("nan")])
    '0,10,20'
    """
    s = np.asarray(steps, dtype=float)
    s = np.unique(s[np.isfinite(s)])
    return ",".join(str(int(x)) if float(x).is_integer() else repr(float(x)) for x in s)


def gap_at(steps: Sequence[float], values: Sequence[float], step: float, *, kind: str = "recovery",
           config=None) -> ev.Gap | None:
    """The precursor gap of one curve had its run acquired at ``step`` (moved to the first checkpoint at or
    after it, as :func:`ckptgeo.events.detect.acquisition_at` does), by the analysis's rule.

    Parameters
    ----------
    steps, values : array-like of shape (n_checkpoints,)
        The curve; checkpoints whose value is not finite are left out.
    step : float
        The acquisition step (the run's own, or another run's of its schedule for a null).
    kind : {"recovery", "change"}
        RankMe-like (collapse, then recovery onset) or other measures (onset of change).
    config : EventRules, optional
        The rules (default ``EventRules()``, the declared defaults).

    Returns
    -------
    Gap or None
        None when the acquisition lands on the first finite checkpoint or after the last (nothing to judge).
    """
    if config is None:
        config = EventRules()
    s, v = np.asarray(steps, dtype=float), np.asarray(values, dtype=float)
    keep = np.isfinite(s) & np.isfinite(v)
    order = np.argsort(s[keep], kind="stable")
    s, v = s[keep][order], v[keep][order]
    i = int(np.searchsorted(s, float(step), side="left"))
    if i == 0 or i >= s.size:
        return None
    return config.curve_events(s, v, config.acquisition_at(s, int(s[i])), kind=kind).gap


def rate_null(outcome: Callable[[int, int], float], acquisition_steps: Sequence[int], strata: Sequence,
              judged: Sequence[int], *, keys: Sequence | None = None, min_judged: int = 1,
              n_permutations: int = stats.DEFAULT_N_PERMUTATIONS, seed: int = 0,
              alternative: str = "greater") -> stats.PermutationResult | None:
    """Permutation test of the judged runs' rate against acquisition steps permuted within schedules.

    Parameters
    ----------
    outcome : callable ``(i, step) -> float``
        Run ``i``'s outcome (1.0 / 0.0; NaN: not counted) had it acquired at ``step``. Called only for judged
        ``i`` and steps of ``i``'s own schedule, once per distinct (i, step).
    acquisition_steps : sequence of int, shape (n,)
        The pool: every run that acquired, each a donor of its acquisition step.
    strata : sequence of shape (n,)
        Each run's schedule (:func:`schedule`); steps move only within one.
    judged : sequence of int
        Indices into the pool of the runs whose rate is tested.
    keys : sequence of shape (n,), optional
        A sortable identity per run (its model name): the permutations are drawn over the pool sorted by it,
        so one pool gives one null however a caller lists it (``analyze`` and the claim table list their runs
        in different orders).
    min_judged : int, default=1
        Fewer judged runs give None (``analyze`` and :func:`ckptgeo.claimtable.chance.permutation_null` pass
        :data:`MIN_JUDGED`: a rate of one run is not tested).
    n_permutations, seed, alternative
        As :func:`ckptgeo.stats.permutation.permutation_test` (exact enumeration when the within-schedule
        relabellings are few).

    Returns
    -------
    PermutationResult or None
        ``statistic`` the observed rate (mean outcome of the judged runs, NaN outcomes left out), ``null_mean``
        and its 95% range, ``p_value``; None with fewer than ``min_judged`` judged runs (or none).
    """
    n = len(acquisition_steps)
    at = sorted(range(n), key=list(keys).__getitem__) if keys is not None else list(range(n))
    steps = [int(acquisition_steps[k]) for k in at]
    labels = [list(strata)[k] for k in at]
    pos = {k: i for i, k in enumerate(at)}
    who = sorted(pos[int(i)] for i in set(judged))
    if len(who) < max(1, min_judged):
        return None
    hit = np.full((n, n), np.nan)
    for i in who:
        seen: dict[int, float] = {}
        for j in range(n):
            if labels[j] == labels[i]:
                if steps[j] not in seen:
                    seen[steps[j]] = float(outcome(at[i], steps[j]))
                hit[i, j] = seen[steps[j]]
    idx = np.asarray(who)

    def rate(order: np.ndarray) -> float:
        x = hit[idx, np.asarray(order)[idx]]
        return float(np.nanmean(x)) if np.isfinite(x).any() else math.nan

    return stats.permutation_test(rate, n, strata=labels, n_permutations=n_permutations, seed=seed,
                                  alternative=alternative)
