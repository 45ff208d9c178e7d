"""Claim rows: linear probes read the answer before the model produces it (the ``probe_lead`` row, with its sanity gate)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd

from ckptgeo.claimtable.power import LEADS, POWER, POWER_PERMUTATIONS, mde_text
from ckptgeo.claimtable.registry import Claim, ClaimContext, register_claim
from ckptgeo.claimtable.verdicts import PROBE_GATE_ACCURACY, ci_text, examples_text, floor_p, fraction_text, holds_verdict, numeric, rate_of
from ckptgeo.events import acquisition_null


def _probe(ctx: ClaimContext, probe_lead: pd.DataFrame, probes: pd.DataFrame | None = None) -> Claim:
    runs = ctx.runs
    pl = probe_lead if probe_lead is not None else pd.DataFrame()
    counted = runs[runs["counted"]]
    if pl.empty:
        return Claim("probe_lead", ctx.claim,
                     "probes lead acquisition", "not measured", "inconclusive", "no probes table in this study",
                     "summary/probe_lead.parquet", ctx.source)
    # layer 0 is the read position's token embedding, the same for every item (the separator): it carries
    # nothing to read and never rises, so it neither leads nor keeps a run whose real layers are all
    # readable at start in the fraction
    pl = pl[pl["model"].isin(set(counted["model"])) & (pd.to_numeric(pl["layer"], errors="coerce") >= 1)]
    failed = _failed_gate(ctx, probes, set(pl["model"]))
    gate = ""
    if failed is not None:
        passed, failed_models = failed
        gate = f"; sanity gate: {passed} run(s) pass, {len(failed_models)} fail ({examples_text(failed_models)})"
        pl = pl[~pl["model"].isin(failed_models)]
        if failed_models and not passed:
            return Claim("probe_lead", ctx.claim,
                         "probes lead acquisition", "not measured (failed gate)", "inconclusive",
                         "no run's probe decodes the target at the end while the model is at "
                         f">= {PROBE_GATE_ACCURACY:.0%}" + gate, "summary/probe_lead.parquet", ctx.source)
    measured = pl[pl["status"] != "not_measured"]
    judged = measured[measured["status"] != "readable_at_start"]
    leads = sorted(set(judged.loc[judged["status"] == "leads", "model"]))
    models = sorted(set(judged["model"]))
    at_start = sorted(set(measured["model"]) - set(judged["model"]))
    not_measured = sorted(set(pl["model"]) - set(measured["model"]))
    rows = counted[counted["model"].isin(models)].set_index("model").loc[models].reset_index() if models else \
        counted.iloc[:0]
    flag = rows["model"].isin(leads)
    rate, lo, hi, how = rate_of(ctx, rows, flag)
    null = p = mde = math.nan
    res, table = None, {}
    if models and "probe_step" in judged.columns:
        first = judged.groupby("model")["probe_step"].min()
        pool = [m for m in models if m in ctx.curves and ctx.curves[m].acquisition_step is not None]
        if pool:
            onset = np.array([float(first.get(m)) if pd.notna(first.get(m)) else math.inf for m in pool])
            res = acquisition_null.rate_null(lambda i, acq: float(onset[i] < acq),
                                             [ctx.curves[m].acquisition_step for m in pool],
                                             [ctx.curves[m].stratum for m in pool], range(len(pool)),
                                             n_permutations=ctx.n_permutations, seed=ctx.seed)
            if res is not None:
                null, p = res.null_mean, res.p_value
                mde, table = _probe_power(ctx, pool)
    verdict, why = holds_verdict(p, len(models), "lead rate against permuted acquisition", floor_p(res), alpha=ctx.alpha, mde=mde)
    extra = (f"; {len(at_start)} acquired run(s) left out: every layer's probe reads the label at the first "
             f"checkpoint (no rise to see)") if at_start else ""
    extra += f"; {len(not_measured)} acquired run(s) not measured (probe undefined)" if not_measured else ""
    return Claim("probe_lead", ctx.claim,
                 "probes lead acquisition",
                 f"{fraction_text(len(leads), len(models))} acquired runs have a layer whose probe leads {ci_text(lo, hi)}"
                 + ("" if math.isnan(null) else f"; permuted {null:.0%}") + (f"; {mde_text(mde, table)}" if table else ""),
                 verdict, why + extra + gate + "; onset: beats max(chance, control) by the margin with p < alpha",
                 "summary/probe_lead.parquet", ctx.source, rate, lo, hi, null, p,
                 f"permutation of acquisition steps within a schedule; interval: {how}", mde=mde)


def _probe_power(ctx: ClaimContext, pool: list[str]) -> tuple[float, dict]:
    """The probe row's MDE in checkpoints: every run's probe onset planted ``d`` checkpoints (of its accuracy
    grid) before its acquisition, give or take one (an onset is known to its checkpoint), never at the first
    checkpoint (that is *readable at start*); the row's permutation test rerun on ``n_power`` such studies. The
    smallest ``d`` of :data:`ckptgeo.claimtable.power.LEADS` detected with power >= 80%; inf when none."""
    rng = np.random.default_rng(ctx.seed)
    acq = [int(ctx.curves[m].acquisition_step) for m in pool]
    grids = [np.asarray(ctx.accuracy[m][0] if m in ctx.accuracy else ctx.curves[m].steps, dtype=float) for m in pool]
    at = [int(np.searchsorted(g, a)) for g, a in zip(grids, acq)]
    table = {}
    for d in LEADS:
        hits = 0
        for _ in range(ctx.n_power):
            idx = [min(max(i - d + int(rng.integers(-1, 2)), 1), len(g) - 1) for i, g in zip(at, grids)]
            onset = np.array([g[i] for i, g in zip(idx, grids)])
            r = acquisition_null.rate_null(lambda i, a: float(onset[i] < a), acq, [ctx.curves[m].stratum for m in pool],
                                           range(len(pool)), n_permutations=min(ctx.n_permutations,
                                                                                POWER_PERMUTATIONS), seed=ctx.seed)
            hits += r is not None and r.p_value < ctx.alpha
        table[d] = hits / ctx.n_power if ctx.n_power else math.nan
        if table[d] >= POWER:
            return float(d), table
    return math.inf, table


def _failed_gate(ctx: ClaimContext, probes: pd.DataFrame | None, models: set) -> tuple[int, list[str]] | None:
    """(runs passing, runs failing) the probe's sanity gate; None without the probes table or accuracy."""
    if probes is None or probes.empty or not ctx.accuracy:
        return None
    from ckptgeo.analysis.config import AnalysisConfig

    cfg = ctx.config or AnalysisConfig()
    passed, failed = 0, []
    for model, g in probes[probes["model"].isin(models)].groupby("model"):
        if model not in ctx.accuracy:
            continue
        last = g["step"].max()
        s_acc, acc, _ = ctx.accuracy[model]
        at = acc[s_acc <= last]
        if not len(at) or at[-1] < PROBE_GATE_ACCURACY:
            continue   # the model is not at ~100% there: the gate does not apply
        end = g[(g["step"] == last) & (pd.to_numeric(g["layer"], errors="coerce") >= 1)]
        acc_p = numeric(end["accuracy"])
        if acc_p.isna().all():
            continue   # the probe is undefined there (too few items of a class): not measured, not failed
        base = np.maximum(numeric(end["chance"]), numeric(end["control_accuracy"]).fillna(0.0))
        pval = numeric(end["p_value"]) if "p_value" in end.columns else pd.Series(0.0, index=end.index)
        if bool(((acc_p - base >= cfg.probe_margin) & (pval < cfg.probe_alpha)).any()):
            passed += 1
        else:
            failed.append(model)
    return passed, failed


@register_claim(id="probe_lead", order=140,
                claim="a linear probe reads the answer before the model produces it",
                source="v4 abstract: probes read the answer before the model produces it",
                anchor="claim-probe-lead", reads=("events", "curves", "accuracy", "probe_lead", "probes"), nulls=())
def probe_lead(ctx: ClaimContext) -> Claim:
    return dataclasses.replace(_probe(ctx, ctx.tables["probe_lead"], ctx.tables["probes"]), kind="holds")
