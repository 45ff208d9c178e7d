"""The paper's claims, one row each, judged by a test against chance on a training grid's events.

:func:`claim_table` is a pure function of the analysis tables (:class:`ckptgeo.analysis.summary.Analysis`:
``events``, ``probe_lead``, ``curves``, ``accuracy``) of a grid whose models are run folders named
``<task>-L<level>-<size>-s<seed>`` (:func:`ckptgeo.training.trainer.run_name`). It reads nothing and
writes nothing; :mod:`ckptgeo.studies.reproduce` writes its result into ``reproduction.md``.

Every row carries the measured value with its interval (a hierarchical bootstrap over tasks and seeds,
:func:`ckptgeo.analysis.stats.hierarchical_bootstrap`, or a binomial interval), the value the same rule gives
by chance (:mod:`ckptgeo.studies.chance`: acquisition steps permuted across runs of one checkpoint schedule,
noise curves at each run's schedule), the test's p-value, and a verdict from that test (:data:`DEFINITIONS`,
:func:`rules`). The rules and thresholds are :func:`rules` (written into the study's metadata).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pandas as pd

from ckptgeo.analysis import stats

__all__ = ["Claim", "claim_table", "runs_table", "parse_run", "is_hard", "rules", "MIN_CASES", "MIN_SETTINGS",
           "ALPHA", "PILOT_HARD", "PROBE_GATE_ACCURACY", "VERDICTS", "DEFINITIONS", "SOURCES", "spacing_table"]

#: fewest cases (runs, settings) a test is run on; fewer: inconclusive.
MIN_CASES = 3
#: fewest matched (task, level) settings a rank correlation between two sizes is judged on.
MIN_SETTINGS = 5
#: significance level of every test.
ALPHA = 0.05
#: (task, level 1) pairs that are hard: acquired at or after step 150 (or not within 1000-1500 steps) on
#: ``tiny`` at seed 0 in the pilot recorded in :mod:`ckptgeo.suites.tasks` (parity 175, addition 525-555,
#: modular and multiplication later); copy 75, compare 75, reverse 100, sort 50 are easy. Every level >= 2 is
#: hard. Fixed before this study's runs; the presets leave seed 0 out.
PILOT_HARD = frozenset({("parity", 1), ("addition", 1), ("modular", 1), ("multiplication", 1)})
#: the probe's sanity gate: where the model's accuracy at the last probed checkpoint is at least this, some
#: layer's probe must decode the target there (beat max(chance, control) by the margin with p < alpha).
PROBE_GATE_ACCURACY = 0.95
VERDICTS = ("reproduced", "not reproduced", "inconclusive")

#: Where each claim comes from (SPEC.md; the figures of the paper were not checked here).
SOURCES = {
    "order": "arXiv:2602.15997 v4, abstract (collapse, recovery, then accuracy), as restated in SPEC.md",
    "precursor_hard": "v4 abstract as restated in SPEC.md: 100% precursor rate for hard algorithmic tasks",
    "precursor_easy": "v4 abstract as restated in SPEC.md: on easy tasks collapse and acquisition coincide",
    "top_down": "v1-v2: 32/32 task x model pairs; v3: 28/32 (SPEC.md)",
    "llc": "v4 abstract as restated in SPEC.md: LLC synchronous, 0/24 precursors",
    "hessian": "v4 abstract as restated in SPEC.md: Hessian lags",
    "floor_modular": "v4 abstract as restated in SPEC.md: modular collapse floor near RankMe 2.0 at every size",
    "floor_multiplication": "from a summary of the paper; not found in its abstracts (SPEC.md)",
    "across_sizes_collapse_floor": "from a summary of the paper (Spearman > 0.92 for Pythia-2.8B); not found in "
                                   "its abstracts (SPEC.md)",
    "across_sizes_acquisition_step": "from a summary of the paper; not found in its abstracts (SPEC.md)",
    "probe_lead": "v4 abstract as restated in SPEC.md: probes read the answer before the model produces it",
    "pythia_deduction": "v4 abstract as restated in SPEC.md: Pythia-2.8B logical deduction, gap about 49K steps",
}

#: How runs are classed and claims judged (markdown; also in reproduction.md).
DEFINITIONS = f"""\
* A **run** is one (task, level, size, seed); its RankMe events are those of the uncentred RankMe at the
  summary layer (the deepest: after the final layer norm). **Counted** runs are acquired, and not at the
  first checkpoint (nothing measured before it could precede it).
* **Hard and easy are fixed before the outcome**: every level >= 2 is hard, and at level 1 the tasks
  {', '.join(sorted(t for t, _ in PILOT_HARD))} (acquired at or after step 150, or not at all, on `tiny` at
  seed 0 in the pilot recorded in `ckptgeo.suites.tasks`; the presets leave seed 0 out); the rest are easy.
* **Intervals**: a rate's interval is a 95% hierarchical bootstrap over tasks, then seeds within a task
  (rows of a drawn (task, seed) kept whole); a count with fewer than {MIN_CASES} tasks gets the Wilson interval.
* **Nulls**. A precursor (or order) rate is compared with the same rule applied with acquisition steps
  permuted across the acquired runs that share a checkpoint schedule (the p-value is the share of
  permutations giving a rate at least as high); beside it, the rule's rate on Gaussian noise curves at each run's
  own schedule and acquisition step (noise: the run's own checkpoint-to-checkpoint spread).
* **Verdicts come from the tests** (alpha = {ALPHA}): a claim that something holds is *reproduced* when its
  test rejects chance (p < alpha), *not reproduced* when it does not with at least {MIN_CASES} cases, else
  *inconclusive*. A claim that something does not happen (no precursor on easy settings; LLC, Hessian not
  precursors) is *reproduced* when the rate is not above chance (p >= alpha) over at least {MIN_CASES} cases
  and not even numerically above the null's rate, *not reproduced* when it is significantly above, and
  *inconclusive* in between (above the null, not significantly: a failure to reject is not evidence of absence). **Top-down**: per run of >= 4 layers, Kendall tau-b of block depth
  (layers 1..L-1) against the collapse onset step (ties counted), the post-final-norm layer L reported apart;
  the mean tau is tested against onsets permuted between the blocks of each run (one-sided, tau < 0).
  **Floors**: modular reproduces when every size's bootstrap interval of the median floor lies within
  2.0 +- 0.5, fails when one lies wholly outside; multiplication's floor rising with size: Kendall tau of
  parameters against floor over runs, one-sided permutation p. **Across sizes**: per matched (task, level),
  the mean over seeds; Kendall tau between each pair of sizes over at least {MIN_SETTINGS} settings (never
  acquired ranked last), permutation p; reproduced when every pair has tau > 0 with p < alpha.
* **Probes** predict the model's own target: the first answer token, exactly (the token the model must emit at
  the read position, the first of those the accuracy scores), classes with too few items dropped. Layer 0
  (the read position's token embedding, the same for every item) is left out. A probe that beats its baseline
  at its first measured checkpoint is *readable at start* (no rise to see) and a run whose every layer is
  is left out. **Sanity gate**: a run whose model is at >= {PROBE_GATE_ACCURACY:.0%} at the last probed
  checkpoint must have a layer whose probe decodes the target there; runs that fail are reported, and the row
  is *not measured (failed gate)* when none passes.
"""
_RUN = re.compile(r"^(?P<task>.+)-L(?P<level>\d+)-(?P<size>[A-Za-z0-9]+)-s(?P<seed>\d+)$")
_NOT_COUNTED = ("never_acquired", "no_data", "acquired_at_start", "censored")


def is_hard(task: str, level: int) -> bool:
    """The study's difficulty rule, fixed before the outcome: level >= 2, or a level-1 task of :data:`PILOT_HARD`.

    Examples
    --------
    >>> is_hard("copy", 1), is_hard("copy", 2), is_hard("modular", 1)
    (False, True, True)
    """
    return int(level) >= 2 or (task, int(level)) in PILOT_HARD


def rules() -> dict:
    """Every rule and threshold the claim table uses (written into ``study.json`` and the dataset's
    ``summary/claims_rules.json``)."""
    from ckptgeo.analysis.summary import AnalysisConfig
    from ckptgeo.studies.chance import SUBSAMPLE_FACTORS

    return {"alpha": ALPHA, "min_cases": MIN_CASES, "min_settings": MIN_SETTINGS,
            "hard": "level >= 2, or (task, 1) in pilot_hard", "pilot_hard": sorted(map(list, PILOT_HARD)),
            "pilot": "tiny, seed 0 (ckptgeo.suites.tasks docstring); seed 0 left out of the presets",
            "probe_gate_accuracy": PROBE_GATE_ACCURACY, "probe_target": "first answer token, exact",
            "interval": "95% hierarchical bootstrap over tasks then seeds (Wilson below min_cases tasks)",
            "null": "acquisition steps permuted across acquired runs sharing a checkpoint schedule",
            "noise": "Gaussian curves at each run's schedule, relative sd = robust_noise_sd / first value",
            "floor_modular": "every size's bootstrap interval of the median floor within 2.0 +- 0.5",
            "subsample_factors": list(SUBSAMPLE_FACTORS), "analysis": AnalysisConfig().__dict__,
            "sources": SOURCES}


@dataclass(frozen=True)
class Claim:
    """One row of ``reproduction.md``: the paper's statement, what was measured, the null, the test, the verdict.

    ``value``, ``low``, ``high``: the measured statistic and its 95% interval (NaN when none); ``null``: the
    statistic's mean under the null (NaN when none); ``p_value``: the test's (NaN when none); ``test``: which.
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


def parse_run(model: str) -> dict | None:
    """``{"task", "level", "size", "seed"}`` of a grid run name, or None.

    Examples
    --------
    >>> parse_run("modular-L1-tiny-s0")
    {'task': 'modular', 'level': 1, 'size': 'tiny', 'seed': 0}
    >>> parse_run("EleutherAI/pythia-160m") is None
    True
    """
    m = _RUN.match(str(model))
    if not m:
        return None
    return {"task": m["task"], "level": int(m["level"]), "size": m["size"], "seed": int(m["seed"])}


def _size_params(size: str) -> float:
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
    e = events[events["metric"] == metric]
    if "centered" in e.columns and e["centered"].eq(False).fillna(False).astype(bool).any():
        e = e[e["centered"].eq(False).fillna(False).astype(bool)]
    e = e[e["layer"] == e.groupby("model")["layer"].transform("max")]
    rows = []
    for r in e.itertuples(index=False):
        run = parse_run(r.model)
        if run is None:
            continue
        rows.append({"model": r.model, **run, "n_parameters": _size_params(run["size"]),
                     "acquisition_step": r.acquisition_step, "acquisition_status": r.acquisition_status,
                     "collapse_step": r.collapse_step, "collapse_floor": r.collapse_floor, "onset_step": r.onset_step,
                     "gap_steps": r.gap_steps, "resolution_steps": r.resolution_steps, "status": r.status,
                     "counted": r.status not in _NOT_COUNTED, "hard": bool(hard(run["task"], run["level"])),
                     "suite": getattr(r, "suite", None), "config_hash": getattr(r, "config_hash", None)})
    df = pd.DataFrame(rows, columns=cols).astype({"counted": bool, "hard": bool})
    return df.sort_values(["n_parameters", "task", "level", "seed"], kind="stable", ignore_index=True)


# ------------------------------------------------------------------------------------------------ helpers

def _frac(k: int, n: int) -> str:
    return f"{k}/{n}" + (f" ({k / n:.0%})" if n else "")


def _examples(models, n: int = 3) -> str:
    models = list(models)
    if not models:
        return "none"
    return ", ".join(models[:n]) + (f" (+{len(models) - n} more)" if len(models) > n else "")


def _num(series) -> pd.Series:
    return pd.to_numeric(series, errors="coerce").astype("float64")


def _ci(lo: float, hi: float) -> str:
    return f"[{lo:.0%}, {hi:.0%}]" if not (math.isnan(lo) or math.isnan(hi)) else "[-]"


def _p(p: float) -> str:
    return "-" if p is None or math.isnan(p) else f"{p:.3g}"


@dataclass
class _Ctx:
    """What the rows share: the runs, their curves for the nulls, and the tests' settings."""

    runs: pd.DataFrame
    curves: dict = field(default_factory=dict)          # model -> chance.Curve (RankMe, summary layer)
    accuracy: dict = field(default_factory=dict)        # model -> (steps, accuracy, chance)
    config: object = None
    n_permutations: int = stats.DEFAULT_N_PERMUTATIONS
    n_resamples: int = stats.DEFAULT_N_RESAMPLES
    n_noise_curves: int = 100
    seed: int = 0


def _rate(ctx: _Ctx, rows: pd.DataFrame, flag: pd.Series) -> tuple[float, float, float, str]:
    """A rate over runs with its interval: hierarchical bootstrap over tasks and seeds where there are at least
    MIN_CASES tasks, else Wilson. Returns (rate, low, high, method)."""
    k, n = int(flag.sum()), int(len(flag))
    if n == 0:
        return math.nan, math.nan, math.nan, "none"
    if rows["task"].nunique() >= MIN_CASES:
        frame = rows.assign(_hit=flag.astype(float).to_numpy())
        b = stats.hierarchical_bootstrap(frame, lambda f: float(f["_hit"].mean()), levels=("task", "seed"),
                                         n_resamples=ctx.n_resamples, seed=ctx.seed)
        return k / n, b.low, b.high, "hierarchical bootstrap over tasks and seeds"
    r = stats.binomial_interval(k, n)
    return r.rate, r.low, r.high, "Wilson"


def _powerless(floor_p: float) -> bool:
    return floor_p is not None and not math.isnan(floor_p) and floor_p >= ALPHA


def _holds(p: float, n: int, what: str, floor_p: float = math.nan) -> tuple[str, str]:
    """Verdict of a claim that something holds, from its test's p-value over n cases (``floor_p``: the smallest
    p-value the test could give; at or above alpha the test cannot reject and the verdict is inconclusive)."""
    if n < MIN_CASES or p is None or math.isnan(p):
        return "inconclusive", f"only {n} case(s); at least {MIN_CASES} are needed" if n < MIN_CASES else \
            "no test possible"
    if p < ALPHA:
        return "reproduced", f"{what}: p = {p:.3g} < {ALPHA}"
    if _powerless(floor_p):
        return "inconclusive", (f"{what}: p = {p:.3g}; the test cannot reject (chance alone gives the highest rate, "
                                f"smallest possible p {floor_p:.2g} >= {ALPHA})")
    return "not reproduced", f"{what}: p = {p:.3g} >= {ALPHA} (not distinguishable from chance)"


def _absent(p: float, n: int, what: str, floor_p: float = math.nan, rate: float = math.nan,
            null: float = math.nan) -> tuple[str, str]:
    """Verdict of a claim that something does not happen beyond chance; inconclusive when the rule fires on
    chance curves so often that no rate could stand out (``floor_p`` >= alpha), and when the measured ``rate``
    lies above the ``null`` without the test rejecting: too few runs to tell absence from a small effect, and
    a failure to reject is not evidence of absence."""
    if n < MIN_CASES or p is None or math.isnan(p):
        return "inconclusive", f"only {n} case(s); at least {MIN_CASES} are needed" if n < MIN_CASES else \
            "no test possible"
    if p < ALPHA:
        return "not reproduced", f"{what} above chance: p = {p:.3g} < {ALPHA}"
    if _powerless(floor_p):
        return "inconclusive", (f"{what}: p = {p:.3g}, but the rule fires on chance curves so often that no rate "
                                f"could stand out (smallest possible p {floor_p:.2g} >= {ALPHA})")
    if rate > null:  # NaN compares False: without a null rate the p-value decides alone
        return "inconclusive", (f"{what} {rate:.0%} above the null's {null:.0%}, not significantly (p = {p:.3g}): "
                                f"{n} runs cannot tell absence from a small effect")
    return "reproduced", f"{what} not above chance: p = {p:.3g} >= {ALPHA}"


# -------------------------------------------------------------------------------------------------- claims

def _order(ctx: _Ctx) -> Claim:
    runs = ctx.runs
    c = runs[runs["counted"]]
    col, rec, acq = _num(c["collapse_step"]), _num(c["onset_step"]), _num(c["acquisition_step"])
    ok = (col < rec) & (rec <= acq)  # NaN compares False: a missing collapse or recovery is out of order
    rate, lo, hi, how = _rate(ctx, c, ok)
    null, p, res = math.nan, math.nan, None
    if ctx.curves and len(c):
        # the order under permuted acquisition: collapse and recovery are found before the acquisition given
        res = _order_null(ctx, list(c["model"]))
        if res is not None:
            null, p = res.null_mean, res.p_value
    verdict, why = _holds(p, len(c), "order rate against permuted acquisition", _floor_p(res))
    missing = c.loc[~ok.to_numpy(), "model"]
    return Claim("order", "collapse -> recovery -> acquisition, in that order, in every run",
                 "the shape holds across tasks and sizes",
                 f"{_frac(int(ok.sum()), len(c))} acquired runs {_ci(lo, hi)}", verdict,
                 why + (f"; out of order: {_examples(missing)}" if len(missing) else ""),
                 "events/events.parquet (metric rankme, summary layer); figures/grid.png", SOURCES["order"],
                 rate, lo, hi, null, p, f"permutation of acquisition steps within a schedule; interval: {how}")


def _order_null(ctx: _Ctx, judged: list[str]):
    """Permutation null of the in-order rate (collapse < recovery onset <= acquisition)."""
    from ckptgeo.studies.chance import events_at

    pool = [m for m, cv in ctx.curves.items() if cv.acquisition_step is not None]
    who = [i for i, m in enumerate(pool) if m in set(judged)]
    if not who:
        return None
    strata = [ctx.curves[m].stratum for m in pool]
    hit = np.zeros((len(pool), len(pool)), dtype=bool)
    for i in who:
        cv = ctx.curves[pool[i]]
        for j, m in enumerate(pool):
            if strata[j] != strata[i]:
                continue
            e = events_at(cv.steps, cv.values, ctx.curves[m].acquisition_step, config=ctx.config)
            col, on = e.collapse.step if e.collapse else None, e.onset.step
            acq = ctx.curves[m].acquisition_step
            hit[i, j] = col is not None and on is not None and col < on <= acq
    idx = np.asarray(who)
    return stats.permutation_test(lambda o: float(hit[idx, np.asarray(o)[idx]].mean()), len(pool), strata=strata,
                                  n_permutations=ctx.n_permutations, seed=ctx.seed)


def _floor_p(res) -> float:
    """The smallest p-value the test could give (the share of the null at the statistic's maximum, 1):
    above alpha, no observation could reject chance."""
    if res is None or not len(res.null):
        return math.nan
    return (1 + int(np.sum(res.null >= 1.0 - 1e-12))) / (1 + len(res.null))


def _precursor(ctx: _Ctx, hard: bool) -> Claim:
    from ckptgeo.studies.chance import noise_rate, permutation_null

    runs = ctx.runs
    c = runs[runs["counted"] & (runs["hard"] == hard)]
    flag = c["status"] == "precursor"
    k = int(flag.sum())
    rate, lo, hi, how = _rate(ctx, c, flag)
    prec = c[flag]
    gaps = _num(prec["gap_steps"])
    gap = f"; median gap {gaps.median():.0f} steps" if len(gaps) else ""
    null = p = math.nan
    noise, res = "", None
    if ctx.curves and len(c):
        res = permutation_null(ctx.curves, list(c["model"]), config=ctx.config, n_permutations=ctx.n_permutations,
                               seed=ctx.seed)
        if res is not None:
            null, p = res.null_mean, res.p_value
        nr = noise_rate(ctx.curves, list(c["model"]), config=ctx.config, n_curves=ctx.n_noise_curves, seed=ctx.seed)
        if nr is not None:
            noise = f"; on noise curves {nr.rate:.0%} {_ci(nr.low, nr.high)}"
    measured = (f"{_frac(k, len(c))} {'hard' if hard else 'easy'} runs {_ci(lo, hi)}{gap}; permuted "
                f"acquisition {null:.0%}{noise}" if not math.isnan(null) else
                f"{_frac(k, len(c))} {'hard' if hard else 'easy'} runs {_ci(lo, hi)}{gap}")
    test = f"permutation of acquisition steps within a schedule (one-sided); interval: {how}"
    if hard:
        verdict, why = _holds(p, len(c), "precursor rate against permuted acquisition", _floor_p(res))
        return Claim("precursor_hard", "RankMe recovery precedes acquisition on hard settings",
                     "100% of hard algorithmic settings", measured, verdict, why,
                     "events/events.parquet (status precursor); runs: " + _examples(c["model"]),
                     SOURCES["precursor_hard"], rate, lo, hi, null, p, test)
    verdict, why = _absent(p, len(c), "easy precursor rate", _floor_p(res), rate, null)
    return Claim("precursor_easy", "on easy settings collapse and acquisition coincide (no precursor)",
                 "none detectable", measured, verdict, why,
                 "events/events.parquet (status, gap_steps, resolution_steps); runs: " + _examples(c["model"]),
                 SOURCES["precursor_easy"], rate, lo, hi, null, p, test)


def _top_down(ctx: _Ctx, events: pd.DataFrame) -> Claim:
    """Kendall tau of block depth against collapse onset, runs of >= 4 layers; post-final-norm layer apart."""
    runs = ctx.runs
    e = events[(events["metric"] == "rankme") & events["model"].isin(set(runs["model"]))] if len(events) else events
    if len(e) and "centered" in e.columns and e["centered"].eq(False).fillna(False).astype(bool).any():
        e = e[e["centered"].eq(False).fillna(False).astype(bool)]
    per_run, items, labels, post_first, ties, small = [], [], [], 0, 0, 0
    for model, g in (e.groupby("model", sort=True) if len(e) else []):
        n_layers = int(g["layer"].max())
        if n_layers < 4:
            small += 1
            continue
        blocks = g[(g["layer"] >= 1) & (g["layer"] < n_layers)].sort_values("layer")
        have = blocks[blocks["collapse_onset_step"].notna()]
        if len(have) < 3:
            continue
        x, y = have["layer"].to_numpy(float), _num(have["collapse_onset_step"]).to_numpy()
        kt = stats.kendall_tau(x, y, n_permutations=999, seed=ctx.seed, alternative="less")
        if math.isnan(kt.tau):
            continue
        per_run.append(kt.tau)
        ties += kt.n_tied_y
        items += list(zip(x, y))
        labels += [model] * len(x)
        post = g.loc[g["layer"] == n_layers, "collapse_onset_step"]
        post_first += int(len(post) and pd.notna(post.iloc[0]) and post.iloc[0] <= y[np.argmax(x)])
    n = len(per_run)
    if n == 0:
        return Claim("top_down", "collapse reaches output-side layers first", "28/32 (v3); 32/32 (v1-v2)",
                     f"no run of >= 4 layers with 3 block onsets ({small} run(s) of fewer layers not tested)",
                     "inconclusive", "top-down needs models of >= 4 layers", "summary/top_down.parquet",
                     SOURCES["top_down"], test="Kendall tau-b (depth, onset), permutation within runs")
    arr = np.asarray(items, dtype=float)
    lab = np.asarray(labels)
    groups = [np.flatnonzero(lab == m) for m in dict.fromkeys(labels)]
    from scipy.stats import kendalltau

    def mean_tau(order: np.ndarray) -> float:
        y = arr[np.asarray(order), 1]
        taus = [kendalltau(arr[g, 0], y[g]).statistic for g in groups]
        taus = [t for t in taus if not math.isnan(t)]
        return float(np.mean(taus)) if taus else math.nan

    res = stats.permutation_test(mean_tau, len(arr), strata=list(lab), n_permutations=ctx.n_permutations,
                                 seed=ctx.seed, alternative="less")
    k = int(sum(t < 0 for t in per_run))
    verdict, why = _holds(res.p_value, n, "mean Kendall tau < 0 against onsets permuted within runs")
    return Claim("top_down", "collapse reaches output-side layers first (Kendall tau(depth, collapse onset) < 0)",
                 "28/32 task x model pairs (v3); 32/32 (v1-v2)",
                 f"mean tau {res.statistic:+.2f} over {n} runs of >= 4 layers ({k} with tau < 0; {ties} tied onset "
                 f"pair(s)); post-final-norm layer at or before the last block in {post_first}/{n}",
                 verdict, why + (f"; {small} run(s) of < 4 layers not tested" if small else "")
                 + "; collapse onset = first step at the collapse fraction of the layer's first RankMe",
                 "events/events.parquet (collapse_onset_step per layer)", SOURCES["top_down"],
                 float(res.statistic), math.nan, math.nan, res.null_mean, res.p_value,
                 "Kendall tau-b per run, mean tau vs onsets permuted among a run's blocks (one-sided)")


def _whole_model(ctx: _Ctx, events: pd.DataFrame, curves: pd.DataFrame | None, metric: str, label: str,
                 paper: str) -> Claim:
    from ckptgeo.studies.chance import Curve, permutation_null

    runs = ctx.runs
    e = events[(events["metric"] == metric) & events["model"].isin(set(runs["model"]))] if len(events) else events
    if e is None or e.empty:
        return Claim(metric, f"{label} is not a precursor", paper, "not measured", "inconclusive",
                     f"no {metric} rows in this study (not in the preset's metrics)", "events/events.parquet",
                     SOURCES[metric])
    e = e[e["layer"] == -1]
    c = e[~e["status"].isin(_NOT_COUNTED)]
    flag = c["status"] == "precursor"
    lag = int((c["status"] == "lagging").sum())
    meta = c.assign(task=[(parse_run(m) or {"task": m})["task"] for m in c["model"]],
                    seed=[(parse_run(m) or {"seed": 0})["seed"] for m in c["model"]])
    rate, lo, hi, how = _rate(ctx, meta, flag.reset_index(drop=True).set_axis(meta.index))
    n_ckpt = int(_num(c["n_checkpoints"]).median()) if len(c) else 0
    null = p = math.nan
    res = None
    if curves is not None and len(curves) and len(c):
        sub = curves[(curves["metric"] == metric) & (curves["layer"] == -1)]
        mc = {}
        for m, g in sub.groupby("model"):
            base = ctx.curves.get(m)
            if base is None:
                continue
            g = g.sort_values("step")
            # one stratum: each run's checkpoints sit around its own acquisition, so no two share a schedule;
            # another run's acquisition step is placed on this run's grid (the first checkpoint at or after it)
            mc[m] = Curve(g["step"].to_numpy(float), g["value"].to_numpy(float), base.acquisition_step, "all",
                          "change")
        res = permutation_null(mc, list(c["model"]), config=ctx.config, n_permutations=ctx.n_permutations,
                               seed=ctx.seed)
        if res is not None:
            null, p = res.null_mean, res.p_value
    verdict, why = _absent(p, len(c), f"{metric} precursor rate", _floor_p(res), rate, null)
    return Claim(metric, f"{label} is not a precursor of acquisition", paper,
                 f"{_frac(int(flag.sum()), len(c))} acquired runs precursor {_ci(lo, hi)}; {lag} lagging; "
                 f"median {n_ckpt} checkpoints per run" + ("" if math.isnan(null) else f"; permuted {null:.0%}"),
                 verdict, why, f"events/events.parquet (metric {metric}, layer -1)", SOURCES[metric],
                 rate, lo, hi, null, p, f"permutation of acquisition steps within a schedule; interval: {how}")


def _floor_rows(runs: pd.DataFrame, task: str) -> pd.DataFrame:
    r = runs[(runs["task"] == task) & (runs["level"] == 1) & runs["collapse_floor"].notna()]
    return r.assign(collapse_floor=_num(r["collapse_floor"]))


def _size_order(sizes) -> list:
    return sorted(sizes, key=_size_params)


def _floor_modular(ctx: _Ctx) -> Claim:
    r = _floor_rows(ctx.runs, "modular")
    parts, inside, outside = [], [], []
    for size in _size_order(r["size"].unique()):
        g = r[r["size"] == size]
        v = g["collapse_floor"].to_numpy()
        if len(v) >= 2:
            b = stats.hierarchical_bootstrap(g.assign(task=size), lambda f: float(f["collapse_floor"].median()),
                                             levels=("task", "seed"), n_resamples=ctx.n_resamples, seed=ctx.seed)
            lo, hi = b.low, b.high
        else:
            lo = hi = float(np.median(v))
        parts.append(f"{size} {np.median(v):.2f} [{lo:.2f}, {hi:.2f}] ({len(v)} seeds)")
        inside.append(1.5 <= lo and hi <= 2.5)
        outside.append(hi < 1.5 or lo > 2.5)
    shown = "; ".join(parts) or "no collapse measured"
    if len(parts) < 2:
        verdict, why = "inconclusive", f"floors at {len(parts)} size(s); at least 2 are needed"
    elif all(inside):
        verdict, why = "reproduced", "every size's interval within 2.0 +- 0.5"
    elif any(outside):
        verdict, why = "not reproduced", "some size's interval lies wholly outside 2.0 +- 0.5"
    else:
        verdict, why = "inconclusive", "some interval straddles the 2.0 +- 0.5 band"
    return Claim("floor_modular", "modular arithmetic collapses to a RankMe floor near 2.0 at every size",
                 "about 2.0 at every size", f"median floor by size [95% bootstrap over seeds]: {shown}", verdict, why,
                 "events/events.parquet (collapse_floor, modular-L1 runs)", SOURCES["floor_modular"],
                 float(r["collapse_floor"].median()) if len(r) else math.nan,
                 test="bootstrap interval per size against the band 2.0 +- 0.5")


def _floor_multiplication(ctx: _Ctx) -> Claim:
    r = _floor_rows(ctx.runs, "multiplication")
    med = r.groupby("size")["collapse_floor"].median() if len(r) else pd.Series(dtype=float)
    med = med.loc[_size_order(med.index)]
    shown = ", ".join(f"{s} {v:.2f}" for s, v in med.items()) or "no collapse measured"
    if len(med) < 2 or len(r) < MIN_CASES:
        return Claim("floor_multiplication", "multiplication's collapse floor rises with capacity",
                     "floors rise with model size", f"median floor by size: {shown}", "inconclusive",
                     f"floors at {len(med)} size(s) over {len(r)} run(s); at least 2 sizes and {MIN_CASES} runs",
                     "events/events.parquet (collapse_floor, multiplication runs)", SOURCES["floor_multiplication"])
    kt = stats.kendall_tau(r["n_parameters"].to_numpy(float), r["collapse_floor"].to_numpy(float),
                           n_permutations=ctx.n_permutations, seed=ctx.seed, alternative="greater")
    verdict, why = _holds(kt.p_value, len(r), f"Kendall tau(parameters, floor) = {kt.tau:+.2f} over {len(r)} runs")
    return Claim("floor_multiplication", "multiplication's collapse floor rises with capacity",
                 "floors rise with model size", f"median floor by size: {shown}; tau {kt.tau:+.2f}", verdict, why,
                 "events/events.parquet (collapse_floor, multiplication runs)", SOURCES["floor_multiplication"],
                 kt.tau, math.nan, math.nan, 0.0, kt.p_value, "Kendall tau-b, one-sided permutation p")


def _across(ctx: _Ctx, quantity: str) -> Claim:
    runs = ctx.runs
    sizes = _size_order(runs["size"].unique())
    key = ["task", "level"]
    if quantity == "collapse_floor":
        table = runs.assign(v=_num(runs["collapse_floor"])).pivot_table(index=key, columns="size", values="v",
                                                                         aggfunc="mean")
        label = "collapse floors"
    else:
        acq = _num(runs["acquisition_step"])
        never = float(acq.max()) + 1.0 if acq.notna().any() else 1.0
        table = runs.assign(v=acq.fillna(never)).pivot_table(index=key, columns="size", values="v", aggfunc="mean")
        label = "acquisition order (never acquired ranked last)"
    pairs = []
    for i, small in enumerate(sizes):
        for large in sizes[i + 1:]:
            both = table[[small, large]].dropna() if {small, large} <= set(table.columns) else table.iloc[:0]
            if len(both) >= 2:
                kt = stats.kendall_tau(both[small].to_numpy(float), both[large].to_numpy(float),
                                       n_permutations=ctx.n_permutations, seed=ctx.seed, alternative="greater")
                pairs.append((small, large, len(both), kt.tau, kt.p_value))
            else:
                pairs.append((small, large, len(both), math.nan, math.nan))
    shown = "; ".join(f"{a} vs {b}: tau {t:+.2f} (p {p:.2g}, {n} settings)" if not math.isnan(t)
                      else f"{a} vs {b}: undefined ({n} settings)" for a, b, n, t, p in pairs) or "one size only"
    judged = [(n, t, p) for _, _, n, t, p in pairs if n >= MIN_SETTINGS and not math.isnan(t)]
    if not judged:
        verdict, why = "inconclusive", f"no pair of sizes shares {MIN_SETTINGS} settings with a defined tau"
    elif all(t > 0 and p < ALPHA for _, t, p in judged):
        verdict, why = "reproduced", f"tau > 0 with p < {ALPHA} for every pair of sizes"
    else:
        verdict, why = "not reproduced", f"some pair of sizes has tau <= 0 or p >= {ALPHA}"
    ps = [p for _, _, p in judged]
    return Claim(f"across_sizes_{quantity}", f"small models predict large ones: rank correlation of {label}",
                 "positive rank correlation between sizes", shown, verdict, why,
                 "events/events.parquet; per-setting values in reproduction.md's runs table",
                 SOURCES[f"across_sizes_{quantity}"],
                 float(np.mean([t for _, t, _ in judged])) if judged else math.nan, math.nan, math.nan, 0.0,
                 max(ps) if ps else math.nan,
                 "Kendall tau-b between sizes over matched (task, level), mean over seeds; permutation p (largest)")


def _probe(ctx: _Ctx, probe_lead: pd.DataFrame, probes: pd.DataFrame | None = None) -> Claim:
    runs = ctx.runs
    pl = probe_lead if probe_lead is not None else pd.DataFrame()
    counted = runs[runs["counted"]]
    if pl.empty:
        return Claim("probe_lead", "a linear probe reads the answer before the model produces it",
                     "probes lead acquisition", "not measured", "inconclusive", "no probes table in this study",
                     "summary/probe_lead.parquet", SOURCES["probe_lead"])
    # layer 0 is the read position's token embedding, the same for every item (the separator): it carries
    # nothing to read and never rises, so it neither leads nor keeps a run whose real layers are all
    # readable at start in the fraction
    pl = pl[pl["model"].isin(set(counted["model"])) & (pd.to_numeric(pl["layer"], errors="coerce") >= 1)]
    failed = _failed_gate(ctx, probes, set(pl["model"]))
    gate = ""
    if failed is not None:
        passed, failed_models = failed
        gate = f"; sanity gate: {passed} run(s) pass, {len(failed_models)} fail ({_examples(failed_models)})"
        pl = pl[~pl["model"].isin(failed_models)]
        if failed_models and not passed:
            return Claim("probe_lead", "a linear probe reads the answer before the model produces it",
                         "probes lead acquisition", "not measured (failed gate)", "inconclusive",
                         "no run's probe decodes the target at the end while the model is at "
                         f">= {PROBE_GATE_ACCURACY:.0%}" + gate, "summary/probe_lead.parquet", SOURCES["probe_lead"])
    measured = pl[pl["status"] != "not_measured"]
    judged = measured[measured["status"] != "readable_at_start"]
    leads = sorted(set(judged.loc[judged["status"] == "leads", "model"]))
    models = sorted(set(judged["model"]))
    at_start = sorted(set(measured["model"]) - set(judged["model"]))
    not_measured = sorted(set(pl["model"]) - set(measured["model"]))
    rows = counted[counted["model"].isin(models)].set_index("model").loc[models].reset_index() if models else \
        counted.iloc[:0]
    flag = rows["model"].isin(leads)
    rate, lo, hi, how = _rate(ctx, rows, flag)
    null = p = math.nan
    res = None
    if models and "probe_step" in judged.columns:
        first = judged.groupby("model")["probe_step"].min()
        pool = [m for m in models if m in ctx.curves and ctx.curves[m].acquisition_step is not None]
        if pool:
            strata = [ctx.curves[m].stratum for m in pool]
            onset = np.array([float(first.get(m)) if pd.notna(first.get(m)) else math.inf for m in pool])
            acq = np.array([float(ctx.curves[m].acquisition_step) for m in pool])
            res = stats.permutation_test(lambda o: float(np.mean(onset < acq[np.asarray(o)])), len(pool),
                                         strata=strata, n_permutations=ctx.n_permutations, seed=ctx.seed)
            null, p = res.null_mean, res.p_value
    verdict, why = _holds(p, len(models), "lead rate against permuted acquisition", _floor_p(res))
    extra = (f"; {len(at_start)} acquired run(s) left out: every layer's probe reads the label at the first "
             f"checkpoint (no rise to see)") if at_start else ""
    extra += f"; {len(not_measured)} acquired run(s) not measured (probe undefined)" if not_measured else ""
    return Claim("probe_lead", "a linear probe reads the answer before the model produces it",
                 "probes lead acquisition",
                 f"{_frac(len(leads), len(models))} acquired runs have a layer whose probe leads {_ci(lo, hi)}"
                 + ("" if math.isnan(null) else f"; permuted {null:.0%}"),
                 verdict, why + extra + gate + "; onset: beats max(chance, control) by the margin with p < alpha",
                 "summary/probe_lead.parquet", SOURCES["probe_lead"], rate, lo, hi, null, p,
                 f"permutation of acquisition steps within a schedule; interval: {how}")


def _failed_gate(ctx: _Ctx, probes: pd.DataFrame | None, models: set) -> tuple[int, list[str]] | None:
    """(runs passing, runs failing) the probe's sanity gate; None without the probes table or accuracy."""
    if probes is None or probes.empty or not ctx.accuracy:
        return None
    from ckptgeo.analysis.summary import AnalysisConfig

    cfg = ctx.config or AnalysisConfig()
    passed, failed = 0, []
    for model, g in probes[probes["model"].isin(models)].groupby("model"):
        if model not in ctx.accuracy:
            continue
        last = g["step"].max()
        s_acc, acc, _ = ctx.accuracy[model]
        at = acc[s_acc <= last]
        if not len(at) or at[-1] < PROBE_GATE_ACCURACY:
            continue   # the model is not at ~100% there: the gate does not apply
        end = g[(g["step"] == last) & (pd.to_numeric(g["layer"], errors="coerce") >= 1)]
        acc_p = _num(end["accuracy"])
        if acc_p.isna().all():
            continue   # the probe is undefined there (too few items of a class): not measured, not failed
        base = np.maximum(_num(end["chance"]), _num(end["control_accuracy"]).fillna(0.0))
        pval = _num(end["p_value"]) if "p_value" in end.columns else pd.Series(0.0, index=end.index)
        if bool(((acc_p - base >= cfg.probe_margin) & (pval < cfg.probe_alpha)).any()):
            passed += 1
        else:
            failed.append(model)
    return passed, failed


def _pythia() -> Claim:
    return Claim("pythia_deduction", "Pythia-2.8B: logical deduction has a precursor gap, easy benchmarks none",
                 "gap of about 49K steps", "not measured by this study", "inconclusive",
                 "needs the Pythia checkpoints: ckptgeo scan EleutherAI/pythia-2.8b --suite logical_deduction",
                 "-", SOURCES["pythia_deduction"])


def _contexts(runs: pd.DataFrame, curves: pd.DataFrame | None, accuracy: pd.DataFrame | None) -> tuple[dict, dict]:
    """Per run: its summary-layer RankMe curve (chance.Curve) and its accuracy curve."""
    from ckptgeo.studies.chance import Curve

    acc_by, cur_by = {}, {}
    if accuracy is not None and len(accuracy):
        for (model, suite), g in accuracy.groupby(["model", "suite"], sort=True):
            if model in set(runs["model"]):
                g = g.sort_values("step").drop_duplicates("step")
                ch = _num(g["chance"]).iloc[0] if "chance" in g.columns else math.nan
                acc_by[model] = (g["step"].to_numpy(float), _num(g["accuracy"]).to_numpy(), float(ch))
    if curves is None or not len(curves):
        return cur_by, acc_by
    rk = curves[curves["metric"] == "rankme"]
    for r in runs.itertuples(index=False):
        g = rk[(rk["model"] == r.model)]
        if r.config_hash is not None and "config_hash" in g.columns and (g["config_hash"] == r.config_hash).any():
            g = g[g["config_hash"] == r.config_hash]
        if not len(g):
            continue
        g = g[g["layer"] == g["layer"].max()].sort_values("step")
        grid = acc_by.get(r.model, (g["step"].to_numpy(float),))[0]
        acq = _num(pd.Series([r.acquisition_step])).iloc[0]
        cur_by[r.model] = Curve(g["step"].to_numpy(float), g["value"].to_numpy(float),
                                None if (not r.counted or math.isnan(acq)) else int(acq),
                                ",".join(str(int(x)) for x in grid), "recovery")
    return cur_by, acc_by


def claim_table(events: pd.DataFrame, top_down: pd.DataFrame | None = None,
                probe_lead: pd.DataFrame | None = None, *, curves: pd.DataFrame | None = None,
                accuracy: pd.DataFrame | None = None, probes: pd.DataFrame | None = None, config=None,
                hard: Callable[[str, int], bool] | None = None, n_permutations: int = stats.DEFAULT_N_PERMUTATIONS,
                n_resamples: int = stats.DEFAULT_N_RESAMPLES, n_noise_curves: int = 100,
                seed: int = 0) -> pd.DataFrame:
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
        Work of the tests (counts, never seconds) and their seed.

    Returns
    -------
    DataFrame
        Columns ``id``, ``claim``, ``paper``, ``measured``, ``verdict`` (one of :data:`VERDICTS`),
        ``reason``, ``evidence``, ``source``, ``value``, ``low``, ``high``, ``null``, ``p_value``, ``test``;
        rows in the order of the paper's argument. Rules: :data:`DEFINITIONS`, :func:`rules`.

    References
    ----------
    Billa, "The Geometric Anatomy of Capability Acquisition in Transformers", arXiv:2602.15997.
    """
    events = events if events is not None else pd.DataFrame(columns=["model", "metric", "layer", "status"])
    runs = runs_table(events, hard=hard)
    cur_by, acc_by = _contexts(runs, curves, accuracy)
    ctx = _Ctx(runs, cur_by, acc_by, config, n_permutations, n_resamples, n_noise_curves, seed)
    rows = [
        _order(ctx), _precursor(ctx, True), _precursor(ctx, False), _top_down(ctx, events),
        _whole_model(ctx, events, curves, "llc", "the local learning coefficient (LLC)",
                     "synchronous: 0/24 precursors"),
        _whole_model(ctx, events, curves, "hessian", "the Hessian's top eigenvalue", "lags acquisition, or is noisy"),
        _floor_modular(ctx), _floor_multiplication(ctx), _across(ctx, "collapse_floor"),
        _across(ctx, "acquisition_step"), _probe(ctx, probe_lead, probes), _pythia(),
    ]
    return pd.DataFrame([r.__dict__ for r in rows], columns=list(Claim.__dataclass_fields__))


def spacing_table(events: pd.DataFrame, curves: pd.DataFrame, accuracy: pd.DataFrame, *, config=None,
                  hard: Callable[[str, int], bool] | None = None) -> pd.DataFrame:
    """Precursor rates of hard and easy runs with every k-th checkpoint kept
    (:func:`ckptgeo.studies.chance.subsample_rates`): checkpoint spacing as a factor."""
    from ckptgeo.studies.chance import subsample_rates

    runs = runs_table(events, hard=hard)
    cur_by, acc_by = _contexts(runs, curves, accuracy)
    flags = dict(zip(runs["model"], runs["hard"]))
    return subsample_rates(cur_by, acc_by, lambda m: bool(flags.get(m, False)), config=config)
