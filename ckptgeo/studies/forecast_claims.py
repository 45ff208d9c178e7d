"""Two claim rows on the acquisition forecast (:mod:`ckptgeo.forecasting`), each with its test.

* ``forecast_geometry``: "geometry improves the forecast of acquisition over behaviour alone": the one-sided
  Wilcoxon test across held-out runs of the per-run log-score difference (behaviour minus behaviour + geometry),
  on the most demanding split the study allows (leave one task out, else one seed, else one run), read beside the
  same test on the null copy (RankMe and cross-checkpoint curves replaced by noise), which must not show skill;
  with the concordance of forecast and actual acquisition order among easy and among hard runs, beside the
  paper's 52% and 69%.
* ``forecast_across_sizes``: "small sizes forecast a larger size's acquisition": the largest size forecast by a
  model fitted to the smaller sizes only; the concordance of its forecast with the actual acquisition order of that
  size's runs, tested by permuting their acquisition steps (one-sided).

Both read the tables of the analysis step ``forecast`` (:mod:`ckptgeo.forecasting.tables`) and are inconclusive
where the data cannot say (too few held-out runs, one size only, a null copy that shows skill too).
"""

from __future__ import annotations

import math

import pandas as pd

from ckptgeo.forecasting.evaluate import PAPER_CONCORDANCE, SPLITS, ForecastConfig, concordance
from ckptgeo.analysis.curves import grid_run
from ckptgeo.studies.claims import ALPHA, MIN_CASES, MIN_SETTINGS, Claim, is_hard, register_claim

__all__ = ["forecast_geometry", "forecast_across_sizes", "hard_easy_concordance"]

_PAPER = ("arXiv:2602.15997 v3 abstract: geometry encodes coarse difficulty, not fine timing; 'not a prediction tool' "
          "(docs/definitions.md#claim-forecast-geometry)")
_SIZES = ("a secondary summary of the paper: small proxies map large runs; v3 abstract: fails at 26% where the task "
          "order reverses across scales (docs/definitions.md#claim-forecast-across-sizes)")


def hard_easy_concordance(forecast: pd.DataFrame, feature_set: str, *, n_permutations: int = 999,
                          seed: int = 0) -> dict:
    """Concordance of forecast and actual acquisition order among the easy and among the hard grid runs
    (:func:`ckptgeo.studies.claims.is_hard`) of the ``forecast`` table: class -> (n_pairs, concordance, p)."""
    out = {}
    if forecast is None or forecast.empty:
        return out
    f = forecast[(forecast["feature_set"] == feature_set) & forecast["acquisition_step"].notna()]
    cfg = ForecastConfig(n_permutations=n_permutations, seed=seed)
    per_class: dict[str, list] = {}
    for (model, suite), g in f.groupby(["model", "suite"], sort=True):
        run = grid_run(model)
        if run is None:
            continue
        g = g.sort_values("step")
        cls = "hard" if is_hard(run["task"], run["level"]) else "easy"
        per_class.setdefault(cls, []).append((g["step"].to_numpy(float), g["median_step"].to_numpy(float),
                                              float(g["acquisition_step"].iloc[0])))
    for cls, items in sorted(per_class.items()):
        out[cls] = concordance(items, cfg)
    return out


def _pct(x: float) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x:.0%}"


@register_claim(id="forecast_geometry", reads=("forecast_skill", "forecast"))
def forecast_geometry(ctx) -> Claim:
    skill, fc = ctx.tables.get("forecast_skill"), ctx.tables.get("forecast")
    claim = "geometry improves the forecast of acquisition over behaviour alone"
    paper = "52% (easy) / 69% (hard) within-class concordance; geometry encodes coarse difficulty, not fine timing"
    evidence = "forecast/forecast_skill.parquet, forecast/forecast_evaluation.parquet, figures/forecast/"
    test = "one-sided Wilcoxon signed-rank test across held-out runs of the log-score difference; null copy beside"
    if skill is None or skill.empty:
        return Claim("forecast_geometry", claim, paper, "no held-out split (fewer than two runs or groups)",
                     "inconclusive", "nothing to hold out", evidence, _PAPER, test=test)
    order = [s for s in (*SPLITS, "run") if s in set(skill["split"])]
    row = skill.set_index("split").loc[order[0]]
    conc = {fs: hard_easy_concordance(fc, fs, n_permutations=ctx.n_permutations, seed=ctx.seed)
            for fs in ("behaviour", "geometry")} if fc is not None else {}
    ctext = "; ".join(f"{cls} concordance geometry {_pct(conc['geometry'].get(cls, (0, math.nan))[1])} "
                      f"behaviour {_pct(conc['behaviour'].get(cls, (0, math.nan))[1])} over "
                      f"{conc['geometry'].get(cls, (0,))[0]} pairs (paper {PAPER_CONCORDANCE[cls]:.0%})"
                      for cls in ("easy", "hard") if cls in conc.get("geometry", {}))
    measured = (f"held out by {order[0]}: {int(row['n_runs'])} runs, log score behaviour - geometry "
                f"{row['delta_log_score']:+.3f} (skill {_pct(row['skill'])}), p = {row['p_value']:.3g}; null copy "
                f"{row['null_delta_log_score']:+.3f}, p = {row['null_p_value']:.3g}" + (f"; {ctext}" if ctext else ""))
    n, p, p0 = int(row["n_runs"]), float(row["p_value"]), float(row["null_p_value"])
    if n < 5 or not math.isfinite(p):
        verdict, why = "inconclusive", f"{n} held-out runs; a one-sided Wilcoxon test needs 5 to reach p < {ALPHA}"
    elif math.isfinite(p0) and p0 < ALPHA:
        verdict, why = "inconclusive", (f"the null copy (RankMe as noise) shows skill too (p = {p0:.3g}): the test "
                                        "cannot tell geometry from a feature that carries no timing on these runs")
    elif p < ALPHA:
        verdict, why = "reproduced", f"geometry's skill p = {p:.3g} < {ALPHA}; the null copy's p = {p0:.3g}"
    else:
        verdict, why = "not reproduced", f"geometry's skill p = {p:.3g} >= {ALPHA} (no skill over behaviour shown)"
    return Claim("forecast_geometry", claim, paper, measured, verdict, why, evidence, _PAPER,
                 float(row["delta_log_score"]), math.nan, math.nan, float(row["null_delta_log_score"]), p, test)


@register_claim(id="forecast_across_sizes", reads=("forecast_sizes",))
def forecast_across_sizes(ctx) -> Claim:
    sizes = ctx.tables.get("forecast_sizes")
    claim = "small sizes forecast a larger size's acquisition (step and order)"
    paper = "'small proxies map large runs' (a summary of the paper); prediction fails at 26% when task order reverses"
    evidence = "forecast/forecast_sizes.parquet"
    test = "concordance of forecast and actual acquisition order at the largest size, acquisition steps permuted"
    if sizes is None or sizes.empty:
        return Claim("forecast_across_sizes", claim, paper, "one size only", "inconclusive",
                     "a forecast across sizes needs two sizes or more", evidence, _SIZES, test=test)
    largest = sizes[sizes["size"] == sizes["size"].iloc[-1]].set_index("feature_set")
    row = largest.loc["geometry"] if "geometry" in largest.index else largest.iloc[0]
    beh = largest.loc["behaviour"] if "behaviour" in largest.index else None
    measured = (f"{row.name if isinstance(row.name, str) else 'geometry'} set, size {sizes['size'].iloc[-1]} from "
                f"{sizes['fitted_on'].iloc[-1]}: concordance {_pct(row['concordance'])} over {int(row['n_pairs'])} "
                f"pairs (tau {row['kendall_tau']:+.2f}), p = {row['p_value']:.3g}; median relative error at 50% of "
                f"the way {_pct(row['rel_error_50'])}; coverage {_pct(row['coverage'])}"
                + (f"; behaviour alone: concordance {_pct(beh['concordance'])}, p = {beh['p_value']:.3g}"
                   if beh is not None else ""))
    n, p = int(row["n_acquired"]), float(row["p_value"])
    if n < MIN_CASES or not math.isfinite(p):
        verdict, why = "inconclusive", f"{n} acquired runs at the largest size; at least {MIN_CASES} are needed"
    elif p < ALPHA:
        verdict, why = "reproduced", f"order concordance p = {p:.3g} < {ALPHA}"
    elif n < MIN_SETTINGS:
        verdict, why = "inconclusive", f"p = {p:.3g} over {n} acquired runs: too few to tell absence from a weak effect"
    else:
        verdict, why = "not reproduced", f"order concordance p = {p:.3g} >= {ALPHA}"
    return Claim("forecast_across_sizes", claim, paper, measured, verdict, why, evidence, _SIZES,
                 float(row["concordance"]), math.nan, math.nan, 0.5, p, test)
