"""Claim rows: layers collapse from the top down (the ``top_down`` row): Kendall tau of block depth against collapse onset per run."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd

import ckptgeo.stats as stats
from ckptgeo.claimtable.power import mean_kendall_mde, tau_mde_text
from ckptgeo.claimtable.registry import Claim, ClaimContext, register_claim
from ckptgeo.claimtable.verdicts import TAU_MARGIN, holds_verdict, numeric
from ckptgeo.events import curves as cv


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
        return Claim("top_down", ctx.claim, "28/32 (v3); 32/32 (v1-v2)",
                     f"not tested: no run of 4 or more layers has 3 block onsets ({few} run(s) of 4+ layers have "
                     f"fewer than 3; {small} run(s) have fewer than 4 layers)",
                     "inconclusive", "top-down needs models of >= 4 layers", "summary/top_down.parquet",
                     ctx.source, test=_TOP_DOWN_TEST)
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
    mde, _ = mean_kendall_mde(depths, alpha=ctx.alpha, seed=ctx.seed)
    mde = -mde   # the row tests tau < 0
    verdict, why = holds_verdict(p, n, f"mean Kendall tau < 0; largest p against {_NULL_NAMES[worst]}", alpha=ctx.alpha, mde=mde,
                                 margin=TAU_MARGIN, unit="in mean Kendall tau")
    shown = "; ".join(f"{_NULL_NAMES[kind]}: mean tau {m:+.2f}, p {q:.3g}{extra}"
                      for kind, (q, m, extra) in by_null.items())
    return Claim("top_down", ctx.claim,
                 "28/32 task x model pairs (v3); 32/32 (v1-v2)",
                 f"mean tau {res.statistic:+.2f} over {n} runs of >= 4 layers ({k} with tau < 0; {ties} tied onset "
                 f"pair(s)); post-final-norm layer at or before the last block in {post_first}/{n}; "
                 f"{tau_mde_text(mde)}; nulls: {shown}",
                 verdict, why + ("" if noise else "; no noise null without the curves table")
                 + (f"; {small} run(s) of < 4 layers not tested" if small else "")
                 + (f"; {few} run(s) of >= 4 layers not tested: fewer than 3 blocks collapse" if few else "")
                 + "; collapse onset = first step at the collapse fraction of the layer's first RankMe",
                 "events/events.parquet (collapse_onset_step per layer); curves (RankMe per layer)",
                 ctx.source, float(res.statistic), math.nan, math.nan, by_null[worst][1], p, _TOP_DOWN_TEST,
                 mde=mde)


_TOP_DOWN_TEST = ("Kendall tau-b per run, mean tau over runs (one-sided, tau < 0); p the largest of three nulls: "
                  "onsets permuted among a run's blocks; each block's RankMe replaced by iid noise, or by a random "
                  "walk, at its own level and spread, onsets found again (null: the mean tau under the largest p's "
                  "null); mde in mean tau against the permutation null")
_NULL_NAMES = {"permuted": "onsets permuted within runs", "iid": "iid noise at each block's level and spread",
               "random_walk": "random walks at each block's level and spread"}


def _top_down_noise(ctx: ClaimContext, tested: list, n_replicates: int) -> dict[str, tuple[np.ndarray, float]]:
    """The top-down row's noise nulls: its mean tau over the same runs when every block's RankMe is noise at the
    block's own level and spread (:func:`ckptgeo.stats.noise.noise_curves_like`, kinds ``iid`` and
    ``random_walk``), collapse onsets found again by the events table's rule
    (:meth:`~ckptgeo.analysis.pipeline.AnalysisConfig.collapse_onset`).

    Each run gets ``n_replicates`` noise copies of its blocks; its null taus are those of the copies in which, as in
    the data, at least 3 blocks collapse with a defined tau (a run no copy makes so keeps its own onsets permuted
    among its blocks). A null mean tau draws one of them per run, so it is over the same runs as the statistic.

    ``tested``: per run in the statistic, (its block rows of the events table, depths (k,), onsets (k,)); the rows'
    ``model`` and ``layer`` (and ``suite``, ``config_hash`` where present) pick each block's curve in
    ``ctx.tables["curves"]``. Returns kind -> (null mean taus of shape (n_replicates,), share of the runs' copies
    with 3 collapsing blocks); {} without the curves table."""
    from ckptgeo.stats import noise as nulls
    from ckptgeo.analysis.config import AnalysisConfig

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


@register_claim(id="top_down", order=70,
                claim="collapse reaches output-side layers first (Kendall tau(depth, collapse onset) < 0)",
                source="v1-v2: 32/32 task x model pairs; v3: 28/32",
                anchor="claim-top-down", reads=("events", "curves", "accuracy"), nulls=("iid", "random_walk"))
def top_down(ctx: ClaimContext) -> Claim:
    return dataclasses.replace(_top_down(ctx, ctx.tables["events"]), kind="holds")
