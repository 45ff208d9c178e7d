"""The built-in claim rows of :func:`ckptgeo.studies.claims.claim_table`, in the order of the paper's argument.

Each row is a function ``fn(ctx: ClaimContext) -> Claim`` registered with the tables it reads
(:func:`ckptgeo.studies.claims.register_claim`); the registrations are at the end of this module.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd

from ckptgeo.analysis import acquisition_null, stats
from ckptgeo.analysis import curves as cv
from ckptgeo.studies.inference import cluster_interval
from ckptgeo.studies.power import LEADS, POWER, kendall_mde, mde_text, mean_kendall_mde, minimum_detectable, tau_mde_text
from ckptgeo.studies.claims import (ALPHA, MIN_CASES, MIN_SETTINGS, PROBE_GATE_ACCURACY, SOURCES, TAU_MARGIN, Claim,
                                    ClaimContext, ci_text, examples_text, fraction_text, holds_verdict, numeric, rate_of, size_params,
                                    register_claim)

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
    verdict, why = holds_verdict(p, len(c), "order rate against permuted acquisition", _floor_p(res), mde=mde)
    missing = c.loc[~ok.to_numpy(), "model"]
    return Claim("order", "collapse -> recovery -> acquisition, in that order, in every run",
                 "the shape holds across tasks and sizes",
                 f"{fraction_text(int(ok.sum()), len(c))} acquired runs {ci_text(lo, hi)}"
                 + (f"; {mde_text(mde, table)}" if table else ""), verdict,
                 why + (f"; out of order: {examples_text(missing)}" if len(missing) else ""),
                 "events/events.parquet (metric rankme, summary layer); figures/grid.png", SOURCES["order"],
                 rate, lo, hi, null, p, f"permutation of acquisition steps within a schedule; interval: {how}",
                 mde=mde)


def _order_null(ctx: ClaimContext, curves: dict, judged: list[str], n_permutations: int | None = None):
    """Permutation null of the in-order rate (collapse < recovery onset <= acquisition) of ``curves``: the shared
    within-schedule null (:func:`ckptgeo.analysis.acquisition_null.rate_null`) with this outcome."""
    from ckptgeo.studies.chance import events_at

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
    accuracy's onset (:mod:`ckptgeo.studies.power`), the row's permutation test rerun on them."""
    from ckptgeo.analysis.summary import AnalysisConfig
    from ckptgeo.studies.claim_leads import behaviour

    beh = behaviour(ctx)
    judged = [m for m in judged if m in ctx.curves and m in beh]

    def detects(planted: dict) -> bool:
        r = _order_null(ctx, planted, judged, n_permutations=min(ctx.n_permutations, _POWER_PERMUTATIONS))
        return r is not None and r.p_value < ALPHA

    return minimum_detectable(detects, ctx.curves, beh, judged, n_power=ctx.n_power,
                              fraction=(ctx.config or AnalysisConfig()).recovery, seed=ctx.seed)


#: permutations inside each planted replicate of a power analysis.
_POWER_PERMUTATIONS = 199


def _floor_p(res) -> float:
    """The smallest p-value the test could give (the share of the null at the statistic's maximum, 1):
    above alpha, no observation could reject chance."""
    if res is None or not len(res.null):
        return math.nan
    return (1 + int(np.sum(res.null >= 1.0 - 1e-12))) / (1 + len(res.null))


def _top_down(ctx: ClaimContext, events: pd.DataFrame) -> Claim:
    """Kendall tau of block depth against collapse onset, runs of >= 4 layers; post-final-norm layer apart. The p is
    the largest of the within-run permutation p and the noise nulls' (:func:`_top_down_noise`)."""
    runs = ctx.runs
    e = events[(events["metric"] == "rankme") & events["model"].isin(set(runs["model"]))] if len(events) else events
    e = cv.preferred_variant(e)
    per_run, depths, items, labels, post_first, ties, small, few = [], [], [], [], 0, 0, 0, 0
    tested = []   # (block rows, depths, onsets) of each run in the statistic: the noise null's input
    for model, g in (e.groupby("model", sort=True) if len(e) else []):
        n_layers = int(g["layer"].max())
        if n_layers < 4:
            small += 1
            continue
        blocks = g[(g["layer"] >= 1) & (g["layer"] < n_layers)].sort_values("layer")
        have = blocks[blocks["collapse_onset_step"].notna()]
        if len(have) < 3:
            few += 1
            continue
        x, y = have["layer"].to_numpy(float), numeric(have["collapse_onset_step"]).to_numpy()
        kt = stats.kendall_tau(x, y, n_permutations=999, seed=ctx.seed, alternative="less")
        if math.isnan(kt.tau):
            continue
        per_run.append(kt.tau)
        depths.append(x)
        tested.append((blocks, x, y))
        ties += kt.n_tied_y
        items += list(zip(x, y))
        labels += [model] * len(x)
        post = g.loc[g["layer"] == n_layers, "collapse_onset_step"]
        post_first += int(len(post) and pd.notna(post.iloc[0]) and post.iloc[0] <= y[np.argmax(x)])
    n = len(per_run)
    if n == 0:
        return Claim("top_down", "collapse reaches output-side layers first", "28/32 (v3); 32/32 (v1-v2)",
                     f"not tested: no run of 4 or more layers has 3 block onsets ({few} run(s) of 4+ layers have "
                     f"fewer than 3; {small} run(s) have fewer than 4 layers)",
                     "inconclusive", "top-down needs models of >= 4 layers", "summary/top_down.parquet",
                     SOURCES["top_down"], test=_TOP_DOWN_TEST)
    arr = np.asarray(items, dtype=float)
    lab = np.asarray(labels)
    groups = [np.flatnonzero(lab == m) for m in dict.fromkeys(labels)]

    def mean_tau(order: np.ndarray) -> float:
        y = arr[np.asarray(order), 1]
        taus = [_tau_rows(arr[g, 0], y[g][None])[0] for g in groups]   # scipy's tau-b, vectorised
        taus = [t for t in taus if not math.isnan(t)]
        return float(np.mean(taus)) if taus else math.nan

    res = stats.permutation_test(mean_tau, len(arr), strata=list(lab), n_permutations=ctx.n_permutations,
                                 seed=ctx.seed, alternative="less")
    noise = _top_down_noise(ctx, tested, ctx.n_permutations)
    by_null = {"permuted": (res.p_value, res.null_mean, "")}
    for kind, (t, share) in noise.items():
        by_null[kind] = (stats.p_value(res.statistic, t, "less", exact=False), float(np.mean(t)),
                         f", runs collapse in {share:.0%} of copies")
    worst = max(by_null, key=lambda kind: by_null[kind][0])
    p = by_null[worst][0] if noise else math.nan   # without the curves there is no noise null: no p
    k = int(sum(t < 0 for t in per_run))
    mde, _ = mean_kendall_mde(depths, alpha=ALPHA, seed=ctx.seed)
    mde = -mde   # the row tests tau < 0
    verdict, why = holds_verdict(p, n, f"mean Kendall tau < 0; largest p against {_NULL_NAMES[worst]}", mde=mde,
                                 margin=TAU_MARGIN, unit="in mean Kendall tau")
    shown = "; ".join(f"{_NULL_NAMES[kind]}: mean tau {m:+.2f}, p {q:.3g}{extra}"
                      for kind, (q, m, extra) in by_null.items())
    return Claim("top_down", "collapse reaches output-side layers first (Kendall tau(depth, collapse onset) < 0)",
                 "28/32 task x model pairs (v3); 32/32 (v1-v2)",
                 f"mean tau {res.statistic:+.2f} over {n} runs of >= 4 layers ({k} with tau < 0; {ties} tied onset "
                 f"pair(s)); post-final-norm layer at or before the last block in {post_first}/{n}; "
                 f"{tau_mde_text(mde)}; nulls: {shown}",
                 verdict, why + ("" if noise else "; no noise null without the curves table")
                 + (f"; {small} run(s) of < 4 layers not tested" if small else "")
                 + (f"; {few} run(s) of >= 4 layers not tested: fewer than 3 blocks collapse" if few else "")
                 + "; collapse onset = first step at the collapse fraction of the layer's first RankMe",
                 "events/events.parquet (collapse_onset_step per layer); curves (RankMe per layer)",
                 SOURCES["top_down"], float(res.statistic), math.nan, math.nan, by_null[worst][1], p, _TOP_DOWN_TEST,
                 mde=mde)


_TOP_DOWN_TEST = ("Kendall tau-b per run, mean tau over runs (one-sided, tau < 0); p the largest of three nulls: "
                  "onsets permuted among a run's blocks; each block's RankMe replaced by iid noise, or by a random "
                  "walk, at its own level and spread, onsets found again (null: the mean tau under the largest p's "
                  "null); mde in mean tau against the permutation null")
_NULL_NAMES = {"permuted": "onsets permuted within runs", "iid": "iid noise at each block's level and spread",
               "random_walk": "random walks at each block's level and spread"}


def _top_down_noise(ctx: ClaimContext, tested: list, n_replicates: int) -> dict[str, tuple[np.ndarray, float]]:
    """The top-down row's noise nulls: its mean tau over the same runs when every block's RankMe is noise at the
    block's own level and spread (:func:`ckptgeo.analysis.nulls.noise_curves_like`, kinds ``iid`` and
    ``random_walk``), collapse onsets found again by the events table's rule
    (:meth:`~ckptgeo.analysis.summary.AnalysisConfig.collapse_onset`).

    Each run gets ``n_replicates`` noise copies of its blocks; its null taus are those of the copies in which, as in
    the data, at least 3 blocks collapse with a defined tau (a run no copy makes so keeps its own onsets permuted
    among its blocks). A null mean tau draws one of them per run, so it is over the same runs as the statistic.

    ``tested``: per run in the statistic, (its block rows of the events table, depths (k,), onsets (k,)); the rows'
    ``model`` and ``layer`` (and ``suite``, ``config_hash`` where present) pick each block's curve in
    ``ctx.tables["curves"]``. Returns kind -> (null mean taus of shape (n_replicates,), share of the runs' copies
    with 3 collapsing blocks); {} without the curves table."""
    from ckptgeo.analysis import nulls
    from ckptgeo.analysis.summary import AnalysisConfig

    curves = ctx.tables.get("curves") if hasattr(ctx.tables, "get") else None
    if not isinstance(curves, pd.DataFrame) or not len(curves) or not tested:
        return {}
    cfg = ctx.config or AnalysisConfig()
    keys = [c for c in ("model", "suite", "config_hash", "layer") if c in curves.columns and c in tested[0][0].columns]
    by = dict(iter(cv.preferred_variant(curves[curves["metric"] == "rankme"]).groupby(keys, sort=False)))
    out = {}
    for i, kind in enumerate(("iid", "random_walk")):
        rng = np.random.default_rng([ctx.seed, i])
        draws, hits = [], 0
        for blocks, x, y in tested:
            onset = np.full((n_replicates, len(blocks)), np.nan)
            for j, key in enumerate(blocks[keys].itertuples(index=False, name=None)):
                g, seed = by.get(key), int(rng.integers(2 ** 32))
                copies = None if g is None else nulls.noise_curves_like(g["step"], g["value"], kind,
                                                                       n_curves=n_replicates, seed=seed)
                if copies is None:
                    continue   # fewer than 3 measured checkpoints: no onset in any copy
                grid = np.sort(g.loc[np.isfinite(g["value"].to_numpy(float)), "step"].to_numpy(float))
                for r, values in enumerate(copies):
                    step = cfg.collapse_onset(grid, values).step
                    onset[r, j] = math.nan if step is None else step
            taus = _tau_rows(blocks["layer"].to_numpy(float), onset)
            taus = taus[np.isfinite(taus)]
            hits += taus.size
            if not taus.size:
                taus = _tau_rows(x, rng.permuted(np.tile(y, (n_replicates, 1)), axis=1))
            draws.append(taus[rng.integers(taus.size, size=n_replicates)])
        out[kind] = (np.mean(draws, axis=0), hits / (n_replicates * len(tested)))
    return out


def _tau_rows(x: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """Kendall tau-b of ``x`` (n,) against each row of ``ys`` (m, n) over the row's finite entries (scipy's
    ``kendalltau`` on them); NaN for a row with fewer than 3 finite entries or no untied pair."""
    i, j = np.triu_indices(x.size, 1)
    ok = np.isfinite(ys[:, i]) & np.isfinite(ys[:, j])
    dx = np.sign(x[i] - x[j])
    dy = np.sign(np.where(ok, ys[:, i] - ys[:, j], 0.0))
    nx, ny = np.count_nonzero(ok & (dx != 0), axis=1), np.count_nonzero(dy, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        tau = (dy @ dx) / np.sqrt(nx * ny)
    tau[(np.isfinite(ys).sum(axis=1) < 3) | (nx == 0) | (ny == 0)] = np.nan
    return tau


def _floor_rows(runs: pd.DataFrame, task: str) -> pd.DataFrame:
    r = runs[(runs["task"] == task) & (runs["level"] == 1) & runs["collapse_floor"].notna()]
    return r.assign(collapse_floor=numeric(r["collapse_floor"]))


def _size_order(sizes) -> list:
    return sorted(sizes, key=size_params)


def _floor_modular(ctx: ClaimContext) -> Claim:
    """Every size's mean floor over seeds with an interval of real coverage (t from 5 seeds, below that the exact
    range with its coverage, one seed unbounded: :func:`ckptgeo.studies.inference.cluster_interval`, each seed its
    own unit) against the band 2.0 +- 0.5; a verdict needs 95% coverage at every size."""
    r = _floor_rows(ctx.runs, "modular")
    parts, inside, outside, weak = [], [], [], []
    for size in _size_order(r["size"].unique()):
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
    return Claim("floor_modular", "modular arithmetic collapses to a RankMe floor near 2.0 at every size",
                 "about 2.0 at every size", f"mean floor by size [interval over seeds]: {shown}", verdict, why,
                 "events/events.parquet (collapse_floor, modular-L1 runs)", SOURCES["floor_modular"],
                 float(r["collapse_floor"].mean()) if len(r) else math.nan,
                 test="interval over seeds per size (t from 5 seeds, else the exact range) against 2.0 +- 0.5")


def _floor_multiplication(ctx: ClaimContext) -> Claim:
    r = _floor_rows(ctx.runs, "multiplication")
    med = r.groupby("size")["collapse_floor"].median() if len(r) else pd.Series(dtype=float)
    med = med.loc[_size_order(med.index)]
    shown = ", ".join(f"{s} {v:.2f}" for s, v in med.items()) or "no collapse measured"
    if len(med) < 2 or len(r) < MIN_CASES:
        return Claim("floor_multiplication", "multiplication's collapse floor rises with capacity",
                     "floors rise with model size", f"median floor by size: {shown}", "inconclusive",
                     f"floors at {len(med)} size(s) over {len(r)} run(s); at least 2 sizes and {MIN_CASES} runs",
                     "events/events.parquet (collapse_floor, multiplication runs)", SOURCES["floor_multiplication"])
    kt = stats.kendall_tau(r["n_parameters"].to_numpy(float), r["collapse_floor"].to_numpy(float),
                           n_permutations=ctx.n_permutations, seed=ctx.seed, alternative="greater")
    # a design that cannot reject leaves a rising floor inconclusive; a falling one is still not reproduced
    mde, _ = kendall_mde(r["n_parameters"].to_numpy(float), alpha=ALPHA, seed=ctx.seed)
    verdict, why = holds_verdict(kt.p_value, len(r), f"Kendall tau(parameters, floor) = {kt.tau:+.2f} over {len(r)} runs",
                                 kt.min_p if kt.tau > 0 else math.nan, mde=mde, margin=TAU_MARGIN,
                                 unit="in Kendall tau")
    return Claim("floor_multiplication", "multiplication's collapse floor rises with capacity",
                 "floors rise with model size", f"median floor by size: {shown}; tau {kt.tau:+.2f}; {tau_mde_text(mde)}",
                 verdict, why, "events/events.parquet (collapse_floor, multiplication runs)",
                 SOURCES["floor_multiplication"], kt.tau, math.nan, math.nan, 0.0, kt.p_value,
                 "Kendall tau-b, one-sided permutation p; mde in tau", mde=mde)


def _across(ctx: ClaimContext, quantity: str) -> Claim:
    runs = ctx.runs
    sizes = _size_order(runs["size"].unique())
    key = ["task", "level"]
    if quantity == "collapse_floor":
        table = runs.assign(v=numeric(runs["collapse_floor"])).pivot_table(index=key, columns="size", values="v",
                                                                         aggfunc="mean")
        label = "collapse floors"
    else:
        acq = numeric(runs["acquisition_step"])
        never = float(acq.max()) + 1.0 if acq.notna().any() else 1.0
        table = runs.assign(v=acq.fillna(never)).pivot_table(index=key, columns="size", values="v", aggfunc="mean")
        label = "acquisition order (never acquired ranked last)"
    pairs, mdes = [], {}
    for i, small in enumerate(sizes):
        for large in sizes[i + 1:]:
            both = table[[small, large]].dropna() if {small, large} <= set(table.columns) else table.iloc[:0]
            if len(both) >= 2:
                kt = stats.kendall_tau(both[small].to_numpy(float), both[large].to_numpy(float),
                                       n_permutations=ctx.n_permutations, seed=ctx.seed, alternative="greater")
                pairs.append((small, large, len(both), kt.tau, kt.p_value, kt.min_p))
                mdes[(small, large)] = kendall_mde(both[small].to_numpy(float), alpha=ALPHA, seed=ctx.seed)[0]
            else:
                pairs.append((small, large, len(both), math.nan, math.nan, math.nan))
    shown = "; ".join(f"{a} vs {b}: tau {t:+.2f} (p {p:.2g}, {n} settings, "
                      f"{tau_mde_text(mdes[(a, b)])})" if not math.isnan(t)
                      else f"{a} vs {b}: undefined ({n} settings)" for a, b, n, t, p, _ in pairs) or "one size only"
    judged = [(n, t, p, m) for _, _, n, t, p, m in pairs if n >= MIN_SETTINGS and not math.isnan(t)]
    mde = max((mdes[(a, b)] for a, b, n, t, _, _ in pairs if n >= MIN_SETTINGS and not math.isnan(t)),
              default=math.nan)
    failed = [(t, m, mdes[(a, b)]) for a, b, n, t, p, m in pairs
              if n >= MIN_SETTINGS and not math.isnan(t) and not (t > 0 and p < ALPHA)]
    if not judged:
        verdict, why = "inconclusive", f"no pair of sizes shares {MIN_SETTINGS} settings with a defined tau"
    elif not failed:
        verdict, why = "reproduced", f"tau > 0 with p < {ALPHA} for every pair of sizes"
    elif all(t > 0 and m >= ALPHA for t, m, _ in failed):
        verdict, why = "inconclusive", (f"tau > 0 for every pair of sizes, but for some pair no order of its "
                                        f"settings could give p < {ALPHA}")
    elif not all(math.isfinite(d) and d <= TAU_MARGIN for _, _, d in failed):
        verdict, why = "inconclusive", (f"some pair of sizes has tau <= 0 or p >= {ALPHA}, but its design detects a "
                                        f"tau of {TAU_MARGIN:g} with power < 80% (not evidence either way)")
    else:
        verdict, why = "not reproduced", f"some pair of sizes has tau <= 0 or p >= {ALPHA}"
    ps = [p for _, _, p, _ in judged]
    return Claim(f"across_sizes_{quantity}", f"small models predict large ones: rank correlation of {label}",
                 "positive rank correlation between sizes", shown, verdict, why,
                 "events/events.parquet; per-setting values in reproduction.md's runs table",
                 SOURCES[f"across_sizes_{quantity}"],
                 float(np.mean([t for _, t, _, _ in judged])) if judged else math.nan, math.nan, math.nan, 0.0,
                 max(ps) if ps else math.nan,
                 "Kendall tau-b between sizes over matched (task, level), mean over seeds; permutation p (largest); "
                 "mde in tau (the largest over the judged pairs)", mde=mde)


def _probe(ctx: ClaimContext, probe_lead: pd.DataFrame, probes: pd.DataFrame | None = None) -> Claim:
    runs = ctx.runs
    pl = probe_lead if probe_lead is not None else pd.DataFrame()
    counted = runs[runs["counted"]]
    if pl.empty:
        return Claim("probe_lead", "a linear probe reads the answer before the model produces it",
                     "probes lead acquisition", "not measured", "inconclusive", "no probes table in this study",
                     "summary/probe_lead.parquet", SOURCES["probe_lead"])
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
            return Claim("probe_lead", "a linear probe reads the answer before the model produces it",
                         "probes lead acquisition", "not measured (failed gate)", "inconclusive",
                         "no run's probe decodes the target at the end while the model is at "
                         f">= {PROBE_GATE_ACCURACY:.0%}" + gate, "summary/probe_lead.parquet", SOURCES["probe_lead"])
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
    verdict, why = holds_verdict(p, len(models), "lead rate against permuted acquisition", _floor_p(res), mde=mde)
    extra = (f"; {len(at_start)} acquired run(s) left out: every layer's probe reads the label at the first "
             f"checkpoint (no rise to see)") if at_start else ""
    extra += f"; {len(not_measured)} acquired run(s) not measured (probe undefined)" if not_measured else ""
    return Claim("probe_lead", "a linear probe reads the answer before the model produces it",
                 "probes lead acquisition",
                 f"{fraction_text(len(leads), len(models))} acquired runs have a layer whose probe leads {ci_text(lo, hi)}"
                 + ("" if math.isnan(null) else f"; permuted {null:.0%}") + (f"; {mde_text(mde, table)}" if table else ""),
                 verdict, why + extra + gate + "; onset: beats max(chance, control) by the margin with p < alpha",
                 "summary/probe_lead.parquet", SOURCES["probe_lead"], rate, lo, hi, null, p,
                 f"permutation of acquisition steps within a schedule; interval: {how}", mde=mde)


def _probe_power(ctx: ClaimContext, pool: list[str]) -> tuple[float, dict]:
    """The probe row's MDE in checkpoints: every run's probe onset planted ``d`` checkpoints (of its accuracy
    grid) before its acquisition, give or take one (an onset is known to its checkpoint), never at the first
    checkpoint (that is *readable at start*); the row's permutation test rerun on ``n_power`` such studies. The
    smallest ``d`` of :data:`ckptgeo.studies.power.LEADS` detected with power >= 80%; inf when none."""
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
                                                                                _POWER_PERMUTATIONS), seed=ctx.seed)
            hits += r is not None and r.p_value < ALPHA
        table[d] = hits / ctx.n_power if ctx.n_power else math.nan
        if table[d] >= POWER:
            return float(d), table
    return math.inf, table


def _failed_gate(ctx: ClaimContext, probes: pd.DataFrame | None, models: set) -> tuple[int, list[str]] | None:
    """(runs passing, runs failing) the probe's sanity gate; None without the probes table or accuracy."""
    if probes is None or probes.empty or not ctx.accuracy:
        return None
    from ckptgeo.analysis.summary import AnalysisConfig

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


def precursor_rates(ctx: ClaimContext) -> pd.DataFrame:
    """RankMe's precursor rate (the summary layer's event status, as ``ckptgeo analyze`` counts it) by the
    analysis's difficulty (``summary/precursor_rates.parquet``'s groups) and by the study's hard / easy classes,
    each with the within-schedule permutation null and p-value of
    :func:`ckptgeo.studies.chance.permutation_null` (the one null ``analyze`` uses, with the analysis's
    permutations and seed), so the two outputs agree number for number.

    Returns
    -------
    DataFrame
        One row per group: ``group``, ``n_counted``, ``n_precursor``, ``precursor_rate``, ``low``, ``high`` (the
        claim table's rate interval), ``null_rate``, ``p_value`` (NaN below two runs).
    """
    from ckptgeo.analysis.curves import run_rows
    from ckptgeo.analysis.summary import AnalysisConfig
    from ckptgeo.studies.chance import permutation_null
    from ckptgeo.studies.inference import rate_interval

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
    return Claim("precursor_rate", "RankMe's precursor rate, as `ckptgeo analyze` reports it (descriptive)",
                 "100% on hard tasks (v4 abstract)", shown, "descriptive",
                 "not a verdict: the rate dichotomises the lead (an onset at a tenth of a change before the 50% "
                 "crossing, which anything that moves early satisfies); the verdicts are the lead rows. The same "
                 "numbers as `ckptgeo analyze` writes in summary/precursor_rates.parquet (metric rankme, by "
                 "difficulty; a table an older version wrote may differ: rerun analyze)",
                 "summary/precursor_rates.parquet; events/events.parquet", SOURCES["precursor_hard"],
                 test="acquisition steps permuted within schedules (the null analyze uses); interval: over settings, "
                      "at least the exact interval of the count", kind="descriptive")


def _pythia() -> Claim:
    return Claim("pythia_deduction", "Pythia-2.8B: logical deduction has a precursor gap, easy benchmarks none",
                 "gap of about 49K steps", "not measured by this study", "inconclusive",
                 "needs the Pythia checkpoints: ckptgeo scan EleutherAI/pythia-2.8b --suite logical_deduction",
                 "-", SOURCES["pythia_deduction"])



# ------------------------------------------------------------------------------------ the registered rows
#: what every row reads: the runs come from the events; the nulls re-run the rules on the curves
_RUNS = ("events", "curves", "accuracy")


@register_claim(id="order", reads=_RUNS)
def order(ctx: ClaimContext) -> Claim:
    return dataclasses.replace(_order(ctx), kind="holds")


@register_claim(id="top_down", reads=_RUNS, nulls=("iid", "random_walk"))
def top_down(ctx: ClaimContext) -> Claim:
    return dataclasses.replace(_top_down(ctx, ctx.tables["events"]), kind="holds")


@register_claim(id="floor_modular", reads=("events",), nulls=())
def floor_modular(ctx: ClaimContext) -> Claim:
    return _floor_modular(ctx)


@register_claim(id="floor_multiplication", reads=("events",), nulls=())
def floor_multiplication(ctx: ClaimContext) -> Claim:
    return dataclasses.replace(_floor_multiplication(ctx), kind="holds")


@register_claim(id="across_sizes_collapse_floor", reads=("events",), nulls=())
def across_sizes_collapse_floor(ctx: ClaimContext) -> Claim:
    return dataclasses.replace(_across(ctx, "collapse_floor"), kind="holds")


@register_claim(id="across_sizes_acquisition_step", reads=("events",), nulls=("permuted",))
def across_sizes_acquisition_step(ctx: ClaimContext) -> Claim:
    return dataclasses.replace(_across(ctx, "acquisition_step"), kind="holds")


@register_claim(id="probe_lead", reads=_RUNS + ("probe_lead", "probes"), nulls=())
def probe_lead(ctx: ClaimContext) -> Claim:
    return dataclasses.replace(_probe(ctx, ctx.tables["probe_lead"], ctx.tables["probes"]), kind="holds")


@register_claim(id="precursor_rate", reads=_RUNS, nulls=())   # descriptive: never "reproduced"
def precursor_rate(ctx: ClaimContext) -> Claim:
    return _precursor_rate(ctx)


@register_claim(id="pythia_deduction", nulls=())
def pythia_deduction(ctx: ClaimContext) -> Claim:
    return _pythia()
