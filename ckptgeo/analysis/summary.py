"""Precursor-gap analysis of a ckptgeo dataset: events per curve and the summaries built on them.

:func:`analyze` reads the dataset's ``geometry``, ``behavior`` and (if present) ``probes`` and
``revisions`` tables, applies :mod:`ckptgeo.analysis.events` to every (model, suite, config_hash,
metric, layer) curve, and writes what it finds next to the input::

    DIR/
    ├── geometry/ behavior/ probes/ revisions/   (input, written by ``ckptgeo scan``)
    ├── events/
    │   └── events.parquet          one row per (model, suite, config_hash, metric, layer)
    └── summary/
        ├── acquisitions.parquet    one row per (model, suite, config_hash) of behaviour
        ├── precursor_rates.parquet by metric and difficulty class (summary layer, see below)
        ├── precursor_rates_by_model.parquet
        ├── top_down.parquet        Spearman(depth, collapse onset) per model and suite
        ├── probe_lead.parquet      per (model, suite, layer)
        ├── across_sizes.parquet    collapse floors / acquisition steps of one task at different sizes
        ├── seed_spread.parquet     precursor rates across seeds (empty with one seed)
        └── runs.csv, runs.tex      one row per run for a paper (:mod:`ckptgeo.analysis.runs_table`)

Each file is written to a hidden temporary name in its folder and moved into place with
``os.replace`` (:func:`ckptgeo._io.atomic_path`); readers of the folder skip names starting with ``.``.

Choices made where SPEC.md leaves room (all recorded or documented; reading and labelling live in
:mod:`ckptgeo.analysis.tables`):

* Revisions whose weights another revision at another training point also serves, or that share a weight
  file with one (a group: pythia#205, #206), are left out of every table, the whole group, unless
  ``keep_grouped`` keeps one member on purpose (:func:`ckptgeo.analysis.tables.leave_out_grouped`;
  ``Analysis.left_out`` says which and why). Remaining rows at the same (curve, step) are averaged.
* Measures with an eigenvalue ``index`` (Hessian top-k) use their lowest index (the top eigenvalue).
* A geometry curve takes its accuracy from the behaviour rows of the same (model, suite) with the
  same ``config_hash``; failing that, the only behaviour config; failing that, the one with most
  checkpoints. Behaviour metric ``accuracy`` is used, ``accuracy_norm`` where it is absent.
* RankMe curves (``collapse_metrics``) get collapse, recovery onset and collapse onset; every other
  metric gets an onset of change (SPEC.md).
* Rates are taken at the **summary layer** of each curve family: the deepest layer (the output
  side, after the final layer norm) for per-layer measures, ``-1`` for whole-model ones. Curves
  never acquired, without data, or acquired at the first checkpoint (censored) are counted apart,
  not in the denominator.
* Difficulty class: a user mapping (``difficulty=``) first; else ``L<level>`` from a suite named
  ``task-L<level>``; else the ``difficulty`` of a bundled suite's header; else, per model, "early" or
  "late" acquisition around that model's median acquisition step ("not acquired" for the rest).
* Model size is parsed from the model name (``160m``, ``2.8b``, or ``<layers>x<d_model>`` as
  12·layers·d_model² parameters); NaN when it cannot be, and models then sort by depth and name.
* Seeds: a model named ``<base>-seed<k>`` / ``<base>-s<k>`` is seed ``k`` of ``<base>``; otherwise
  several values of the ``seed`` column for one model count as seeds.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import numpy as np
import pandas as pd

from ckptgeo._io import atomic_path
from ckptgeo._params import Interval, Options, validate_params
from ckptgeo.errors import DatasetLayoutError, InvalidParameterError
from ckptgeo.store.schemas import EVENTS_COLUMNS, SCHEMAS
from ckptgeo.analysis import events as ev
from ckptgeo.analysis import stats as st
from ckptgeo.analysis.tables import (_KEYS, _clean_behavior, _clean_geometry, _difficulty, _require,
                                    _with_defaults, check_x, events_in_tokens, leave_out_grouped, model_size,
                                    split_seed)
from ckptgeo.store.dataset import read_table

__all__ = [
    "AnalysisConfig", "Analysis", "analyze", "events_text", "events_view", "events_legend", "read_runs", "run_labels",
    "read_table", "model_size", "split_seed", "EVENTS_SCHEMA", "check_analysis_out",
]

logger = logging.getLogger(__name__)

_NOT_COUNTED = ("never_acquired", "no_data", "acquired_at_start", "censored")


@dataclass(frozen=True)
class AnalysisConfig:
    """Settings of one analysis; every field is recorded in the events table.

    Attributes
    ----------
    acc_threshold : float or None
        Accuracy threshold; None means 0.5, or halfway between chance and 1 where chance >= 0.5.
    window : int
        Consecutive checkpoints above the threshold (acquisition).
    recovery : float
        Fraction of the drop regained (recovery onset) or of the departure moved (onset of change).
    probe_margin : float
        Probe accuracy over the better of majority-class chance and its shuffled-label control that
        counts as "information present".
    probe_alpha : float
        Significance level of the probe's test (its ``p_value`` must be below it).
    collapse_fraction : float
        Fraction of its first value a layer's RankMe must fall to (collapse onset).
    min_drop : float
        A collapse needs RankMe to fall by more than this fraction of its first value
        (:data:`ckptgeo.analysis.events.DEFAULT_MIN_DROP`, 0.25; why: that module's docstring).
    collapse_metrics : tuple of str
        Metrics analysed by collapse and recovery rather than onset of change.
    resolution_checkpoints : int
        A gap of at most this many checkpoints (or one spacing in steps) is "unresolved", not a precursor.
    n_permutations : int
        Relabellings of each permutation test (precursor rates, the difficulty slope, top-down).
    n_noise_curves : int
        Synthetic noise curves per summary-layer curve for the detector's false-positive rate (0: skip).
    noise_kind : {"gaussian", "random_walk"}
        The noise of those curves (:func:`ckptgeo.analysis.stats.noise_curves`).
    noise_relative_sd : float or None
        Their standard deviation as a fraction of the curve's median value (their mean level); None: the
        curve's own noise (:func:`ckptgeo.analysis.stats.robust_noise_sd` over its median).
    seed : int
        Seed of every null (permutations, noise curves).
    confidence : float
        Coverage of every interval (binomial, null quantiles).
    alpha : float
        Level at which a test's p-value gives a verdict (a rate "above_null", a direction).
    """

    acc_threshold: float | None = None
    window: int = ev.DEFAULT_WINDOW
    recovery: float = ev.DEFAULT_RECOVERY
    probe_margin: float = 0.1
    probe_alpha: float = 0.05
    collapse_fraction: float = ev.DEFAULT_COLLAPSE_FRACTION
    min_drop: float = ev.DEFAULT_MIN_DROP
    collapse_metrics: tuple[str, ...] = ("rankme",)
    resolution_checkpoints: int = ev.DEFAULT_RESOLUTION_CHECKPOINTS
    n_permutations: int = st.DEFAULT_N_PERMUTATIONS
    n_noise_curves: int = st.DEFAULT_N_NOISE_CURVES
    noise_kind: str = "gaussian"
    noise_relative_sd: float | None = None
    seed: int = 0
    confidence: float = st.DEFAULT_CONFIDENCE
    alpha: float = 0.05

    _parameter_constraints = {
        "acc_threshold": [Interval(float, 0, 1, closed="left"), None],
        "window": [Interval(int, 1, None)],
        "recovery": [Interval(float, 0, 1, closed="right")],
        "collapse_fraction": [Interval(float, 0, 1, closed="right")],
        "probe_margin": [Interval(float, 0, 1, closed="left")],
        "min_drop": [Interval(float, 0, 1, closed="left")],
        "probe_alpha": [Interval(float, 0, 1, closed="left")],
        "resolution_checkpoints": [Interval(int, 0, None)],
        "n_permutations": [Interval(int, 1, None)],
        "n_noise_curves": [Interval(int, 0, None)],
        "noise_kind": [Options("gaussian", "random_walk")],
        "noise_relative_sd": [Interval(float, 0, None), None],
        "seed": [Interval(int, 0, None)],
        "confidence": [Interval(float, 0, 1, closed="neither")],
        "alpha": [Interval(float, 0, 1, closed="neither")],
    }

    def rules(self) -> dict:
        """Every rule and threshold of this analysis, with the defaults it fell back to, as plain values (written
        into each output table's Parquet metadata under ``ckptgeo.rules``)."""
        d = dataclasses.asdict(self)
        d["collapse_metrics"] = list(self.collapse_metrics)
        d["acc_threshold_rule"] = ("explicit" if self.acc_threshold is not None else
                                   f"{ev.DEFAULT_ACC_THRESHOLD:g}, or (chance + 1) / 2 where chance >= 0.5")
        d["precursor_rule"] = (f"gap_steps > max spacing before onset and acquisition, and gap_checkpoints > "
                               f"{self.resolution_checkpoints}")
        d["collapse_rule"] = f"RankMe minimum before acquisition more than {self.min_drop:g} of its first value below it"
        d["censoring_rule"] = (f"above threshold at the last checkpoints, fewer than window={self.window}: censored")
        d["null"] = ("acquisition steps permuted across counted runs (permutation p, one-sided: rate above the "
                     "null); detector on synthetic noise curves at each run's own schedule (false-positive rate)")
        return d


@dataclass(frozen=True, eq=False)
class Analysis:
    """What :func:`analyze` found. Every table is a DataFrame (possibly empty, never None).

    Attributes
    ----------
    events : DataFrame
        One row per (model, suite, config_hash, metric, layer): see :data:`EVENTS_SCHEMA`.
    acquisitions : DataFrame
        One row per behaviour curve (model, suite, config_hash).
    precursor_rates, precursor_rates_by_model : DataFrame
        Precursor rate by (metric, centered, difficulty) [and model, size].
    top_down : DataFrame
        Spearman correlation of layer depth with collapse onset, per curve family.
    probe_lead : DataFrame
        Probe onset against acquisition, per (model, suite, config_hash, layer).
    across_sizes : DataFrame
        Collapse floors / acquisition steps of each pair of models of different sizes (parameters in the name,
        else depth) that share suites: their means over the shared suites and Spearman correlation (3+ suites).
    seed_spread : DataFrame
        Precursor rates across seeds: mean, std, min, max, and the pooled rate with its binomial interval.
    difficulty_slope : DataFrame
        Per (metric, centered): slope of the gap in checkpoints on the acquisition step (per 1000 steps), beside
        the slope the permutation null gives (later acquisition leaves room for longer gaps by construction).
    seed_events : DataFrame
        Per (base model, suite, metric) with several seeds: the spread of acquisition steps and gaps across seeds.
    curves : DataFrame
        The cleaned geometry curves used (model, suite, config_hash, metric, layer, step, value).
    accuracy : DataFrame
        The cleaned behaviour curves used (model, suite, config_hash, step, accuracy, chance).
    probes : DataFrame or None
        The dataset's probes table (grouped revisions left out), for the probe figures; None without one.
    left_out : DataFrame or None
        The revisions left out and why (:data:`ckptgeo.analysis.tables.LEFT_OUT_COLUMNS`).
    x : {"steps", "tokens"}
        The axis of the figures and of the events a reader sees.
    config : AnalysisConfig
    root, out : Path
        The dataset read and the folder written (the same unless ``out`` was given).
    """

    events: pd.DataFrame
    acquisitions: pd.DataFrame
    precursor_rates: pd.DataFrame
    precursor_rates_by_model: pd.DataFrame
    top_down: pd.DataFrame
    probe_lead: pd.DataFrame
    across_sizes: pd.DataFrame
    seed_spread: pd.DataFrame
    curves: pd.DataFrame
    accuracy: pd.DataFrame
    config: AnalysisConfig
    root: Path
    out: Path
    written: tuple[Path, ...] = field(default=())
    probes: pd.DataFrame | None = None
    left_out: pd.DataFrame | None = None
    x: str = "steps"
    difficulty_slope: pd.DataFrame = field(default_factory=pd.DataFrame)
    seed_events: pd.DataFrame = field(default_factory=pd.DataFrame)

    def summary_tables(self) -> dict[str, pd.DataFrame]:
        """The summary tables by file name (without ``.parquet``)."""
        return {"acquisitions": self.acquisitions, "precursor_rates": self.precursor_rates,
                "precursor_rates_by_model": self.precursor_rates_by_model, "top_down": self.top_down,
                "probe_lead": self.probe_lead, "across_sizes": self.across_sizes,
                "seed_spread": self.seed_spread, "difficulty_slope": self.difficulty_slope,
                "seed_events": self.seed_events}


#: column names of the events table, in order (its schema: ``ckptgeo.store.schemas.SCHEMAS["events"]``).
EVENTS_SCHEMA = EVENTS_COLUMNS


# ------------------------------------------------------------------------------------------ events

def _match_behavior(acc_groups: dict, model: str, suite: str, config_hash: str):
    options = acc_groups.get((model, suite))
    if not options:
        return None
    if config_hash in options:
        return options[config_hash]
    if len(options) == 1:
        return next(iter(options.values()))
    return max(sorted(options.items(), key=lambda kv: kv[0]), key=lambda kv: len(kv[1].steps))[1]


def _opt(x) -> int | None:
    return None if x is None else int(x)


def _fnan(x) -> float:
    return math.nan if x is None else float(x)


@dataclass(frozen=True)
class _Behavior:
    """One behaviour curve and what was found on it."""

    steps: np.ndarray
    acc: np.ndarray
    acquisition: ev.Acquisition
    onset: ev.Onset
    n_items: np.ndarray


def _onset_as_acquisition(onset: ev.Onset, like: ev.Acquisition) -> ev.Acquisition:
    """Accuracy's own onset in the shape :func:`ev.precursor_gap` compares against."""
    if like.status == "no_data":
        return like
    if onset.step is None:
        return ev.Acquisition(None, None, like.threshold, like.window, like.chance, "never_acquired",
                              f"no accuracy onset: {onset.reason}", grid=like.grid)
    return ev.Acquisition(onset.step, onset.index, like.threshold, like.window, like.chance, "acquired", None,
                          onset.resolution_steps, onset.index == 0, onset.spacing_after, grid=like.grid)


def _accuracy_at(b: _Behavior, step: int | None, confidence: float) -> tuple[float, float, float, int | None]:
    """Accuracy at a checkpoint with its binomial interval over the suite's items (NaN without n_items)."""
    if step is None:
        return math.nan, math.nan, math.nan, None
    at = np.nonzero(b.steps == step)[0]
    if at.size == 0 or not np.isfinite(b.acc[at[0]]):
        return math.nan, math.nan, math.nan, None
    acc, n = float(b.acc[at[0]]), b.n_items[at[0]]
    if not np.isfinite(n) or n < 1:
        return acc, math.nan, math.nan, None
    r = st.binomial_interval(int(round(acc * n)), int(n), confidence=confidence)
    return acc, r.low, r.high, int(n)


def _detector(cfg: AnalysisConfig, kind: str, grid: np.ndarray, acquisition_step: int):
    """The precursor rule on curves measured at ``grid``, against an acquisition at ``acquisition_step`` of it."""
    acq = ev.acquisition_at(grid, acquisition_step, window=cfg.window)

    def fires(steps, values) -> bool:
        return ev.curve_events(steps, values, acq, kind=kind, min_drop=cfg.min_drop, recovery=cfg.recovery,
                               resolution_checkpoints=cfg.resolution_checkpoints).precursor
    return fires


def _noise_fpr(s: np.ndarray, v: np.ndarray, acq: ev.Acquisition, kind: str, cfg: AnalysisConfig):
    """The detector's false-positive rate on noise curves at this curve's schedule, and the noise level used."""
    keep = np.isfinite(v)
    s, v = s[keep], v[keep]
    if cfg.n_noise_curves == 0 or not acq.acquired or acq.at_first_checkpoint or s.size < 3:
        return None, math.nan
    level = float(np.median(v)) or 1.0   # the curve's typical value; its first value is one noisy draw
    sd = cfg.noise_relative_sd
    if sd is None:
        sd = st.robust_noise_sd(v) / abs(level)
        sd = 0.0 if not math.isfinite(sd) else sd
    rate = st.false_positive_rate(_detector(cfg, kind, np.sort(s), int(acq.step)), s, n_curves=cfg.n_noise_curves,
                                  seed=cfg.seed, kind=cfg.noise_kind, level=level, relative_sd=sd,
                                  confidence=cfg.confidence)
    return rate, float(sd)


def _compute_events(curves: pd.DataFrame, acc_groups: dict, classes: dict, cfg: AnalysisConfig,
                    version: str) -> pd.DataFrame:
    rows = []
    keys = _KEYS + ["metric", "layer"]
    deepest = curves.groupby(_KEYS + ["metric"])["layer"].max().to_dict() if len(curves) else {}
    for (model, suite, chash, metric, layer), g in curves.groupby(keys, sort=True):
        s, v = g["step"].to_numpy(), g["value"].to_numpy()
        match = _match_behavior(acc_groups, model, suite, chash)
        if match is None:
            acq = ev.Acquisition(None, None, ev.acquisition_threshold(cfg.acc_threshold), cfg.window, None,
                                 "no_data", "no behavior rows for this model and suite")
            acq_onset = ev.Onset(None, None, math.nan, "no_data", acq.reason)
        else:
            acq, acq_onset = match.acquisition, match.onset
        finite = np.isfinite(v)
        kind = "recovery" if metric in cfg.collapse_metrics else "change"
        ce = ev.curve_events(s, v, acq, kind=kind, min_drop=cfg.min_drop, recovery=cfg.recovery,
                             resolution_checkpoints=cfg.resolution_checkpoints)
        col, onset, gap = ce.collapse, ce.onset, ce.gap
        con = ev.collapse_onset(s, v, fraction=cfg.collapse_fraction) if kind == "recovery" else None
        vs_onset = ev.precursor_gap(_onset_as_acquisition(acq_onset, acq), onset,
                                    resolution_checkpoints=cfg.resolution_checkpoints)
        reason = gap.reason if gap.status != "no_onset" else onset.reason
        task, diff = classes.get((model, suite), (suite, "unclassified"))
        first = float(v[finite][0]) if finite.any() else math.nan
        centered = g["centered"].iloc[0] if "centered" in g.columns else None
        seed = g["seed"].iloc[0] if "seed" in g.columns else None
        acc, acc_low, acc_high, n_items = (_accuracy_at(match, acq.step, cfg.confidence) if match is not None
                                           else (math.nan, math.nan, math.nan, None))
        fpr, noise_sd = (None, math.nan)
        if int(layer) == deepest.get((model, suite, chash, metric)):
            fpr, noise_sd = _noise_fpr(s, v, acq, kind, cfg)
        drop = col.drop if col is not None and col.step is not None else math.nan
        rows.append({
            "model": model, "suite": suite, "config_hash": chash, "task": task, "difficulty": diff,
            "metric": metric, "layer": int(layer),
            "centered": None if centered is None or pd.isna(centered) else bool(centered),
            "seed": None if seed is None or pd.isna(seed) else int(seed),
            "n_checkpoints": int(finite.sum()),
            "first_step": int(s[finite][0]) if finite.any() else None,
            "last_step": int(s[finite][-1]) if finite.any() else None,
            "acquisition_step": _opt(acq.step), "acquisition_status": acq.status,
            "acquisition_censored_step": _opt(acq.censored_step),
            "acquisition_spacing_before": _opt(acq.resolution_steps),
            "acquisition_spacing_after": _opt(acq.spacing_after),
            "acc_at_acquisition": acc, "acc_low": acc_low, "acc_high": acc_high, "n_items": n_items,
            "collapse_step": _opt(col.step) if col is not None else None,
            "collapse_floor": col.floor if col is not None and col.step is not None else math.nan,
            "collapse_drop_fraction": drop / abs(first) if math.isfinite(drop) and first else math.nan,
            "first_value": first, "onset_kind": kind, "onset_step": _opt(onset.step),
            "onset_resolution_steps": _opt(onset.resolution_steps), "onset_spacing_after": _opt(onset.spacing_after),
            "collapse_onset_step": _opt(con.step) if con is not None else None,
            "precursor": bool(gap.precursor), "gap_steps": _opt(gap.gap_steps),
            "gap_checkpoints": _opt(gap.gap_checkpoints), "gap_low_steps": _opt(gap.gap_low_steps),
            "gap_high_steps": _opt(gap.gap_high_steps),
            "resolution_steps": _opt(gap.resolution_steps), "status": gap.status, "reason": reason,
            "acc_onset_step": _opt(acq_onset.step), "gap_acc_onset_steps": _opt(vs_onset.gap_steps),
            "gap_acc_onset_checkpoints": _opt(vs_onset.gap_checkpoints), "status_acc_onset": vs_onset.status,
            "noise_fpr": math.nan if fpr is None else fpr.rate, "noise_fpr_low": math.nan if fpr is None else fpr.low,
            "noise_fpr_high": math.nan if fpr is None else fpr.high, "noise_relative_sd": noise_sd,
            "acc_threshold": acq.threshold, "chance": math.nan if acq.chance is None else acq.chance,
            "window": cfg.window, "recovery": cfg.recovery, "collapse_fraction": cfg.collapse_fraction,
            "min_drop": cfg.min_drop, "resolution_checkpoints": cfg.resolution_checkpoints,
            "noise_kind": cfg.noise_kind, "n_noise_curves": cfg.n_noise_curves,
            "n_permutations": cfg.n_permutations, "null_seed": cfg.seed, "confidence": cfg.confidence,
            "ckptgeo_version": version,
        })
    df = pd.DataFrame(rows, columns=list(EVENTS_SCHEMA))
    for c, typ in zip(EVENTS_SCHEMA, SCHEMAS["events"].types):
        if str(typ) == "int64":
            df[c] = df[c].astype("Int64")
        elif str(typ) == "bool":
            df[c] = df[c].astype("boolean")
    return df


# ------------------------------------------------------------------------------------------ summaries

def _summary_rows(events: pd.DataFrame) -> pd.DataFrame:
    """Rows at each curve family's summary layer (deepest layer; -1 for whole-model measures)."""
    if events.empty:
        return events
    fam = _KEYS + ["metric"]
    deepest = events.groupby(fam)["layer"].transform("max")
    return events[events["layer"] == deepest]


@dataclass(frozen=True)
class _NullCurve:
    """One summary-layer curve's verdicts for an acquisition at each checkpoint of its own grid."""

    grid: np.ndarray         # (n,) measured steps
    precursor: np.ndarray    # (n,) 1.0 / 0.0, NaN where not counted (acquisition at the first checkpoint)
    gap_checkpoints: np.ndarray  # (n,) NaN where there is no gap


def _null_curves(rows: pd.DataFrame, curves: pd.DataFrame, cfg: AnalysisConfig) -> dict[tuple, _NullCurve]:
    """Per counted summary row, the rule's outcome with acquisition moved to each checkpoint of the curve."""
    counted = rows[~rows["status"].isin(_NOT_COUNTED)]
    if counted.empty:
        return {}
    keys = _KEYS + ["metric", "layer"]
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
            acq = ev.acquisition_at(s, int(s[m]), window=cfg.window)
            gap = ev.curve_events(s, v, acq, kind=kind, min_drop=cfg.min_drop, recovery=cfg.recovery,
                                  resolution_checkpoints=cfg.resolution_checkpoints).gap
            prec[m] = float(gap.precursor)
            gck[m] = math.nan if gap.gap_checkpoints is None else float(gap.gap_checkpoints)
        out[key] = _NullCurve(s, prec, gck)
    return out


def _outcomes(nulls: list[_NullCurve], acq_steps: np.ndarray, field_: str) -> np.ndarray:
    """M[i, j]: curve i's outcome with run j's acquisition step (NaN: censored or at its first checkpoint)."""
    m = np.full((len(nulls), acq_steps.size), np.nan)
    for i, nc in enumerate(nulls):
        pos = np.searchsorted(nc.grid, acq_steps, side="left")
        ok = pos < nc.grid.size
        m[i, ok] = getattr(nc, field_)[pos[ok]]
    return m


def _rate_null(counted: pd.DataFrame, nulls: dict, cfg: AnalysisConfig) -> st.PermutationResult | None:
    """Permutation test of a precursor rate: acquisition steps permuted across the counted runs."""
    keys = _KEYS + ["metric", "layer"]
    have = [(nulls.get(k), a) for k, a in zip(counted[keys].itertuples(index=False, name=None),
                                            counted["acquisition_step"])]
    have = [(nc, a) for nc, a in have if nc is not None and pd.notna(a)]
    if len(have) < 2:
        return None
    o = _outcomes([nc for nc, _ in have], np.asarray([a for _, a in have], dtype=np.int64), "precursor")
    idx = np.arange(len(have))

    def rate(order):
        x = o[idx, order]
        return float(np.nanmean(x)) if np.isfinite(x).any() else math.nan

    return st.permutation_test(rate, len(have), n_permutations=cfg.n_permutations, seed=cfg.seed)


def _rates(rows: pd.DataFrame, by: list[str], cfg: AnalysisConfig | None = None,
           nulls: dict | None = None) -> pd.DataFrame:
    """Precursor rates with their binomial interval, the permutation null and p-value, and the noise rate."""
    cfg = cfg or AnalysisConfig()
    cols = by + ["n_curves", "n_counted", "n_precursor", "precursor_rate", "rate_low", "rate_high",
                 "null_rate", "null_low", "null_high", "p_value", "noise_rate", "noise_rate_low", "noise_rate_high",
                 "verdict", "n_unresolved", "n_synchronous", "n_lagging", "n_no_onset", "median_gap_steps",
                 "median_gap_checkpoints", "n_precursor_vs_acc_onset", "rate_vs_acc_onset", "n_never_acquired",
                 "n_censored", "n_acquired_at_start", "n_no_data", "confidence", "alpha", "n_permutations"]
    if rows.empty:
        return pd.DataFrame(columns=cols)
    out = []
    for key, g in rows.groupby(by, sort=True, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        counted = g[~g["status"].isin(_NOT_COUNTED)]
        prec = counted["precursor"].astype(bool)
        n_prec = int(prec.sum())
        rate = st.binomial_interval(n_prec, len(counted), confidence=cfg.confidence)
        null = _rate_null(counted, nulls or {}, cfg)
        fpr = counted["noise_fpr"].astype("float64") if "noise_fpr" in counted.columns else pd.Series(dtype=float)
        fpr = fpr.dropna()
        k_noise = int(round(float((fpr * cfg.n_noise_curves).sum())))
        noise = st.binomial_interval(k_noise, cfg.n_noise_curves * len(fpr), confidence=cfg.confidence)
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
            "noise_rate": noise.rate, "noise_rate_low": noise.low, "noise_rate_high": noise.high,
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


def _difficulty_slope(rows: pd.DataFrame, nulls: dict, cfg: AnalysisConfig) -> pd.DataFrame:
    """Difficulty as continuous: slope of the gap (checkpoints) on the acquisition step, beside the null's slope.

    Later acquisition leaves more checkpoints before it, so even unrelated curves give gaps that grow with the
    acquisition step; the null (acquisition steps permuted across runs, each curve's gap recomputed) measures
    that built-in slope, and the p-value (two-sided) says whether the observed slope differs from it.
    """
    by = ["metric", "centered"]
    cols = by + ["n_runs", "slope_checkpoints_per_1k_steps", "null_slope", "null_low", "null_high", "p_value",
                 "n_permutations"]
    out = []
    if rows.empty:
        return pd.DataFrame(columns=cols)
    keys = _KEYS + ["metric", "layer"]
    for key, g in rows.groupby(by, sort=True, dropna=False):
        counted = g[~g["status"].isin(_NOT_COUNTED)]
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

        res = st.permutation_test(fit, len(have), n_permutations=cfg.n_permutations, seed=cfg.seed,
                                  alternative="two-sided")
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


def _top_down(events: pd.DataFrame, cfg: AnalysisConfig) -> pd.DataFrame:
    """Order of collapse onsets over depth, per curve family, tested.

    Kendall's tau-b of block depth (layers 1 .. L-1) against collapse onset, with an exact (or Monte Carlo)
    permutation p-value and ties counted; the deepest layer (after the final layer norm) is reported apart
    (``final_norm_onset_step``) and left out of the test, and so is layer 0 (the embedding). ``direction``
    comes from the test: "top-down" / "bottom-up" when p < alpha, "not_significant" otherwise (two or three
    blocks can never reach p < 0.05), "simultaneous" when every onset ties, "undetermined" with fewer than two
    onsets. ``spearman_rho`` / ``p_value`` are Spearman over every layer >= 1 (kept for comparison; no verdict).
    """
    cols = _KEYS + ["metric", "centered", "n_layers", "n_with_onset", "onsets", "spearman_rho", "p_value",
                    "n_blocks_tested", "kendall_tau", "kendall_p", "kendall_exact", "n_tied_onsets",
                    "final_norm_layer", "final_norm_onset_step", "direction", "alpha", "n_permutations"]
    rows = []
    sub = events[events["metric"].isin(cfg.collapse_metrics) & (events["layer"] >= 1)]
    for (model, suite, chash, metric), g in sub.groupby(_KEYS + ["metric"], sort=True):
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


def _probe_lead(probes: pd.DataFrame, acc_groups: dict, cfg: AnalysisConfig) -> pd.DataFrame:
    """Probe onset against acquisition per (model, suite, config_hash, layer).

    status: "leads" / "synchronous" / "lags" (onset before / at / after acquisition), "no_probe_onset"
    (measured, never beat max(chance, control) by the margin with p < alpha), "readable_at_start" (beats
    it already at the first measured checkpoint, so no rise can be seen: not a lead), "not_measured" (no
    checkpoint has a defined probe: the reason the probe gave), or the acquisition's status
    ("never_acquired", "acquired_at_start", "no_data") when the probe was measured but there is no
    acquisition to lead.
    """
    cols = _KEYS + ["layer", "n_checkpoints", "probe_step", "acquisition_step", "lead_steps", "leads",
                    "resolution_steps", "status", "reason", "probe_margin", "probe_alpha", "p_value_at_onset"]
    if probes.empty:
        return pd.DataFrame(columns=cols)
    p = _with_defaults(probes)
    has_p = "p_value" in p.columns and p["p_value"].notna().any()
    p = p[p["step"].notna()].assign(
        accuracy=pd.to_numeric(p["accuracy"], errors="coerce"),
        control_accuracy=pd.to_numeric(p["control_accuracy"], errors="coerce"),
        chance=pd.to_numeric(p["chance"], errors="coerce") if "chance" in p.columns else math.nan,
        p_value=pd.to_numeric(p["p_value"], errors="coerce") if has_p else math.nan,
        reason=p["reason"].astype("object") if "reason" in p.columns else None)
    p = p.groupby(_KEYS + ["layer", "step"], sort=True).agg(
        accuracy=("accuracy", "mean"), control_accuracy=("control_accuracy", "mean"), chance=("chance", "mean"),
        p_value=("p_value", "max"), reason=("reason", "first")).reset_index()
    rows = []
    for (model, suite, chash, layer), g in p.groupby(_KEYS + ["layer"], sort=True):
        steps = g["step"].to_numpy()
        onset = ev.probe_onset(steps, g["accuracy"].to_numpy(), g["control_accuracy"].to_numpy(),
                               chance=g["chance"].to_numpy(), p_value=g["p_value"].to_numpy() if has_p else None,
                               margin=cfg.probe_margin, alpha=cfg.probe_alpha)
        match = _match_behavior(acc_groups, model, suite, chash)
        acq = match.acquisition if match else ev.Acquisition(None, None, math.nan, cfg.window, None, "no_data",
                                                    "no behavior rows for this model and suite")
        gap = ev.precursor_gap(acq, onset)
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
                     "probe_step": _opt(onset.step), "acquisition_step": _opt(acq.step),
                     "lead_steps": _opt(gap.gap_steps), "leads": status == "leads",
                     "resolution_steps": _opt(gap.resolution_steps), "status": status, "reason": reason,
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


def _across_sizes(events: pd.DataFrame, acq: pd.DataFrame, curves: pd.DataFrame,
                  cfg: AnalysisConfig) -> pd.DataFrame:
    cols = ["quantity", "model_small", "model_large", "size_small", "size_large", "n_suites", "suites",
            "value_small", "value_large", "spearman_rho", "p_value", "kendall_tau", "kendall_p", "n_tied"]
    per: dict[str, pd.DataFrame] = {}
    rows_ = _summary_rows(events)
    rk = rows_[rows_["metric"] == cfg.collapse_metrics[0]] if len(rows_) else rows_
    uncentred = rk["centered"].eq(False).fillna(False).astype(bool) if len(rk) else None
    if uncentred is not None and uncentred.any():
        rk = rk[uncentred]  # the uncentred RankMe of SPEC.md
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
    rows_ = _summary_rows(events)
    if rows_.empty:
        return
    split = [split_seed(m) for m in rows_["model"]]
    rows_ = rows_.assign(base_model=[b for b, _ in split], name_seed=[s for _, s in split])
    for base, g in rows_.groupby("base_model", sort=True):
        if g["name_seed"].notna().all() and g["name_seed"].nunique() >= 2:
            yield base, g.assign(replicate=g["name_seed"]), "model name"
        elif g["seed"].notna().all() and g["seed"].nunique() >= 2:
            yield base, g.assign(replicate=g["seed"]), "seed column"


def _seed_spread(events: pd.DataFrame, cfg: AnalysisConfig | None = None) -> pd.DataFrame:
    cfg = cfg or AnalysisConfig()
    by = ["base_model", "metric", "centered", "difficulty"]
    cols = by + ["seed_source", "n_seeds", "rate_mean", "rate_std", "rate_min", "rate_max", "n_counted",
                 "n_precursor", "pooled_rate", "pooled_low", "pooled_high"]
    out = []
    for base, g, source in _with_replicates(events):
        per_seed = _rates(g, ["metric", "centered", "difficulty", "replicate"], cfg)
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


def _seed_events(events: pd.DataFrame) -> pd.DataFrame:
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
                "n_counted": int((~h["status"].isin(_NOT_COUNTED)).sum())})
    return pd.DataFrame(out, columns=cols)


# ------------------------------------------------------------------------------------------ writing

#: Parquet metadata key under which every analysis table carries its rules (:meth:`AnalysisConfig.rules`).
RULES_KEY = b"ckptgeo.rules"


def read_rules(path: str | os.PathLike) -> dict:
    """The rules and thresholds an analysis table was made with (its ``ckptgeo.rules`` metadata); {} if none."""
    import pyarrow.parquet as pq

    meta = pq.read_schema(path).metadata or {}
    return json.loads(meta[RULES_KEY]) if RULES_KEY in meta else {}


def _atomic_parquet(df: pd.DataFrame, path: Path, schema=None, rules: Mapping | None = None) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(df, schema=schema, preserve_index=False)
    if rules is not None:
        table = table.replace_schema_metadata({**(table.schema.metadata or {}),
                                               RULES_KEY: json.dumps(dict(rules), default=str).encode()})
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)
    return path


def _validate(cfg: AnalysisConfig) -> None:
    validate_params(cfg, owner="analyze")
    if not cfg.collapse_metrics:
        raise InvalidParameterError("The 'collapse_metrics' parameter must name at least one metric. Got ().",
                                    name="collapse_metrics", value=())


def check_analysis_out(out: str | os.PathLike, dataset: str | os.PathLike | None = None) -> None:
    """Refuse an analysis output folder that would overwrite someone's files.

    Accepted: a missing or empty folder (dot files aside), the dataset analysed (``dataset``; any ckptgeo
    dataset when None) and an earlier analysis output (``events/events.parquet``).

    Raises
    ------
    DatasetLayoutError
        ``out`` is a file, another dataset than ``dataset`` (its events would be replaced by this one's),
        or a non-empty folder of neither kind.
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise DatasetLayoutError(f"--out {out} is a file, not a folder; choose another --out folder.", path=str(out))
    if dataset is not None and (out / "ckptgeo.json").is_file() and out.resolve() != Path(dataset).resolve():
        raise DatasetLayoutError(
            f"--out {out} is another ckptgeo dataset than {dataset}; writing this analysis there would replace its "
            f"events and report. Choose a new or empty --out folder (or leave --out out to write into {dataset}).",
            path=str(out))
    if not out.is_dir() or (out / "ckptgeo.json").is_file() or (out / "events" / "events.parquet").is_file():
        return
    if any(not p.name.startswith(".") for p in out.iterdir()):
        raise DatasetLayoutError(
            f"--out {out} is not empty and is neither a ckptgeo dataset (no ckptgeo.json) nor an earlier analysis "
            f"(no events/events.parquet); refusing to write report.md, figures/, events/ and summary/ into it. "
            f"Choose a new or empty --out folder.", path=str(out))


def analyze(dir: str | os.PathLike, *, acc_threshold: float | None = None, window: int = ev.DEFAULT_WINDOW,
            recovery: float = ev.DEFAULT_RECOVERY, probe_margin: float = 0.1, probe_alpha: float = 0.05,
            out: str | os.PathLike | None = None,
            collapse_fraction: float = ev.DEFAULT_COLLAPSE_FRACTION, min_drop: float = ev.DEFAULT_MIN_DROP,
            collapse_metrics: tuple[str, ...] = ("rankme",), difficulty: Mapping[str, str] | None = None,
            write: bool = True, keep_grouped: str | list[str] | None = None, x: str = "steps",
            resolution_checkpoints: int = ev.DEFAULT_RESOLUTION_CHECKPOINTS,
            n_permutations: int = st.DEFAULT_N_PERMUTATIONS, n_noise_curves: int = st.DEFAULT_N_NOISE_CURVES,
            noise_kind: str = "gaussian", noise_relative_sd: float | None = None, seed: int = 0,
            confidence: float = st.DEFAULT_CONFIDENCE, alpha: float = 0.05) -> Analysis:
    """Find acquisition, collapse, recovery and precursor gaps in a scanned dataset.

    Parameters
    ----------
    dir : path
        A ckptgeo dataset (``geometry/`` and ``behavior/`` tables; ``probes/`` and ``revisions/`` used
        when present).
    acc_threshold : float or None, default=None
        Accuracy threshold; None: 0.5, or ``(chance + 1) / 2`` where chance >= 0.5.
    window : int, default=3
        Consecutive checkpoints above the threshold.
    recovery : float in (0, 1], default=0.1
        Fraction of the drop regained (RankMe) or of the departure moved (other measures).
    probe_margin : float in [0, 1), default=0.1
        Probe accuracy over max(majority-class chance, shuffled-label control) that marks the probe onset.
    probe_alpha : float in (0, 1), default=0.05
        The probe onset also needs the probe's p-value (``probes.p_value``) below this.
    out : path or None, default=None
        Where ``events/`` and ``summary/`` go; None: ``dir`` itself.
    collapse_fraction : float in (0, 1], default=0.5
        Collapse onset: RankMe at this fraction of its first value.
    min_drop : float in [0, 1), default=0.25
        A collapse needs RankMe more than this fraction of its first value below it
        (:data:`ckptgeo.analysis.events.DEFAULT_MIN_DROP`).
    collapse_metrics : tuple of str, default=("rankme",)
        Metrics analysed by collapse/recovery; the first is used for collapse floors across sizes.
    difficulty : mapping of str to str or None, default=None
        Difficulty class per suite, overriding the defaults (see the module docstring).
    write : bool, default=True
        Write ``events/events.parquet`` and ``summary/*.parquet`` (atomically), each with every rule and
        threshold in its Parquet metadata (:func:`read_rules`).
    keep_grouped : {None, "latest"} or list of str, default=None
        Revisions serving the same weights as another are left out whole; ``"latest"`` keeps the latest of each
        group, a list keeps those named (:func:`ckptgeo.analysis.tables.leave_out_grouped`).
    x : {"steps", "tokens"}, default="steps"
        The axis of figures and of the events a reader sees. Events carry both: ``*_step`` and ``*_tokens``
        (:func:`ckptgeo.analysis.tables.events_in_tokens`); "tokens" needs the dataset's ``tokens`` column.
    resolution_checkpoints : int, default=1
        A gap of at most this many checkpoints is "unresolved", not a precursor.
    n_permutations : int, default=999
        Relabellings of each permutation test.
    n_noise_curves : int, default=200
        Noise curves per summary-layer curve for the detector's false-positive rate (0: skip; the rate's
        columns are then NaN).
    noise_kind : {"gaussian", "random_walk"}, default="gaussian"
    noise_relative_sd : float or None, default=None
        Noise level as a fraction of the curve's median (the noise curves' mean level); None: each curve's own
        (robust) noise level.
    seed : int, default=0
        Seed of every null; the same dataset and seed give the same tables.
    confidence : float, default=0.95
        Coverage of every interval.
    alpha : float, default=0.05
        Level of the tests behind each verdict.

    Returns
    -------
    Analysis

    Raises
    ------
    DatasetLayoutError
        ``dir`` has no geometry or behaviour table, or one lacks required columns; ``out`` is a file, or a
        non-empty folder that is neither a dataset nor an earlier analysis (:func:`check_analysis_out`).
    InvalidParameterError
        A threshold, fraction or window is out of range; ``x`` is not "steps" or "tokens", or is "tokens" and
        some curve records no tokens.

    References
    ----------
    Billa, "The Geometric Anatomy of Capability Acquisition in Transformers", arXiv:2602.15997.
    """
    from ckptgeo import __version__

    cfg = AnalysisConfig(acc_threshold=acc_threshold, window=window, recovery=recovery, probe_margin=probe_margin,
                         probe_alpha=probe_alpha,
                         collapse_fraction=collapse_fraction, min_drop=min_drop,
                         collapse_metrics=tuple(collapse_metrics), resolution_checkpoints=resolution_checkpoints,
                         n_permutations=n_permutations, n_noise_curves=n_noise_curves, noise_kind=noise_kind,
                         noise_relative_sd=noise_relative_sd, seed=seed, confidence=confidence, alpha=alpha)
    _validate(cfg)
    root = Path(dir)
    if not root.is_dir():
        raise DatasetLayoutError(f"Dataset folder {root} does not exist; run `ckptgeo scan` first.", path=str(root))
    if write and out is not None:
        check_analysis_out(out, dataset=root)
    geo, beh = read_table(root, "geometry"), read_table(root, "behavior")
    if geo.empty and beh.empty:
        raise DatasetLayoutError(f"{root} holds neither a geometry/ nor a behavior/ table; is it a ckptgeo "
                                 "dataset (the --out folder of `ckptgeo scan`)?", path=str(root))
    probes, revs = read_table(root, "probes"), read_table(root, "revisions")
    kept, left_out = leave_out_grouped({"geometry": geo, "behavior": beh, "probes": probes}, revs, keep=keep_grouped)
    geo, beh, probes = kept["geometry"], kept["behavior"], kept["probes"]

    if not geo.empty:
        _require(geo, "geometry", ("model", "suite", "step", "metric", "layer", "value"), root)
        curves = _clean_geometry(geo)
    else:
        curves = pd.DataFrame(columns=_KEYS + ["metric", "layer", "step", "value"])
    if not beh.empty:
        _require(beh, "behavior", ("model", "suite", "step", "metric", "value"), root)
        accuracy = _clean_behavior(beh)
    else:
        accuracy = pd.DataFrame(columns=_KEYS + ["step", "accuracy", "chance"])
    if not probes.empty:
        _require(probes, "probes", ("model", "suite", "step", "layer", "accuracy", "control_accuracy"), root)

    acc_groups: dict = {}
    acq_rows = []
    for (model, suite, chash), g in accuracy.groupby(_KEYS, sort=True):
        chance = g["chance"].median()
        chance = None if pd.isna(chance) else float(chance)
        steps, accs = g["step"].to_numpy(), g["accuracy"].to_numpy()
        a = ev.acquisition_step(steps, accs, cfg.acc_threshold, cfg.window, chance)
        onset = ev.accuracy_onset(steps, accs, chance, fraction=cfg.recovery)
        n_items = (pd.to_numeric(g["n_items"], errors="coerce").to_numpy(dtype=np.float64) if "n_items" in g.columns
                   else np.full(len(g), np.nan))
        b = _Behavior(steps, accs, a, onset, n_items)
        acc_groups.setdefault((model, suite), {})[chash] = b
        last = int(np.nonzero(np.isfinite(accs))[0][-1]) if np.isfinite(accs).any() else None
        final, f_low, f_high, f_n = _accuracy_at(b, None if last is None else int(steps[last]), cfg.confidence)
        acq_rows.append({"model": model, "suite": suite, "config_hash": chash,
                         "n_checkpoints": int(g["accuracy"].notna().sum()),
                         "acquisition_step": _opt(a.step), "status": a.status,
                         "at_first_checkpoint": a.at_first_checkpoint, "resolution_steps": _opt(a.resolution_steps),
                         "spacing_after": _opt(a.spacing_after), "censored_step": _opt(a.censored_step),
                         "acc_onset_step": _opt(onset.step), "acc_threshold": a.threshold,
                         "chance": math.nan if a.chance is None else a.chance,
                         "window": cfg.window, "final_accuracy": final, "final_acc_low": f_low,
                         "final_acc_high": f_high, "n_items": f_n, "reason": a.reason})
    acq = pd.DataFrame(acq_rows, columns=_KEYS + ["n_checkpoints", "acquisition_step", "status",
                                                  "at_first_checkpoint", "resolution_steps", "spacing_after",
                                                  "censored_step", "acc_onset_step", "acc_threshold",
                                                  "chance", "window", "final_accuracy", "final_acc_low",
                                                  "final_acc_high", "n_items", "reason"])
    for c in ("n_checkpoints", "acquisition_step", "resolution_steps", "spacing_after", "censored_step",
              "acc_onset_step", "window", "n_items"):
        acq[c] = acq[c].astype("Int64")
    classes = _difficulty(acq, difficulty)
    if len(acq):
        acq.insert(3, "task", [classes.get((m, s), (s, ""))[0] for m, s in zip(acq["model"], acq["suite"])])
        acq.insert(4, "difficulty", [classes.get((m, s), (s, ""))[1] for m, s in zip(acq["model"], acq["suite"])])
    else:
        acq.insert(3, "task", pd.Series(dtype=str))
        acq.insert(4, "difficulty", pd.Series(dtype=str))

    events = events_in_tokens(_compute_events(curves, acc_groups, classes, cfg, __version__), curves, accuracy)
    check_x(x, curves, accuracy)
    rows_ = _summary_rows(events)
    nulls = _null_curves(rows_, curves, cfg)
    curves_sizes = {m: model_size(m) for m in events["model"].unique()}
    by_model = _rates(rows_, ["model", "metric", "centered", "difficulty"], cfg, nulls)
    by_model.insert(1, "size", [curves_sizes.get(m, math.nan) for m in by_model["model"]])
    analysis = Analysis(
        events=events, acquisitions=acq,
        precursor_rates=_rates(rows_, ["metric", "centered", "difficulty"], cfg, nulls),
        precursor_rates_by_model=by_model, top_down=_top_down(events, cfg),
        probe_lead=_probe_lead(probes, acc_groups, cfg), across_sizes=_across_sizes(events, acq, curves, cfg),
        seed_spread=_seed_spread(events, cfg), curves=curves, accuracy=accuracy, probes=probes, config=cfg,
        root=root, out=Path(out) if out is not None else root, left_out=left_out, x=x,
        difficulty_slope=_difficulty_slope(rows_, nulls, cfg), seed_events=_seed_events(events))
    if write:
        rules = cfg.rules()
        written = [_atomic_parquet(events, analysis.out / "events" / "events.parquet", SCHEMAS["events"], rules)]
        for name, table in analysis.summary_tables().items():
            written.append(_atomic_parquet(table, analysis.out / "summary" / f"{name}.parquet", rules=rules))
        written += _combine_cross_checkpoint(root, analysis.out)
        from ckptgeo.analysis.runs_table import write_runs_table

        written.extend(write_runs_table(events, analysis.out / "summary"))   # runs.csv, runs.tex: one row per run
        analysis = dataclasses.replace(analysis, written=tuple(written))
        logger.info("wrote %d events to %s", len(events), written[0])
    return analysis


def _combine_cross_checkpoint(root: Path, out: Path) -> list[Path]:
    """The hook that runs the cross-checkpoint step (:func:`ckptgeo.metrics.cross.combine`) when the dataset
    holds artifacts: ``out/compare/compare.parquet``."""
    if not (root / "artifacts").is_dir():
        return []
    from ckptgeo.metrics.cross import combine
    from ckptgeo.store.dataset import Dataset

    rows = combine(Dataset(root, create=False), write=False)
    return [_atomic_parquet(rows.reindex(columns=SCHEMAS["compare"].names), out / "compare" / "compare.parquet",
                            SCHEMAS["compare"])]


#: the events columns a reader sees (console and report.md): events-table column -> short header
EVENT_VIEW = {"model": "model", "suite": "suite", "metric": "metric", "layer": "layer", "acquisition_step": "acq",
              "collapse_step": "collapse", "collapse_floor": "floor", "onset_step": "onset",
              "collapse_onset_step": "half_onset", "gap_steps": "gap", "gap_checkpoints": "gap_ck",
              "resolution_steps": "res", "status": "status"}


def read_runs(root: str | os.PathLike) -> dict[str, dict]:
    """The settings behind each config hash of a dataset (``runs/<config_hash>.json``); {} when absent."""
    out = {}
    for path in sorted((Path(root) / "runs").glob("*.json")):
        try:
            out[path.stem] = json.loads(path.read_text())
        except ValueError:
            continue
    return out


def _flat(d: Mapping, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, Mapping):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def run_labels(hashes, runs: Mapping[str, dict] | None = None, *, width: int = 48) -> dict[str, str]:
    """A short label per config hash saying what tells the runs apart: the settings that differ between
    them (``centered=True``), else the hash itself.

    Examples
    --------
    >>> run_labels(["a1", "b2"], {"a1": {"n_samples": 200, "seed": 0}, "b2": {"n_samples": 50, "seed": 0}})
    {'a1': 'n_samples=200', 'b2': 'n_samples=50'}
    >>> run_labels(["a1", "c3"], {"a1": {"seed": 0}})
    {'a1': 'a1', 'c3': 'c3'}
    """
    hashes = sorted(set(hashes))
    runs = runs or {}
    if not all(h in runs for h in hashes):
        return {h: h for h in hashes}
    flat = {h: _flat({k: v for k, v in runs[h].items() if k not in ("ckptgeo_version", "source")}) for h in hashes}
    keys = sorted({k for f in flat.values() for k in f})
    differ = [k for k in keys if len({json.dumps(f.get(k), sort_keys=True, default=str) for f in flat.values()}) > 1]
    labels = {}
    for h in hashes:
        parts = []   # "metrics.rankme.centered" and "centered" both say centered=...: shown once
        for k in differ:
            part = (f"suite {k[len('suites.'):]} items {str(flat[h].get(k, '-'))[:6]}" if k.startswith("suites.")
                    else f"{k.rsplit('.', 1)[-1]}={flat[h].get(k, '-')}")
            if part not in parts:
                parts.append(part)
        label = ", ".join(parts)
        labels[h] = h if not label or len(label) > width else label
    return labels


def events_view(events: pd.DataFrame, *, all_layers: bool = False, runs: Mapping[str, dict] | None = None
                ) -> pd.DataFrame:
    """The events as a reader sees them, on the console and in report.md: one row per curve family's summary
    layer (or every layer), the columns of :data:`EVENT_VIEW` under their short headers, and a ``run`` column
    (:func:`run_labels`) when a model and suite were measured with several settings."""
    rows = events if all_layers else _summary_rows(events)
    view = rows[list(EVENT_VIEW)].rename(columns=EVENT_VIEW)
    view = view.assign(floor=view["floor"].astype("float64").round(2))
    if "gap_low_steps" in rows.columns and "gap_high_steps" in rows.columns:
        lo, hi = pd.to_numeric(rows["gap_low_steps"]), pd.to_numeric(rows["gap_high_steps"])
        view.insert(view.columns.get_loc("gap_ck") + 1, "gap_range",
                    [f"{int(a)}..{int(b)}" if pd.notna(a) and pd.notna(b) else "-" for a, b in zip(lo, hi)])
    if len(rows) and rows.groupby(["model", "suite"])["config_hash"].nunique().max() > 1:
        labels = run_labels(rows["config_hash"], runs)
        view.insert(2, "run", [labels[h] for h in rows["config_hash"]])
    return view


def events_legend(config: "AnalysisConfig | None" = None) -> str:
    """What each header of :func:`events_view` means (steps are training steps)."""
    cfg = config or AnalysisConfig()
    thr = ("0.5 (or halfway between chance and 1 where chance >= 0.5)" if cfg.acc_threshold is None
           else f"{cfg.acc_threshold:g}")
    return "\n".join([
        "model, suite, metric, layer: the curve (layer -1: a whole-model measure; by default the deepest layer)",
        "run: the settings that differ between the runs of one model and suite (or their config hash)",
        f"acq: acquisition, first of {cfg.window} checkpoints in a row with accuracy above {thr}",
        "collapse: checkpoint of the metric's minimum before acquisition (RankMe); floor: its value there",
        f"onset: RankMe back up by {cfg.recovery:g} of its drop after the collapse (other measures: moved "
        f"{cfg.recovery:g} of the way to their largest departure from the first value over the run)",
        f"half_onset: first checkpoint at {cfg.collapse_fraction:g} of the first RankMe value (orders layers)",
        "gap: acq - onset in steps (positive: the geometry moved first); gap_ck: the same in checkpoints; "
        "gap_range: the gap's interval in steps from the checkpoint grid (each event lies after the checkpoint "
        "before it); res: the larger checkpoint spacing before acq or before the onset",
        f"status: precursor (onset before acq by more than res and more than {cfg.resolution_checkpoints} "
        "checkpoint), unresolved (within that), synchronous, lagging, no_onset, acquired_at_start, censored (above "
        "threshold at the last checkpoints, fewer than the window), never_acquired, no_data; '-': not defined",
        f"collapse: RankMe more than {cfg.min_drop:g} of its first value below it",
    ])


def events_text(events: pd.DataFrame, *, all_layers: bool = False, max_rows: int = 200,
                runs: Mapping[str, dict] | None = None, config: "AnalysisConfig | None" = None,
                legend: bool = True) -> str:
    """The events table as aligned text for a terminal (:func:`events_view`), then what its headers mean.

    Parameters
    ----------
    events : DataFrame
        :attr:`Analysis.events`.
    all_layers : bool, default=False
        Every layer; by default only each curve family's summary layer (deepest, or -1).
    max_rows : int, default=200
    runs : mapping or None, default=None
        :func:`read_runs` of the dataset, to name the settings that tell runs apart.
    config : AnalysisConfig or None, default=None
        The thresholds the legend states.
    legend : bool, default=True

    Returns
    -------
    str
    """
    if events.empty:
        return "(no events: the dataset has no geometry curves)"
    view = events_view(events, all_layers=all_layers, runs=runs)
    text = view.head(max_rows).astype(object).where(view.head(max_rows).notna(), "-").to_string(index=False)
    if len(view) > max_rows:
        text += f"\n... {len(view) - max_rows} more rows (read the events table)"
    if legend:
        text += "\n\n" + events_legend(config)
    return text
