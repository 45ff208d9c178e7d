"""The paper's claims, one row each, judged against a training grid's events.

:func:`claim_table` is a pure function of the analysis tables (:class:`ckptgeo.analysis.summary.Analysis`:
``events``, ``top_down``, ``probe_lead``) of a grid whose models are run folders named
``<task>-L<level>-<size>-s<seed>`` (:func:`ckptgeo.training.trainer.run_name`). It reads nothing and
writes nothing; :mod:`ckptgeo.studies.reproduce` writes its result into ``reproduction.md``.

The definitions and thresholds behind every verdict are :data:`DEFINITIONS` (written into
``reproduction.md`` beside the table).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

__all__ = ["Claim", "claim_table", "runs_table", "parse_run", "MIN_CASES", "MIN_SETTINGS", "VERDICTS", "DEFINITIONS"]

#: fewest cases (runs, pairs) a fraction is judged on.
MIN_CASES = 3
#: fewest settings a rank correlation between two sizes is judged on.
MIN_SETTINGS = 5
VERDICTS = ("reproduced", "not reproduced", "inconclusive")
#: How runs are classed and claims judged (markdown; also in reproduction.md).
DEFINITIONS = """\
* A **run** is one (task, level, size, seed); its RankMe events are those of the uncentred RankMe at the
  summary layer (the deepest: after the final layer norm). **Counted** runs are acquired, and not at the
  first checkpoint (nothing measured before it could precede it).
* **Hard relative to capacity**: a counted run whose acquisition step is at or above the median
  acquisition step of the counted runs *of the same model size* (slow for that size); the others are
  **easy**. So the split moves with capacity: a task slow for `tiny` can be easy for a larger model.
* Whole-model measures (LLC, Hessian) and probes are measured at a subset of checkpoints (the preset
  says how many); their onsets are judged against the acquisition step from every checkpoint. A probe
  that beats its baseline already at its first measured checkpoint is *readable at start*: no rise can be
  seen, so it is no lead, and a run whose every probed layer is readable at start is left out of the probe
  row's fraction.
* Verdicts. A claim that something holds in all (most) cases is *reproduced* when the measured
  fraction is >= 0.8, *not reproduced* when <= 0.5, else *inconclusive* (mixed); a claim that something
  never happens is reproduced at <= 0.2, not reproduced at >= 0.5. Fewer than 3 cases:
  inconclusive. Collapse floors: modular arithmetic reproduces when every size's median floor is within
  2.0 +- 0.5 and the sizes' medians differ by at most 0.5. Rank correlations between sizes: reproduced
  at Spearman rho >= 0.5 with p < 0.05 over at least 5 settings, not reproduced at
  rho < 0.5 over that many, else inconclusive.
"""
_RUN = re.compile(r"^(?P<task>.+)-L(?P<level>\d+)-(?P<size>[A-Za-z0-9]+)-s(?P<seed>\d+)$")
_NOT_COUNTED = ("never_acquired", "no_data", "acquired_at_start")


@dataclass(frozen=True)
class Claim:
    """One row of ``reproduction.md``: the paper's statement, what was measured, and the verdict."""

    id: str
    claim: str
    paper: str
    measured: str
    verdict: str
    reason: str
    evidence: str


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


def runs_table(events: pd.DataFrame, metric: str = "rankme") -> pd.DataFrame:
    """One row per grid run: its summary-layer events of ``metric`` (uncentred where both exist).

    Columns: model, task, level, size, n_parameters, seed, acquisition_step, acquisition_status,
    collapse_step, collapse_floor, onset_step, gap_steps, resolution_steps, status, counted, hard.
    """
    cols = ["model", "task", "level", "size", "n_parameters", "seed", "acquisition_step", "acquisition_status",
            "collapse_step", "collapse_floor", "onset_step", "gap_steps", "resolution_steps", "status", "counted",
            "hard"]
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
                     "counted": r.status not in _NOT_COUNTED})
    df = pd.DataFrame(rows, columns=cols[:-1]).astype({"counted": bool})
    if df.empty:
        return df.assign(hard=pd.Series(dtype=bool))
    acq = _num(df["acquisition_step"])
    median = acq.where(df["counted"]).groupby(df["size"]).transform("median")
    df["hard"] = df["counted"] & (acq >= median)
    return df.sort_values(["n_parameters", "task", "level", "seed"], kind="stable", ignore_index=True)


# ------------------------------------------------------------------------------------------------ verdicts

def _fraction_verdict(k: int, n: int, *, want: str) -> tuple[str, str]:
    """Verdict of "holds in all cases" (want="all") or "never happens" (want="none") from k of n."""
    if n < MIN_CASES:
        return "inconclusive", f"only {n} case(s); at least {MIN_CASES} are needed"
    f = k / n
    if want == "all":
        if f >= 0.8:
            return "reproduced", f"{f:.0%} >= 80%"
        if f <= 0.5:
            return "not reproduced", f"{f:.0%} <= 50%"
        return "inconclusive", f"{f:.0%}: between 50% and 80% (mixed)"
    if f <= 0.2:
        return "reproduced", f"{f:.0%} <= 20%"
    if f >= 0.5:
        return "not reproduced", f"{f:.0%} >= 50%"
    return "inconclusive", f"{f:.0%}: between 20% and 50% (mixed)"


def _frac(k: int, n: int) -> str:
    return f"{k}/{n}" + (f" ({k / n:.0%})" if n else "")


def _examples(models, n: int = 3) -> str:
    models = list(models)
    if not models:
        return "none"
    return ", ".join(models[:n]) + (f" (+{len(models) - n} more)" if len(models) > n else "")


def _spearman(x, y) -> tuple[float, float]:
    from scipy.stats import spearmanr

    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.size < 2 or np.unique(x).size < 2 or np.unique(y).size < 2:
        return math.nan, math.nan
    res = spearmanr(x, y)
    return float(res.statistic), float(res.pvalue)


# -------------------------------------------------------------------------------------------------- claims

def _num(series) -> pd.Series:
    return pd.to_numeric(series, errors="coerce").astype("float64")


def _order(runs: pd.DataFrame) -> Claim:
    c = runs[runs["counted"]]
    col, rec, acq = _num(c["collapse_step"]), _num(c["onset_step"]), _num(c["acquisition_step"])
    ok = c[(col < rec) & (rec <= acq)]  # NaN compares False: a missing collapse or recovery is out of order
    verdict, why = _fraction_verdict(len(ok), len(c), want="all")
    missing = c.loc[~c.index.isin(ok.index), "model"]
    return Claim("order", "collapse -> recovery -> acquisition, in that order, in every run",
                 "the shape holds across tasks and sizes", f"{_frac(len(ok), len(c))} acquired runs",
                 verdict, why + (f"; out of order: {_examples(missing)}" if len(missing) else ""),
                 "events/events.parquet (metric rankme, summary layer); figures/grid.png")


def _precursor(runs: pd.DataFrame, hard: bool) -> Claim:
    c = runs[runs["counted"] & (runs["hard"] == hard)]
    k = int((c["status"] == "precursor").sum())
    prec = c[c["status"] == "precursor"]
    gaps, rel = _num(prec["gap_steps"]), _num(prec["gap_steps"]) / _num(prec["acquisition_step"])
    gap = f"; median gap {gaps.median():.0f} steps ({rel.median():.0%} of the acquisition step)" if len(gaps) else ""
    verdict, why = _fraction_verdict(k, len(c), want="all" if hard else "none")
    if hard:
        return Claim("precursor_hard", "RankMe recovery precedes acquisition on hard settings",
                     "100% of hard algorithmic settings", f"{_frac(k, len(c))} hard runs{gap}", verdict, why,
                     "summary/precursor_rates.parquet; events (status precursor); runs: "
                     + _examples(c["model"]))
    return Claim("precursor_easy", "on easy settings collapse and acquisition coincide (no precursor)",
                 "none detectable", f"{_frac(k, len(c))} easy runs are precursors{gap}", verdict, why,
                 "events/events.parquet (status, gap_steps, resolution_steps); runs: " + _examples(c["model"]))


def _top_down(top_down: pd.DataFrame, runs: pd.DataFrame) -> Claim:
    td = top_down if top_down is not None else pd.DataFrame()
    if len(td):
        td = td[td["model"].isin(set(runs["model"])) & (td["metric"] == "rankme")]
        if "centered" in td.columns and td["centered"].eq(False).fillna(False).astype(bool).any():
            td = td[td["centered"].eq(False).fillna(False).astype(bool)]
    decided = td[td["direction"].isin(["top-down", "bottom-up", "simultaneous"])] if len(td) else td
    k = int((decided["direction"] == "top-down").sum()) if len(decided) else 0
    verdict, why = _fraction_verdict(k, len(decided), want="all")
    return Claim("top_down", "collapse reaches output-side layers first (Spearman(depth, collapse onset) < 0)",
                 "28/32 task x model pairs (v3); 32/32 (v1-v2)", f"{_frac(k, len(decided))} runs top-down",
                 verdict, why + "; collapse onset = first step at half the layer's first RankMe",
                 "summary/top_down.parquet")


def _whole_model(events: pd.DataFrame, runs: pd.DataFrame, metric: str, label: str, paper: str) -> Claim:
    e = events[(events["metric"] == metric) & events["model"].isin(set(runs["model"]))] if len(events) else events
    if e is None or e.empty:
        return Claim(metric, f"{label} is not a precursor", paper, "not measured", "inconclusive",
                     f"no {metric} rows in this study (not in the preset's metrics)", "events/events.parquet")
    e = e[e["layer"] == -1]
    c = e[~e["status"].isin(_NOT_COUNTED)]
    k = int((c["status"] == "precursor").sum())
    lag = int((c["status"] == "lagging").sum())
    verdict, why = _fraction_verdict(k, len(c), want="none")
    return Claim(metric, f"{label} is not a precursor of acquisition", paper,
                 f"{_frac(k, len(c))} acquired runs precursor; {lag} lagging", verdict, why,
                 f"events/events.parquet (metric {metric}, layer -1)")


def _floors(runs: pd.DataFrame, task: str) -> pd.Series:
    r = runs[(runs["task"] == task) & runs["collapse_floor"].notna()]
    if r.empty:
        return pd.Series(dtype=float)
    med = r.groupby("size")["collapse_floor"].median()
    order = sorted(med.index, key=_size_params)
    return med.loc[order]


def _floor_modular(runs: pd.DataFrame) -> Claim:
    med = _floors(runs, "modular")
    shown = ", ".join(f"{s} {v:.2f}" for s, v in med.items()) or "no collapse measured"
    if len(med) < 2:
        verdict, why = "inconclusive", f"floors at {len(med)} size(s); at least 2 are needed"
    elif (abs(med - 2.0) <= 0.5).all() and float(med.max() - med.min()) <= 0.5:
        verdict, why = "reproduced", "every size within 2.0 +- 0.5, sizes within 0.5 of each other"
    else:
        verdict, why = "not reproduced", (f"median floors {med.min():.2f}..{med.max():.2f}: not all within "
                                          "2.0 +- 0.5 with a spread <= 0.5")
    return Claim("floor_modular", "modular arithmetic collapses to a RankMe floor near 2.0 at every size",
                 "about 2.0 at every size", f"median floor by size: {shown}", verdict, why,
                 "events/events.parquet (collapse_floor, modular runs)")


def _floor_multiplication(runs: pd.DataFrame) -> Claim:
    med = _floors(runs, "multiplication")
    shown = ", ".join(f"{s} {v:.2f}" for s, v in med.items()) or "no collapse measured"
    if len(med) < 2:
        verdict, why = "inconclusive", f"floors at {len(med)} size(s); at least 2 are needed"
    elif bool(np.all(np.diff(med.to_numpy()) > 0)):
        verdict, why = "reproduced", "median floor rises with every step up in size"
    else:
        verdict, why = "not reproduced", "median floor does not rise with size"
    return Claim("floor_multiplication", "multiplication's collapse floor rises with capacity",
                 "floors rise with model size", f"median floor by size: {shown}", verdict, why,
                 "events/events.parquet (collapse_floor, multiplication runs)")


def _across(runs: pd.DataFrame, quantity: str) -> Claim:
    sizes = sorted(runs["size"].unique(), key=_size_params)
    key = ["task", "level", "seed"]
    if quantity == "collapse_floor":
        table = runs.pivot_table(index=key, columns="size", values="collapse_floor", aggfunc="mean")
        label = "collapse floors"
    else:
        acq = _num(runs["acquisition_step"])
        never = float(acq.max()) + 1.0 if acq.notna().any() else 1.0
        table = runs.assign(a=acq.fillna(never)).pivot_table(index=key, columns="size", values="a", aggfunc="mean")
        label = "acquisition order (never acquired ranked last)"
    pairs = []
    for i, small in enumerate(sizes):
        for large in sizes[i + 1:]:
            both = table[[small, large]].dropna() if {small, large} <= set(table.columns) else table.iloc[:0]
            rho, p = _spearman(both[small], both[large]) if len(both) >= 2 else (math.nan, math.nan)
            pairs.append((small, large, len(both), rho, p))
    shown = "; ".join(f"{a} vs {b}: rho {r:+.2f} (p {p:.2g}, {n} settings)" if not math.isnan(r)
                      else f"{a} vs {b}: undefined ({n} settings)" for a, b, n, r, p in pairs) or "one size only"
    judged = [(n, r, p) for _, _, n, r, p in pairs if n >= MIN_SETTINGS and not math.isnan(r)]
    if not judged:
        verdict, why = "inconclusive", f"no pair of sizes shares {MIN_SETTINGS} settings with a defined rho"
    elif all(r >= 0.5 and p < 0.05 for _, r, p in judged):
        verdict, why = "reproduced", "rho >= 0.5 with p < 0.05 for every pair of sizes"
    elif any(r < 0.5 for _, r, _ in judged):
        verdict, why = "not reproduced", "rho < 0.5 for some pair of sizes"
    else:
        verdict, why = "inconclusive", "rho >= 0.5 but not significant (p >= 0.05)"
    return Claim(f"across_sizes_{quantity}", f"small models predict large ones: rank correlation of {label}",
                 "positive rank correlation between sizes (the rho reported differs between versions; this row "
                 "checks rho >= 0.5)", shown, verdict, why,
                 "events/events.parquet; per-setting values in reproduction.md's runs table")


def _probe(probe_lead: pd.DataFrame, runs: pd.DataFrame) -> Claim:
    pl = probe_lead if probe_lead is not None else pd.DataFrame()
    counted = runs[runs["counted"]]
    if pl.empty:
        return Claim("probe_lead", "a linear probe reads the answer before the model produces it",
                     "probes lead acquisition", "not measured", "inconclusive", "no probes table in this study",
                     "summary/probe_lead.parquet")
    # layer 0 is the read position's token embedding, the same for every item (the separator): it carries
    # nothing to read and never rises, so it neither leads nor keeps a run whose real layers are all
    # readable at start in the fraction
    pl = pl[pl["model"].isin(set(counted["model"])) & (pd.to_numeric(pl["layer"], errors="coerce") >= 1)]
    measured = pl[pl["status"] != "not_measured"]
    # a run is judged on the layers whose probe could be seen rising: readable at the first checkpoint is no lead
    judged = measured[measured["status"] != "readable_at_start"]
    leads = sorted(set(judged.loc[judged["status"] == "leads", "model"]))
    n = judged["model"].nunique()
    at_start = sorted(set(measured["model"]) - set(judged["model"]))
    not_measured = sorted(set(pl["model"]) - set(measured["model"]))
    verdict, why = _fraction_verdict(len(leads), n, want="all")
    extra = (f"; {len(at_start)} acquired run(s) left out: every layer's probe reads the label at the first "
             f"checkpoint (no rise to see)") if at_start else ""
    extra += f"; {len(not_measured)} acquired run(s) not measured (probe undefined)" if not_measured else ""
    return Claim("probe_lead", "a linear probe reads the answer before the model produces it",
                 "probes lead acquisition", f"{_frac(len(leads), n)} acquired runs have a layer whose probe leads",
                 verdict, why + extra + "; onset: beats max(chance, control) by the margin with p < alpha",
                 "summary/probe_lead.parquet")


def _pythia() -> Claim:
    return Claim("pythia_deduction", "Pythia-2.8B: logical deduction has a precursor gap, easy benchmarks none",
                 "gap of about 49K steps", "not measured by this study", "inconclusive",
                 "needs the Pythia checkpoints: ckptgeo scan EleutherAI/pythia-2.8b --suite logical_deduction",
                 "-")


def claim_table(events: pd.DataFrame, top_down: pd.DataFrame | None = None,
                probe_lead: pd.DataFrame | None = None) -> pd.DataFrame:
    """The claims of arXiv:2602.15997 against a grid's events, one row each.

    Parameters
    ----------
    events : DataFrame
        :attr:`Analysis.events` of a dataset whose models are grid runs (``<task>-L<level>-<size>-s<seed>``);
        other models are ignored.
    top_down, probe_lead : DataFrame, optional
        :attr:`Analysis.top_down` and :attr:`Analysis.probe_lead`; missing ones make their rows inconclusive.

    Returns
    -------
    DataFrame
        Columns ``id``, ``claim``, ``paper``, ``measured``, ``verdict`` (one of :data:`VERDICTS`),
        ``reason``, ``evidence``; rows in the order of the paper's argument. Thresholds: module docstring.

    References
    ----------
    Billa, "The Geometric Anatomy of Capability Acquisition in Transformers", arXiv:2602.15997.
    """
    events = events if events is not None else pd.DataFrame(columns=["model", "metric", "layer", "status"])
    runs = runs_table(events)
    rows = [
        _order(runs), _precursor(runs, True), _precursor(runs, False), _top_down(top_down, runs),
        _whole_model(events, runs, "llc", "the local learning coefficient (LLC)", "synchronous: 0/24 precursors"),
        _whole_model(events, runs, "hessian", "the Hessian's top eigenvalue", "lags acquisition, or is noisy"),
        _floor_modular(runs), _floor_multiplication(runs), _across(runs, "collapse_floor"),
        _across(runs, "acquisition_step"), _probe(probe_lead, runs), _pythia(),
    ]
    return pd.DataFrame([r.__dict__ for r in rows], columns=list(Claim.__dataclass_fields__))
