"""Honest evaluation of the acquisition forecast: every score is on runs the model was not fitted to.

Splits (each where the data has at least two groups): ``task`` (leave one task out), ``seed`` (leave one seed
out), ``size`` (leave one model size out). For each split and feature set, every held-out run is forecast at each
of its checkpoints before its acquisition is known, and scored:

* **log score** and **Brier** of the h-step event "acquired at or before checkpoint i + h", averaged over the
  run's scorable checkpoints (the outcome known: the acquisition seen, or the run long enough after ``i``);
  lower is better;
* **absolute error** of the forecast's median acquisition step at the checkpoints 25%, 50% and 75% of the way
  (in steps) to the acquisition, acquired runs only (a median beyond the horizon counts as the horizon's step);
* **coverage** of the 80% interval at those checkpoints (an interval open above where its upper end lies beyond
  the horizon): the interval widened for the held-out fold by an inner leave-one-group-out on its training runs
  (:mod:`ckptgeo.forecasting.calibrate`), and beside it the model's own (``coverage_model``).

**Skill** of geometry over behaviour: per held-out run, the behaviour set's log score minus the geometry set's
(positive: geometry better); a one-sided Wilcoxon signed-rank test across runs (``scipy.stats.wilcoxon``). The same
on a **null copy** (every RankMe and cross-checkpoint curve replaced by noise at the mean and sd pooled over all
runs, :func:`ckptgeo.forecasting.features.null_copy`), which must show no skill. The test the other way
(``p_value_worse``) says where geometry made the forecast worse. Skill may come from the setting alone (a hard
task's RankMe differs from an easy one's, and so does its acquisition step): the **sibling copy** gives each run
the geometry of another seed of its own setting (:func:`ckptgeo.forecasting.features.sibling_copy`), and
"geometry helps" needs the run's own geometry to beat it too (``timing_p_value``, the same test).

**Concordance** within a difficulty class (hard / easy, :attr:`RunCurves.difficulty_class`): for two acquired runs
of one class, their forecasts made at the same training step (half the earlier acquisition, before either
acquired) put them in the true order; ties count a half. Its p-value permutes acquisition steps among the class's
runs (the forecasts at each run's checkpoints kept), one-sided; its 95% interval resamples tasks, then runs within
them. The paper's figures for geometry alone: 52% (easy) and 69% (hard).

**Across sizes**: each size forecast by a model fitted to the strictly smaller sizes only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import pandas as pd

import ckptgeo.stats as stats
from ckptgeo._settings import Interval, setting, with_settings_doc
from ckptgeo.analysis.config import AnalysisConfig
from ckptgeo.forecasting.calibrate import FRACTIONS, FitCache, scoring_rows, widen, widening
from ckptgeo.forecasting.data import RunCurves
from ckptgeo.forecasting.features import FEATURE_SETS, null_copy, run_features, sibling_copy
from ckptgeo.forecasting.model import DEFAULT_COVERAGE, DEFAULT_HORIZON, DEFAULT_MAX_HORIZON, HazardModel

__all__ = ["ForecastConfig", "SPLITS", "PAPER_CONCORDANCE", "SKILL_VERDICTS", "split_groups", "out_of_fold",
           "run_scores", "evaluation_table", "skill_table", "skill_verdict", "Concordance", "concordance",
           "concordance_table", "sizes_table", "primary_split"]

#: the held-out splits, in the order tables show them
SPLITS = ("task", "seed", "size")
#: within-class concordance of geometry with acquisition order, arXiv:2602.15997 v3 abstract
PAPER_CONCORDANCE = {"easy": 0.52, "hard": 0.69}


@dataclass(frozen=True)
class ForecastConfig(AnalysisConfig):
    """Settings of a forecast: the analysis's (:class:`~ckptgeo.analysis.config.AnalysisConfig`: the event rules its
    geometry features apply, ``min_drop`` and ``recovery``; the seed of the null copy and the permutations; the
    relabellings of each concordance test, ``n_permutations``; the tests' level ``alpha``), and its own below, each
    declared once with its ``ckptgeo forecast`` flag where it has one. Written into its tables' metadata.

    Attributes
    ----------
    {settings}
    """

    horizon: int = setting(DEFAULT_HORIZON, "h of P(acquired within the next h checkpoints).",
                           admits=(Interval(int, 1, None),), flag="--horizon",
                           help="h of P(acquired within the next h checkpoints) (default %(default)s)")
    max_horizon: int = setting(DEFAULT_MAX_HORIZON, "Checkpoints ahead the hazard models; a later acquisition is "
                               "\"beyond the horizon\".", admits=(Interval(int, 1, None),), flag="--max-horizon",
                               help="checkpoints ahead the hazard is modelled; later is 'beyond the horizon' "
                                    "(default %(default)s)")
    max_landmarks: int = setting(32, "Checkpoints per run the model is fitted at (evenly spaced).",
                                 admits=(Interval(int, 1, None),))
    coverage: float = setting(DEFAULT_COVERAGE, "The forecast interval's coverage.",
                              admits=(Interval(float, 0, 1, closed="neither"),), flag="--coverage",
                              help="the forecast interval's coverage (default %(default)s)")
    C: float = setting(0.1, "Inverse L2 strength of the logistic regression.",
                       admits=(Interval(float, 0, None, closed="neither"),))
    calibrate: bool = setting(True, "Widen each held-out fold's intervals by an inner leave-one-group-out on its "
                              "training runs (:mod:`ckptgeo.forecasting.calibrate`); False: the model's own intervals.")

    def model(self) -> HazardModel:
        return HazardModel(max_horizon=self.max_horizon, max_landmarks=self.max_landmarks, C=self.C, seed=self.seed)

    def features(self, run: RunCurves, feature_set: str, with_tokens: bool = False) -> np.ndarray:
        return run_features(run, feature_set, min_drop=self.min_drop, recovery=self.recovery, with_tokens=with_tokens)


ForecastConfig.__doc__ = with_settings_doc(ForecastConfig.__doc__, ForecastConfig)


def split_groups(runs: list[RunCurves], split: str) -> list | None:
    """Each run's group under ``split``; None when the runs do not form at least two groups."""
    labels = [getattr(r, split) for r in runs]
    if any(v is None or v == "" for v in labels) or len(set(labels)) < 2:
        return None
    return labels


def primary_split(runs: list[RunCurves]) -> str | None:
    """The split whose out-of-fold forecasts fill the forecast table: task, else seed, else size, else None."""
    return next((s for s in SPLITS if split_groups(runs, s) is not None), None)


def out_of_fold(runs: list[RunCurves], groups: list, cfg: ForecastConfig, sets=FEATURE_SETS,
                copies: dict[str, list[RunCurves]] | None = None) -> dict[str, list[pd.DataFrame]]:
    """Per feature set, and per named copy of the runs in ``copies`` (the geometry set fitted to and forecast on
    the copy: ``geometry_null``, ``geometry_sibling``), each run's forecast from a model fitted to the other
    groups' runs, its interval widened by an inner leave-one-group-out on those runs alone
    (:func:`ckptgeo.forecasting.calibrate.widening`; columns ``low_step_model``, ``high_step_model``, ``widening``);
    None for a run whose training set is empty."""
    jobs = [(s, runs, s) for s in sets] + [(name, rs, "geometry") for name, rs in (copies or {}).items()]
    out: dict[str, list] = {}
    for name, rs, fset in jobs:
        cache = FitCache(rs, [cfg.features(r, fset) for r in rs], cfg)
        res: list = [None] * len(rs)
        for g in sorted(set(groups), key=str):
            train = [i for i, v in enumerate(groups) if v != g]
            test = [i for i, v in enumerate(groups) if v == g]
            if not train:
                continue
            model = cache.without(test)
            q = widening(cache, train, groups, held_out=test)[0] if cfg.calibrate else 0.0
            for i in test:
                fc = model.forecast_run(rs[i], cache.feats[i], horizon=cfg.horizon, coverage=cfg.coverage)
                res[i] = widen(fc, q, rs[i])
        out[name] = res
    return out


def run_scores(run: RunCurves, fc: pd.DataFrame | None, cfg: ForecastConfig) -> dict:
    """One held-out run's scores (module docstring); NaN where undefined. ``covered_model`` counts the model's own
    interval (before the widening), ``widening`` is the fold's."""
    out = {"log_score": math.nan, "brier": math.nan, "n_scored": 0}
    for f in FRACTIONS:
        out[f"abs_error_{int(f * 100)}"] = math.nan
        out[f"rel_error_{int(f * 100)}"] = math.nan
    out.update(covered=0, covered_model=0, n_covered=0, widening=math.nan)
    if fc is None or not len(fc):
        return out
    n, w, h, c = len(run.steps), run.window, cfg.horizon, run.confirmed_index
    i = fc["checkpoint"].to_numpy()
    if c is not None:   # the acquisition seen: every forecast's outcome is known
        y, known = (i + h + w - 1 >= c).astype(float), np.ones(len(i), bool)
    else:               # not acquired in the run: known where the run lasts h + window - 1 checkpoints more
        y, known = np.zeros(len(i)), i + h + w - 1 <= n - 1
    p = np.clip(fc["p_next"].to_numpy(float), 1e-6, 1 - 1e-6)
    if known.any():
        yk, pk = y[known], p[known]
        out["log_score"] = float(-np.mean(yk * np.log(pk) + (1 - yk) * np.log(1 - pk)))
        out["brier"] = float(np.mean((pk - yk) ** 2))
        out["n_scored"] = int(known.sum())
    if "widening" in fc:
        out["widening"] = float(fc["widening"].iloc[0])
    model_fc = (fc.assign(low_step=fc["low_step_model"], high_step=fc["high_step_model"])
                if "low_step_model" in fc else fc)
    for (f, _, med, lo, hi, acq), (*_, lo0, hi0, _a) in zip(scoring_rows(run, fc, cfg.max_horizon),
                                                            scoring_rows(run, model_fc, cfg.max_horizon)):
        out[f"abs_error_{int(f * 100)}"] = abs(med - acq)
        out[f"rel_error_{int(f * 100)}"] = abs(med - acq) / acq
        out["covered"] += int(lo <= acq <= hi)
        out["covered_model"] += int(lo0 <= acq <= hi0)
        out["n_covered"] += 1
    return out


def _scores_frame(runs, fcs: dict[str, list], cfg: ForecastConfig, split: str) -> pd.DataFrame:
    rows = []
    for name, per_run in fcs.items():
        for run, fc in zip(runs, per_run):
            if fc is None:
                continue
            rows.append({"split": split, "feature_set": name, "run": run.name, "task": run.task,
                         "difficulty": run.difficulty, **run_scores(run, fc, cfg)})
    return pd.DataFrame(rows)


def evaluation_table(scores: pd.DataFrame, cfg: ForecastConfig) -> pd.DataFrame:
    """One row per (split, feature set): held-out runs, mean log score and Brier, median absolute and relative
    errors at 25/50/75% of the way, the 80% intervals' coverage with its Wilson interval, the model's own
    intervals' coverage before the widening (``coverage_model``) and the median widening (in ``log1p(step)``)."""
    rows = []
    for (split, fset), g in scores.groupby(["split", "feature_set"], sort=False):
        k, n = int(g["covered"].sum()), int(g["n_covered"].sum())
        cov = stats.binomial_interval(k, n) if n else None
        row = {"split": split, "feature_set": fset, "n_runs": len(g), "n_acquired": int((g["n_covered"] > 0).sum()),
               "log_score": g["log_score"].mean(), "brier": g["brier"].mean()}
        for f in FRACTIONS:
            row[f"abs_error_{int(f * 100)}"] = g[f"abs_error_{int(f * 100)}"].median()
        for f in FRACTIONS:
            row[f"rel_error_{int(f * 100)}"] = g[f"rel_error_{int(f * 100)}"].median()
        row.update(coverage=cov.rate if cov else math.nan, coverage_low=cov.low if cov else math.nan,
                   coverage_high=cov.high if cov else math.nan, n_intervals=n, nominal_coverage=cfg.coverage,
                   coverage_model=int(g["covered_model"].sum()) / n if n else math.nan,
                   widening=g["widening"].median())
        rows.append(row)
    return pd.DataFrame(rows)


def _wilcoxon(d: np.ndarray, alternative: str = "greater") -> float:
    from scipy.stats import wilcoxon

    d = d[np.isfinite(d)]
    if not len(d) or not np.any(d != 0):
        return math.nan if not len(d) else 1.0
    return float(wilcoxon(d, alternative=alternative).pvalue)


def skill_table(scores: pd.DataFrame, cfg: ForecastConfig) -> pd.DataFrame:
    """Per split: geometry's skill over behaviour (mean per-run log-score difference, positive = geometry better,
    relative skill 1 - LS_geometry / LS_behaviour) with its one-sided Wilcoxon p-value across held-out runs
    (``p_value``: geometry better; ``p_value_worse``: geometry worse), and the same for the null copy (``null_``);
    the sibling copy's skill over behaviour (``sibling_n_runs``, ``sibling_delta_log_score``: what knowing the
    setting's geometry gives) and the run's own geometry against it (``timing_delta_log_score``: the sibling's log
    score minus the run's own, positive = the run's own timing helps; ``timing_p_value``, one-sided) on the runs
    that took a sibling's geometry; ``verdict`` reads them all (:func:`skill_verdict`)."""
    rows = []
    for split, g in scores.groupby("split", sort=False):
        piv = g.pivot_table(index="run", columns="feature_set", values="log_score")
        if "behaviour" not in piv or "geometry" not in piv:
            continue
        row = {"split": split}
        for name, label in (("geometry", ""), ("geometry_null", "null_")):
            if name not in piv:
                row.update({f"{label}n_runs": 0, f"{label}delta_log_score": math.nan, f"{label}skill": math.nan,
                            f"{label}p_value": math.nan, f"{label}p_value_worse": math.nan})
                continue
            both = piv[["behaviour", name]].dropna()
            d = (both["behaviour"] - both[name]).to_numpy(float)
            row.update({f"{label}n_runs": len(d), f"{label}delta_log_score": float(np.mean(d)) if len(d) else math.nan,
                        f"{label}skill": float(1 - both[name].mean() / both["behaviour"].mean())
                        if len(d) and both["behaviour"].mean() > 0 else math.nan,
                        f"{label}p_value": _wilcoxon(d), f"{label}p_value_worse": _wilcoxon(d, "less")})
        sib = piv[["behaviour", "geometry", "geometry_sibling"]].dropna() if "geometry_sibling" in piv else None
        if sib is None or not len(sib):
            row.update(sibling_n_runs=0, sibling_delta_log_score=math.nan, timing_delta_log_score=math.nan,
                       timing_p_value=math.nan)
        else:
            d = (sib["geometry_sibling"] - sib["geometry"]).to_numpy(float)
            row.update(sibling_n_runs=len(sib),
                       sibling_delta_log_score=float((sib["behaviour"] - sib["geometry_sibling"]).mean()),
                       timing_delta_log_score=float(np.mean(d)), timing_p_value=_wilcoxon(d))
        row["verdict"] = skill_verdict(row, cfg.alpha)
        rows.append(row)
    return pd.DataFrame(rows)


#: the verdicts of :func:`skill_verdict`, in the order of how much they say
SKILL_VERDICTS = ("geometry helps", "setting level only", "timing untested", "no skill shown", "geometry worse",
                  "inconclusive")


def skill_verdict(row: dict, alpha: float, min_runs: int = 5) -> str:
    """One of :data:`SKILL_VERDICTS`:

    * ``geometry helps``: better than behaviour alone (``p_value`` < ``alpha``) *and* better than a sibling's
      geometry of the same setting (``timing_p_value`` < ``alpha``): the run's own geometry tells its timing;
    * ``setting level only``: better than behaviour, not shown better than a sibling's geometry: the gain is what
      the geometry says of the task, size and schedule (the paper's "coarse difficulty, not fine timing");
    * ``timing untested``: better than behaviour, and fewer than ``min_runs`` runs with a sibling to test timing;
    * ``geometry worse`` (the one-sided test the other way) / ``no skill shown`` (neither: not evidence of no
      skill);
    * ``inconclusive``: fewer than ``min_runs`` held-out runs (5 is the fewest at which a one-sided Wilcoxon test
      can reach p < 0.05), or the null copy showing skill too, so the test cannot be trusted on these data.
    """
    n, p, p0 = row.get("n_runs", 0), row.get("p_value", math.nan), row.get("null_p_value", math.nan)
    if n < min_runs or not math.isfinite(p):
        return "inconclusive"
    if math.isfinite(p0) and p0 < alpha:
        return "inconclusive"
    if p < alpha:
        pt = row.get("timing_p_value", math.nan)
        if row.get("sibling_n_runs", 0) < min_runs or not math.isfinite(pt):
            return "timing untested"
        return "geometry helps" if pt < alpha else "setting level only"
    return "geometry worse" if row.get("p_value_worse", math.nan) < alpha else "no skill shown"


def _pairs_concordance(steps_by_run, med_by_run, acq: np.ndarray, order: np.ndarray) -> float:
    """Share of pairs in the true order of (permuted) acquisition steps ``acq[order]``, each pair judged by the
    two forecasts made at half the earlier acquisition (the run's own acquisition where it was known by then)."""
    a = acq[np.asarray(order)]
    n = len(a)
    half = 0.5 * np.minimum.outer(a, a)
    pred = np.empty((n, n))
    for x in range(n):
        li = np.searchsorted(steps_by_run[x], half[x], side="right") - 1
        known = li >= len(med_by_run[x])
        pred[x] = np.where(known, acq[x], med_by_run[x][np.clip(li, 0, len(med_by_run[x]) - 1)])
    iu = np.triu_indices(n, 1)
    px, py = pred[iu], pred.T[iu]    # pred[x, y]: run x's forecast at the pair's landmark; pred.T[x, y] = pred[y, x]
    ax, ay = a[iu[0]], a[iu[1]]
    use = ax != ay
    if not use.any():
        return math.nan
    hit = np.where(px == py, 0.5, ((px < py) == (ax < ay)).astype(float))
    return float(hit[use].mean())


class Concordance(NamedTuple):
    """Concordance of forecast and actual acquisition order: pairs judged, the share in the true order, its
    one-sided permutation p, and its 95% interval (runs resampled within tasks resampled, percentile)."""

    n_pairs: int
    concordance: float
    p_value: float
    low: float = math.nan
    high: float = math.nan


def concordance(forecasts: list[tuple[np.ndarray, np.ndarray, float]], cfg: ForecastConfig,
                clusters: list | None = None) -> Concordance:
    """The :class:`Concordance` of acquired runs' forecasts.

    Parameters
    ----------
    forecasts : list of (steps, median_step, acquisition_step)
        Per acquired run: the steps of its forecast checkpoints (increasing), the median forecast at each (NaN:
        beyond the horizon, ordered after any finite step), and its acquisition step.
    clusters : list, optional
        Per run, its task: the interval resamples tasks, then runs within them (``stats.hierarchical_bootstrap``,
        ``cfg.n_permutations`` resamples); None: runs alone.
    """
    if len(forecasts) < 2:
        return Concordance(0, math.nan, math.nan)
    steps = [np.asarray(s, float) for s, _, _ in forecasts]
    meds = [np.where(np.isfinite(m), m, np.inf) for _, m, _ in forecasts]
    acq = np.array([float(a) for _, _, a in forecasts])
    n_pairs = int(sum(1 for x in range(len(acq)) for y in range(x + 1, len(acq)) if acq[x] != acq[y]))
    if not n_pairs:
        return Concordance(0, math.nan, math.nan)
    res = stats.permutation_test(lambda o: _pairs_concordance(steps, meds, acq, np.asarray(o)), len(acq),
                                 n_permutations=cfg.n_permutations, seed=cfg.seed)

    def on(frame):
        idx = frame["run"].to_numpy()
        return _pairs_concordance([steps[i] for i in idx], [meds[i] for i in idx], acq[idx], np.arange(len(idx)))

    frame = pd.DataFrame({"task": list(clusters) if clusters is not None else range(len(acq)),
                          "run": np.arange(len(acq))})
    boot = stats.hierarchical_bootstrap(frame, on, levels=("task", "run"), n_resamples=cfg.n_permutations,
                                        seed=cfg.seed)
    return Concordance(n_pairs, res.statistic, res.p_value, boot.low, boot.high)


def _concordance(runs: list[RunCurves], fcs: list, cfg: ForecastConfig) -> Concordance:
    keep = [(r, fc) for r, fc in zip(runs, fcs) if fc is not None and r.acquisition_step is not None and len(fc)]
    return concordance([(fc["step"].to_numpy(float), fc["median_step"].to_numpy(float), r.acquisition_step)
                        for r, fc in keep], cfg, clusters=[r.task for r, _ in keep])


def concordance_table(runs: list[RunCurves], fcs: dict[str, list], split: str, cfg: ForecastConfig) -> pd.DataFrame:
    """Per feature set and difficulty class (:attr:`RunCurves.difficulty_class`: hard / easy): runs, acquired runs,
    pairs, concordance with its 95% interval and permutation p, the paper's figure for that class."""
    rows = []
    classes = sorted({r.difficulty_class for r in runs})
    for name, per_run in fcs.items():
        for cls in classes:
            idx = [i for i, r in enumerate(runs) if r.difficulty_class == cls]
            c = _concordance([runs[i] for i in idx], [per_run[i] for i in idx], cfg)
            rows.append({"split": split, "feature_set": name, "difficulty": cls, "n_runs": len(idx),
                         "n_acquired": sum(runs[i].acquisition_step is not None for i in idx), "n_pairs": c.n_pairs,
                         "concordance": c.concordance, "concordance_low": c.low, "concordance_high": c.high,
                         "p_value": c.p_value, "paper": PAPER_CONCORDANCE.get(cls, math.nan)})
    return pd.DataFrame(rows)


def sizes_table(runs: list[RunCurves], cfg: ForecastConfig, sets=FEATURE_SETS) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Each size (but the smallest) forecast from the strictly smaller sizes: (table, per-run scores).

    Table columns: size, fitted_on (the smaller sizes), feature_set, n_runs, n_acquired, rel_error_25/50/75
    (medians), coverage (the widened intervals; :mod:`ckptgeo.forecasting.calibrate`, inner groups from the smaller
    sizes), coverage_model (the model's own), widening, n_pairs, concordance (order of acquisition) with its 95%
    interval (concordance_low/high), p_value (permutation), kendall_tau (2 x concordance - 1).
    """
    sizes: dict[str, list[float]] = {}
    for r in runs:
        if r.size:
            sizes.setdefault(r.size, []).append(r.size_order)
    order = sorted(sizes, key=lambda s: (np.nanmedian(sizes[s]) if np.isfinite(sizes[s]).any() else math.inf, s))
    rows, score_rows = [], []
    caches = {fset: FitCache(runs, [cfg.features(r, fset) for r in runs], cfg) for fset in sets}
    labels = [r.size for r in runs]
    for j, size in enumerate(order[1:], start=1):
        train = [i for i, r in enumerate(runs) if r.size in order[:j]]
        later = [i for i, r in enumerate(runs) if r.size not in order[:j]]
        test = [i for i, r in enumerate(runs) if r.size == size]
        for fset in sets:
            cache = caches[fset]
            model = cache.without(later)
            q = widening(cache, train, labels, held_out=later)[0] if cfg.calibrate else 0.0
            fcs = [widen(model.forecast_run(runs[i], cache.feats[i], horizon=cfg.horizon, coverage=cfg.coverage), q,
                         runs[i]) for i in test]
            sc = pd.DataFrame([{"run": runs[i].name, "size": size, "feature_set": fset, **run_scores(runs[i], fc, cfg)}
                               for i, fc in zip(test, fcs)])
            score_rows.append(sc)
            c = _concordance([runs[i] for i in test], fcs, cfg)
            k, n = int(sc["covered"].sum()), int(sc["n_covered"].sum())
            rows.append({"size": size, "fitted_on": ",".join(order[:j]), "feature_set": fset, "n_runs": len(test),
                         "n_acquired": int(sum(runs[i].acquisition_step is not None for i in test)),
                         **{f"rel_error_{int(f * 100)}": sc[f"rel_error_{int(f * 100)}"].median() for f in FRACTIONS},
                         "coverage": k / n if n else math.nan,
                         "coverage_model": int(sc["covered_model"].sum()) / n if n else math.nan, "widening": q,
                         "n_pairs": c.n_pairs, "concordance": c.concordance, "concordance_low": c.low,
                         "concordance_high": c.high, "p_value": c.p_value,
                         "kendall_tau": 2 * c.concordance - 1 if math.isfinite(c.concordance) else math.nan})
    return pd.DataFrame(rows), (pd.concat(score_rows, ignore_index=True) if score_rows else pd.DataFrame())


def _held_out(runs: list[RunCurves], groups: list, cfg: ForecastConfig, copies: dict, swapped: np.ndarray) -> dict:
    """:func:`out_of_fold` with the copies; the sibling copy's forecasts kept only for the runs that took a
    sibling's geometry (the others carry their own, and would compare the run with itself)."""
    out = out_of_fold(runs, groups, cfg, copies=copies)
    out["geometry_sibling"] = [fc if ok else None for fc, ok in zip(out["geometry_sibling"], swapped)]
    return out


def evaluate(runs: list[RunCurves], cfg: ForecastConfig) -> dict:
    """Every split's out-of-fold forecasts and scores, and the tables built on them.

    Returns
    -------
    dict
        ``forecasts`` (split -> feature set -> per-run forecast or None), ``scores`` (per held-out run),
        ``evaluation``, ``skill``, ``concordance`` (on the primary split), ``sizes``, ``primary`` (split name).
    """
    siblings, swapped = sibling_copy(runs, seed=cfg.seed)
    copies = {"geometry_null": null_copy(runs, seed=cfg.seed), "geometry_sibling": siblings}
    forecasts, frames = {}, []
    for split in SPLITS:
        groups = split_groups(runs, split)
        if groups is None:
            continue
        forecasts[split] = _held_out(runs, groups, cfg, copies, swapped)
        frames.append(_scores_frame(runs, forecasts[split], cfg, split))
    primary = primary_split(runs)
    if primary is None and len(runs) >= 2:   # one group only: leave one run out
        primary = "run"
        forecasts["run"] = _held_out(runs, list(range(len(runs))), cfg, copies, swapped)
        frames.append(_scores_frame(runs, forecasts["run"], cfg, "run"))
    scores = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        columns=["split", "feature_set", "run", "log_score", "covered", "n_covered"])
    conc = (concordance_table(runs, {k: v for k, v in forecasts[primary].items() if k in FEATURE_SETS}, primary, cfg)
            if primary else pd.DataFrame())
    sizes, size_scores = sizes_table(runs, cfg) if split_groups(runs, "size") is not None else (pd.DataFrame(),
                                                                                              pd.DataFrame())
    return {"forecasts": forecasts, "scores": scores, "evaluation": evaluation_table(scores, cfg) if len(scores)
            else pd.DataFrame(), "skill": skill_table(scores, cfg) if len(scores) else pd.DataFrame(),
            "concordance": conc, "sizes": sizes, "size_scores": size_scores, "primary": primary}
