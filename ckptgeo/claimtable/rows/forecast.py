"""Two claim rows on the acquisition forecast (:mod:`ckptgeo.forecasting`), each with its test.

* ``forecast_geometry``: "geometry improves the forecast of acquisition over behaviour alone, beyond its setting's
  level": the one-sided Wilcoxon test across held-out runs of the per-run log-score difference (behaviour minus
  behaviour + geometry), on the most demanding split the study allows (leave one task out, else one seed, else one
  run), and the same test of the run's own geometry against a sibling's (another seed of the same setting), both
  needed for "reproduced" (:func:`ckptgeo.forecasting.evaluate.skill_verdict`); "not reproduced" only where the
  test the other way shows geometry worse (else inconclusive); read beside the same test on the null copy (RankMe and
  cross-checkpoint curves replaced by noise pooled over all runs), which must not show skill;
  with the concordance of forecast and actual acquisition order among
  easy and among hard runs (the ``forecast_concordance`` table), its interval and p, beside the paper's 52% and 69%.
* ``forecast_across_sizes``: "small sizes forecast a larger size's acquisition": the largest size forecast by a
  model fitted to the smaller sizes only; the concordance of its forecast with the actual acquisition order of that
  size's runs, tested by permuting their acquisition steps (one-sided).

Both read the tables of the analysis step ``forecast`` (:mod:`ckptgeo.forecasting.tables`) and are inconclusive
where the data cannot say (too few held-out runs, one size only, a null copy that shows skill too).
"""

from __future__ import annotations

import math

import pandas as pd

from ckptgeo.forecasting.evaluate import PAPER_CONCORDANCE, SPLITS, skill_verdict
from ckptgeo.claimtable.registry import Claim, register_claim
from ckptgeo.claimtable.verdicts import MIN_CASES, MIN_SETTINGS

__all__ = ["forecast_geometry", "forecast_across_sizes", "hard_easy_concordance"]


def hard_easy_concordance(concordance: pd.DataFrame | None, feature_set: str) -> dict:
    """The rows of the ``forecast_concordance`` table for ``feature_set`` among the easy and among the hard runs
    (the classes :attr:`ckptgeo.forecasting.data.RunCurves.difficulty_class` gives: the studies' rule
    :func:`ckptgeo.suites.tasks.is_hard` for a study's runs): class -> row (``n_pairs``, ``concordance``,
    ``concordance_low``, ``concordance_high``, ``p_value``)."""
    if concordance is None or concordance.empty or "difficulty" not in concordance:
        return {}
    rows = concordance[(concordance["feature_set"] == feature_set) & concordance["difficulty"].isin(("easy", "hard"))]
    return {str(r["difficulty"]): r for _, r in rows.iterrows()}


def _pct(x: float) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x:.0%}"


def _conc_text(conc: dict) -> str:
    parts = []
    for cls in ("easy", "hard"):
        g, b = conc.get("geometry", {}).get(cls), conc.get("behaviour", {}).get(cls)
        if g is None:
            continue
        parts.append(f"{cls} concordance geometry {_pct(g['concordance'])} [{_pct(g['concordance_low'])}, "
                     f"{_pct(g['concordance_high'])}] (p = {g['p_value']:.3g}) behaviour "
                     f"{_pct(b['concordance']) if b is not None else '-'} over {int(g['n_pairs'])} pairs "
                     f"(paper {PAPER_CONCORDANCE[cls]:.0%})")
    return "; ".join(parts)


@register_claim(id="forecast_geometry", order=170,
                claim="geometry improves the forecast of acquisition over behaviour alone, beyond its setting's level",
                source="arXiv:2602.15997 v3 abstract: geometry encodes coarse difficulty, not fine timing; 'not a prediction tool'",
                anchor="claim-forecast-geometry", reads=("forecast_skill", "forecast_concordance"), nulls=())
def forecast_geometry(ctx) -> Claim:
    skill, cc = ctx.tables.get("forecast_skill"), ctx.tables.get("forecast_concordance")
    paper = "52% (easy) / 69% (hard) within-class concordance; geometry encodes coarse difficulty, not fine timing"
    evidence = "forecast/forecast_skill.parquet, forecast/forecast_evaluation.parquet, figures/forecast/"
    test = ("one-sided Wilcoxon signed-rank tests across held-out runs of the log-score difference, against behaviour "
            "and against a sibling's geometry (another seed of the same setting); null copy beside")
    if skill is None or skill.empty:
        return Claim("forecast_geometry", ctx.claim, paper, "no held-out split (fewer than two runs or groups)",
                     "inconclusive", "nothing to hold out", evidence, ctx.source, test=test)
    order = [s for s in (*SPLITS, "run") if s in set(skill["split"])]
    row = skill.set_index("split").loc[order[0]]
    ctext = _conc_text({fs: hard_easy_concordance(cc, fs) for fs in ("behaviour", "geometry")})
    measured = (f"held out by {order[0]}: {int(row['n_runs'])} runs, log score behaviour - geometry "
                f"{row['delta_log_score']:+.3f} (skill {_pct(row['skill'])}), p = {row['p_value']:.3g}; null copy "
                f"{row['null_delta_log_score']:+.3f}, p = {row['null_p_value']:.3g}")
    n, p, p0 = int(row["n_runs"]), float(row["p_value"]), float(row["null_p_value"])
    pw = float(row.get("p_value_worse", math.nan))
    ns, pt = float(row.get("sibling_n_runs", 0)), float(row.get("timing_p_value", math.nan))
    ns = int(ns) if math.isfinite(ns) else 0   # a table written before the sibling copy has no such column
    if ns:
        measured += (f"; a sibling's geometry (another seed of the setting) {row['sibling_delta_log_score']:+.3f}, "
                     f"the run's own over it {row['timing_delta_log_score']:+.3f}, p = {pt:.3g} over {ns} runs")
    measured += f"; {ctext}" if ctext else ""
    said = skill_verdict(row.to_dict(), ctx.alpha)   # the forecast's own verdict; the row's reason says why in words
    verdict = {"geometry helps": "reproduced", "geometry worse": "not reproduced"}.get(said, "inconclusive")
    if n < 5 or not math.isfinite(p):
        why = f"{n} held-out runs; a one-sided Wilcoxon test needs 5 to reach p < {ctx.alpha}"
    elif math.isfinite(p0) and p0 < ctx.alpha:
        why = (f"the null copy (geometry made of noise) shows skill too (p = {p0:.3g}): the test cannot tell "
               "geometry from curves that say nothing of the run's own acquisition")
    else:
        why = {
            "geometry helps": f"geometry's skill p = {p:.3g} < {ctx.alpha}, and the run's own geometry beats a sibling's "
                              f"(p = {pt:.3g}); the null copy's p = {p0:.3g}",
            "setting level only": f"geometry's skill p = {p:.3g}, but a sibling's geometry of the same setting "
                                  f"forecasts as well (the run's own over it p = {pt:.3g}): the gain is what the "
                                  "geometry says of the setting, not of this run's timing",
            "timing untested": f"geometry's skill p = {p:.3g}, but {ns} held-out runs have a sibling (another seed "
                               "of the setting) to test whether the gain is the setting's level; 5 are needed",
            "geometry worse": f"geometry forecasts worse than behaviour alone: one-sided p = {pw:.3g} < {ctx.alpha} "
                              f"(skill p = {p:.3g})",
        }.get(said, f"no skill shown (p = {p:.3g}) and geometry not shown worse (p = {pw:.3g}): a test that fails to "
                    "reject is not evidence of no skill")
    return Claim("forecast_geometry", ctx.claim, paper, measured, verdict, why, evidence, ctx.source,
                 float(row["delta_log_score"]), math.nan, math.nan, float(row["null_delta_log_score"]), p, test)


@register_claim(id="forecast_across_sizes", order=180,
                claim="small sizes forecast a larger size's acquisition (step and order)",
                source="a secondary summary of the paper: small proxies map large runs; v3 abstract: fails at 26% where the task order reverses across scales",
                anchor="claim-forecast-across-sizes", reads=("forecast_sizes",), nulls=())
def forecast_across_sizes(ctx) -> Claim:
    sizes = ctx.tables.get("forecast_sizes")
    paper = "'small proxies map large runs' (a summary of the paper); prediction fails at 26% when task order reverses"
    evidence = "forecast/forecast_sizes.parquet"
    test = "concordance of forecast and actual acquisition order at the largest size, acquisition steps permuted"
    if sizes is None or sizes.empty:
        return Claim("forecast_across_sizes", ctx.claim, paper, "one size only", "inconclusive",
                     "a forecast across sizes needs two sizes or more", evidence, ctx.source, test=test)
    largest = sizes[sizes["size"] == sizes["size"].iloc[-1]].set_index("feature_set")
    row = largest.loc["geometry"] if "geometry" in largest.index else largest.iloc[0]
    beh = largest.loc["behaviour"] if "behaviour" in largest.index else None
    measured = (f"{row.name if isinstance(row.name, str) else 'geometry'} set, size {sizes['size'].iloc[-1]} from "
                f"{sizes['fitted_on'].iloc[-1]}: concordance {_pct(row['concordance'])} "
                f"[{_pct(row.get('concordance_low', math.nan))}, {_pct(row.get('concordance_high', math.nan))}] over "
                f"{int(row['n_pairs'])} pairs (tau {row['kendall_tau']:+.2f}), p = {row['p_value']:.3g}; median "
                f"relative error at 50% of the way {_pct(row['rel_error_50'])}; coverage of the widened 80% intervals "
                f"{_pct(row['coverage'])} (the model's own {_pct(row.get('coverage_model', math.nan))})"
                + (f"; behaviour alone: concordance {_pct(beh['concordance'])}, p = {beh['p_value']:.3g}"
                   if beh is not None else ""))
    n, p = int(row["n_acquired"]), float(row["p_value"])
    if n < MIN_CASES or not math.isfinite(p):
        verdict, why = "inconclusive", f"{n} acquired runs at the largest size; at least {MIN_CASES} are needed"
    elif p < ctx.alpha:
        verdict, why = "reproduced", f"order concordance p = {p:.3g} < {ctx.alpha}"
    elif n < MIN_SETTINGS:
        verdict, why = "inconclusive", f"p = {p:.3g} over {n} acquired runs: too few to tell absence from a weak effect"
    else:
        verdict, why = "not reproduced", f"order concordance p = {p:.3g} >= {ctx.alpha}"
    return Claim("forecast_across_sizes", ctx.claim, paper, measured, verdict, why, evidence, ctx.source,
                 float(row["concordance"]), float(row.get("concordance_low", math.nan)),
                 float(row.get("concordance_high", math.nan)), 0.5, p, test)
