"""Two claim rows on the acquisition forecast (:mod:`ckptgeo.forecasting`), each with its test.

* ``forecast_geometry``: "geometry improves the forecast of acquisition over behaviour alone, beyond its setting's
  level": the one-sided sign-flip test over independent units (the held-out tasks, else the settings: the seeds of
  a setting are one piece of evidence) of the log-score difference (behaviour minus behaviour + geometry), on the
  most demanding split the study allows (leave one task out, else one seed, else one run), and the same test of the
  run's own geometry against a sibling's (another seed of the same setting), both needed for "reproduced"
  (:func:`ckptgeo.forecasting.evaluate.skill_verdict`); "not reproduced" only where the test the other way shows
  geometry worse (else inconclusive; a gain a sibling's geometry gives as well is "not shown beyond the setting's
  level", with the smallest timing gain the test could have found); read beside the same test on the null copy
  (RankMe and cross-checkpoint curves replaced by noise pooled over all runs), which must not show skill; with the
  concordance of forecast and actual acquisition order among easy and among hard runs (the
  ``forecast_concordance`` table: whole settings' acquisitions exchanged), its interval and p, beside the paper's
  52% and 69%.
* ``forecast_across_sizes``: "small sizes forecast a larger size's acquisition": the largest size forecast by a
  model fitted to the smaller sizes only; the concordance of its forecast with the actual acquisition order of that
  size's runs, tested by exchanging whole settings' acquisition steps (one-sided); "not reproduced" only where the
  test had power >= 80% at a Kendall tau of 0.75 (:func:`ckptgeo.forecasting.evaluate.concordance_power`).

Both read the tables of the analysis step ``forecast`` (:mod:`ckptgeo.forecasting.tables`) and are inconclusive
where the data cannot say (too few held-out units or settings for a p below alpha, one size only, a null copy that
shows skill too, a test without power).
"""

from __future__ import annotations

import math

import pandas as pd

from ckptgeo.claimtable.power import POWER
from ckptgeo.claimtable.registry import Claim, register_claim
from ckptgeo.claimtable.verdicts import MIN_CASES
from ckptgeo.forecasting.evaluate import PAPER_CONCORDANCE, POWER_TAU, SPLITS, min_units, skill_verdict

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


def _units_text(row, alpha: float) -> str:
    """", 4 settings: p >= 0.042" for a concordance row (nothing for a table written before it counted settings)."""
    n, low = row.get("n_units", math.nan), row.get("min_p", math.nan)
    if n is None or not math.isfinite(float(n)):
        return ""
    text = f", {int(n)} settings"
    return text + (f", so p >= {low:.2g}: too few to show it" if math.isfinite(low) and low >= alpha else "")


def _conc_text(conc: dict, alpha: float) -> str:
    parts = []
    for cls in ("easy", "hard"):
        g, b = conc.get("geometry", {}).get(cls), conc.get("behaviour", {}).get(cls)
        if g is None:
            continue
        parts.append(f"{cls} concordance geometry {_pct(g['concordance'])} [{_pct(g['concordance_low'])}, "
                     f"{_pct(g['concordance_high'])}] (p = {g['p_value']:.3g}{_units_text(g, alpha)}) behaviour "
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
    test = ("one-sided sign-flip tests over held-out tasks (else settings: seeds of a setting are one unit) of the "
            "log-score difference, against behaviour and against a sibling's geometry (another seed of the same "
            "setting); null copy beside")
    if skill is None or skill.empty:
        return Claim("forecast_geometry", ctx.claim, paper, "no held-out split (fewer than two runs or groups)",
                     "inconclusive", "nothing to hold out", evidence, ctx.source, test=test)
    order = [s for s in (*SPLITS, "run") if s in set(skill["split"])]
    row = skill.set_index("split").loc[order[0]]
    ctext = _conc_text({fs: hard_easy_concordance(cc, fs) for fs in ("behaviour", "geometry")}, ctx.alpha)
    need = min_units(ctx.alpha)
    nu = row.get("n_units", math.nan)
    n = int(nu) if nu is not None and math.isfinite(float(nu)) else int(row["n_runs"])   # older tables: runs
    unit = "held-out tasks" if order[0] == "task" else ("sizes" if order[0] == "size" else "settings")
    measured = (f"held out by {order[0]}: {int(row['n_runs'])} runs in {n} {unit}, log score behaviour - geometry "
                f"{row['delta_log_score']:+.3f} (skill {_pct(row['skill'])}), p = {row['p_value']:.3g}; null copy "
                f"{row['null_delta_log_score']:+.3f}, p = {row['null_p_value']:.3g}")
    p, p0 = float(row["p_value"]), float(row["null_p_value"])
    pw = float(row.get("p_value_worse", math.nan))
    ns, pt = float(row.get("sibling_n_runs", 0)), float(row.get("timing_p_value", math.nan))
    ns = int(ns) if math.isfinite(ns) else 0   # a table written before the sibling copy has no such column
    nt = float(row.get("timing_n_units", ns))
    nt = int(nt) if math.isfinite(nt) else ns
    mde = float(row.get("timing_mde", math.nan))
    power = (f"the timing test ({nt} units) detects a gain of {mde:.3g} nats with 80% power" if math.isfinite(mde)
             else f"the timing test ({nt} units) has no power at alpha {ctx.alpha}")
    if ns:
        measured += (f"; a sibling's geometry (another seed of the setting) {row['sibling_delta_log_score']:+.3f}, "
                     f"the run's own over it {row['timing_delta_log_score']:+.3f}, p = {pt:.3g} over {ns} runs "
                     f"({nt} units; {power})")
    measured += f"; {ctext}" if ctext else ""
    said = skill_verdict(row.to_dict(), ctx.alpha)   # the forecast's own verdict; the row's reason says why in words
    verdict = {"geometry helps": "reproduced", "geometry worse": "not reproduced"}.get(said, "inconclusive")
    if n < need or not math.isfinite(p):
        why = (f"{n} {unit}: a one-sided sign-flip test over them cannot reach p < {ctx.alpha} (it needs {need}; "
               "the seeds of a setting are one unit, not several)")
    elif math.isfinite(p0) and p0 < ctx.alpha:
        why = (f"the null copy (geometry made of noise) shows skill too (p = {p0:.3g}): the test cannot tell "
               "geometry from curves that say nothing of the run's own acquisition")
    else:
        why = {
            "geometry helps": f"geometry's skill p = {p:.3g} < {ctx.alpha}, and the run's own geometry beats a sibling's "
                              f"(p = {pt:.3g}); the null copy's p = {p0:.3g}",
            "not shown beyond the setting's level": (
                f"geometry's skill p = {p:.3g}, but not shown beyond the setting's level: the run's own geometry "
                f"over a sibling's p = {pt:.3g} (a failure to reject, not a finding; {power})"),
            "timing untested": f"geometry's skill p = {p:.3g}, but {nt} units have a sibling (another seed of the "
                               f"setting) to test whether the gain is the setting's level; {need} are needed",
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
    test = ("concordance of forecast and actual acquisition order at the largest size, whole settings' acquisition "
            "steps exchanged (seeds kept together); power at Kendall tau 0.75 on planted forecasts")
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
    units, low = float(row.get("n_units", math.nan)), float(row.get("min_p", math.nan))
    power = float(row.get("power", math.nan))
    if math.isfinite(units):
        measured += (f"; {int(units)} settings (p >= {low:.2g}); power {_pct(power)} at Kendall tau {POWER_TAU:g}"
                     if math.isfinite(low) else f"; {int(units)} settings")
    if n < MIN_CASES or not math.isfinite(p):
        verdict, why = "inconclusive", f"{n} acquired runs at the largest size; at least {MIN_CASES} are needed"
    elif math.isfinite(low) and low >= ctx.alpha:
        verdict, why = "inconclusive", (f"{int(units)} settings with acquired runs at the largest size: exchanging "
                                        f"them allows no p below {low:.2g}, so no order could be shown")
    elif p < ctx.alpha:
        verdict, why = "reproduced", f"order concordance p = {p:.3g} < {ctx.alpha}, settings exchanged"
    elif not power >= POWER:
        verdict, why = "inconclusive", (f"p = {p:.3g}, but the test had {_pct(power)} power at a Kendall tau of "
                                        f"{POWER_TAU:g} (at least {POWER:.0%} is needed to say absent): a failure "
                                        "to reject, not evidence of no order")
    else:
        verdict, why = "not reproduced", (f"order concordance p = {p:.3g} >= {ctx.alpha}, with {_pct(power)} power "
                                          f"at a Kendall tau of {POWER_TAU:g}")
    return Claim("forecast_across_sizes", ctx.claim, paper, measured, verdict, why, evidence, ctx.source,
                 float(row["concordance"]), float(row.get("concordance_low", math.nan)),
                 float(row.get("concordance_high", math.nan)), 0.5, p, test)
