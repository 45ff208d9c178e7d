"""The summary tables built on the events: precursor rates with their nulls, the difficulty slope, top-down
order, probe lead, comparisons across model sizes, and spread across seeds.

Each function takes the events table (and what else it names) and returns one table; the steps of
:mod:`ckptgeo.analysis.builtin_steps` call them. Rates are taken at the summary layer of each curve family
(:func:`ckptgeo.events.curves.summary_rows`); the nulls re-run the detector itself with acquisition moved
(:func:`null_curves`) and permute acquisition within checkpoint schedules, the one null the claim table uses
too (:mod:`ckptgeo.events.acquisition_null`).
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ckptgeo.events import acquisition_null as an
from ckptgeo.events import detect as ev
import ckptgeo.stats as st
from ckptgeo.analysis.config import AnalysisConfig
from ckptgeo.analysis.curve_events import match_behavior, opt_int
from ckptgeo.events import curves as cv
from ckptgeo.events.curves import CURVE_KEYS, preferred_variant, split_seed, summary_rows
from ckptgeo.events.curves import model_size, with_defaults

__all__ = ["null_curves", "rates", "difficulty_slope", "top_down", "probe_lead", "across_sizes",
           "seed_spread", "seed_events"]

@dataclass(frozen=True)
class _NullCurve:
    """One summary-layer curve's verdicts for an acquisition at each checkpoint of its own grid."""

    grid: np.ndarray         # (n,) measured steps
    precursor: np.ndarray    # (n,) 1.0 / 0.0, NaN where not counted (acquisition at the first checkpoint)
    gap_checkpoints: np.ndarray  # (n,) NaN where there is no gap
    schedule: str = ""       # the run's checkpoint schedule (acquisition_null.schedule of its behaviour's steps)

    def at(self, step: float, field_: str = "precursor") -> float:
        """The outcome with acquisition at ``step`` (moved to the first checkpoint at or after it; NaN after
        the last), as :func:`ckptgeo.events.acquisition_null.gap_at` gives it."""
        pos = int(np.searchsorted(self.grid, float(step), side="left"))
        return float(getattr(self, field_)[pos]) if pos < self.grid.size else math.nan


def null_curves(rows: pd.DataFrame, curves: pd.DataFrame, cfg: AnalysisConfig,
                acc_groups: dict | None = None) -> dict[tuple, _NullCurve]:
    """Per counted summary row, the rule's outcome with acquisition moved to each checkpoint of the curve, and
    the run's schedule: the steps of the behaviour curve it is judged against (``acc_groups``:
    :attr:`BehaviorEvents.groups`), else its own."""
    counted = rows[cv.counted(rows)]
    if counted.empty:
        return {}
    keys = CURVE_KEYS + ["metric", "layer"]
    wanted = set(map(tuple, counted[keys].itertuples(index=False, name=None)))
    out = {}
    for key, g in curves.groupby(keys, sort=False):
        if key not in wanted:
            continue
        s, v = g["step"].to_numpy(), g["value"].to_numpy(dtype=np.float64)
        keep = np.isfinite(v)
        s, v = np.sort(s[keep]), v[keep][np.argsort(s[keep], kind="stable")]
        kind = "recovery" if key[3] in cfg.collapse_metrics else "change"
        prec = np.full(s.size, np.nan)
        gck = np.full(s.size, np.nan)
        for m in range(1, s.size):
            gap = an.gap_at(s, v, s[m], kind=kind, config=cfg)
            prec[m] = float(gap.precursor)
            gck[m] = math.nan if gap.gap_checkpoints is None else float(gap.gap_checkpoints)
        match = match_behavior(acc_groups or {}, *key[:3])
        out[key] = _NullCurve(s, prec, gck, an.schedule(match.steps if match is not None else g["step"]))
    return out


def _outcomes(nulls: list[_NullCurve], acq_steps: np.ndarray, field_: str) -> np.ndarray:
    """M[i, j]: curve i's outcome with run j's acquisition step (NaN: censored or at its first checkpoint)."""
    m = np.full((len(nulls), acq_steps.size), np.nan)
    for i, nc in enumerate(nulls):
        pos = np.searchsorted(nc.grid, acq_steps, side="left")
        ok = pos < nc.grid.size
        m[i, ok] = getattr(nc, field_)[pos[ok]]
    return m


def _rate_null(pool: pd.DataFrame, judged: pd.Index, nulls: dict, cfg: AnalysisConfig) -> st.PermutationResult | None:
    """The judged rows' precursor rate against acquisition permuted within schedules
    (:func:`ckptgeo.events.acquisition_null.rate_null`): ``pool`` the counted rows of the curve family, each a
    donor of its acquisition step."""
    keys = CURVE_KEYS + ["metric", "layer"]
    have = [(ix, nulls.get(k), a) for ix, k, a in zip(pool.index, pool[keys].itertuples(index=False, name=None),
                                                     pool["acquisition_step"])]
    have = [(ix, nc, int(a)) for ix, nc, a in have if nc is not None and pd.notna(a)]
    judged = set(judged)
    return an.rate_null(lambda i, step: have[i][1].at(step), [a for _, _, a in have],
                        [nc.schedule for _, nc, _ in have], [i for i, (ix, _, _) in enumerate(have) if ix in judged],
                        keys=[tuple(str(x) for x in pool.loc[ix, keys]) for ix, _, _ in have], min_judged=an.MIN_JUDGED,
                        n_permutations=cfg.n_permutations, seed=cfg.seed)


#: the precursor rule's rate on each noise model, pooled over the curves (ckptgeo.stats.noise): measurement
#: jitter, iid noise at each curve's own variance, random walks of that spread
NOISE_RATE_COLUMNS = tuple(f"{k}_rate{x}" for k in ("jitter", "iid", "walk") for x in ("", "_low", "_high"))


def _pooled_noise(counted: pd.DataFrame, cfg: AnalysisConfig) -> dict:
    """Each noise model's rate over the curves that have one: the events' rates times ``n_noise_curves`` added up."""
    out = {}
    for kind in ("jitter", "iid", "walk"):
        col = f"{kind}_fpr"
        fpr = counted[col].astype("float64").dropna() if col in counted.columns else pd.Series(dtype=float)
        k = int(round(float((fpr * cfg.n_noise_curves).sum())))
        r = st.binomial_interval(k, cfg.n_noise_curves * len(fpr), confidence=cfg.confidence)
        out |= {f"{kind}_rate": r.rate, f"{kind}_rate_low": r.low, f"{kind}_rate_high": r.high}
    return out


def rates(rows: pd.DataFrame, by: list[str], cfg: AnalysisConfig | None = None,
           nulls: dict | None = None) -> pd.DataFrame:
    """Precursor rates with their binomial interval, the permutation null and p-value, and the noise rate."""
    cfg = cfg or AnalysisConfig()
    cols = by + ["n_curves", "n_counted", "n_precursor", "precursor_rate", "rate_low", "rate_high",
                 "null_rate", "null_low", "null_high", "p_value", *NOISE_RATE_COLUMNS,
                 "verdict", "n_unresolved", "n_synchronous", "n_lagging", "n_no_onset", "median_gap_steps",
                 "median_gap_checkpoints", "n_precursor_vs_acc_onset", "rate_vs_acc_onset", "n_never_acquired",
                 "n_censored", "n_acquired_at_start", "n_no_data", "confidence", "alpha", "n_permutations"]
    if rows.empty:
        return pd.DataFrame(columns=cols)
    out = []
    # the null's donors: every counted run of the row's curve family (metric, centred or not), whatever its
    # difficulty or model, so that a rate and the claim table's rate over the same runs share one null
    family = [c for c in ("metric", "centered") if c in rows.columns]
    fam = rows.groupby(family, sort=False, dropna=False).ngroup() if family else pd.Series(0, index=rows.index)
    all_counted = cv.counted(rows)
    for key, g in rows.groupby(by, sort=True, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        counted = g[cv.counted(g)]
        prec = counted["precursor"].astype(bool)
        n_prec = int(prec.sum())
        rate = st.binomial_interval(n_prec, len(counted), confidence=cfg.confidence)
        pool = rows[all_counted & fam.isin(set(fam.loc[g.index]))]
        null = _rate_null(pool, counted.index, nulls or {}, cfg)
        noise = _pooled_noise(counted, cfg)
        if null is None or math.isnan(null.p_value):
            verdict = "too_few_runs"
        else:
            verdict = "above_null" if null.p_value < cfg.alpha else "not_above_null"
        vs_onset = counted["status_acc_onset"] == "precursor" if "status_acc_onset" in counted.columns else prec * 0
        gaps = counted.loc[prec, "gap_steps"].astype("float64")
        gck = counted.loc[prec, "gap_checkpoints"].astype("float64") if "gap_checkpoints" in counted.columns \
            else pd.Series(dtype=float)
        out.append(dict(zip(by, key)) | {
            "n_curves": len(g), "n_counted": len(counted), "n_precursor": n_prec, "precursor_rate": rate.rate,
            "rate_low": rate.low, "rate_high": rate.high,
            "null_rate": math.nan if null is None else null.null_mean,
            "null_low": math.nan if null is None else null.null_low,
            "null_high": math.nan if null is None else null.null_high,
            "p_value": math.nan if null is None else null.p_value,
            **noise,
            "verdict": verdict,
            "n_unresolved": int((counted["status"] == "unresolved").sum()),
            "n_synchronous": int((counted["status"] == "synchronous").sum()),
            "n_lagging": int((counted["status"] == "lagging").sum()),
            "n_no_onset": int((counted["status"] == "no_onset").sum()),
            "median_gap_steps": float(gaps.median()) if len(gaps) else math.nan,
            "median_gap_checkpoints": float(gck.median()) if len(gck) else math.nan,
            "n_precursor_vs_acc_onset": int(vs_onset.sum()),
            "rate_vs_acc_onset": float(vs_onset.mean()) if len(counted) else math.nan,
            "n_never_acquired": int((g["status"] == "never_acquired").sum()),
            "n_censored": int((g["status"] == "censored").sum()),
            "n_acquired_at_start": int((g["status"] == "acquired_at_start").sum()),
            "n_no_data": int((g["status"] == "no_data").sum()),
            "confidence": cfg.confidence, "alpha": cfg.alpha, "n_permutations": cfg.n_permutations,
        })
    df = pd.DataFrame(out, columns=cols)
    return df


def difficulty_slope(rows: pd.DataFrame, nulls: dict, cfg: AnalysisConfig) -> pd.DataFrame:
    """Difficulty as continuous: slope of the gap (checkpoints) on the acquisition step, beside the null's slope.

    Later acquisition leaves more checkpoints before it, so even unrelated curves give gaps that grow with the
    acquisition step; the null (acquisition steps permuted among the runs of one checkpoint schedule, as for the
    rates (:mod:`ckptgeo.events.acquisition_null`), each curve's gap recomputed) measures
    that built-in slope, and the p-value (two-sided) says whether the observed slope differs from it.
    """
    by = ["metric", "centered"]
    cols = by + ["n_runs", "slope_checkpoints_per_1k_steps", "null_slope", "null_low", "null_high", "p_value",
                 "n_permutations"]
    out = []
    if rows.empty:
        return pd.DataFrame(columns=cols)
    keys = CURVE_KEYS + ["metric", "layer"]
    for key, g in rows.groupby(by, sort=True, dropna=False):
        counted = g[cv.counted(g)]
        have = [(nulls.get(k), a) for k, a in zip(counted[keys].itertuples(index=False, name=None),
                                                counted["acquisition_step"])]
        have = [(nc, a) for nc, a in have if nc is not None and pd.notna(a)]
        if len(have) < 3:
            continue
        a = np.asarray([x for _, x in have], dtype=np.int64)
        gm = _outcomes([nc for nc, _ in have], a, "gap_checkpoints")
        idx = np.arange(len(have))

        def fit(order):
            return 1000.0 * st.slope(a[order].astype(np.float64), gm[idx, order])

        res = st.permutation_test(fit, len(have), strata=[nc.schedule for nc, _ in have],
                                  n_permutations=cfg.n_permutations, seed=cfg.seed, alternative="two-sided")
        out.append(dict(zip(by, key)) | {"n_runs": len(have), "slope_checkpoints_per_1k_steps": res.statistic,
                                         "null_slope": res.null_mean, "null_low": res.null_low,
                                         "null_high": res.null_high, "p_value": res.p_value,
                                         "n_permutations": res.n_permutations})
    return pd.DataFrame(out, columns=cols)


def _spearman(x, y) -> tuple[float, float]:
    from scipy.stats import spearmanr

    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.size < 2 or np.unique(x).size < 2 or np.unique(y).size < 2:
        return math.nan, math.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = spearmanr(x, y)
    return float(res.statistic), float(res.pvalue)


def top_down(events: pd.DataFrame, cfg: AnalysisConfig) -> pd.DataFrame:
    """Order of collapse onsets over depth, per curve family, tested.

    Kendall's tau-b of block depth (layers 1 .. L-1) against collapse onset, with an exact (or Monte Carlo)
    permutation p-value and ties counted; the deepest layer (after the final layer norm) is reported apart
    (``final_norm_onset_step``) and left out of the test, and so is layer 0 (the embedding). ``direction``
    comes from the test: "top-down" / "bottom-up" when p < alpha, "not_significant" otherwise (two or three
    blocks can never reach p < 0.05), "simultaneous" when every onset ties, "undetermined" with fewer than two
    onsets. ``spearman_rho`` / ``p_value`` are Spearman over every layer >= 1 (kept for comparison; no verdict).
    """
    cols = CURVE_KEYS + ["metric", "centered", "n_layers", "n_with_onset", "onsets", "spearman_rho", "p_value",
                    "n_blocks_tested", "kendall_tau", "kendall_p", "kendall_exact", "n_tied_onsets",
                    "final_norm_layer", "final_norm_onset_step", "direction", "alpha", "n_permutations"]
    rows = []
    sub = events[events["metric"].isin(cfg.collapse_metrics) & (events["layer"] >= 1)]
    for (model, suite, chash, metric), g in sub.groupby(CURVE_KEYS + ["metric"], sort=True):
        g = g.sort_values("layer")
        have = g[g["collapse_onset_step"].notna()]
        rho, p = _spearman(have["layer"], have["collapse_onset_step"])
        last = int(g["layer"].max())
        blocks = have[have["layer"] < last]
        kt = st.kendall_tau(blocks["layer"].astype("float64"), blocks["collapse_onset_step"].astype("float64"),
                            n_permutations=cfg.n_permutations, seed=cfg.seed)
        if len(blocks) < 2:
            direction = "undetermined"
        elif math.isnan(kt.tau):
            direction = "simultaneous"
        elif kt.p_value < cfg.alpha:
            direction = "top-down" if kt.tau < 0 else "bottom-up"
        else:
            direction = "not_significant"
        onsets = " ".join(f"L{int(r.layer)}:{'-' if pd.isna(r.collapse_onset_step) else int(r.collapse_onset_step)}"
                          for r in g.itertuples())
        fin = g.loc[g["layer"] == last, "collapse_onset_step"]
        c = g["centered"].iloc[0]
        rows.append({"model": model, "suite": suite, "config_hash": chash, "metric": metric,
                     "centered": None if pd.isna(c) else bool(c), "n_layers": len(g),
                     "n_with_onset": len(have), "onsets": onsets, "spearman_rho": rho, "p_value": p,
                     "n_blocks_tested": kt.n, "kendall_tau": kt.tau, "kendall_p": kt.p_value,
                     "kendall_exact": kt.exact, "n_tied_onsets": kt.n_tied_y, "final_norm_layer": last,
                     "final_norm_onset_step": None if fin.isna().all() else int(fin.iloc[0]),
                     "direction": direction, "alpha": cfg.alpha, "n_permutations": cfg.n_permutations})
    df = pd.DataFrame(rows, columns=cols)
    df["final_norm_onset_step"] = df["final_norm_onset_step"].astype("Int64")
    return df


def probe_lead(probes: pd.DataFrame, acc_groups: dict, cfg: AnalysisConfig) -> pd.DataFrame:
    """Probe onset against acquisition per (model, suite, config_hash, layer).

    status: "leads" / "synchronous" / "lags" (onset before / at / after acquisition), "no_probe_onset"
    (measured, never beat max(chance, control) by the margin with p < alpha), "readable_at_start" (beats
    it already at the first measured checkpoint, so no rise can be seen: not a lead), "not_measured" (no
    checkpoint has a defined probe: the reason the probe gave), or the acquisition's status
    ("never_acquired", "acquired_at_start", "no_data") when the probe was measured but there is no
    acquisition to lead.
    """
    cols = CURVE_KEYS + ["layer", "n_checkpoints", "probe_step", "acquisition_step", "lead_steps", "leads",
                    "resolution_steps", "status", "reason", "probe_margin", "probe_alpha", "p_value_at_onset"]
    if probes.empty:
        return pd.DataFrame(columns=cols)
    p = with_defaults(probes)
    has_p = "p_value" in p.columns and p["p_value"].notna().any()
    p = p[p["step"].notna()].assign(
        accuracy=pd.to_numeric(p["accuracy"], errors="coerce"),
        control_accuracy=pd.to_numeric(p["control_accuracy"], errors="coerce"),
        chance=pd.to_numeric(p["chance"], errors="coerce") if "chance" in p.columns else math.nan,
        p_value=pd.to_numeric(p["p_value"], errors="coerce") if has_p else math.nan,
        reason=p["reason"].astype("object") if "reason" in p.columns else None)
    p = p.groupby(CURVE_KEYS + ["layer", "step"], sort=True).agg(
        accuracy=("accuracy", "mean"), control_accuracy=("control_accuracy", "mean"), chance=("chance", "mean"),
        p_value=("p_value", "max"), reason=("reason", "first")).reset_index()
    rows = []
    for (model, suite, chash, layer), g in p.groupby(CURVE_KEYS + ["layer"], sort=True):
        steps = g["step"].to_numpy()
        onset = ev.probe_onset(steps, g["accuracy"].to_numpy(), g["control_accuracy"].to_numpy(),
                               chance=g["chance"].to_numpy(), p_value=g["p_value"].to_numpy() if has_p else None,
                               margin=cfg.probe_margin, alpha=cfg.probe_alpha)
        match = match_behavior(acc_groups, model, suite, chash)
        acq = match.acquisition if match else ev.Acquisition(None, None, math.nan, cfg.window, None, "no_data",
                                                    "no behavior rows for this model and suite")
        gap = cfg.gap(acq, onset)
        if onset.status == "no_data":
            reasons = g["reason"].dropna().astype(str)
            status = "not_measured"
            reason = "probe undefined at every checkpoint" + (f": {reasons.iloc[0]}" if len(reasons) else "")
        elif onset.index == 0:
            # beats its baseline at the first measured checkpoint: readable from the start (the inputs carry
            # it), so no checkpoint before the onset shows the probe learning it: not a lead
            status = "readable_at_start"
            reason = (f"the probe beats max(chance, control) at the first measured checkpoint (step {onset.step}): "
                      f"nothing before it shows the probe rising")
        else:
            status = {"precursor": "leads", "lagging": "lags", "no_onset": "no_probe_onset"}.get(gap.status,
                                                                                                gap.status)
            reason = gap.reason if gap.status != "no_onset" else onset.reason
            if onset.reason and gap.status != "no_onset":
                reason = "; ".join(r for r in (reason, onset.reason) if r)
        at = g.loc[g["step"] == onset.step, "p_value"] if onset.step is not None else pd.Series(dtype=float)
        rows.append({"model": model, "suite": suite, "config_hash": chash, "layer": int(layer),
                     "n_checkpoints": int(g[["accuracy", "control_accuracy"]].notna().all(axis=1).sum()),
                     "probe_step": opt_int(onset.step), "acquisition_step": opt_int(acq.step),
                     "lead_steps": opt_int(gap.gap_steps), "leads": status == "leads",
                     "resolution_steps": opt_int(gap.resolution_steps), "status": status, "reason": reason,
                     "probe_margin": cfg.probe_margin, "probe_alpha": cfg.probe_alpha,
                     "p_value_at_onset": float(at.iloc[0]) if len(at) else math.nan})
    df = pd.DataFrame(rows, columns=cols)
    for c in ("layer", "n_checkpoints", "probe_step", "acquisition_step", "lead_steps", "resolution_steps"):
        df[c] = df[c].astype("Int64")
    return df


def _model_order(models, curves: pd.DataFrame) -> list[tuple[str, float]]:
    depth = curves.groupby("model")["layer"].max() if len(curves) else pd.Series(dtype=float)
    sized = [(m, model_size(m), float(depth.get(m, math.nan))) for m in models]
    sized.sort(key=lambda t: (math.isnan(t[1]), t[1] if not math.isnan(t[1]) else 0.0,
                              t[2] if not math.isnan(t[2]) else 0.0, t[0]))
    return [(m, s) for m, s, _ in sized]


def across_sizes(events: pd.DataFrame, acq: pd.DataFrame, curves: pd.DataFrame,
                  cfg: AnalysisConfig) -> pd.DataFrame:
    cols = ["quantity", "model_small", "model_large", "size_small", "size_large", "n_suites", "suites",
            "value_small", "value_large", "spearman_rho", "p_value", "kendall_tau", "kendall_p", "n_tied"]
    per: dict[str, pd.DataFrame] = {}
    rows_ = summary_rows(events)
    rk = rows_[rows_["metric"] == cfg.collapse_metrics[0]] if len(rows_) else rows_
    rk = preferred_variant(rk)
    if len(rk):
        per["collapse_floor"] = rk.groupby(["model", "suite"])["collapse_floor"].mean().unstack("suite")
    if len(acq):
        a = acq.groupby(["model", "suite"])["acquisition_step"].min().astype("float64")
        never = float(a.max()) + 1.0 if a.notna().any() else 1.0
        per["acquisition_step"] = a.fillna(never).unstack("suite")  # never acquired: ranked last, tied
    depth = curves.groupby("model")["layer"].max() if len(curves) else pd.Series(dtype=float)

    def shape(model, size) -> tuple:   # what "a model size" is: parameters from the name, else depth
        d = float(depth.get(model, math.nan))
        return (None if math.isnan(size) else size, None if math.isnan(d) else d)

    rows = []
    for quantity, table in per.items():
        order = _model_order(list(table.index), curves)
        for i, (small, s_small) in enumerate(order):
            for large, s_large in order[i + 1:]:
                pair = table.loc[[small, large]].T.dropna()
                if len(pair) == 0 or shape(small, s_small) == shape(large, s_large):
                    continue   # other tasks, or the same size: not a comparison across sizes
                rho, p = _spearman(pair[small], pair[large]) if len(pair) >= 3 else (math.nan, math.nan)
                kt = st.kendall_tau(pair[small], pair[large], n_permutations=cfg.n_permutations, seed=cfg.seed)
                if len(pair) < 3:
                    kt = dataclasses.replace(kt, tau=math.nan, p_value=math.nan)
                rows.append({"quantity": quantity, "model_small": small, "model_large": large,
                             "size_small": s_small, "size_large": s_large, "n_suites": len(pair),
                             "suites": ",".join(map(str, pair.index)), "value_small": float(pair[small].mean()),
                             "value_large": float(pair[large].mean()), "spearman_rho": rho, "p_value": p,
                             "kendall_tau": kt.tau, "kendall_p": kt.p_value, "n_tied": kt.n_tied_x + kt.n_tied_y})
    return pd.DataFrame(rows, columns=cols)


def _with_replicates(events: pd.DataFrame):
    """Yield (base_model, rows with a ``replicate`` column, seed source) for models run under several seeds."""
    rows_ = summary_rows(events)
    if rows_.empty:
        return
    split = [split_seed(m) for m in rows_["model"]]
    rows_ = rows_.assign(base_model=[b for b, _ in split], name_seed=[s for _, s in split])
    for base, g in rows_.groupby("base_model", sort=True):
        if g["name_seed"].notna().all() and g["name_seed"].nunique() >= 2:
            yield base, g.assign(replicate=g["name_seed"]), "model name"
        elif g["seed"].notna().all() and g["seed"].nunique() >= 2:
            yield base, g.assign(replicate=g["seed"]), "seed column"


def seed_spread(events: pd.DataFrame, cfg: AnalysisConfig | None = None) -> pd.DataFrame:
    cfg = cfg or AnalysisConfig()
    by = ["base_model", "metric", "centered", "difficulty"]
    cols = by + ["seed_source", "n_seeds", "rate_mean", "rate_std", "rate_min", "rate_max", "n_counted",
                 "n_precursor", "pooled_rate", "pooled_low", "pooled_high"]
    out = []
    for base, g, source in _with_replicates(events):
        per_seed = rates(g, ["metric", "centered", "difficulty", "replicate"], cfg)
        for key, h in per_seed.groupby(["metric", "centered", "difficulty"], sort=True, dropna=False):
            r = h["precursor_rate"].dropna()
            pooled = st.binomial_interval(int(h["n_precursor"].sum()), int(h["n_counted"].sum()),
                                          confidence=cfg.confidence)
            out.append(dict(zip(by, (base,) + key)) | {
                "seed_source": source, "n_seeds": len(r), "rate_mean": float(r.mean()) if len(r) else math.nan,
                "rate_std": float(r.std(ddof=1)) if len(r) >= 2 else math.nan,
                "rate_min": float(r.min()) if len(r) else math.nan, "rate_max": float(r.max()) if len(r) else math.nan,
                "n_counted": pooled.n, "n_precursor": pooled.k, "pooled_rate": pooled.rate,
                "pooled_low": pooled.low, "pooled_high": pooled.high})
    return pd.DataFrame(out, columns=cols)


def seed_events(events: pd.DataFrame) -> pd.DataFrame:
    """Each event across seeds: per (base model, suite, metric) at the summary layer, the spread of acquisition
    steps and gaps over the runs that differ only by seed (the across-seed interval is [min, max])."""
    by = ["base_model", "suite", "metric", "centered"]
    cols = by + ["seed_source", "n_seeds", "seeds", "statuses", "acquisition_step_mean", "acquisition_step_min",
                 "acquisition_step_max", "gap_steps_mean", "gap_steps_min", "gap_steps_max", "gap_checkpoints_min",
                 "gap_checkpoints_max", "n_precursor", "n_counted"]
    out = []
    for base, g, source in _with_replicates(events):
        for key, h in g.groupby(["suite", "metric", "centered"], sort=True, dropna=False):
            if h["replicate"].nunique() < 2:
                continue
            h = h.sort_values("replicate")
            a = h["acquisition_step"].astype("float64").dropna()
            gp = h["gap_steps"].astype("float64").dropna()
            gc = h["gap_checkpoints"].astype("float64").dropna()
            out.append(dict(zip(by, (base,) + key)) | {
                "seed_source": source, "n_seeds": int(h["replicate"].nunique()),
                "seeds": ",".join(str(int(x)) for x in h["replicate"]),
                "statuses": ",".join(map(str, h["status"])),
                "acquisition_step_mean": float(a.mean()) if len(a) else math.nan,
                "acquisition_step_min": float(a.min()) if len(a) else math.nan,
                "acquisition_step_max": float(a.max()) if len(a) else math.nan,
                "gap_steps_mean": float(gp.mean()) if len(gp) else math.nan,
                "gap_steps_min": float(gp.min()) if len(gp) else math.nan,
                "gap_steps_max": float(gp.max()) if len(gp) else math.nan,
                "gap_checkpoints_min": float(gc.min()) if len(gc) else math.nan,
                "gap_checkpoints_max": float(gc.max()) if len(gc) else math.nan,
                "n_precursor": int(h["precursor"].astype(bool).sum()),
                "n_counted": int(cv.counted(h).sum())})
    return pd.DataFrame(out, columns=cols)

