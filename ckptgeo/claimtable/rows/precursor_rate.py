"""Claim rows: RankMe's precursor rate as ``ckptgeo analyze`` counts it, shown beside the verdicts (descriptive)."""

from __future__ import annotations

import math

import pandas as pd

from ckptgeo.claimtable.registry import Claim, ClaimContext, register_claim
from ckptgeo.claimtable.verdicts import ci_text, fraction_text


def precursor_rates(ctx: ClaimContext) -> pd.DataFrame:
    """RankMe's precursor rate (the summary layer's event status, as ``ckptgeo analyze`` counts it) by the
    analysis's difficulty (``summary/precursor_rates.parquet``'s groups) and by the study's hard / easy classes,
    each with the within-schedule permutation null and p-value of
    :func:`ckptgeo.claimtable.chance.permutation_null` (the one null ``analyze`` uses, with the analysis's
    permutations and seed), so the two outputs agree number for number.

    Returns
    -------
    DataFrame
        One row per group: ``group``, ``n_counted``, ``n_precursor``, ``precursor_rate``, ``low``, ``high`` (the
        claim table's rate interval), ``null_rate``, ``p_value`` (NaN below two runs).
    """
    from ckptgeo.events.curves import run_rows
    from ckptgeo.analysis.config import AnalysisConfig
    from ckptgeo.claimtable.chance import permutation_null
    from ckptgeo.claimtable.inference import rate_interval

    cfg = ctx.config or AnalysisConfig()
    runs = ctx.runs[ctx.runs["counted"]]
    events = ctx.tables.get("events") if hasattr(ctx.tables, "get") else None
    diff = {}
    if isinstance(events, pd.DataFrame) and len(events) and "difficulty" in events.columns:
        rr = run_rows(events)
        diff = dict(zip(rr["model"], rr["difficulty"]))
    groups = [(str(d), runs[runs["model"].map(diff) == d]) for d in sorted({diff[m] for m in runs["model"] if m in diff})]
    groups += [("hard", runs[runs["hard"]]), ("easy", runs[~runs["hard"]])]
    out = []
    for label, g in groups:
        hit = (g["status"] == "precursor").astype(float)
        iv = rate_interval(hit.to_numpy(), [f"{t}-L{lv}-{sz}" for t, lv, sz in zip(g["task"], g["level"], g["size"])])
        res = permutation_null(ctx.curves, list(g["model"]), config=cfg, n_permutations=cfg.n_permutations,
                               seed=cfg.seed) if ctx.curves else None
        out.append({"group": label, "n_counted": len(g), "n_precursor": int(hit.sum()), "precursor_rate": iv.value,
                    "low": iv.low, "high": iv.high, "null_rate": math.nan if res is None else res.null_mean,
                    "p_value": math.nan if res is None else res.p_value})
    return pd.DataFrame(out, columns=["group", "n_counted", "n_precursor", "precursor_rate", "low", "high",
                                      "null_rate", "p_value"])


def _precursor_rate(ctx: ClaimContext) -> Claim:
    t = precursor_rates(ctx)
    shown = "; ".join(f"{r.group}: {fraction_text(r.n_precursor, r.n_counted)} {ci_text(r.low, r.high)}"
                      + ("" if math.isnan(r.null_rate) else f", permuted {r.null_rate:.0%}, p = {r.p_value:.3g}")
                      for r in t.itertuples() if r.n_counted) or "no counted run"
    return Claim("precursor_rate", ctx.claim,
                 "100% on hard tasks (v4 abstract)", shown, "descriptive",
                 "not a verdict: the rate dichotomises the lead (an onset at a tenth of a change before the 50% "
                 "crossing, which anything that moves early satisfies); the verdicts are the lead rows. The same "
                 "numbers as `ckptgeo analyze` writes in summary/precursor_rates.parquet (metric rankme, by "
                 "difficulty; a table an older version wrote may differ: rerun analyze)",
                 "summary/precursor_rates.parquet; events/events.parquet", ctx.source,
                 test="acquisition steps permuted within schedules (the null analyze uses); interval: over settings, "
                      "at least the exact interval of the count", kind="descriptive")


@register_claim(id="precursor_rate", order=150,
                claim="RankMe's precursor rate, as `ckptgeo analyze` reports it (descriptive)",
                source="v4 abstract: 100% precursor rate for hard algorithmic tasks",
                anchor="claim-precursor-rate", reads=("events", "curves", "accuracy"), nulls=())   # descriptive: never "reproduced"
def precursor_rate(ctx: ClaimContext) -> Claim:
    return _precursor_rate(ctx)
