"""Claim rows: sizes rank the settings alike (collapse floor, acquisition step): Kendall tau between each pair of sizes."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

import ckptgeo.stats as stats
from ckptgeo.claimtable.power import kendall_mde, tau_mde_text
from ckptgeo.claimtable.registry import Claim, ClaimContext, register_claim
from ckptgeo.claimtable.verdicts import MIN_SETTINGS, TAU_MARGIN, numeric, size_order


def _across(ctx: ClaimContext, quantity: str) -> Claim:
    runs = ctx.runs
    sizes = size_order(runs["size"].unique())
    key = ["task", "level"]
    if quantity == "collapse_floor":
        table = runs.assign(v=numeric(runs["collapse_floor"])).pivot_table(index=key, columns="size", values="v",
                                                                         aggfunc="mean")
    else:
        acq = numeric(runs["acquisition_step"])
        never = float(acq.max()) + 1.0 if acq.notna().any() else 1.0
        table = runs.assign(v=acq.fillna(never)).pivot_table(index=key, columns="size", values="v", aggfunc="mean")
    pairs, mdes = [], {}
    for i, small in enumerate(sizes):
        for large in sizes[i + 1:]:
            both = table[[small, large]].dropna() if {small, large} <= set(table.columns) else table.iloc[:0]
            if len(both) >= 2:
                kt = stats.kendall_tau(both[small].to_numpy(float), both[large].to_numpy(float),
                                       n_permutations=ctx.n_permutations, seed=ctx.seed, alternative="greater")
                pairs.append((small, large, len(both), kt.tau, kt.p_value, kt.min_p))
                mdes[(small, large)] = kendall_mde(both[small].to_numpy(float), alpha=ctx.alpha, seed=ctx.seed)[0]
            else:
                pairs.append((small, large, len(both), math.nan, math.nan, math.nan))
    shown = "; ".join(f"{a} vs {b}: tau {t:+.2f} (p {p:.2g}, {n} settings, "
                      f"{tau_mde_text(mdes[(a, b)])})" if not math.isnan(t)
                      else f"{a} vs {b}: undefined ({n} settings)" for a, b, n, t, p, _ in pairs) or "one size only"
    judged = [(n, t, p, m) for _, _, n, t, p, m in pairs if n >= MIN_SETTINGS and not math.isnan(t)]
    mde = max((mdes[(a, b)] for a, b, n, t, _, _ in pairs if n >= MIN_SETTINGS and not math.isnan(t)),
              default=math.nan)
    failed = [(t, m, mdes[(a, b)]) for a, b, n, t, p, m in pairs
              if n >= MIN_SETTINGS and not math.isnan(t) and not (t > 0 and p < ctx.alpha)]
    if not judged:
        verdict, why = "inconclusive", f"no pair of sizes shares {MIN_SETTINGS} settings with a defined tau"
    elif not failed:
        verdict, why = "reproduced", f"tau > 0 with p < {ctx.alpha} for every pair of sizes"
    elif all(t > 0 and m >= ctx.alpha for t, m, _ in failed):
        verdict, why = "inconclusive", (f"tau > 0 for every pair of sizes, but for some pair no order of its "
                                        f"settings could give p < {ctx.alpha}")
    elif not all(math.isfinite(d) and d <= TAU_MARGIN for _, _, d in failed):
        verdict, why = "inconclusive", (f"some pair of sizes has tau <= 0 or p >= {ctx.alpha}, but its design detects a "
                                        f"tau of {TAU_MARGIN:g} with power < 80% (not evidence either way)")
    else:
        verdict, why = "not reproduced", f"some pair of sizes has tau <= 0 or p >= {ctx.alpha}"
    ps = [p for _, _, p, _ in judged]
    return Claim(f"across_sizes_{quantity}", ctx.claim,
                 "positive rank correlation between sizes", shown, verdict, why,
                 "events/events.parquet; per-setting values in reproduction.md's runs table",
                 ctx.source,
                 float(np.mean([t for _, t, _, _ in judged])) if judged else math.nan, math.nan, math.nan, 0.0,
                 max(ps) if ps else math.nan,
                 "Kendall tau-b between sizes over matched (task, level), mean over seeds; permutation p (largest); "
                 "mde in tau (the largest over the judged pairs)", mde=mde)


@register_claim(id="across_sizes_collapse_floor", order=120,
                claim="small models predict large ones: rank correlation of collapse floors",
                source="from a summary of the paper (Spearman > 0.92 for Pythia-2.8B); not found in its abstracts",
                anchor="claim-across-sizes", reads=("events",), nulls=())
def across_sizes_collapse_floor(ctx: ClaimContext) -> Claim:
    return dataclasses.replace(_across(ctx, "collapse_floor"), kind="holds")


@register_claim(id="across_sizes_acquisition_step", order=130,
                claim="small models predict large ones: rank correlation of acquisition order (never acquired ranked last)",
                source="from a summary of the paper; not found in its abstracts",
                anchor="claim-across-sizes", reads=("events",), nulls=("permuted",))
def across_sizes_acquisition_step(ctx: ClaimContext) -> Claim:
    return dataclasses.replace(_across(ctx, "acquisition_step"), kind="holds")
