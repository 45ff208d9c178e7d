"""Claim rows: where RankMe's collapse floor lies: near 2.0 on modular at every size, rising with size on multiplication."""

from __future__ import annotations

import dataclasses
import math

import pandas as pd

import ckptgeo.stats as stats
from ckptgeo.claimtable.inference import cluster_interval
from ckptgeo.claimtable.power import kendall_mde, tau_mde_text
from ckptgeo.claimtable.registry import Claim, ClaimContext, register_claim
from ckptgeo.claimtable.verdicts import MIN_CASES, TAU_MARGIN, holds_verdict, numeric, size_order


def _floor_rows(runs: pd.DataFrame, task: str) -> pd.DataFrame:
    r = runs[(runs["task"] == task) & (runs["level"] == 1) & runs["collapse_floor"].notna()]
    return r.assign(collapse_floor=numeric(r["collapse_floor"]))


def _floor_modular(ctx: ClaimContext) -> Claim:
    """Every size's mean floor over seeds with an interval of real coverage (t from 5 seeds, below that the exact
    range with its coverage, one seed unbounded: :func:`ckptgeo.claimtable.inference.cluster_interval`, each seed its
    own unit) against the band 2.0 +- 0.5; a verdict needs 95% coverage at every size."""
    r = _floor_rows(ctx.runs, "modular")
    parts, inside, outside, weak = [], [], [], []
    for size in size_order(r["size"].unique()):
        v = r.loc[r["size"] == size, "collapse_floor"].to_numpy(float)
        iv = cluster_interval(v, range(len(v)))
        parts.append(f"{size} {iv.text(fmt='{:.2f}')} ({len(v)} seeds)")
        inside.append(1.5 <= iv.low and iv.high <= 2.5)
        outside.append(iv.high < 1.5 or iv.low > 2.5)
        if iv.coverage < 0.95 - 1e-9:
            weak.append(f"{size}: {len(v)} seed(s) give " + ("no interval" if len(v) < 2 else
                                                              f"{iv.coverage:.0%} coverage"))
    shown = "; ".join(parts) or "no collapse measured"
    if len(parts) < 2:
        verdict, why = "inconclusive", f"floors at {len(parts)} size(s); at least 2 are needed"
    elif weak:
        verdict, why = "inconclusive", "no 95% interval at every size (" + "; ".join(weak) + ")"
    elif all(inside):
        verdict, why = "reproduced", "every size's interval within 2.0 +- 0.5"
    elif any(outside):
        verdict, why = "not reproduced", "some size's interval lies wholly outside 2.0 +- 0.5"
    else:
        verdict, why = "inconclusive", "some interval straddles the 2.0 +- 0.5 band"
    return Claim("floor_modular", ctx.claim,
                 "about 2.0 at every size", f"mean floor by size [interval over seeds]: {shown}", verdict, why,
                 "events/events.parquet (collapse_floor, modular-L1 runs)", ctx.source,
                 float(r["collapse_floor"].mean()) if len(r) else math.nan,
                 test="interval over seeds per size (t from 5 seeds, else the exact range) against 2.0 +- 0.5")


def _floor_multiplication(ctx: ClaimContext) -> Claim:
    r = _floor_rows(ctx.runs, "multiplication")
    med = r.groupby("size")["collapse_floor"].median() if len(r) else pd.Series(dtype=float)
    med = med.loc[size_order(med.index)]
    shown = ", ".join(f"{s} {v:.2f}" for s, v in med.items()) or "no collapse measured"
    if len(med) < 2 or len(r) < MIN_CASES:
        return Claim("floor_multiplication", ctx.claim,
                     "floors rise with model size", f"median floor by size: {shown}", "inconclusive",
                     f"floors at {len(med)} size(s) over {len(r)} run(s); at least 2 sizes and {MIN_CASES} runs",
                     "events/events.parquet (collapse_floor, multiplication runs)", ctx.source)
    kt = stats.kendall_tau(r["n_parameters"].to_numpy(float), r["collapse_floor"].to_numpy(float),
                           n_permutations=ctx.n_permutations, seed=ctx.seed, alternative="greater")
    # a design that cannot reject leaves a rising floor inconclusive; a falling one is still not reproduced
    mde, _ = kendall_mde(r["n_parameters"].to_numpy(float), alpha=ctx.alpha, seed=ctx.seed)
    verdict, why = holds_verdict(kt.p_value, len(r), f"Kendall tau(parameters, floor) = {kt.tau:+.2f} over {len(r)} runs",
                                 kt.min_p if kt.tau > 0 else math.nan, alpha=ctx.alpha, mde=mde, margin=TAU_MARGIN,
                                 unit="in Kendall tau")
    return Claim("floor_multiplication", ctx.claim,
                 "floors rise with model size", f"median floor by size: {shown}; tau {kt.tau:+.2f}; {tau_mde_text(mde)}",
                 verdict, why, "events/events.parquet (collapse_floor, multiplication runs)",
                 ctx.source, kt.tau, math.nan, math.nan, 0.0, kt.p_value,
                 "Kendall tau-b, one-sided permutation p; mde in tau", mde=mde)


@register_claim(id="floor_modular", order=100,
                claim="modular arithmetic collapses to a RankMe floor near 2.0 at every size",
                source="v4 abstract: modular collapse floor near RankMe 2.0 at every size",
                anchor="claim-floor-modular", reads=("events",), nulls=())
def floor_modular(ctx: ClaimContext) -> Claim:
    return _floor_modular(ctx)


@register_claim(id="floor_multiplication", order=110,
                claim="multiplication's collapse floor rises with capacity",
                source="from a summary of the paper; not found in its abstracts",
                anchor="claim-floor-multiplication", reads=("events",), nulls=())
def floor_multiplication(ctx: ClaimContext) -> Claim:
    return dataclasses.replace(_floor_multiplication(ctx), kind="holds")
