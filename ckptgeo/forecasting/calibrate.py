"""Widening the forecast's intervals for a held-out group, chosen on the training runs only (cross-conformal).

The hazard model's 80% interval is right on runs like those it was fitted to; a held-out task or size is unlike
them (its acquisition may fall outside the training runs' timing), so the interval covers less. The widening is
conformalised quantile regression in ``log1p(step)``, with the calibration scores taken by an inner leave-one-group-
out on the training runs alone, so that the calibration runs are held out from their model as the test runs are:

* **score** of a forecast at a scoring checkpoint (25%, 50%, 75% of the way to an acquired run's acquisition,
  the checkpoints the coverage is measured at): ``max(log1p(low) - log1p(A), log1p(A) - log1p(high))`` for the
  acquisition step ``A`` (a lower end beyond the horizon counts as the horizon's step; an upper end beyond it as
  infinite). ``A`` is inside the interval iff the score is <= 0.
* **widening** ``q``: the ``ceil((n + 1) c) / n`` empirical quantile of the ``n`` inner scores at coverage ``c``,
  floored at 0 (never narrower than the model's interval); infinite where ``n`` is too small for that quantile.
* **calibrated interval**: ``[expm1(log1p(low) - q), expm1(log1p(high) + q)]``, the lower end no earlier than the
  earliest checkpoint the acquisition can still be at.

Inner groups: the split's own groups among the training runs where there are two or more, else the training runs'
tasks, else their seeds, else no widening (``q = 0``). Leaving one size out of two sizes has one size to train
on: its inner groups are then tasks, a stand-in for the size shift it cannot rehearse. Exchangeability of held-out
groups is assumed, not guaranteed: the coverage on held-out runs is still measured and reported.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ckptgeo.forecasting.data import RunCurves
from ckptgeo.forecasting.model import HazardModel, future_steps

__all__ = ["FRACTIONS", "cap_step", "scoring_checkpoints", "scoring_rows", "conformity_score", "conformal_quantile",
           "widen", "inner_labels", "FitCache", "widening"]

#: where a held-out run is scored: 25%, 50%, 75% of the way to its acquisition (in steps)
FRACTIONS = (0.25, 0.5, 0.75)


def scoring_checkpoints(run: RunCurves) -> list[tuple[float, int]]:
    """``(fraction, checkpoint)`` for each of :data:`FRACTIONS`: the last checkpoint at or before that fraction of
    the acquisition step; empty for a run not acquired (or acquired at step 0)."""
    acq = run.acquisition_step
    if acq is None or acq <= 0:
        return []
    return [(f, max(0, int(np.searchsorted(run.steps, f * acq, side="right")) - 1)) for f in FRACTIONS]


def cap_step(run: RunCurves, i: int, max_horizon: int) -> float:
    """The latest acquisition step a forecast made at checkpoint ``i`` can name (its horizon's last checkpoint
    less the confirming window): where a median or lower end beyond the horizon is counted."""
    grid = future_steps(run.steps, i, max_horizon)
    return float(grid[max(0, len(grid) - run.window)])


def scoring_rows(run: RunCurves, fc: pd.DataFrame | None, max_horizon: int) -> list[tuple]:
    """Per fraction of :data:`FRACTIONS` whose checkpoint has a forecast: ``(fraction, checkpoint, median, low,
    high, acquisition_step)``, a quantile beyond the horizon replaced (median and low by :func:`cap_step`, high by
    ``inf``). Empty for a run not acquired or without forecasts."""
    if fc is None or not len(fc):
        return []
    out, acq = [], run.acquisition_step
    by_i = fc.set_index("checkpoint")
    for f, li in scoring_checkpoints(run):
        if li not in by_i.index:
            continue
        r = by_i.loc[li]
        c = cap_step(run, li, max_horizon)
        med = r["median_step"] if math.isfinite(r["median_step"]) else c
        lo = r["low_step"] if math.isfinite(r["low_step"]) else c
        hi = r["high_step"] if math.isfinite(r["high_step"]) else math.inf
        out.append((f, li, float(med), float(lo), float(hi), float(acq)))
    return out


def conformity_score(low: float, high: float, acq: float) -> float:
    """``max(log1p(low) - log1p(acq), log1p(acq) - log1p(high))``: <= 0 inside the interval.

    Examples
    --------
    >>> round(conformity_score(99.0, 399.0, 199.0), 4), round(conformity_score(99.0, math.inf, 999.0), 4)
    (-0.6931, -2.3026)
    """
    up = -math.inf if not math.isfinite(high) else math.log1p(acq) - math.log1p(high)
    return max(math.log1p(low) - math.log1p(acq), up)


def conformal_quantile(scores, coverage: float) -> float:
    """The widening of ``scores`` at ``coverage``: their ``ceil((n + 1) coverage)``-th smallest, floored at 0; inf
    where that rank exceeds ``n`` (too few scores), 0 where there are none.

    Examples
    --------
    >>> conformal_quantile([-1.0, 0.2, 0.5, 0.1], 0.5), conformal_quantile([0.3], 0.8)
    (0.2, inf)
    """
    s = np.sort(np.asarray([x for x in scores if not math.isnan(x)], float))
    if not len(s):
        return 0.0
    k = math.ceil((len(s) + 1) * coverage)
    return math.inf if k > len(s) else max(0.0, float(s[k - 1]))


def widen(fc: pd.DataFrame | None, q: float, run: RunCurves) -> pd.DataFrame | None:
    """``fc`` with its interval widened by ``q`` (module docstring); the model's own ends kept as ``low_step_model``
    and ``high_step_model``, ``q`` as ``widening``. An infinite ``q`` opens both ends (NaN)."""
    if fc is None:
        return None
    fc = fc.copy()
    fc["low_step_model"], fc["high_step_model"], fc["widening"] = fc["low_step"], fc["high_step"], q
    if q == 0 or not len(fc):
        return fc
    earliest = run.steps[np.maximum(0, fc["checkpoint"].to_numpy() - run.window + 2)].astype(float)
    if not math.isfinite(q):
        fc["low_step"], fc["high_step"] = earliest, math.nan
        return fc
    lo = np.expm1(np.log1p(fc["low_step"].to_numpy(float)) - q)
    fc["low_step"] = np.where(np.isfinite(lo), np.maximum(lo, earliest), lo)
    fc["high_step"] = np.expm1(np.log1p(fc["high_step"].to_numpy(float)) + q)
    return fc


def inner_labels(runs: list[RunCurves], train: list[int], labels: list) -> list | None:
    """The inner groups of the training runs ``train``: ``labels`` where they form two groups or more, else the
    runs' tasks, else their seeds; None where none does."""
    for cand in (labels, [r.task for r in runs], [r.seed for r in runs]):
        sub = [cand[i] for i in train]
        if all(v is not None and v != "" for v in sub) and len(set(sub)) >= 2:
            return sub
    return None


class FitCache:
    """Hazard models of one feature set fitted on all runs but an excluded set, each fitted once (the model without
    groups g and h serves both g's inner fold h and h's inner fold g)."""

    def __init__(self, runs: list[RunCurves], feats: list[np.ndarray], cfg):
        self.runs, self.feats, self.cfg = runs, feats, cfg
        self._models: dict[frozenset, object] = {}

    def without(self, excluded) -> object:
        key = frozenset(int(i) for i in excluded)
        if key not in self._models:
            keep = [i for i in range(len(self.runs)) if i not in key]
            self._models[key] = HazardModel.from_config(self.cfg).fit([self.runs[i] for i in keep], [self.feats[i] for i in keep])
        return self._models[key]


def widening(cache: FitCache, train: list[int], labels: list, held_out=()) -> tuple[float, int]:
    """(q, number of inner scores) for a model fitted on ``train``: each inner group of :func:`inner_labels` forecast
    by a model fitted on the other training runs only (``held_out`` excluded from every fit too), scored at the
    scoring checkpoints of its acquired runs (:func:`scoring_rows`)."""
    cfg = cache.cfg
    inner = inner_labels(cache.runs, train, labels)
    if inner is None:
        return 0.0, 0
    scores = []
    for h in sorted(set(inner), key=str):
        test = [i for i, v in zip(train, inner) if v == h]
        model = cache.without([*held_out, *test])
        for i in test:
            run = cache.runs[i]
            marks = sorted({li for _, li in scoring_checkpoints(run)})
            if not marks:
                continue
            fc = model.forecast_run(run, cache.feats[i], horizon=cfg.horizon, coverage=cfg.coverage,
                                    landmarks=marks)
            scores += [conformity_score(lo, hi, a) for _, _, _, lo, hi, a in scoring_rows(run, fc, cfg.max_horizon)]
    return conformal_quantile(scores, cfg.coverage), len(scores)

