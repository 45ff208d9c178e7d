"""How a claim row is judged: the thresholds fixed before any outcome, the verdict rules, the definitions
written into ``reproduction.md`` (:func:`definitions`), every rule as plain values (:func:`rules`), and the small
text helpers the rows share.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ckptgeo.claimtable.registry import CLAIMS, ClaimContext, claim_ids
from ckptgeo.suites.tasks import PILOT_HARD

__all__ = ["MIN_CASES", "MIN_SETTINGS", "PROBE_GATE_ACCURACY", "VERDICTS", "MARGIN", "TAU_MARGIN",
           "definitions", "rules", "holds_verdict", "rate_of", "size_params", "size_order", "floor_p", "fraction_text", "examples_text",
           "numeric", "ci_text"]

#: fewest cases (runs, settings) a test is run on; fewer: inconclusive.
MIN_CASES = 3
#: fewest matched (task, level) settings a rank correlation between two sizes is judged on.
MIN_SETTINGS = 5
#: the probe's sanity gate: where the model's accuracy at the last probed checkpoint is at least this, some
#: layer's probe must decode the target there (beat max(chance, control) by the margin with p < alpha).
PROBE_GATE_ACCURACY = 0.95
#: "descriptive": a number shown beside the verdicts for comparison (RankMe's precursor rate as ``analyze`` gives
#: it), never judged, never in Holm's family.
VERDICTS = ("reproduced", "not reproduced", "inconclusive", "descriptive")
#: equivalence margin of the absence rows, and the lead the holds rows need power at, in checkpoints: twice the
#: +-1 checkpoint to which each of a lead's two onsets is known. Fixed before any outcome.
MARGIN = 2.0
#: the rank rows' margin (top-down, floors rising with size, across sizes): a failure to reject is "not reproduced"
#: only where a Kendall tau of this size is detected with power >= 80%. The paper's own effect: its across-sizes
#: Spearman 0.92, as Kendall tau under a normal copula ((2/pi) asin(2 sin(pi 0.92 / 6)) = 0.75); the paper gives
#: no size for the other rank claims, which get the same.
TAU_MARGIN = 0.75

def definitions(alpha: float) -> str:
    """How runs are classed and claims judged, at significance level ``alpha`` (markdown; in reproduction.md and
    claims.md)."""
    return f"""\
* A **run** is one (task, level, size, seed); its RankMe events are those of the uncentred RankMe at the
  summary layer (the deepest: after the final layer norm). **Counted** runs are acquired, and not at the
  first checkpoint (nothing measured before it could precede it).
* **Hard and easy are fixed before the outcome**: every level >= 2 is hard, and at level 1 the tasks
  {', '.join(sorted(t for t, _ in PILOT_HARD))} (acquired at or after step 150, or not at all, on `tiny` at
  seed 0 in the pilot recorded in `ckptgeo.suites.tasks`; the presets leave seed 0 out); the rest are easy.
* **Leads, like for like**: a run's lead is accuracy's onset (the first checkpoint at which accuracy has risen a
  tenth of the way from chance to its maximum) minus the geometric onset under the same rule (RankMe's recovery
  onset, a whole-model measure's onset of change), in checkpoints and steps; each onset is known to its checkpoint
  (+-1). **Schedules are paired**: the presets train hard and easy settings on the same checkpoint schedules and
  measure whole-model quantities on a grid shared within a schedule, so one null serves both.
* **The primary row** (`contrast`, judged at alpha = {alpha} without adjustment): hard minus easy difference in
  lead over settings of one schedule; tested by permuting the difficulty labels among the settings of a schedule
  (seeds move with their setting), with stratified ranks of the setting-mean lead (one-sided). Every other tested
  row is also judged on its **Holm**-adjusted p (raw and adjusted side by side); a verdict that rested on a raw p
  the adjustment does not keep is *inconclusive*.
* **Intervals** over tasks and seeds: the mean over settings (each the mean of its seeds) with Student's t on the
  setting means from 5 settings on; below 5, the exact range of the setting means (its coverage printed, e.g. 75%
  at 3) or, for the contrast, the permutation test inverted over shifts; never narrower than one checkpoint. A
  rate's interval (order, probes) is the same over the settings' rates, widened where narrower to the exact
  (Clopper-Pearson) interval of the count: never of zero width (54/54 gives [93%, 100%]).
* **Holds rows** (a precursor on hard settings; RankMe leads the loss): *reproduced* when the geometric onset
  tracks behaviour's onset -- Kendall tau over pairs of runs on one schedule against behaviour permuted within
  schedules, the onset found again against each permuted acquisition (p < alpha) -- and the mean lead's interval
  lies above 0. *Not reproduced* only where the design has power >= 80% at a {MARGIN:g}-checkpoint lead
  (planted leads on smooth curves of each run's own size with its own noise) **and** the lead's upper bound is
  below that margin (the planted curves carry no spread of leads between settings; the interval does); else
  *inconclusive*. The primary contrast is judged the same way.
* **Absence rows** (no precursor on easy settings; LLC, Hessian not precursors): *reproduced* only by equivalence:
  over runs whose rule found an onset (at least {MIN_CASES}), the mean lead's 95% upper bound below the margin of
  {MARGIN:g} checkpoints fixed in advance, and a minimum detectable lead at or below it. *Not reproduced* when
  the holds test finds a precursor. Otherwise *inconclusive*: a blind detector or a powerless design shows nothing.
* Claims that something holds elsewhere (order, probes) are *reproduced* when their permutation test rejects
  chance (p < alpha), *not reproduced* when it does not with at least {MIN_CASES} cases and the design detects a
  {MARGIN:g}-checkpoint lead with power >= 80% (order: RankMe planted with a collapse, then a recovery that far
  before accuracy's onset; probes: each run's probe onset planted that far before acquisition, +-1 checkpoint),
  and *inconclusive* otherwise (no outcome of these cases could reject, or too little power). The rank rows
  (top-down, floors rising, across sizes) state their MDE in Kendall tau and say *not reproduced* only where a tau
  of {TAU_MARGIN:g} (the paper's across-sizes Spearman 0.92 as Kendall tau) is detected with power >= 80%.
* **precursor_rate** is *descriptive*, not a verdict: RankMe's precursor rate as `ckptgeo analyze` counts it (by
  the analysis's difficulty, and by hard / easy), with the same within-schedule null and p, so the claim table
  and `summary/precursor_rates.parquet` can be compared number for number. **Top-down**: per run of >= 4 layers,
  Kendall tau-b of block depth (layers 1..L-1) against the collapse onset step (ties counted), the
  post-final-norm layer L reported apart; the mean tau is tested against onsets permuted between the blocks
  of each run and against noise at each block's own level and spread (iid and random walk, onsets found again);
  its p is the largest of the three (one-sided, tau < 0).
  **Floors**: modular reproduces when every size's 95% interval of the mean floor over seeds (t; fewer than
  5 seeds: no 95% interval, inconclusive) lies within 2.0 +- 0.5, fails when one lies wholly outside; multiplication's floor rising with size: Kendall tau of
  parameters against floor over runs, one-sided permutation p. **Across sizes**: per matched (task, level),
  the mean over seeds; Kendall tau between each pair of sizes over at least {MIN_SETTINGS} settings (never
  acquired ranked last), permutation p; reproduced when every pair has tau > 0 with p < alpha (inconclusive when
  the pairs that miss it have tau > 0 and could not have reached it).
* **Probes** predict the model's own target: the first answer token, exactly (the token the model must emit at
  the read position, the first of those the accuracy scores), classes with too few items dropped. Layer 0
  (the read position's token embedding, the same for every item) is left out. A probe that beats its baseline
  at its first measured checkpoint is *readable at start* (no rise to see) and a run whose every layer is
  is left out. **Sanity gate**: a run whose model is at >= {PROBE_GATE_ACCURACY:.0%} at the last probed
  checkpoint must have a layer whose probe decodes the target there; runs that fail are reported, and the row
  is *not measured (failed gate)* when none passes.
"""


def rules(config=None) -> dict:
    """Every rule and threshold the claim table uses with the analysis settings ``config`` (default
    ``AnalysisConfig()``; its ``alpha`` is every test's level), written into ``study.json`` and the dataset's
    ``summary/claims_rules.json``."""
    from ckptgeo.analysis.config import AnalysisConfig
    from ckptgeo.claimtable.chance import SUBSAMPLE_FACTORS

    config = config if config is not None else AnalysisConfig()
    return {"alpha": config.alpha, "min_cases": MIN_CASES, "min_settings": MIN_SETTINGS,
            "hard": "level >= 2, or (task, 1) in pilot_hard", "pilot_hard": sorted(map(list, PILOT_HARD)),
            "pilot": "tiny, seed 0 (ckptgeo.suites.tasks docstring); seed 0 left out of the presets",
            "probe_gate_accuracy": PROBE_GATE_ACCURACY, "probe_target": "first answer token, exact",
            "primary": "contrast: hard minus easy lead, difficulty labels permuted among settings within schedules",
            "multiplicity": "Holm over every tested row but the primary",
            "margin_checkpoints": MARGIN, "margin_tau": TAU_MARGIN, "power": 0.8,
            "lead": "accuracy onset (a tenth of the way from chance to its maximum) minus the geometric onset, "
                    "same fraction",
            "interval": "t on setting means from 5 settings; below 5 the exact range (contrast: inverted "
                        "permutation test); rates: the same on setting rates, at least Clopper-Pearson of the count",
            "null": "behaviour permuted among runs sharing a checkpoint schedule, onsets found again",
            "floor_modular": "every size's 95% t interval of the mean floor over seeds (>= 5) within 2.0 +- 0.5",
            "subsample_factors": list(SUBSAMPLE_FACTORS), "analysis": config.__dict__,
            "sources": {cid: CLAIMS.get(cid).source_text for cid in claim_ids()}}


def size_params(size: str) -> float:
    from ckptgeo.training.sizes import SIZES

    return float(SIZES[size].n_parameters()) if size in SIZES else math.nan



# ------------------------------------------------------------------------------------------------ helpers

def size_order(sizes) -> list:
    """Sizes sorted by their parameter count."""
    return sorted(sizes, key=size_params)


def floor_p(res) -> float:
    """The smallest p-value the test could give (the share of the null at the statistic's maximum, 1):
    above alpha, no observation could reject chance."""
    if res is None or not len(res.null):
        return math.nan
    return (1 + int(np.sum(res.null >= 1.0 - 1e-12))) / (1 + len(res.null))


def fraction_text(k: int, n: int) -> str:
    return f"{k}/{n}" + (f" ({k / n:.0%})" if n else "")


def examples_text(models, n: int = 3) -> str:
    models = list(models)
    if not models:
        return "none"
    return ", ".join(models[:n]) + (f" (+{len(models) - n} more)" if len(models) > n else "")


def numeric(series) -> pd.Series:
    return pd.to_numeric(series, errors="coerce").astype("float64")


def ci_text(lo: float, hi: float) -> str:
    return f"[{lo:.0%}, {hi:.0%}]" if not (math.isnan(lo) or math.isnan(hi)) else "[-]"


def rate_of(ctx: ClaimContext, rows: pd.DataFrame, flag: pd.Series) -> tuple[float, float, float, str]:
    """A rate over runs with its interval (:func:`ckptgeo.claimtable.inference.rate_interval`: over settings, the
    seeds of a setting averaged first, never narrower than the exact interval of the count, never of zero width).
    Returns (rate, low, high, method; the method names a flag below 5 settings)."""
    from ckptgeo.claimtable.inference import rate_interval

    if not len(flag):
        return math.nan, math.nan, math.nan, "none"
    setting = [f"{t}-L{lv}-{sz}" for t, lv, sz in zip(rows["task"], rows["level"], rows["size"])]
    r = rate_interval(flag.astype(float).to_numpy(), setting)
    return r.value, r.low, r.high, r.method + (f" ({r.flag})" if r.flag else "")


def _powerless(floor_p: float, alpha: float) -> bool:
    return floor_p is not None and not math.isnan(floor_p) and floor_p >= alpha


def holds_verdict(p: float, n: int, what: str, floor_p: float = math.nan, *, alpha: float, mde: float | None = None,
                  margin: float = MARGIN, unit: str = "checkpoints") -> tuple[str, str]:
    """Verdict of a claim that something holds, from its test's p-value over n cases (``floor_p``: the smallest
    p-value the test could give; at or above alpha the test cannot reject and the verdict is inconclusive).

    ``mde``: the smallest effect the test detects with power >= 80% at this design (:mod:`ckptgeo.claimtable.power`);
    a failure to reject is *not reproduced* only where it is at or below ``margin`` (in ``unit``), else
    *inconclusive*. None (a row that states no power) keeps the failure as *not reproduced*."""
    if n < MIN_CASES or p is None or math.isnan(p):
        return "inconclusive", f"only {n} case(s); at least {MIN_CASES} are needed" if n < MIN_CASES else \
            "no test possible"
    if p < alpha:
        return "reproduced", f"{what}: p = {p:.3g} < {alpha}"
    if _powerless(floor_p, alpha):
        return "inconclusive", (f"{what}: p = {p:.3g}; the test cannot reject (no outcome of these cases could: "
                                f"its smallest possible p is {floor_p:.2g} >= {alpha})")
    if mde is not None and not (math.isfinite(mde) and abs(mde) <= margin):
        return "inconclusive", (f"{what}: p = {p:.3g} >= {alpha}, but this design detects an effect of {margin:g} "
                                f"{unit} with power < 80% (not evidence either way)")
    power = "" if mde is None else f", and this design detects {abs(mde):g} {unit} with power >= 80%"
    return "not reproduced", f"{what}: p = {p:.3g} >= {alpha} (not distinguishable from chance){power}"
