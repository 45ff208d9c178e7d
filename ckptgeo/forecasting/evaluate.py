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
(positive: geometry better), averaged over each independent **unit** (the held-out task or size, or for the seed
split the run's setting: the seeds of a setting share its geometry and timing); a one-sided sign-flip test across
units (:func:`ckptgeo.stats.sign_flip_test`; 5 units are the fewest that can give p < 0.05). The same
on a **null copy** (every RankMe and cross-checkpoint curve replaced by noise at the mean and sd pooled over all
runs, :func:`ckptgeo.forecasting.features.null_copy`), which must show no skill. The test the other way
(``p_value_worse``) says where geometry made the forecast worse. Skill may come from the setting alone (a hard
task's RankMe differs from an easy one's, and so does its acquisition step): the **sibling copy** gives each run
the geometry of another seed of its own setting (:func:`ckptgeo.forecasting.features.sibling_copy`), and
"geometry helps" needs the run's own geometry to beat it too (``timing_p_value``, the same test); where it does
not, the verdict is "not shown beyond the setting's level", a failure to reject stated with the test's power
(``timing_mde``).

**Concordance** within a difficulty class (hard / easy, :attr:`RunCurves.difficulty_class`): for two acquired runs
of one class, their forecasts made at the same training step (half the earlier acquisition, before either
acquired) put them in the true order; ties count a half. Its p-value exchanges whole settings' acquisition steps
among the class's settings (seeds kept together; the forecasts at each run's checkpoints kept), one-sided, never
below what the number of settings allows (``min_p``); its 95% interval resamples tasks, then runs within them. The
paper's figures for geometry alone: 52% (easy) and 69% (hard).

**Across sizes**: each size forecast by a model fitted to the strictly smaller sizes only; its concordance tested
as above among that size's settings, with the test's power at a Kendall tau of :data:`POWER_TAU`
(:func:`concordance_power`).
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import pandas as pd

import ckptgeo.stats as stats
from ckptgeo._settings import Interval, setting, with_settings_doc
from ckptgeo.analysis.config import AnalysisConfig
from ckptgeo.forecasting.config import ForecastConfig
from ckptgeo.forecasting.calibrate import FRACTIONS, FitCache, scoring_rows, widen, widening
from ckptgeo.forecasting.data import RunCurves
from ckptgeo.forecasting.features import FEATURE_SETS, null_copy, run_features, sibling_copy
from ckptgeo.forecasting.model import DEFAULT_COVERAGE, DEFAULT_HORIZON, DEFAULT_MAX_HORIZON, HazardModel

__all__ = ["ForecastConfig", "SPLITS", "PAPER_CONCORDANCE", "SKILL_VERDICTS", "split_groups", "out_of_fold",
           "run_scores", "evaluation_table", "skill_table", "skill_verdict", "Concordance", "concordance",
           "concordance_table", "concordance_power", "sizes_table", "primary_split", "unit_of", "min_units",
           "sign_flip_mde", "POWER_TAU", "N_POWER"]

#: the held-out splits, in the order tables show them
SPLITS = ("task", "seed", "size")
#: within-class concordance of geometry with acquisition order, arXiv:2602.15997 v3 abstract
PAPER_CONCORDANCE = {"easy": 0.52, "hard": 0.69}
#: the across-sizes concordance test's power is stated at this Kendall tau (the claim table's margin in tau,
#: :data:`ckptgeo.claimtable.verdicts.TAU_MARGIN`), over this many planted forecasts (:func:`concordance_power`)
POWER_TAU = 0.75
N_POWER = 40




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
            rows.append({"split": split, "feature_set": name, "run": run.name, "task": run.task, "size": run.size,
                         "setting": run.setting, "difficulty": run.difficulty, **run_scores(run, fc, cfg)})
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


def unit_of(split: str) -> str:
    """The column of the scores that names a run's independent unit under ``split``: the held-out group where it
    holds whole settings (``task``, ``size``), else the run's setting (``seed`` and ``run`` groups cut across
    settings, whose seeds share their geometry and timing)."""
    return split if split in ("task", "size") else "setting"


def min_units(alpha: float) -> int:
    """The fewest units with which a one-sided sign-flip test can reach p < ``alpha`` (5 at 0.05).

    Examples
    --------
    >>> min_units(0.05), min_units(0.01)
    (5, 7)
    """
    return int(math.floor(math.log2(1 / alpha))) + 1


def _unit_means(d: pd.Series, units: pd.Series) -> np.ndarray:
    """Per unit, the mean of its runs' finite values of ``d`` (indexed by run)."""
    d = d[np.isfinite(d.to_numpy(float))]
    return d.groupby(units.reindex(d.index).to_numpy(), sort=True).mean().to_numpy(float)


def _sign_flip(values: np.ndarray, cfg: ForecastConfig, alternative: str = "greater") -> float:
    if not len(values):
        return math.nan
    return stats.sign_flip_test(values, n_permutations=cfg.n_permutations, seed=cfg.seed,
                                alternative=alternative).p_value


def _smallest_sign_p(n_units: int, cfg: ForecastConfig) -> float:
    return 2.0 ** -n_units if 2 ** n_units <= cfg.n_permutations else 1.0 / (cfg.n_permutations + 1)


#: effects tried by :func:`sign_flip_mde`, in units of the spread of the units' values
_MDE_STEPS = (0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0)


def sign_flip_mde(values: np.ndarray, cfg: ForecastConfig, *, power: float = 0.8, n_power: int = 200) -> float:
    """The smallest mean effect the one-sided sign-flip test over these units detects with ``power``: the least
    ``delta`` of :data:`_MDE_STEPS` x s (s the units' sd) at which the test rejects at ``cfg.alpha`` in ``power``
    of ``n_power`` draws of as many units, each N(delta, s^2). NaN where none does (too few units, or no spread).

    Examples
    --------
    >>> cfg = ForecastConfig(n_permutations=999)
    >>> math.isnan(sign_flip_mde(np.array([0.1, -0.2, 0.3, 0.0]), cfg))   # 4 units: never p < 0.05
    True
    >>> 0 < sign_flip_mde(np.array([0.1, -0.2, 0.3, 0.0, 0.2, -0.1, 0.05, 0.15]), cfg) < 0.5
    True
    """
    values = np.asarray(values, float)
    values = values[np.isfinite(values)]
    sd = float(values.std(ddof=1)) if len(values) > 1 else math.nan
    if not math.isfinite(sd) or sd <= 0 or _smallest_sign_p(len(values), cfg) >= cfg.alpha:
        return math.nan
    rng = np.random.default_rng(cfg.seed)
    draws = rng.normal(0.0, sd, (n_power, len(values)))
    # the relabellings of stats.sign_flip_test, once for every draw: all sign vectors where they are few
    exact = 2 ** len(values) <= cfg.n_permutations
    signs = (np.array(list(itertools.product((1.0, -1.0), repeat=len(values)))) if exact else
             np.where(np.random.default_rng(cfg.seed).random((cfg.n_permutations, len(values))) < 0.5, -1.0, 1.0))
    for k in _MDE_STEPS:
        shifted = draws + k * sd
        null = shifted @ signs.T / len(values)
        hits = sum(stats.p_value(float(obs), row, "greater", exact) < cfg.alpha
                   for obs, row in zip(shifted.mean(axis=1), null))
        if hits >= power * n_power:
            return k * sd
    return math.nan


def skill_table(scores: pd.DataFrame, cfg: ForecastConfig) -> pd.DataFrame:
    """Per split: geometry's skill over behaviour and its tests, with the **unit** of each test a run's held-out
    group where it holds whole settings (task, size), else its setting (:func:`unit_of`): the seeds of a setting
    share its geometry and timing, so they are one piece of evidence, not three.

    Columns: ``n_runs`` and ``n_units`` (held-out runs, and the units they form), ``min_p`` (the smallest p the
    units allow: ``2 ** -n_units``), ``delta_log_score`` (the mean over units of their runs' mean log-score
    difference behaviour minus geometry; positive = geometry better), ``skill`` (1 - LS_geometry / LS_behaviour over
    runs), ``p_value`` (one-sided sign-flip test over the units' means, :func:`ckptgeo.stats.sign_flip_test`:
    geometry better), ``p_value_worse`` (geometry worse); the same for the null copy (``null_``); the sibling copy's
    skill over behaviour (``sibling_n_runs``, ``sibling_delta_log_score``: what knowing the setting's geometry
    gives) and the run's own geometry against it on the runs that took a sibling's geometry
    (``timing_delta_log_score``: the sibling's log score minus the run's own, positive = the run's own timing helps;
    ``timing_n_units``, ``timing_p_value``, one-sided, and ``timing_mde``: the smallest timing gain in log score
    the test detects with 80% power, :func:`sign_flip_mde`); ``verdict`` reads them all (:func:`skill_verdict`)."""
    rows = []
    for split, g in scores.groupby("split", sort=False):
        piv = g.pivot_table(index="run", columns="feature_set", values="log_score")
        if "behaviour" not in piv or "geometry" not in piv:
            continue
        units = g.drop_duplicates("run").set_index("run")[unit_of(split)] if unit_of(split) in g else \
            pd.Series(piv.index, index=piv.index)
        row = {"split": split}
        for name, label in (("geometry", ""), ("geometry_null", "null_")):
            if name not in piv:
                row.update({f"{label}n_runs": 0, f"{label}n_units": 0, f"{label}delta_log_score": math.nan,
                            f"{label}skill": math.nan, f"{label}p_value": math.nan,
                            f"{label}p_value_worse": math.nan})
                continue
            both = piv[["behaviour", name]].dropna()
            m = _unit_means(both["behaviour"] - both[name], units)
            row.update({f"{label}n_runs": len(both), f"{label}n_units": len(m),
                        f"{label}delta_log_score": float(np.mean(m)) if len(m) else math.nan,
                        f"{label}skill": float(1 - both[name].mean() / both["behaviour"].mean())
                        if len(both) and both["behaviour"].mean() > 0 else math.nan,
                        f"{label}p_value": _sign_flip(m, cfg), f"{label}p_value_worse": _sign_flip(m, cfg, "less")})
        row["min_p"] = _smallest_sign_p(row["n_units"], cfg) if row["n_units"] else math.nan
        sib = piv[["behaviour", "geometry", "geometry_sibling"]].dropna() if "geometry_sibling" in piv else None
        if sib is None or not len(sib):
            row.update(sibling_n_runs=0, sibling_delta_log_score=math.nan, timing_delta_log_score=math.nan,
                       timing_n_units=0, timing_p_value=math.nan, timing_mde=math.nan)
        else:
            m = _unit_means(sib["geometry_sibling"] - sib["geometry"], units)
            row.update(sibling_n_runs=len(sib),
                       sibling_delta_log_score=float(np.mean(_unit_means(sib["behaviour"] - sib["geometry_sibling"],
                                                                         units))),
                       timing_delta_log_score=float(np.mean(m)), timing_n_units=len(m),
                       timing_p_value=_sign_flip(m, cfg), timing_mde=sign_flip_mde(m, cfg))
        row["verdict"] = skill_verdict(row, cfg.alpha)
        rows.append(row)
    return pd.DataFrame(rows)


#: the verdicts of :func:`skill_verdict`, in the order of how much they say
SKILL_VERDICTS = ("geometry helps", "not shown beyond the setting's level", "timing untested", "no skill shown",
                  "geometry worse", "inconclusive")


def skill_verdict(row: dict, alpha: float) -> str:
    """One of :data:`SKILL_VERDICTS`, each test counting units (:func:`skill_table`), at least :func:`min_units`:

    * ``geometry helps``: better than behaviour alone (``p_value`` < ``alpha``) *and* better than a sibling's
      geometry of the same setting (``timing_p_value`` < ``alpha``): the run's own geometry tells its timing;
    * ``not shown beyond the setting's level``: better than behaviour, not shown better than a sibling's geometry:
      a failure to reject, not a finding (the row states the timing test's power, ``timing_mde``); the gain shown
      is what the geometry says of the task, size and schedule (the paper's "coarse difficulty, not fine timing");
    * ``timing untested``: better than behaviour, and fewer units than :func:`min_units` with a sibling to test
      timing;
    * ``geometry worse`` (the one-sided test the other way) / ``no skill shown`` (neither: not evidence of no
      skill);
    * ``inconclusive``: fewer held-out units than :func:`min_units` (no p below ``alpha`` is possible), or the null
      copy showing skill too, so the test cannot be trusted on these data.
    """
    need = min_units(alpha)
    n = row.get("n_units", row.get("n_runs", 0))
    p, p0 = row.get("p_value", math.nan), row.get("null_p_value", math.nan)
    if n < need or not math.isfinite(p):
        return "inconclusive"
    if math.isfinite(p0) and p0 < alpha:
        return "inconclusive"
    if p < alpha:
        pt = row.get("timing_p_value", math.nan)
        if row.get("timing_n_units", row.get("sibling_n_runs", 0)) < need or not math.isfinite(pt):
            return "timing untested"
        return "geometry helps" if pt < alpha else "not shown beyond the setting's level"
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
    one-sided permutation p (whole settings' acquisitions exchanged), its 95% interval (runs resampled within tasks
    resampled, percentile), the settings the test counts (``n_units``) and the smallest p their relabellings allow
    (``min_p``: above alpha, the design cannot show concordance whatever the forecasts)."""

    n_pairs: int
    concordance: float
    p_value: float
    low: float = math.nan
    high: float = math.nan
    n_units: int = 0
    min_p: float = math.nan


def _unit_blocks(units: list) -> list[np.ndarray]:
    """The runs of each unit (in order of first appearance), as index arrays."""
    members: dict = {}
    for i, u in enumerate(units):
        members.setdefault(u, []).append(i)
    return [np.asarray(m) for m in members.values()]


def _smallest_p(sizes: list[int], n_permutations: int) -> float:
    """The smallest p of a test that exchanges whole units among units of the same size: one over the number of
    distinct relabellings (the product over sizes of (units of that size)!), or over the draws where they are more."""
    total = math.prod(math.factorial(c) for c in Counter(sizes).values())
    return 1.0 / total if total <= n_permutations else 1.0 / (n_permutations + 1)


def _settings_permuted(steps: list, meds: list, acq: np.ndarray, units: list | None, cfg: ForecastConfig):
    """The concordance's permutation test with whole units' acquisitions exchanged (:func:`concordance`):
    (PermutationResult, number of units, smallest p they allow)."""
    blocks = _unit_blocks(list(units) if units is not None else list(range(len(acq))))
    sizes = [len(b) for b in blocks]

    def relabelled(unit_order: np.ndarray) -> float:
        order = np.empty(len(acq), dtype=np.int64)
        for block, source in zip(blocks, unit_order):
            order[block] = blocks[source]   # the same number of runs: permuted within strata of sizes
        return _pairs_concordance(steps, meds, acq, order)

    res = stats.permutation_test(relabelled, len(blocks), strata=sizes, n_permutations=cfg.n_permutations,
                                 seed=cfg.seed)
    return res, len(blocks), _smallest_p(sizes, cfg.n_permutations)


def concordance_power(acquisitions, units: list, cfg: ForecastConfig, *, tau: float = POWER_TAU,
                      n_power: int = N_POWER) -> float:
    """The power of the concordance test (:func:`concordance`) on a design: the share of ``n_power`` planted
    forecasts in which it rejects at ``cfg.alpha``.

    Each planted forecast is a run's own acquisition step plus Gaussian noise (one value for all its checkpoints),
    with the noise's sd set so that the expected concordance over the design's pairs is ``(1 + tau) / 2`` (Kendall's
    tau ``tau``, run-level information: what a forecast that tells the order would give). 0 where the design's
    settings allow no p below alpha.

    Parameters
    ----------
    acquisitions : sequence of float, shape (n_runs,)
        The acquired runs' acquisition steps.
    units : list, shape (n_runs,)
        Each run's setting, as :func:`concordance` takes it.
    tau : float in (0, 1), default=:data:`POWER_TAU`
    n_power : int, default=:data:`N_POWER`
    """
    from scipy.optimize import brentq
    from scipy.stats import norm

    acq = np.asarray(acquisitions, float)
    iu = np.triu_indices(len(acq), 1)
    gap = np.abs(acq[iu[0]] - acq[iu[1]])
    gap = gap[gap > 0]
    if not len(gap) or _smallest_p([len(b) for b in _unit_blocks(list(units))], cfg.n_permutations) >= cfg.alpha:
        return 0.0
    target = (1 + tau) / 2
    log_sd = brentq(lambda x: float(norm.cdf(gap / (math.exp(x) * math.sqrt(2))).mean()) - target, -20, 20)
    rng = np.random.default_rng(cfg.seed)
    flat = [np.zeros(1)] * len(acq)
    hits = 0
    for _ in range(n_power):
        planted = [np.array([v]) for v in acq + rng.normal(0, math.exp(log_sd), len(acq))]
        hits += _settings_permuted(flat, planted, acq, units, cfg)[0].p_value < cfg.alpha
    return hits / n_power


def concordance(forecasts: list[tuple[np.ndarray, np.ndarray, float]], cfg: ForecastConfig,
                clusters: list | None = None, units: list | None = None) -> Concordance:
    """The :class:`Concordance` of acquired runs' forecasts.

    Parameters
    ----------
    forecasts : list of (steps, median_step, acquisition_step)
        Per acquired run: the steps of its forecast checkpoints (increasing), the median forecast at each (NaN:
        beyond the horizon, ordered after any finite step), and its acquisition step.
    clusters : list, optional
        Per run, its task: the interval resamples tasks, then runs within them (``stats.hierarchical_bootstrap``,
        ``cfg.n_permutations`` resamples); None: runs alone.
    units : list, optional
        Per run, its setting (:attr:`RunCurves.setting`): the p-value's null gives each setting the acquisition
        steps of another setting with as many acquired runs, its seeds kept together (in their order), so that
        forecasts and acquisitions that share a setting's level but not its timing are not counted as evidence
        (``stats.permutation_test`` over settings, strata by their number of runs; exact where the relabellings
        are few). None: each run its own unit.

    Notes
    -----
    The seeds of a setting share its task's geometry and timing: permuting single runs' acquisitions treats
    them as independent, and on synthetic designs whose forecasts knew only the task (unrelated to acquisition) it
    rejected in 11-20% of designs at alpha 5%. Exchanging whole settings keeps that structure under the null
    (``scripts/forecast_false_positives.py`` measures both).
    """
    if len(forecasts) < 2:
        return Concordance(0, math.nan, math.nan)
    steps = [np.asarray(s, float) for s, _, _ in forecasts]
    meds = [np.where(np.isfinite(m), m, np.inf) for _, m, _ in forecasts]
    acq = np.array([float(a) for _, _, a in forecasts])
    n_pairs = int(sum(1 for x in range(len(acq)) for y in range(x + 1, len(acq)) if acq[x] != acq[y]))
    if not n_pairs:
        return Concordance(0, math.nan, math.nan)
    res, n_units, min_p = _settings_permuted(steps, meds, acq, units, cfg)

    def on(frame):
        idx = frame["run"].to_numpy()
        return _pairs_concordance([steps[i] for i in idx], [meds[i] for i in idx], acq[idx], np.arange(len(idx)))

    frame = pd.DataFrame({"task": list(clusters) if clusters is not None else range(len(acq)),
                          "run": np.arange(len(acq))})
    boot = stats.hierarchical_bootstrap(frame, on, levels=("task", "run"), n_resamples=cfg.n_permutations,
                                        seed=cfg.seed)
    return Concordance(n_pairs, res.statistic, res.p_value, boot.low, boot.high, n_units, min_p)


def _concordance(runs: list[RunCurves], fcs: list, cfg: ForecastConfig) -> Concordance:
    keep = [(r, fc) for r, fc in zip(runs, fcs) if fc is not None and r.acquisition_step is not None and len(fc)]
    return concordance([(fc["step"].to_numpy(float), fc["median_step"].to_numpy(float), r.acquisition_step)
                        for r, fc in keep], cfg, clusters=[r.task for r, _ in keep],
                       units=[r.setting for r, _ in keep])


def concordance_table(runs: list[RunCurves], fcs: dict[str, list], split: str, cfg: ForecastConfig) -> pd.DataFrame:
    """Per feature set and difficulty class (:attr:`RunCurves.difficulty_class`: hard / easy): runs, acquired runs,
    pairs, concordance with its 95% interval and permutation p (settings exchanged, :func:`concordance`), the
    settings it counts (``n_units``) and the smallest p they allow (``min_p``), the paper's figure for that class."""
    rows = []
    classes = sorted({r.difficulty_class for r in runs})
    for name, per_run in fcs.items():
        for cls in classes:
            idx = [i for i, r in enumerate(runs) if r.difficulty_class == cls]
            c = _concordance([runs[i] for i in idx], [per_run[i] for i in idx], cfg)
            rows.append({"split": split, "feature_set": name, "difficulty": cls, "n_runs": len(idx),
                         "n_acquired": sum(runs[i].acquisition_step is not None for i in idx), "n_pairs": c.n_pairs,
                         "concordance": c.concordance, "concordance_low": c.low, "concordance_high": c.high,
                         "p_value": c.p_value, "n_units": c.n_units, "min_p": c.min_p,
                         "paper": PAPER_CONCORDANCE.get(cls, math.nan)})
    return pd.DataFrame(rows)


def sizes_table(runs: list[RunCurves], cfg: ForecastConfig, sets=FEATURE_SETS) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Each size (but the smallest) forecast from the strictly smaller sizes: (table, per-run scores).

    Table columns: size, fitted_on (the smaller sizes), feature_set, n_runs, n_acquired, rel_error_25/50/75
    (medians), coverage (the widened intervals; :mod:`ckptgeo.forecasting.calibrate`, inner groups from the smaller
    sizes), coverage_model (the model's own), widening, n_pairs, concordance (order of acquisition) with its 95%
    interval (concordance_low/high), p_value (permutation, settings exchanged: :func:`concordance`), n_units (the
    size's settings with an acquired run), min_p (the smallest p they allow), power (the test's power at a Kendall tau
    of :data:`POWER_TAU`, :func:`concordance_power`), kendall_tau (2 x concordance - 1).
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
        acquired = [runs[i] for i in test if runs[i].acquisition_step is not None]
        power = concordance_power([r.acquisition_step for r in acquired], [r.setting for r in acquired], cfg)
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
                         "concordance_high": c.high, "p_value": c.p_value, "n_units": c.n_units, "min_p": c.min_p,
                         "power": power,
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
