"""The paper's claims, one row each, judged by a test against chance on a training grid's events.

:func:`claim_table` is a pure function of the analysis tables (:class:`ckptgeo.analysis.summary.Analysis`:
``events``, ``probe_lead``, ``curves``, ``accuracy``) of a grid whose models are run folders named
``<task>-L<level>-<size>-s<seed>`` (:func:`ckptgeo.training.trainer.run_name`). It reads nothing and
writes nothing; :mod:`ckptgeo.studies.reproduce` writes its result into ``reproduction.md``.

Every row carries the measured value with its interval (over settings, :mod:`ckptgeo.studies.inference`; a
rate's never narrower than the exact binomial interval of its count), the value the same rule gives
by chance (:mod:`ckptgeo.studies.chance`: acquisition steps permuted across runs of one checkpoint schedule,
noise curves at each run's schedule), the test's p-value, and a verdict from that test (:data:`DEFINITIONS`,
:func:`rules`). The rules and thresholds are :func:`rules` (written into the study's metadata).

Each row is a registered function ``fn(ctx: ClaimContext) -> Claim`` (:data:`CLAIMS`, :func:`register_claim`)
that declares the analysis tables it reads; the built-in rows are :mod:`ckptgeo.studies.claim_rows`, and an
installed package adds one through the entry-point group ``ckptgeo.claims``::

    from ckptgeo import register_claim

    @register_claim(id="my_claim", reads=("events",))
    def my_claim(ctx):     # returns a Claim, or a dict of its fields
        n = int(ctx.runs["counted"].sum())
        return {"id": "my_claim", "claim": "what the paper says", "paper": "its number",
                "measured": f"{n} counted runs", "verdict": "inconclusive", "reason": "why",
                "evidence": "events/events.parquet"}
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Mapping

import pandas as pd

from ckptgeo._registry import Registry
from ckptgeo.analysis import stats
from ckptgeo.analysis.curves import (NOT_COUNTED, grid_run, preferred_variant, run_identity, run_rows,
                                    summary_rows)
from ckptgeo.suites.tasks import PILOT_HARD, is_hard  # the difficulty rule, re-exported here

__all__ = ["Claim", "ClaimContext", "ClaimRow", "CLAIMS", "NULLS", "register_claim", "claim_table", "holm_permutations", "runs_table", "is_hard", "rules", "MIN_CASES", "MIN_SETTINGS",
           "ALPHA", "MARGIN", "TAU_MARGIN", "PILOT_HARD", "PROBE_GATE_ACCURACY", "VERDICTS", "DEFINITIONS", "SOURCES", "spacing_table", "claim_context"]

#: fewest cases (runs, settings) a test is run on; fewer: inconclusive.
MIN_CASES = 3
#: fewest matched (task, level) settings a rank correlation between two sizes is judged on.
MIN_SETTINGS = 5
#: significance level of every test.
ALPHA = 0.05
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

#: Where each claim comes from (docs/definitions.md#claims: the paper's version and section, in our words; the
#: figures of the paper were not checked here).
SOURCES = {
    "contrast": "v4 abstract: 100% precursors on hard tasks, none on easy ones, tested here as a hard-minus-easy "
                "contrast of leads (docs/definitions.md#claim-contrast)",
    "tracking": "v4 abstract: geometry changes before the capability emerges (docs/definitions.md#claim-tracking)",
    "loss": "not a claim of the paper: the bar a geometric precursor must clear to be of use, leading the loss "
            "(docs/definitions.md#claim-loss)",
    "order": "arXiv:2602.15997 v4, abstract: collapse, recovery, then accuracy (docs/definitions.md#claim-order)",
    "precursor_hard": "v4 abstract: 100% precursor rate for hard algorithmic tasks "
                      "(docs/definitions.md#claim-precursor-hard)",
    "precursor_easy": "v4 abstract: on easy tasks collapse and acquisition coincide "
                      "(docs/definitions.md#claim-precursor-easy)",
    "top_down": "v1-v2: 32/32 task x model pairs; v3: 28/32 (docs/definitions.md#claim-top-down)",
    "llc": "v4 abstract: LLC synchronous, 0/24 precursors (docs/definitions.md#claim-llc)",
    "hessian": "v4 abstract: Hessian lags (docs/definitions.md#claim-hessian)",
    "floor_modular": "v4 abstract: modular collapse floor near RankMe 2.0 at every size "
                     "(docs/definitions.md#claim-floor-modular)",
    "floor_multiplication": "from a summary of the paper; not found in its abstracts "
                            "(docs/definitions.md#claim-floor-multiplication)",
    "across_sizes_collapse_floor": "from a summary of the paper (Spearman > 0.92 for Pythia-2.8B); not found in "
                                   "its abstracts (docs/definitions.md#claim-across-sizes)",
    "across_sizes_acquisition_step": "from a summary of the paper; not found in its abstracts "
                                     "(docs/definitions.md#claim-across-sizes)",
    "probe_lead": "v4 abstract: probes read the answer before the model produces it "
                  "(docs/definitions.md#claim-probe-lead)",
    "pythia_deduction": "v4 abstract: Pythia-2.8B logical deduction, gap about 49K steps "
                        "(docs/definitions.md#claim-pythia-deduction)",
}

#: How runs are classed and claims judged (markdown; also in reproduction.md).
DEFINITIONS = f"""\
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
* **The primary row** (`contrast`, judged at alpha = {ALPHA} without adjustment): hard minus easy difference in
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


def rules() -> dict:
    """Every rule and threshold the claim table uses (written into ``study.json`` and the dataset's
    ``summary/claims_rules.json``)."""
    from ckptgeo.analysis.summary import AnalysisConfig
    from ckptgeo.studies.chance import SUBSAMPLE_FACTORS

    return {"alpha": ALPHA, "min_cases": MIN_CASES, "min_settings": MIN_SETTINGS,
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
            "subsample_factors": list(SUBSAMPLE_FACTORS), "analysis": AnalysisConfig().__dict__,
            "sources": SOURCES}


@dataclass(frozen=True)
class Claim:
    """One row of ``reproduction.md``: the paper's statement, what was measured, the null, the test, the verdict.

    ``value``, ``low``, ``high``: the measured statistic and its 95% interval (NaN when none); ``null``: the
    statistic's mean under the null (NaN when none); ``p_value``: the test's (NaN when none); ``test``: which.
    ``kind``: "primary" (the declared primary row, judged at alpha), "holds" (a claim that something happens),
    "descriptive" (a number shown for comparison, verdict "descriptive", never in Holm's family),
    "absent" (that it does not: judged by equivalence) or "" (no test); ``p_holm``: ``p_value`` adjusted by Holm
    over every row but the primary (:func:`claim_table`); ``margin``: the equivalence margin (absence rows, in
    checkpoints); ``mde``: the smallest lead the row detects with power >= 80% at this design (checkpoints; inf:
    none tried; rank rows, floor_multiplication and across_sizes, in Kendall tau:
    :func:`ckptgeo.studies.power.kendall_mde`).
    """

    id: str
    claim: str
    paper: str
    measured: str
    verdict: str
    reason: str
    evidence: str
    source: str = ""
    value: float = math.nan
    low: float = math.nan
    high: float = math.nan
    null: float = math.nan
    p_value: float = math.nan
    test: str = ""
    kind: str = ""
    p_holm: float = math.nan
    margin: float = math.nan
    mde: float = math.nan


def size_params(size: str) -> float:
    from ckptgeo.training.sizes import SIZES

    return float(SIZES[size].n_parameters()) if size in SIZES else math.nan


def runs_table(events: pd.DataFrame, metric: str = "rankme",
               hard: Callable[[str, int], bool] | None = None) -> pd.DataFrame:
    """One row per grid run: its summary-layer events of ``metric`` (uncentred where both exist).

    Parameters
    ----------
    events : DataFrame
        :attr:`Analysis.events`.
    metric : str, default="rankme"
    hard : callable (task, level) -> bool, optional
        The difficulty rule, fixed before the outcome (default :func:`is_hard`).

    Returns
    -------
    DataFrame
        Columns: model, task, level, size, n_parameters, seed, acquisition_step, acquisition_status,
        collapse_step, collapse_floor, onset_step, gap_steps, resolution_steps, status, counted, hard,
        suite, config_hash.
    """
    hard = hard or is_hard
    cols = ["model", "task", "level", "size", "n_parameters", "seed", "acquisition_step", "acquisition_status",
            "collapse_step", "collapse_floor", "onset_step", "gap_steps", "resolution_steps", "status", "counted",
            "hard", "suite", "config_hash"]
    if events is None or events.empty:
        return pd.DataFrame(columns=cols).astype({"counted": bool, "hard": bool})
    rows = []
    for r in run_rows(events, metric).itertuples(index=False):
        if grid_run(r.model) is None:
            continue
        run = run_identity(r.model, getattr(r, "suite", None), getattr(r, "task", None))
        rows.append({"model": r.model, **run, "n_parameters": size_params(run["size"]),
                     "acquisition_step": r.acquisition_step, "acquisition_status": r.acquisition_status,
                     "collapse_step": r.collapse_step, "collapse_floor": r.collapse_floor, "onset_step": r.onset_step,
                     "gap_steps": r.gap_steps, "resolution_steps": r.resolution_steps, "status": r.status,
                     "counted": r.status not in NOT_COUNTED, "hard": bool(hard(run["task"], run["level"])),
                     "suite": getattr(r, "suite", None), "config_hash": getattr(r, "config_hash", None)})
    df = pd.DataFrame(rows, columns=cols).astype({"counted": bool, "hard": bool})
    return df.sort_values(["n_parameters", "task", "level", "seed"], kind="stable", ignore_index=True)


# ------------------------------------------------------------------------------------------------ helpers

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


def _p(p: float) -> str:
    return "-" if p is None or math.isnan(p) else f"{p:.3g}"


@dataclass
class ClaimContext:
    """What a claim row sees: the grid's runs, their curves for the nulls, the tests' settings, and the tables
    the row declares it reads.

    Attributes
    ----------
    runs : DataFrame
        :func:`runs_table` of the events (one row per grid run, ``counted`` and ``hard`` flagged).
    curves : dict
        model -> :class:`ckptgeo.studies.chance.Curve` (its summary-layer RankMe; for the nulls).
    accuracy : dict
        model -> (steps, accuracy, chance) arrays.
    config : AnalysisConfig or None
    n_permutations, n_resamples, n_noise_curves, seed : int
        Work of the tests (counts, never seconds) and their seed; ``n_permutations`` is raised to
        :func:`holm_permutations` of the row count where smaller.
    n_power : int
        Planted replicates per lead of the power analysis (:mod:`ckptgeo.studies.power`).
    tables : mapping of str to DataFrame or None
        The analysis tables of the row's ``reads`` (``ctx.tables["events"]``); None where a table was not given.
    """

    runs: pd.DataFrame
    curves: dict = field(default_factory=dict)          # model -> chance.Curve (RankMe, summary layer)
    accuracy: dict = field(default_factory=dict)        # model -> (steps, accuracy, chance)
    config: object = None
    n_permutations: int = stats.DEFAULT_N_PERMUTATIONS
    n_resamples: int = stats.DEFAULT_N_RESAMPLES
    n_noise_curves: int = 100
    seed: int = 0
    tables: Mapping[str, Any] = field(default_factory=dict)
    n_power: int = 40


def rate_of(ctx: ClaimContext, rows: pd.DataFrame, flag: pd.Series) -> tuple[float, float, float, str]:
    """A rate over runs with its interval (:func:`ckptgeo.studies.inference.rate_interval`: over settings, the
    seeds of a setting averaged first, never narrower than the exact interval of the count, never of zero width).
    Returns (rate, low, high, method; the method names a flag below 5 settings)."""
    from ckptgeo.studies.inference import rate_interval

    if not len(flag):
        return math.nan, math.nan, math.nan, "none"
    setting = [f"{t}-L{lv}-{sz}" for t, lv, sz in zip(rows["task"], rows["level"], rows["size"])]
    r = rate_interval(flag.astype(float).to_numpy(), setting)
    return r.value, r.low, r.high, r.method + (f" ({r.flag})" if r.flag else "")


def _powerless(floor_p: float) -> bool:
    return floor_p is not None and not math.isnan(floor_p) and floor_p >= ALPHA


def holds_verdict(p: float, n: int, what: str, floor_p: float = math.nan, *, mde: float | None = None,
                  margin: float = MARGIN, unit: str = "checkpoints") -> tuple[str, str]:
    """Verdict of a claim that something holds, from its test's p-value over n cases (``floor_p``: the smallest
    p-value the test could give; at or above alpha the test cannot reject and the verdict is inconclusive).

    ``mde``: the smallest effect the test detects with power >= 80% at this design (:mod:`ckptgeo.studies.power`);
    a failure to reject is *not reproduced* only where it is at or below ``margin`` (in ``unit``), else
    *inconclusive*. None (a row that states no power) keeps the failure as *not reproduced*."""
    if n < MIN_CASES or p is None or math.isnan(p):
        return "inconclusive", f"only {n} case(s); at least {MIN_CASES} are needed" if n < MIN_CASES else \
            "no test possible"
    if p < ALPHA:
        return "reproduced", f"{what}: p = {p:.3g} < {ALPHA}"
    if _powerless(floor_p):
        return "inconclusive", (f"{what}: p = {p:.3g}; the test cannot reject (no outcome of these cases could: "
                                f"its smallest possible p is {floor_p:.2g} >= {ALPHA})")
    if mde is not None and not (math.isfinite(mde) and abs(mde) <= margin):
        return "inconclusive", (f"{what}: p = {p:.3g} >= {ALPHA}, but this design detects an effect of {margin:g} "
                                f"{unit} with power < 80% (not evidence either way)")
    power = "" if mde is None else f", and this design detects {abs(mde):g} {unit} with power >= 80%"
    return "not reproduced", f"{what}: p = {p:.3g} >= {ALPHA} (not distinguishable from chance){power}"


# ------------------------------------------------------------------------------------------- the registry

#: kinds of null copy (:mod:`ckptgeo.studies.calibrate`): ``iid`` and ``random_walk`` void the geometry's timing
#: (each curve keeps its level), ``permuted`` voids which accuracy curve goes with which run of a schedule.
NULLS = ("iid", "random_walk", "permuted")


@dataclass(frozen=True)
class ClaimRow:
    """One row of the claim table: ``fn(ctx: ClaimContext) -> Claim``, the analysis tables it reads, and ``nulls``:
    the kinds of :data:`NULLS` that void what the row tests (a copy of another kind keeps it, so a "reproduced"
    there is not false: e.g. a random walk of RankMe keeps the acquisition order the across-sizes row ranks)."""

    id: str
    fn: Callable[[ClaimContext], Claim]
    reads: tuple[str, ...] = ()
    nulls: tuple[str, ...] = NULLS


def _check_row(name: str, obj) -> None:
    if not isinstance(obj, ClaimRow):
        raise TypeError(f"expected a claim row registered with @register_claim(id={name!r}, ...), got "
                        f"{type(obj).__name__} {getattr(obj, '__qualname__', obj)!r}")


#: the rows built on like-for-like leads (:mod:`ckptgeo.studies.claim_leads`)
_LEAD_ROWS = ("contrast", "precursor_hard", "precursor_easy", "tracking", "loss", "llc", "hessian")
#: Every claim row, in the order of the table: the built-ins (:mod:`ckptgeo.studies.claim_rows`, in the order of
#: the paper's argument), then those installed packages declare in the ``ckptgeo.claims`` entry-point group, then
#: those registered in this process.
CLAIMS = Registry("claim", "ckptgeo.claims", {
    name: ("ckptgeo.studies.claim_leads" if name in _LEAD_ROWS else "ckptgeo.studies.claim_rows") for name in (
        "contrast", "order", "precursor_hard", "precursor_easy", "tracking", "loss", "top_down", "llc", "hessian",
        "floor_modular", "floor_multiplication", "across_sizes_collapse_floor", "across_sizes_acquisition_step",
        "probe_lead", "precursor_rate", "pythia_deduction")
} | {name: "ckptgeo.studies.forecast_claims" for name in ("forecast_geometry", "forecast_across_sizes")},
    check=_check_row)


def register_claim(*, id: str, reads: tuple[str, ...] = (), nulls: tuple[str, ...] = NULLS):
    """Decorator registering ``fn(ctx: ClaimContext) -> Claim`` (or a dict of :class:`Claim`'s fields) as claim row
    ``id`` in :data:`CLAIMS`.

    ``reads`` names the analysis tables the row uses (``events``, ``curves``, ``accuracy``, ``probe_lead``,
    ``probes``, or any table an analysis step writes, given to :func:`claim_table` as ``tables=``); they are
    ``ctx.tables`` (None where not given). ``nulls``: the null copies that void what the row tests (default
    all of :data:`NULLS`; ``()`` for a row the calibration does not rebuild). Returns ``fn``.

    Raises
    ------
    DuplicateNameError
        ``id`` already registered to another function.
    ValueError
        ``nulls`` names a kind not in :data:`NULLS`.
    """
    unknown = sorted(set(nulls) - set(NULLS))
    if unknown:
        raise ValueError(f"claim {id!r}: unknown null kind(s) {unknown}; known: {', '.join(NULLS)}")

    def deco(fn):
        CLAIMS.register(id, ClaimRow(id=id, fn=fn, reads=tuple(reads), nulls=tuple(nulls)))
        return fn

    return deco


def _contexts(runs: pd.DataFrame, curves: pd.DataFrame | None, accuracy: pd.DataFrame | None) -> tuple[dict, dict]:
    """Per run: its summary-layer RankMe curve (chance.Curve) and its accuracy curve."""
    from ckptgeo.analysis.acquisition_null import schedule
    from ckptgeo.studies.chance import Curve

    acc_by, cur_by = {}, {}
    if accuracy is not None and len(accuracy):
        for (model, suite), g in accuracy.groupby(["model", "suite"], sort=True):
            if model in set(runs["model"]):
                g = g.sort_values("step").drop_duplicates("step")
                ch = numeric(g["chance"]).iloc[0] if "chance" in g.columns else math.nan
                acc_by[model] = (g["step"].to_numpy(float), numeric(g["accuracy"]).to_numpy(), float(ch))
    if curves is None or not len(curves):
        return cur_by, acc_by
    rk = curves[curves["metric"] == "rankme"]
    for r in runs.itertuples(index=False):
        g = rk[(rk["model"] == r.model)]
        if r.config_hash is not None and "config_hash" in g.columns and (g["config_hash"] == r.config_hash).any():
            g = g[g["config_hash"] == r.config_hash]
        if not len(g):
            continue
        g = summary_rows(preferred_variant(g)).sort_values("step")
        grid = acc_by.get(r.model, (g["step"].to_numpy(float),))[0]
        acq = numeric(pd.Series([r.acquisition_step])).iloc[0]
        cur_by[r.model] = Curve(g["step"].to_numpy(float), g["value"].to_numpy(float),
                                None if (not r.counted or math.isnan(acq)) else int(acq),
                                schedule(grid), "recovery")
    return cur_by, acc_by


def claim_table(events: pd.DataFrame, top_down: pd.DataFrame | None = None,
                probe_lead: pd.DataFrame | None = None, *, curves: pd.DataFrame | None = None,
                accuracy: pd.DataFrame | None = None, probes: pd.DataFrame | None = None, config=None,
                hard: Callable[[str, int], bool] | None = None, n_permutations: int = stats.DEFAULT_N_PERMUTATIONS,
                n_resamples: int = stats.DEFAULT_N_RESAMPLES, n_noise_curves: int = 100,
                seed: int = 0, tables: Mapping[str, Any] | None = None, n_power: int = 40) -> pd.DataFrame:
    """The claims of arXiv:2602.15997 against a grid's events, one row each, each with its test.

    Parameters
    ----------
    events : DataFrame
        :attr:`Analysis.events` of a dataset whose models are grid runs (``<task>-L<level>-<size>-s<seed>``);
        other models are ignored.
    top_down : DataFrame, optional
        Unused (kept for the call signature of earlier versions; top-down is tested from ``events``).
    probe_lead : DataFrame, optional
        :attr:`Analysis.probe_lead`; missing: the probe row is inconclusive.
    curves, accuracy : DataFrame, optional
        :attr:`Analysis.curves` and :attr:`Analysis.accuracy`: the nulls need them; without them rows have
        no p-value and the tested claims are inconclusive.
    probes : DataFrame, optional
        The probes table, for the probe's sanity gate.
    config : AnalysisConfig, optional
        The analysis's settings (the nulls re-run its rules); default ``AnalysisConfig()``.
    hard : callable (task, level) -> bool, optional
        The difficulty rule (default :func:`is_hard`).
    n_permutations, n_resamples, n_noise_curves, seed : int
        Work of the tests (counts, never seconds) and their seed; ``n_permutations`` is raised to
        :func:`holm_permutations` of the row count where smaller.
    tables : mapping of str to DataFrame, optional
        Further analysis tables by name (``Analysis.tables``), for rows an installed package registers.
    n_power : int, default=40
        Planted replicates per lead of each row's power analysis.

    Returns
    -------
    DataFrame
        One row per registered claim (:data:`CLAIMS`, in its order: the built-in rows in the order of the
        paper's argument, then the installed ones). Columns ``id``, ``claim``, ``paper``, ``measured``,
        ``verdict`` (one of :data:`VERDICTS`), ``reason``, ``evidence``, ``source``, ``value``, ``low``,
        ``high``, ``null``, ``p_value``, ``test``, ``kind``, ``p_holm``, ``margin``, ``mde``. The primary row
        (``contrast``) is judged at alpha; every other tested row also by its Holm-adjusted p. Rules:
        :data:`DEFINITIONS`, :func:`rules`.

    References
    ----------
    Billa, "The Geometric Anatomy of Capability Acquisition in Transformers", arXiv:2602.15997.
    """
    events = events if events is not None else pd.DataFrame(columns=["model", "metric", "layer", "status"])
    runs = runs_table(events, hard=hard)
    cur_by, acc_by = _contexts(runs, curves, accuracy)
    given = dict(tables or {})
    given.update((name, t) for name, t in (("events", events), ("top_down", top_down), ("probe_lead", probe_lead),
                                           ("curves", curves), ("accuracy", accuracy), ("probes", probes))
                 if t is not None or name not in given)
    names = CLAIMS.names(sorted_=False)
    ctx = ClaimContext(runs, cur_by, acc_by, config, max(int(n_permutations), holm_permutations(len(names))),
                       n_resamples, n_noise_curves, seed, n_power=n_power)
    rows = []
    for name in names:
        row = CLAIMS.get(name)
        view = MappingProxyType({t: given.get(t) for t in row.reads})
        claim = row.fn(dataclasses.replace(ctx, tables=view))
        rows.append(Claim(**claim) if isinstance(claim, Mapping) else claim)
    return pd.DataFrame([r.__dict__ for r in _adjusted(rows)], columns=list(Claim.__dataclass_fields__))


def holm_permutations(n_rows: int) -> int:
    """Fewest relabellings per permutation test that let Holm over ``n_rows`` rows reject: the smallest
    p-value, 1 / (N + 1), times ``n_rows`` must fall below alpha. :func:`claim_table` raises a smaller
    ``n_permutations`` to this (the calibration's copies ask for 199, at which Holm over 20 rows could never
    reject, so no row could read "reproduced" on a copy and the calibration would pass by construction).

    >>> holm_permutations(20)
    400
    """
    return math.ceil(n_rows / ALPHA - 1e-9)


def _adjusted(rows: list[Claim]) -> list[Claim]:
    """Holm over every tested row but the primary one; a verdict its raw p gave that the adjusted p does not
    keep becomes inconclusive (a "reproduced" that rested on p < alpha, a "not reproduced" absence that rested
    on a significant excess)."""
    from ckptgeo.studies.inference import holm

    family = [i for i, r in enumerate(rows) if r.kind not in ("primary", "descriptive") and r.p_value == r.p_value]
    adj = holm([rows[i].p_value for i in family])
    out = list(rows)
    for i, q in zip(family, adj):
        r = dataclasses.replace(rows[i], p_holm=float(q))
        rested = (r.verdict == "reproduced" and r.kind != "absent") or (r.verdict == "not reproduced"
                                                                     and r.kind == "absent")
        if rested and r.p_value < ALPHA <= q:
            r = dataclasses.replace(r, verdict="inconclusive",
                                    reason=r.reason + f"; Holm-adjusted p = {q:.3g} >= {ALPHA} over "
                                                      f"{len(family)} rows")
        out[i] = r
    return out


def claim_context(events: pd.DataFrame, curves: pd.DataFrame | None, accuracy: pd.DataFrame | None, *, config=None,
                  hard: Callable[[str, int], bool] | None = None) -> ClaimContext:
    """The :class:`ClaimContext` the rows see (without tables), for tables built beside the claim table."""
    runs = runs_table(events, hard=hard)
    cur_by, acc_by = _contexts(runs, curves, accuracy)
    return ClaimContext(runs, cur_by, acc_by, config)


def spacing_table(events: pd.DataFrame, curves: pd.DataFrame, accuracy: pd.DataFrame, *, config=None,
                  hard: Callable[[str, int], bool] | None = None) -> pd.DataFrame:
    """Precursor rates of hard and easy runs with every k-th checkpoint kept
    (:func:`ckptgeo.studies.chance.subsample_rates`): checkpoint spacing as a factor."""
    from ckptgeo.studies.chance import subsample_rates

    runs = runs_table(events, hard=hard)
    cur_by, acc_by = _contexts(runs, curves, accuracy)
    flags = dict(zip(runs["model"], runs["hard"]))
    return subsample_rates(cur_by, acc_by, lambda m: bool(flags.get(m, False)), config=config)
