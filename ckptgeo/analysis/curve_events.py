"""The events of every curve of a dataset: :mod:`ckptgeo.events.detect` applied per curve.

:func:`acquisitions` finds acquisition (and accuracy's own onset) on every behaviour curve and returns the
``acquisitions`` table with the :class:`BehaviorEvents` the geometry curves are judged against;
:func:`events_table` finds collapse, onsets and the precursor gap on every (model, suite, config_hash,
metric, layer) geometry curve, with the detector's false-positive rate on noise at the summary layer.
The rules are in the docstring of :mod:`ckptgeo.analysis.pipeline`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np
import pandas as pd

from ckptgeo.events import detect as ev
from ckptgeo.stats import noise as nulls
import ckptgeo.stats as st
from ckptgeo.analysis.config import EVENTS_SCHEMA, AnalysisConfig
from ckptgeo.events.curves import CURVE_KEYS, summary_layer
from ckptgeo.analysis.inputs import difficulty_classes
from ckptgeo.store.schemas import SCHEMAS

__all__ = ["BehaviorEvents", "acquisitions", "events_table", "match_behavior", "opt_int"]


def match_behavior(acc_groups: dict, model: str, suite: str, config_hash: str):
    options = acc_groups.get((model, suite))
    if not options:
        return None
    if config_hash in options:
        return options[config_hash]
    if len(options) == 1:
        return next(iter(options.values()))
    return max(sorted(options.items(), key=lambda kv: kv[0]), key=lambda kv: len(kv[1].steps))[1]


def opt_int(x) -> int | None:
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
    acq = cfg.acquisition_at(grid, acquisition_step)

    def fires(steps, values) -> bool:
        return cfg.curve_events(steps, values, acq, kind=kind).precursor
    return fires


def _noise(s: np.ndarray, v: np.ndarray, acq: ev.Acquisition, kind: str, cfg: AnalysisConfig) -> nulls.NoiseRates | None:
    """The detector's rates on noise copies of this curve (jitter, own-variance iid, random walk) at its schedule."""
    keep = np.isfinite(v)
    s, v = s[keep], v[keep]
    if cfg.n_noise_curves == 0 or not acq.acquired or acq.at_first_checkpoint or s.size < 3:
        return None
    return nulls.noise_rates(_detector(cfg, kind, np.sort(s), int(acq.step)), s, v, n_curves=cfg.n_noise_curves,
                             seed=cfg.seed, confidence=cfg.confidence)


def _noise_columns(r: nulls.NoiseRates | None) -> dict:
    """The events table's noise columns: each model's rate and interval, and the two noise levels."""
    out = {}
    for kind, col in (("jitter", "jitter"), ("iid", "iid"), ("random_walk", "walk")):
        rate = None if r is None else r.rate(kind)
        out |= {f"{col}_fpr": math.nan if rate is None else rate.rate,
                f"{col}_fpr_low": math.nan if rate is None else rate.low,
                f"{col}_fpr_high": math.nan if rate is None else rate.high}
    lv = None if r is None else r.levels
    return out | {"jitter_relative_sd": math.nan if lv is None else lv.jitter_relative_sd,
                  "own_relative_sd": math.nan if lv is None else lv.own_relative_sd}


def _half_width(g: pd.DataFrame) -> np.ndarray | None:
    """Half the width of each checkpoint's measurement interval (``value_low`` / ``value_high``), None without."""
    if "value_low" not in g.columns or "value_high" not in g.columns:
        return None
    half = (pd.to_numeric(g["value_high"], errors="coerce") - pd.to_numeric(g["value_low"], errors="coerce")) / 2
    half = half.to_numpy(dtype=np.float64)
    return half if np.isfinite(half).any() else None


def _count(g: pd.DataFrame, column: str) -> int:
    return int(pd.to_numeric(g[column], errors="coerce").fillna(0).sum()) if column in g.columns else 0


def events_table(curves: pd.DataFrame, acc_groups: dict, classes: dict, cfg: AnalysisConfig,
                 version: str) -> pd.DataFrame:
    """The events table (:data:`EVENTS_SCHEMA`): one row per geometry curve of ``curves``, judged against the
    behaviour curve :func:`match_behavior` pairs it with (``acc_groups``: :attr:`BehaviorEvents.groups`),
    classed by ``classes`` ((model, suite) -> (task, difficulty)); ``version`` is recorded in each row."""
    rows = []
    keys = CURVE_KEYS + ["metric", "layer"]
    loss = curves[curves["metric"] == "loss"] if len(curves) else curves
    loss_onsets = {k: cfg.change_onset(g["step"].to_numpy(), g["value"].to_numpy())
                   for k, g in (loss.groupby(CURVE_KEYS, sort=True) if len(loss) else [])}
    deepest = summary_layer(curves)
    for (model, suite, chash, metric, layer), g in curves.groupby(keys, sort=True):
        s, v = g["step"].to_numpy(), g["value"].to_numpy()
        match = match_behavior(acc_groups, model, suite, chash)
        if match is None:
            acq = ev.Acquisition(None, None, ev.acquisition_threshold(cfg.acc_threshold), cfg.window, None,
                                 "no_data", "no behavior rows for this model and suite")
            acq_onset = ev.Onset(None, None, math.nan, "no_data", acq.reason)
        else:
            acq, acq_onset = match.acquisition, match.onset
        finite = np.isfinite(v)
        kind = "recovery" if metric in cfg.collapse_metrics else "change"
        ce = cfg.curve_events(s, v, acq, kind=kind, error=_half_width(g))
        col, onset, gap = ce.collapse, ce.onset, ce.gap
        con = cfg.collapse_onset(s, v) if kind == "recovery" else None
        vs_onset = cfg.gap(_onset_as_acquisition(acq_onset, acq), onset)
        lo = loss_onsets.get((model, suite, chash))
        vs_loss = cfg.gap(_onset_as_acquisition(lo, acq), onset) if lo is not None else None
        reason = gap.reason if gap.status != "no_onset" else onset.reason
        task, diff = classes.get((model, suite), (suite, "unclassified"))
        first = float(v[finite][0]) if finite.any() else math.nan
        centered = g["centered"].iloc[0] if "centered" in g.columns else None
        seed = g["seed"].iloc[0] if "seed" in g.columns else None
        acc, acc_low, acc_high, n_items = (_accuracy_at(match, acq.step, cfg.confidence) if match is not None
                                           else (math.nan, math.nan, math.nan, None))
        noise = None
        if int(layer) == deepest.loc[g.index[0]]:
            noise = _noise(s, v, acq, kind, cfg)
        drop = col.drop if col is not None and col.step is not None else math.nan
        rows.append({
            "model": model, "suite": suite, "config_hash": chash, "task": task, "difficulty": diff,
            "metric": metric, "layer": int(layer),
            "centered": None if centered is None or pd.isna(centered) else bool(centered),
            "seed": None if seed is None or pd.isna(seed) else int(seed),
            "n_checkpoints": int(finite.sum()),
            "first_step": int(s[finite][0]) if finite.any() else None,
            "last_step": int(s[finite][-1]) if finite.any() else None,
            "acquisition_step": opt_int(acq.step), "acquisition_status": acq.status,
            "acquisition_censored_step": opt_int(acq.censored_step),
            "acquisition_spacing_before": opt_int(acq.resolution_steps),
            "acquisition_spacing_after": opt_int(acq.spacing_after),
            "acc_at_acquisition": acc, "acc_low": acc_low, "acc_high": acc_high, "n_items": n_items,
            "collapse_step": opt_int(col.step) if col is not None else None,
            "collapse_floor": col.floor if col is not None and col.step is not None else math.nan,
            "collapse_drop_fraction": drop / abs(first) if math.isfinite(drop) and first else math.nan,
            "first_value": first, "onset_kind": kind, "onset_step": opt_int(onset.step),
            "onset_resolution_steps": opt_int(onset.resolution_steps), "onset_spacing_after": opt_int(onset.spacing_after),
            "collapse_onset_step": opt_int(con.step) if con is not None else None,
            "precursor": bool(gap.precursor), "gap_steps": opt_int(gap.gap_steps),
            "gap_checkpoints": opt_int(gap.gap_checkpoints), "gap_low_steps": opt_int(gap.gap_low_steps),
            "gap_high_steps": opt_int(gap.gap_high_steps),
            "resolution_steps": opt_int(gap.resolution_steps), "status": gap.status, "reason": reason,
            "acc_onset_step": opt_int(acq_onset.step), "gap_acc_onset_steps": opt_int(vs_onset.gap_steps),
            "gap_acc_onset_checkpoints": opt_int(vs_onset.gap_checkpoints), "status_acc_onset": vs_onset.status,
            "loss_onset_step": opt_int(lo.step) if lo is not None else None,
            "gap_loss_onset_steps": opt_int(vs_loss.gap_steps) if vs_loss is not None else None,
            "gap_loss_onset_checkpoints": opt_int(vs_loss.gap_checkpoints) if vs_loss is not None else None,
            "status_loss_onset": vs_loss.status if vs_loss is not None else None,
            **_noise_columns(noise),
            "n_unconverged": _count(g, "unconverged"), "n_negative": _count(g, "negative"),
            "acc_threshold": acq.threshold, "chance": math.nan if acq.chance is None else acq.chance,
            "window": cfg.window, "recovery": cfg.recovery, "collapse_fraction": cfg.collapse_fraction,
            "min_drop": cfg.min_drop, "resolution_checkpoints": cfg.resolution_checkpoints,
            "n_noise_curves": cfg.n_noise_curves,
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


@dataclass(frozen=True)
class BehaviorEvents:
    """What :func:`acquisitions` found, for the steps after it: ``groups`` maps (model, suite) -> config_hash ->
    the behaviour curve and its events; ``classes`` maps (model, suite) -> (task, difficulty class)."""

    groups: dict = field(default_factory=dict)
    classes: dict = field(default_factory=dict)


def acquisitions(accuracy: pd.DataFrame, cfg: AnalysisConfig,
                 difficulty: Mapping[str, str] | None = None) -> tuple[pd.DataFrame, BehaviorEvents]:
    """Acquisition and accuracy onset of every behaviour curve (model, suite, config_hash) of ``accuracy``.

    Returns
    -------
    (DataFrame, BehaviorEvents)
        The ``acquisitions`` table (one row per curve, with its task and difficulty class) and the curves'
        events by (model, suite) for :func:`events_table` and the probe lead.
    """
    acc_groups: dict = {}
    acq_rows = []
    for (model, suite, chash), g in accuracy.groupby(CURVE_KEYS, sort=True):
        chance = g["chance"].median()
        chance = None if pd.isna(chance) else float(chance)
        steps, accs = g["step"].to_numpy(), g["accuracy"].to_numpy()
        a = cfg.acquisition(steps, accs, chance)
        onset = cfg.accuracy_onset(steps, accs, chance)
        n_items = (pd.to_numeric(g["n_items"], errors="coerce").to_numpy(dtype=np.float64) if "n_items" in g.columns
                   else np.full(len(g), np.nan))
        b = _Behavior(steps, accs, a, onset, n_items)
        acc_groups.setdefault((model, suite), {})[chash] = b
        last = int(np.nonzero(np.isfinite(accs))[0][-1]) if np.isfinite(accs).any() else None
        final, f_low, f_high, f_n = _accuracy_at(b, None if last is None else int(steps[last]), cfg.confidence)
        acq_rows.append({"model": model, "suite": suite, "config_hash": chash,
                         "n_checkpoints": int(g["accuracy"].notna().sum()),
                         "acquisition_step": opt_int(a.step), "status": a.status,
                         "at_first_checkpoint": a.at_first_checkpoint, "resolution_steps": opt_int(a.resolution_steps),
                         "spacing_after": opt_int(a.spacing_after), "censored_step": opt_int(a.censored_step),
                         "acc_onset_step": opt_int(onset.step), "acc_threshold": a.threshold,
                         "chance": math.nan if a.chance is None else a.chance,
                         "window": cfg.window, "final_accuracy": final, "final_acc_low": f_low,
                         "final_acc_high": f_high, "n_items": f_n, "reason": a.reason})
    acq = pd.DataFrame(acq_rows, columns=CURVE_KEYS + ["n_checkpoints", "acquisition_step", "status",
                                                  "at_first_checkpoint", "resolution_steps", "spacing_after",
                                                  "censored_step", "acc_onset_step", "acc_threshold",
                                                  "chance", "window", "final_accuracy", "final_acc_low",
                                                  "final_acc_high", "n_items", "reason"])
    for c in ("n_checkpoints", "acquisition_step", "resolution_steps", "spacing_after", "censored_step",
              "acc_onset_step", "window", "n_items"):
        acq[c] = acq[c].astype("Int64")
    classes = difficulty_classes(acq, difficulty)
    if len(acq):
        acq.insert(3, "task", [classes.get((m, s), (s, ""))[0] for m, s in zip(acq["model"], acq["suite"])])
        acq.insert(4, "difficulty", [classes.get((m, s), (s, ""))[1] for m, s in zip(acq["model"], acq["suite"])])
    else:
        acq.insert(3, "task", pd.Series(dtype=str))
        acq.insert(4, "difficulty", pd.Series(dtype=str))
    return acq, BehaviorEvents(acc_groups, classes)
