"""Claim rows: collapse, then recovery, then acquisition, in that order (the ``order`` row)."""

from __future__ import annotations

import dataclasses
import math

from ckptgeo.claimtable.power import POWER_PERMUTATIONS, mde_text, minimum_detectable
from ckptgeo.claimtable.registry import Claim, ClaimContext, register_claim
from ckptgeo.claimtable.verdicts import ci_text, examples_text, floor_p, fraction_text, holds_verdict, numeric, rate_of
from ckptgeo.events import acquisition_null
from ckptgeo.events import curves as cv


def _order(ctx: ClaimContext) -> Claim:
    runs = ctx.runs
    c = runs[runs["counted"]]
    col, rec, acq = numeric(c["collapse_step"]), numeric(c["onset_step"]), numeric(c["acquisition_step"])
    ok = (col < rec) & (rec <= acq)  # NaN compares False: a missing collapse or recovery is out of order
    rate, lo, hi, how = rate_of(ctx, c, ok)
    null, p, res, mde, table = math.nan, math.nan, None, math.nan, {}
    if ctx.curves and len(c):
        # the order under permuted acquisition: collapse and recovery are found before the acquisition given
        res = _order_null(ctx, ctx.curves, list(c["model"]))
        if res is not None:
            null, p = res.null_mean, res.p_value
            mde, table = _order_power(ctx, list(c["model"]))
    verdict, why = holds_verdict(p, len(c), "order rate against permuted acquisition", floor_p(res), alpha=ctx.alpha, mde=mde)
    missing = c.loc[~ok.to_numpy(), "model"]
    return Claim("order", ctx.claim,
                 "the shape holds across tasks and sizes",
                 f"{fraction_text(int(ok.sum()), len(c))} acquired runs {ci_text(lo, hi)}"
                 + (f"; {mde_text(mde, table)}" if table else ""), verdict,
                 why + (f"; out of order: {examples_text(missing)}" if len(missing) else ""),
                 "events/events.parquet (metric rankme, summary layer); figures/grid.png", ctx.source,
                 rate, lo, hi, null, p, f"permutation of acquisition steps within a schedule; interval: {how}",
                 mde=mde)


def _order_null(ctx: ClaimContext, curves: dict, judged: list[str], n_permutations: int | None = None):
    """Permutation null of the in-order rate (collapse < recovery onset <= acquisition) of ``curves``: the shared
    within-schedule null (:func:`ckptgeo.events.acquisition_null.rate_null`) with this outcome."""
    from ckptgeo.claimtable.chance import events_at

    pool = [m for m, cv in curves.items() if cv.acquisition_step is not None]

    def in_order(i: int, acq: int) -> float:
        cv = curves[pool[i]]
        e = events_at(cv.steps, cv.values, acq, config=ctx.config)
        col, on = e.collapse.step if e.collapse else None, e.onset.step
        return float(col is not None and on is not None and col < on <= acq)

    judged_set = set(judged)
    return acquisition_null.rate_null(in_order, [curves[m].acquisition_step for m in pool],
                                      [curves[m].stratum for m in pool],
                                      [i for i, m in enumerate(pool) if m in judged_set],
                                      n_permutations=n_permutations or ctx.n_permutations, seed=ctx.seed)


def _order_power(ctx: ClaimContext, judged: list[str]) -> tuple[float, dict]:
    """The order row's MDE: RankMe curves planted with a collapse, then a recovery ``d`` checkpoints before
    accuracy's onset (:mod:`ckptgeo.claimtable.power`), the row's permutation test rerun on them."""
    from ckptgeo.analysis.config import AnalysisConfig
    from ckptgeo.claimtable.rows.leads import behaviour

    beh = behaviour(ctx)
    judged = [m for m in judged if m in ctx.curves and m in beh]

    def detects(planted: dict) -> bool:
        r = _order_null(ctx, planted, judged, n_permutations=min(ctx.n_permutations, POWER_PERMUTATIONS))
        return r is not None and r.p_value < ctx.alpha

    return minimum_detectable(detects, ctx.curves, beh, judged, n_power=ctx.n_power,
                              fraction=(ctx.config or AnalysisConfig()).recovery, seed=ctx.seed)


@register_claim(id="order", order=20,
                claim="collapse -> recovery -> acquisition, in that order, in every run",
                source="arXiv:2602.15997 v4, abstract: collapse, recovery, then accuracy",
                anchor="claim-order", reads=("events", "curves", "accuracy"))
def order(ctx: ClaimContext) -> Claim:
    return dataclasses.replace(_order(ctx), kind="holds")
