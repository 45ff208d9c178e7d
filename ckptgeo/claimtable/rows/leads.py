"""The claim rows built on like-for-like leads (:mod:`ckptgeo.claimtable.leads`), with power before verdicts.

* ``contrast`` (the **primary** row, judged at alpha without adjustment): geometry leads behaviour more on hard
  settings than on easy ones -- :func:`ckptgeo.claimtable.units.adjusted_contrast`: the setting-mean lead on
  difficulty and on the checkpoint of acquisition (:func:`with_acquisition`) within schedules, settings as units;
  *reproduced* only with p < alpha and the interval above 0.
* ``precursor_hard``, ``loss`` ("holds" rows): the hard runs' RankMe onset leads accuracy's onset (the loss's
  onset); reproduced when the onset **tracks** behaviour (Kendall tau of the onset against behaviour's onset
  over pairs of runs on one schedule, behaviour permuted within schedules, the onset found again against each
  permuted acquisition) and the mean lead's interval lies above zero.
* ``precursor_easy``, ``llc``, ``hessian`` ("absent" rows): reproduced only by equivalence -- the mean lead's
  95% upper bound below :data:`MARGIN` checkpoints, over runs whose rule found an onset, with a minimum
  detectable effect at or below the margin; not reproduced when the holds test finds a precursor; else
  inconclusive (a blind or powerless test).
* ``tracking``: the Kendall tau over pairs of runs of two settings (whole settings' behaviour exchanged within
  schedules), and over pairs of seeds of one setting (behaviour permuted among them: timing beyond the setting's
  level, with its power).

Every p here counts settings, not runs (:mod:`ckptgeo.stats.units`): the seeds of a setting share its geometry and
timing, so a test that permuted runs rejected far above alpha where effects live at the setting level (issue 44).
A design whose settings allow no p below alpha says so.

Every "not reproduced" of a holds row (and of the contrast) needs power >= 80% at the margin
(:mod:`ckptgeo.claimtable.power`) **and** an upper bound below the margin: the planted curves carry measurement
noise but not the spread of leads between settings, so power alone would overstate what a few settings exclude.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import pandas as pd

import ckptgeo.stats as stats
from ckptgeo.events.curves import grid_run, summary_rows
from ckptgeo.claimtable.registry import Claim, ClaimContext, register_claim
from ckptgeo.claimtable.verdicts import MARGIN, MIN_CASES
from ckptgeo.claimtable.inference import Interval, cluster_interval
from ckptgeo.claimtable.leads import Behaviour, LeadMatrix, lead_matrix
from ckptgeo.claimtable.power import POWER_PERMUTATIONS, mde_text, minimum_detectable
from ckptgeo.claimtable.units import adjusted_contrast, setting_of
from ckptgeo.stats.units import unit_permutation_test

__all__ = ["behaviour", "lead_frame", "leads_table", "tracking_test", "whole_model_curves"]


def behaviour(ctx: ClaimContext, loss: bool = False) -> dict:
    """Model -> :class:`Behaviour` of every grid run with an accuracy curve (``loss``: its loss curve)."""
    out = {}
    acq = {r.model: (int(r.acquisition_step) if r.counted and pd.notna(r.acquisition_step) else None)
           for r in ctx.runs.itertuples(index=False)}
    if loss:
        for m, (s, v) in loss_curves(ctx).items():
            if m in acq:
                out[m] = Behaviour(s, v, math.nan, acq[m], rising=False)
        return out
    for m, (s, a, chance) in ctx.accuracy.items():
        if m in acq:
            out[m] = Behaviour(np.asarray(s, float), np.asarray(a, float), float(chance), acq[m])
    return out


def loss_curves(ctx: ClaimContext) -> dict:
    """Model -> (steps, loss) from the behaviour rows' ``loss`` column, or curves of metric ``loss``."""
    out = {}
    acc = ctx.tables.get("accuracy") if hasattr(ctx.tables, "get") else None
    if isinstance(acc, pd.DataFrame) and "loss" in acc.columns:
        for m, g in acc.groupby("model"):
            g = g.sort_values("step").drop_duplicates("step")
            out[m] = (g["step"].to_numpy(float), pd.to_numeric(g["loss"], errors="coerce").to_numpy(float))
        return out
    cur = ctx.tables.get("curves") if hasattr(ctx.tables, "get") else None
    if isinstance(cur, pd.DataFrame) and len(cur):
        sub = cur[cur["metric"] == "loss"]
        for m, g in sub.groupby("model"):
            g = summary_rows(g).sort_values("step").drop_duplicates("step")
            out[m] = (g["step"].to_numpy(float), g["value"].to_numpy(float))
    return out


def whole_model_curves(ctx: ClaimContext, metric: str) -> dict:
    """Model -> Curve of a whole-model measure (layer -1); runs on one whole-model grid share a stratum."""
    from ckptgeo.claimtable.chance import Curve

    curves = ctx.tables.get("curves")
    if curves is None or not len(curves):
        return {}
    sub = curves[(curves["metric"] == metric) & (curves["layer"] == -1)]
    out = {}
    for m, g in sub.groupby("model"):
        base = ctx.curves.get(m)
        if base is None:
            continue
        g = g.sort_values("step").drop_duplicates("step")
        s = g["step"].to_numpy(float)
        out[m] = Curve(s, g["value"].to_numpy(float), base.acquisition_step,
                       base.stratum + "|" + ",".join(str(int(x)) for x in s), "change")
    return out


def lead_frame(lm: LeadMatrix, runs: pd.DataFrame) -> pd.DataFrame:
    """One row per run of the pool: its lead (checkpoints, steps), both onsets and their resolutions, and
    the run's task, level, size, seed, difficulty, setting and schedule."""
    meta = runs.set_index("model")
    rows = []
    for i, m in enumerate(lm.models):
        r = meta.loc[m] if m in meta.index else None
        run = grid_run(m) or {}
        rows.append({"model": m, "task": run.get("task", m), "level": run.get("level"), "size": run.get("size"),
                     "seed": run.get("seed"), "hard": bool(r["hard"]) if r is not None else False,
                     "setting": f"{run.get('task', m)}-L{run.get('level')}-{run.get('size')}",
                     "stratum": lm.strata[i], "lead": lm.checkpoints[i, i], "lead_steps": lm.steps[i, i],
                     "geo_onset_step": lm.geo_step[i], "acc_onset_step": lm.acc_step[i],
                     "geo_resolution_steps": lm.geo_resolution[i], "acc_resolution_steps": lm.acc_resolution[i],
                     "onset_found": bool(lm.found[i])})
    return pd.DataFrame(rows)


def leads_table(ctx: ClaimContext) -> pd.DataFrame:
    """Every acquired run's RankMe lead over accuracy's onset (:func:`lead_frame`), ``summary/leads.parquet``."""
    lm = lead_matrix(ctx.curves, behaviour(ctx), config=ctx.config, own_only=True) if ctx.curves else None
    if lm is None:
        return pd.DataFrame(columns=["model", "task", "level", "size", "seed", "hard", "setting", "stratum", "lead",
                                     "lead_steps", "geo_onset_step", "acc_onset_step", "geo_resolution_steps",
                                     "acc_resolution_steps", "onset_found"])
    return lead_frame(lm, ctx.runs)


def with_acquisition(frame: pd.DataFrame, beh: dict) -> pd.DataFrame:
    """``frame`` (:func:`lead_frame`) with ``schedule`` (its checkpoint schedule) and ``acquisition`` (the index on
    the run's curve grid of the first checkpoint at or after its acquisition): what the primary contrast adjusts
    for. A geometry that knows nothing of behaviour leads a later acquisition by more, and hard settings acquire
    later."""
    acq = []
    for m, stratum in zip(frame["model"], frame["stratum"]):
        grid = np.asarray([float(x) for x in str(stratum).split(",")]) if "," in str(stratum) else None
        a = beh[m].acquisition_step
        acq.append(float(np.searchsorted(grid, a)) if grid is not None else float(a))
    return frame.assign(schedule=frame["stratum"], acquisition=acq)


def _pairs(keys: list, among: np.ndarray, pairs: str, units: list) -> np.ndarray:
    out = []
    for a in range(len(among)):
        for b in range(a + 1, len(among)):
            i, j = among[a], among[b]
            if keys[i] != keys[j]:
                continue
            if pairs == "all" or (units[i] == units[j]) == (pairs == "within"):
                out.append((i, j))
    return np.asarray(out, dtype=int).reshape(-1, 2)


def tracking_test(lm: LeadMatrix, judged, *, n_permutations: int, seed: int, pairs: str = "all",
                  units: Sequence | None = None):
    """Kendall tau-a of the geometric onset against behaviour's onset over pairs of judged runs on one schedule,
    the onset found again against each permuted behaviour; one-sided permutation p. None without a pair.

    Parameters
    ----------
    lm : LeadMatrix
    judged : iterable of str
        The runs whose pairs count.
    n_permutations, seed : int
    pairs : {"all", "between", "within"}, default="all"
        Pairs of any two runs, of runs of two settings, or of runs of one setting (its seeds).
    units : sequence of shape (len(lm.models),), optional
        Each run's setting (:func:`ckptgeo.claimtable.units.setting_of` of its name when None). ``"all"`` and
        ``"between"``: whole settings' behaviour exchanged within schedules (seeds move with their setting, so a
        setting counts once: :func:`ckptgeo.stats.units.unit_permutation_test`); ``"within"``: behaviour
        permuted among the seeds of each setting (the run-level timing, beyond the setting's level).
    """
    units = [setting_of(m) for m in lm.models] if units is None else [str(u) for u in units]
    judged = set(judged)
    idx = np.asarray([i for i, m in enumerate(lm.models) if m in judged], dtype=int)
    pair = _pairs(lm.strata, idx, pairs, units)
    if not len(pair):
        return None
    acc = lm.acc_step
    st = lm.steps
    i, j = pair[:, 0], pair[:, 1]

    def tau(order: np.ndarray) -> float:
        o = np.asarray(order)
        geo_i, geo_j = acc[o[i]] - st[i, o[i]], acc[o[j]] - st[j, o[j]]
        return float(np.mean(np.sign(geo_i - geo_j) * np.sign(acc[o[i]] - acc[o[j]])))

    if pairs == "within":
        return stats.permutation_test(tau, len(lm.models), strata=[f"{s}|{u}" for s, u in zip(lm.strata, units)],
                                      n_permutations=n_permutations, seed=seed)
    return unit_permutation_test(tau, units, list(lm.strata), n_permutations=n_permutations, seed=seed)


def _fmt(x: float, f: str = "{:.2g}") -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f.format(x)


def _lead_study(ctx: ClaimContext, curves: dict, beh: dict, judged: list, *, power: bool = True):
    """The lead matrix, the judged runs' leads and interval, the tracking test and the MDE."""
    lm = lead_matrix(curves, beh, config=ctx.config)
    if lm is None:
        return None
    judged = [m for m in judged if m in set(lm.models)]
    frame = lead_frame(lm, ctx.runs)
    mine = frame[frame["model"].isin(judged)]
    with_onset = mine[mine["onset_found"]]
    iv = cluster_interval(with_onset["lead"], with_onset["setting"], floor=1.0)
    res = tracking_test(lm, judged, n_permutations=ctx.n_permutations, seed=ctx.seed)
    null = float(np.nanmean([np.nanmean(lm.checkpoints[lm.models.index(m)]) for m in judged])) if judged else math.nan
    mde, table = math.nan, {}
    if power and judged:
        cfg = ctx.config
        mine_set = set(judged)
        setting = dict(zip(frame["model"], frame["setting"]))

        def detects(planted: dict) -> bool:
            plm = lead_matrix(planted, beh, config=cfg, judged=judged)
            if plm is None:
                return False
            keep = [i for i, m in enumerate(plm.models) if m in mine_set and plm.found[i]]
            lo = cluster_interval(plm.checkpoints[keep, keep], [setting[plm.models[i]] for i in keep],
                                  floor=1.0).low
            if not lo > 0:
                return False
            r = tracking_test(plm, judged, n_permutations=min(ctx.n_permutations, POWER_PERMUTATIONS),
                              seed=ctx.seed)
            return r is not None and r.p_value < ctx.alpha

        from ckptgeo.analysis.config import AnalysisConfig

        mde, table = minimum_detectable(detects, curves, beh, judged, n_power=ctx.n_power,
                                        rules=cfg or AnalysisConfig(), seed=ctx.seed)
    return lm, mine, with_onset, iv, res, null, mde, table


def _floor(res) -> float:
    """The smallest p-value a permutation result's design allows (NaN without one)."""
    if res is None or not res.n_permutations:
        return math.nan
    return 1.0 / res.n_permutations if res.exact else 1.0 / (res.n_permutations + 1)


def _holds_verdict(p: float, iv: Interval, mde: float, n: int, what: str, floor: float = math.nan, *,
                   alpha: float) -> tuple[str, str]:
    if n < MIN_CASES or p != p:
        return "inconclusive", f"{n} run(s) with a lead; at least {MIN_CASES} are needed" if n < MIN_CASES else \
            "no pair of runs on one schedule to test"
    if floor >= alpha:
        return "inconclusive", (f"{what}: tracking p = {p:.3g}; the smallest p these settings allow is {floor:.2g} >= "
                                f"{alpha} (too few settings to decide)")
    if p < alpha and iv.low > 0:
        return "reproduced", f"{what} tracks behaviour (p = {p:.3g}) and leads it (interval above 0)"
    seen = (f"tracks behaviour (p = {p:.3g}) but its lead's interval reaches 0" if p < alpha else
            f"tracking p = {p:.3g} >= {alpha}")
    if not (math.isfinite(mde) and mde <= MARGIN):
        return "inconclusive", (f"{what} {seen}; this design detects a {MARGIN:g}-checkpoint lead with power < 80% "
                                f"(not evidence either way)")
    if not iv.high < MARGIN:
        return "inconclusive", (f"{what} {seen}, but the lead's upper bound {iv.high:+.1f} does not exclude a "
                                f"{MARGIN:g}-checkpoint lead")
    return "not reproduced", (f"{what} {seen}; this design detects a {mde:g}-checkpoint lead with power >= 80% and "
                              f"the lead's upper bound {iv.high:+.1f} < {MARGIN:g}")


def _absent_verdict(p: float, iv: Interval, mde: float, n: int, n_all: int, what: str, *, alpha: float) -> tuple[str, str]:
    if n < MIN_CASES:
        return "inconclusive", (f"the rule found an onset in {n} of {n_all} runs; at least {MIN_CASES} are needed "
                                f"(a detector that finds nothing shows nothing)")
    if p == p and p < alpha and iv.low > 0:
        return "not reproduced", f"{what} tracks behaviour (p = {p:.3g}) and leads it (interval above 0)"
    if iv.coverage < 0.95 - 1e-9 or not math.isfinite(iv.high):
        return "inconclusive", (f"no 95% upper bound on the lead ({iv.flag or iv.method}): absence needs one below "
                                f"the {MARGIN:g}-checkpoint margin")
    if iv.high >= MARGIN:
        return "inconclusive", f"upper bound {iv.high:+.1f} checkpoints does not clear the {MARGIN:g}-checkpoint margin"
    if not (math.isfinite(mde) and mde <= MARGIN):
        return "inconclusive", (f"upper bound {iv.high:+.1f} < {MARGIN:g}, but a {MARGIN:g}-checkpoint lead is "
                                f"detected with power < 80% here (blind or powerless)")
    return "reproduced", (f"upper bound {iv.high:+.1f} checkpoints < margin {MARGIN:g}, and leads of {mde:g} "
                          f"checkpoints are detected with power >= 80%")


def _lead_row(ctx: ClaimContext, row_id: str, paper: str, curves: dict, beh: dict, judged: list,
              kind: str, what: str, evidence: str) -> Claim:
    source = ctx.source
    got = _lead_study(ctx, curves, beh, judged) if judged and curves and beh else None
    if got is None:
        return Claim(row_id, ctx.claim, paper, "not measured", "inconclusive",
                     "no run with both this curve and behaviour's onset", evidence, source, kind=kind, margin=MARGIN)
    lm, mine, with_onset, iv, res, null, mde, table = got
    p = math.nan if res is None else res.p_value
    tau = math.nan if res is None else res.statistic
    steps = with_onset["lead_steps"].median() if len(with_onset) else math.nan
    measured = (f"mean lead {iv.text(' ckpt')} over {len(with_onset)} of {len(mine)} runs with an onset "
                f"({iv.n_settings} settings; median {_fmt(steps, '{:+.0f}')} steps); by chance (behaviour of its "
                f"schedule) {_fmt(null, '{:+.1f}')}; tracking tau {_fmt(tau, '{:+.2f}')}; {mde_text(mde, table)}")
    if kind == "absent":
        verdict, why = _absent_verdict(p, iv, mde, len(with_onset), len(mine), what, alpha=ctx.alpha)
    else:
        verdict, why = _holds_verdict(p, iv, mde, len(with_onset), what, _floor(res), alpha=ctx.alpha)
    return Claim(row_id, ctx.claim, paper, measured, verdict, why + (f"; {iv.flag}" if iv.flag else ""), evidence, source,
                 iv.value, iv.low, iv.high, null, p,
                 "Kendall tau of onset vs behaviour's onset within schedules, behaviour permuted within schedules "
                 f"(one-sided); lead interval: {iv.method}", kind=kind, margin=MARGIN, mde=mde)


def _counted(ctx: ClaimContext, hard: bool | None) -> list:
    r = ctx.runs[ctx.runs["counted"]]
    if hard is not None:
        r = r[r["hard"] == hard]
    return list(r["model"])


@register_claim(id="contrast", order=10,
                claim="geometry leads behaviour more on hard settings than on easy ones (acquisition time accounted "
                      "for)",
                source="v4 abstract: 100% precursors on hard tasks, none on easy ones, tested here as a hard-minus-easy contrast of leads",
                anchor="claim-contrast", reads=("events", "curves", "accuracy"))
def contrast_row(ctx: ClaimContext) -> Claim:
    """The primary row: hard minus easy difference in RankMe's lead over accuracy's onset, settings as units,
    adjusted for when each setting acquires (:func:`ckptgeo.claimtable.units.adjusted_contrast`)."""
    beh = behaviour(ctx)
    claim = ctx.claim
    paper = "hard: precursor (100%); easy: none"
    evidence = "summary/leads.parquet (lead per run); events/events.parquet"
    test = ("setting-mean lead on difficulty + acquisition checkpoint (intercept and slope per schedule); "
            "Freedman-Lane: the reduced model's residuals permuted among the settings of a schedule (one-sided); "
            "interval: t on the setting means")
    acquired = int(pd.to_numeric(ctx.runs["acquisition_step"], errors="coerce").notna().sum())
    lm = lead_matrix(ctx.curves, beh, config=ctx.config, own_only=True) if ctx.curves and beh else None
    if lm is None:
        return Claim("contrast", claim, paper, f"not measured (0 of {acquired} acquired runs with a lead)",
                     "inconclusive", "no acquired run with RankMe and accuracy", evidence, ctx.source,
                     test=test, kind="primary", margin=MARGIN)
    frame = with_acquisition(lead_frame(lm, ctx.runs), beh)
    frame = frame[frame["model"].isin(_counted(ctx, None))]
    c = adjusted_contrast(frame, n_permutations=ctx.n_permutations, seed=ctx.seed, alpha=ctx.alpha)
    used = (f"{c.n_runs} of {acquired} acquired runs, {c.n_settings} settings ({c.n_hard} hard, {c.n_easy} easy) "
            f"in {c.n_schedules} schedule(s)")
    if c.p_value != c.p_value:
        return Claim("contrast", claim, paper, f"no test: {used}", "inconclusive", c.flag, evidence,
                     ctx.source, test=test, kind="primary", margin=MARGIN)
    hard = list(frame.loc[frame["hard"].astype(bool), "model"])
    easy = list(frame.loc[~frame["hard"].astype(bool), "model"])

    def detects(planted: dict) -> bool:
        plm = lead_matrix(planted, beh, config=ctx.config, own_only=True, judged=list(frame["model"]))
        f = frame.assign(lead=[plm.checkpoints[plm.models.index(m), plm.models.index(m)] for m in frame["model"]])
        r = adjusted_contrast(f, n_permutations=min(ctx.n_permutations, POWER_PERMUTATIONS), seed=ctx.seed,
                              alpha=ctx.alpha)
        return r.p_value < ctx.alpha and r.low > 0

    from ckptgeo.analysis.config import AnalysisConfig

    mde, table = (math.inf, {})
    if c.min_p < ctx.alpha:
        mde, table = minimum_detectable(detects, ctx.curves, beh, hard, n_power=ctx.n_power,
                                        rules=ctx.config or AnalysisConfig(), seed=ctx.seed,
                                        others={m: 0 for m in easy})
    slope = "" if c.slope != c.slope else f"; lead per checkpoint of later acquisition {c.slope:+.2f}"
    measured = (f"hard minus easy lead {c.estimate:+.1f} checkpoints [{c.low:+.1f}, {c.high:+.1f}] with acquisition "
                f"accounted for, over {used}{slope}; t {c.statistic:+.2f} (df {c.df}); "
                + (mde_text(mde, table) if table else f"no relabelling of these settings could give p < {ctx.alpha}"))
    if c.min_p >= ctx.alpha:
        verdict, why = "inconclusive", (f"p = {c.p_value:.3g}; the smallest p these {c.n_settings} settings allow is "
                                        f"{c.min_p:.2g} >= {ctx.alpha} (too few settings to decide)")
    elif c.p_value < ctx.alpha and c.low > 0:
        verdict, why = "reproduced", f"p = {c.p_value:.3g} < {ctx.alpha} and the interval lies above 0 (primary row)"
    elif c.p_value < ctx.alpha:
        verdict, why = "inconclusive", (f"p = {c.p_value:.3g} < {ctx.alpha}, but the interval [{c.low:+.1f}, "
                                        f"{c.high:+.1f}] reaches 0")
    elif not (math.isfinite(mde) and mde <= MARGIN):
        verdict, why = "inconclusive", (f"not shown: p = {c.p_value:.3g} >= {ctx.alpha}, and this design detects a "
                                        f"{MARGIN:g}-checkpoint contrast with power < 80% (not evidence either way)")
    elif not c.high < MARGIN:
        verdict, why = "inconclusive", (f"not shown: p = {c.p_value:.3g} >= {ctx.alpha}, but the upper bound "
                                        f"{c.high:+.1f} does not exclude a {MARGIN:g}-checkpoint contrast")
    else:
        verdict, why = "not reproduced", (f"p = {c.p_value:.3g} >= {ctx.alpha}, with power >= 80% at {mde:g} "
                                          f"checkpoints and the upper bound {c.high:+.1f} < {MARGIN:g}")
    return Claim("contrast", claim, paper, measured, verdict, why, evidence, ctx.source, c.estimate, c.low,
                 c.high, 0.0, c.p_value, test, kind="primary", margin=MARGIN, mde=mde)


@register_claim(id="precursor_hard", order=30,
                claim="RankMe's onset leads accuracy's onset on hard settings",
                source="v4 abstract: 100% precursor rate for hard algorithmic tasks",
                anchor="claim-precursor-hard", reads=("events", "curves", "accuracy"))
def precursor_hard(ctx: ClaimContext) -> Claim:
    return _lead_row(ctx, "precursor_hard", "100% of hard algorithmic settings", ctx.curves, behaviour(ctx), _counted(ctx, True), "holds",
                     "RankMe", "summary/leads.parquet; events/events.parquet")


@register_claim(id="precursor_easy", order=40,
                claim="on easy settings RankMe does not lead accuracy (no precursor)",
                source="v4 abstract: on easy tasks collapse and acquisition coincide",
                anchor="claim-precursor-easy", reads=("events", "curves", "accuracy"))
def precursor_easy(ctx: ClaimContext) -> Claim:
    return _lead_row(ctx, "precursor_easy", "none detectable", ctx.curves, behaviour(ctx), _counted(ctx, False), "absent", "RankMe",
                     "summary/leads.parquet; events/events.parquet")


@register_claim(id="loss", order=60,
                claim="RankMe's onset leads the loss's onset (a precursor more useful than the loss)",
                source="not a claim of the paper: the bar a geometric precursor must clear to be of use, leading the loss",
                anchor="claim-loss", reads=("events", "curves", "accuracy"))
def loss(ctx: ClaimContext) -> Claim:
    """A geometric precursor is useful only where it leads the loss too."""
    return _lead_row(ctx, "loss", "not claimed by the paper: the bar a geometric precursor must clear", ctx.curves,
                     behaviour(ctx, loss=True), _counted(ctx, None), "holds", "RankMe against the loss",
                     "behavior (loss); summary/leads.parquet")


@register_claim(id="tracking", order=50,
                claim="RankMe's onset tracks accuracy's onset (Kendall tau within schedules, settings as units)",
                source="v4 abstract: geometry changes before the capability emerges",
                anchor="claim-tracking", reads=("events", "curves", "accuracy"))
def tracking(ctx: ClaimContext) -> Claim:
    beh = behaviour(ctx)
    judged = _counted(ctx, None)
    lm = lead_matrix(ctx.curves, beh, config=ctx.config) if ctx.curves and beh else None
    claim = ctx.claim
    test = ("Kendall tau-a over pairs of runs of two settings on one schedule, whole settings' behaviour exchanged "
            "within schedules (one-sided); over seeds of one setting, behaviour permuted among them (shown, "
            "with its power)")
    if lm is None:
        return Claim("tracking", ctx.claim, "onsets follow acquisition", "not measured", "inconclusive",
                     "no acquired run with RankMe and accuracy", "summary/leads.parquet", ctx.source,
                     kind="holds")
    b = tracking_test(lm, judged, n_permutations=ctx.n_permutations, seed=ctx.seed, pairs="between")
    w = tracking_test(lm, judged, n_permutations=ctx.n_permutations, seed=ctx.seed, pairs="within")
    n_settings = len({setting_of(m) for m in judged if m in set(lm.models)})
    part = [f"{name}: tau {r.statistic:+.2f} (p {r.p_value:.3g}, null {r.null_mean:+.2f})" if r is not None
            else f"{name}: no pair" for name, r in (("between settings", b), ("seeds of one setting", w))]
    p, floor = (math.nan, math.nan) if b is None else (b.p_value, _floor(b))
    if b is None or len(judged) < MIN_CASES:
        verdict, why = "inconclusive", "no pair of runs of two settings on one schedule"
    elif floor >= ctx.alpha:
        verdict, why = "inconclusive", (f"between settings p = {p:.3g}; the smallest p these {n_settings} settings "
                                        f"allow is {floor:.2g} >= {ctx.alpha} (too few settings to decide)")
    elif p < ctx.alpha:
        verdict, why = "reproduced", f"between settings p = {p:.3g} < {ctx.alpha}"
    else:
        verdict, why = "inconclusive", (f"not shown: between settings p = {p:.3g} >= {ctx.alpha} (tracking has no "
                                        "power analysis here)")
    if w is not None:
        why += "; " + _within_words(ctx, lm, beh, judged, w)
    return Claim("tracking", claim, "onsets follow acquisition", "; ".join(part) + f" ({n_settings} settings)",
                 verdict, why, "summary/leads.parquet", ctx.source,
                 math.nan if b is None else b.statistic, null=math.nan if b is None else b.null_mean, p_value=p,
                 test=test, kind="holds")


def _within_words(ctx: ClaimContext, lm: LeadMatrix, beh: dict, judged: list, w) -> str:
    """What the seeds of one setting show: run-level timing beyond the setting's level, or, on a failure to reject,
    "not shown beyond the setting's level" with the power of that test at planted run-level timing (each run's
    onset planted ``d`` checkpoints before its own accuracy onset, :mod:`ckptgeo.claimtable.power`)."""
    if w.p_value < ctx.alpha:
        return f"the seeds of a setting track their own acquisitions too (p = {w.p_value:.3g}): run-level timing"
    if _floor(w) >= ctx.alpha:
        return (f"not shown beyond the setting's level: the seeds' test cannot reject (smallest p "
                f"{_floor(w):.2g} >= {ctx.alpha})")
    from ckptgeo.analysis.config import AnalysisConfig

    def detects(planted: dict) -> bool:
        plm = lead_matrix(planted, beh, config=ctx.config)
        r = None if plm is None else tracking_test(plm, judged, n_permutations=min(ctx.n_permutations,
                                                                                   POWER_PERMUTATIONS),
                                                   seed=ctx.seed, pairs="within")
        return r is not None and r.p_value < ctx.alpha

    pool = [m for m in judged if m in set(lm.models)]
    mde, table = minimum_detectable(detects, ctx.curves, beh, pool, n_power=ctx.n_power,
                                    rules=ctx.config or AnalysisConfig(), seed=ctx.seed)
    return (f"not shown beyond the setting's level: seeds of one setting p = {w.p_value:.3g} >= {ctx.alpha}; power of "
            f"that test at planted run-level timing: {mde_text(mde, table)}")


def _whole(ctx: ClaimContext, metric: str, paper: str) -> Claim:
    import dataclasses

    curves = whole_model_curves(ctx, metric)
    judged = [m for m in _counted(ctx, None) if m in curves]
    row = _lead_row(ctx, metric, paper, curves, behaviour(ctx),
                    judged, "absent", metric, f"curves (metric {metric}, layer -1, a grid shared within each "
                                               "schedule); summary/leads.parquet")
    left = left_out_text([curves[m] for m in judged])
    if left:
        row = dataclasses.replace(row, measured=row.measured + f"; {left}")
    return row


def left_out_text(curves: list) -> str:
    """Which checkpoints of whole-model curves the analysis left out (a budget cut the estimate short, a negative
    LLC, an LLC not estimated away from a minimum: ``llc.max_gradient_bias``, or not measured) and where each
    curve's first kept value lies: an onset before it cannot be seen. ``""`` where nothing was left out.

    Examples
    --------
    >>> from types import SimpleNamespace as C
    >>> text = left_out_text([C(steps=np.array([0, 16, 60]), values=np.array([np.nan, np.nan, 5.0])),
    ...                       C(steps=np.array([0, 16, 60]), values=np.array([np.nan, 2.0, 5.0]))])
    >>> text.split(": ")[1]
    'step 0 in 2 runs, 16 in 1 run; the first kept value at step 16 in 1 run, 60 in 1 run'
    """
    from collections import Counter

    gone, first, missing, total = Counter(), Counter(), 0, 0
    for c in curves:
        v, s = np.asarray(c.values, dtype=float), np.asarray(c.steps)
        bad = ~np.isfinite(v)
        missing, total = missing + int(bad.sum()), total + len(v)
        gone.update(int(x) for x in s[bad])
        kept = s[~bad]
        first[int(kept[0]) if len(kept) else -1] += 1
    if not missing:
        return ""

    def counts(c: Counter, what: str) -> str:
        items = sorted(c.items())
        return ", ".join(f"{what + ' ' if i == 0 else ''}{'none' if k < 0 else k} in {n} run{'s' if n > 1 else ''}"
                         for i, (k, n) in enumerate(items))

    return (f"{missing} of {total} values left out (not converged, negative, not near a minimum, or not measured): "
            f"{counts(gone, 'step')}; the first kept value at {counts(first, 'step')}: an onset before a run's first "
            "kept value cannot be seen")


@register_claim(id="llc", order=80,
                claim="the local learning coefficient (LLC) is not a precursor of accuracy's onset",
                source="v4 abstract: LLC synchronous, 0/24 precursors",
                anchor="claim-llc", reads=("events", "curves", "accuracy"))
def llc(ctx: ClaimContext) -> Claim:
    return _whole(ctx, "llc", "synchronous: 0/24 precursors")


@register_claim(id="hessian", order=90,
                claim="the Hessian's top eigenvalue is not a precursor of accuracy's onset",
                source="v4 abstract: Hessian lags",
                anchor="claim-hessian", reads=("events", "curves", "accuracy"))
def hessian(ctx: ClaimContext) -> Claim:
    return _whole(ctx, "hessian", "lags acquisition, or is noisy")
