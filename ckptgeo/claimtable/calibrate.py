"""The claim table on any dataset, and on null copies of it: verdicts that noise cannot give.

:func:`dataset_claims` judges the claims on a study's or a scan's dataset (the analysis of its tables, then
:func:`ckptgeo.claimtable.table.claim_table`). :func:`calibrate` reruns every row on ``k`` null copies of each kind
(:data:`NULLS`), built from the dataset's own curves:

* ``iid`` -- every geometric curve replaced by independent Gaussian values at its own mean and standard deviation;
* ``random_walk`` -- by a random walk from its first value whose steps have the spread of its own
  checkpoint-to-checkpoint changes (in both, each checkpoint's measurement interval, ``value_low`` /
  ``value_high``, moves with its new value and keeps its half-width, so the rule's error margin on a copy is the
  real curve's);
* ``permuted`` -- the geometry kept, each run's accuracy curve given to another run of its checkpoint schedule.

Nothing in a copy knows the real pairing of geometry and behaviour, so a row that reads *reproduced* there is a
false reproduction -- for the rows whose registration names that kind among the nulls that void what they test
(a random walk of RankMe keeps the acquisition order that the across-sizes row ranks; level rows such as the
collapse floors, and rows not rebuilt on a copy, have none). :func:`calibration_table` gives, per row and null, that rate with its interval (Wilson) and
how the row's p-values sit against uniform (the share at or below alpha, and the one-sided binomial p that this
share exceeds alpha). The probe row is not rerun (its table is not rebuilt on a copy).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pandas as pd

import ckptgeo.stats as stats
from ckptgeo.claimtable.registry import CLAIMS, NULLS, ClaimSettings
from ckptgeo.claimtable.table import claim_table

__all__ = ["NULLS", "dataset_claims", "null_copy", "calibrate", "calibration_table"]


def _schedule(accuracy: pd.DataFrame) -> dict:
    """model -> its accuracy schedule (the steps, as text)."""
    return {m: ",".join(str(int(s)) for s in sorted(g["step"].unique())) for m, g in accuracy.groupby("model")}


def null_copy(curves: pd.DataFrame, accuracy: pd.DataFrame, kind: str,
              rng: np.random.Generator) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(curves, accuracy) of one null copy of ``kind`` (module docstring)."""
    if kind == "permuted":
        acc = accuracy.copy()
        sched = _schedule(acc)
        by = {}
        for m, s in sched.items():
            by.setdefault(s, []).append(m)
        for models in by.values():
            donors = list(rng.permutation(models))
            rows = {m: acc[acc["model"] == m].sort_values("step") for m in models}
            for m, d in zip(models, donors):
                src, dst = rows[d], rows[m]
                if len(src) != len(dst):
                    continue
                for col in ("accuracy", "chance"):
                    if col in acc.columns:
                        acc.loc[dst.index, col] = src[col].to_numpy()
        return curves, acc
    out = curves.copy()
    keys = [c for c in ("model", "suite", "config_hash", "metric", "layer") if c in out.columns]
    for _, g in out.groupby(keys, sort=False):
        g = g.sort_values("step")
        v = pd.to_numeric(g["value"], errors="coerce").to_numpy(float)
        fin = v[np.isfinite(v)]
        if len(fin) < 3:
            continue
        if kind == "iid":
            new = rng.normal(float(np.mean(fin)), float(np.std(fin)), len(v))
        elif kind == "random_walk":
            new = fin[0] + np.concatenate([[0.0], np.cumsum(rng.normal(0.0, float(np.std(np.diff(fin))),
                                                                       len(v) - 1))])
        else:
            raise ValueError(f"unknown null {kind!r}; one of {NULLS}")
        out.loc[g.index, "value"] = new
        if "value_low" in out.columns and "value_high" in out.columns:
            # the measurement interval moves with the value, its half-width kept: the rule on a copy (an onset or
            # collapse only where the change exceeds the interval) is the rule on the real curve
            half = (pd.to_numeric(g["value_high"], errors="coerce") - pd.to_numeric(g["value_low"], errors="coerce")
                    ).to_numpy(float) / 2
            out.loc[g.index, "value_low"], out.loc[g.index, "value_high"] = new - half, new + half
    return out, accuracy


def _events(curves: pd.DataFrame, accuracy: pd.DataFrame, config) -> pd.DataFrame:
    from ckptgeo._version import __version__
    from ckptgeo.analysis.curve_events import acquisitions, events_table

    cfg = dataclasses.replace(config, n_noise_curves=0)
    _, behavior = acquisitions(accuracy, cfg)
    return events_table(curves, behavior.groups, behavior.classes, cfg, __version__)


def dataset_claims(dataset: str | Path, *, analysis=None, settings: ClaimSettings | None = None,
                   config=None) -> tuple[pd.DataFrame, object]:
    """(claim table, analysis) of a dataset folder (``ckptgeo analyze``'s input), with the claim table's
    ``settings`` (default ``ClaimSettings()``) and the analysis settings ``config`` (default ``AnalysisConfig()``;
    ignored with ``analysis``)."""
    from ckptgeo.analysis import analyze
    import ckptgeo.forecasting.tables  # noqa: F401  (registers the forecast step and figure)

    a = analysis if analysis is not None else analyze(dataset, write=False, config=config)
    table = claim_table(a.events, a.probe_lead, curves=a.curves, accuracy=a.accuracy, probes=a.probes,
                        config=a.config, settings=settings, tables=a.tables)
    return table, a


def calibrate(analysis, k: int, *, n_permutations: int = 199, n_power: int = 10, seed: int = 0,
              progress=None) -> pd.DataFrame:
    """Every row on ``k`` null copies of each kind of :data:`NULLS`: one row per (null, copy, claim) with its
    ``verdict`` and ``p_value``. ``progress(i, total, text)`` is called after each copy."""
    from ckptgeo.analysis.config import AnalysisConfig

    cfg = analysis.config or AnalysisConfig()
    rows, total, done = [], k * len(NULLS), 0
    for n_i, kind in enumerate(NULLS):
        for c in range(k):
            rng = np.random.default_rng([seed, n_i, c])
            curves, acc = null_copy(analysis.curves, analysis.accuracy, kind, rng)
            events = _events(curves, acc, cfg)
            t = claim_table(events, curves=curves, accuracy=acc, config=cfg, n_permutations=n_permutations,
                            seed=seed + c, n_power=n_power,
                            tables={"curves": curves, "accuracy": acc, "events": events})
            rows += [{"null": kind, "copy": c, "id": r.id, "verdict": r.verdict, "p_value": r.p_value}
                     for r in t.itertuples(index=False)]
            done += 1
            if progress:
                progress(done, total, f"{kind} copy {c + 1}/{k}")
    return pd.DataFrame(rows)


def _applies(cid: str, null: str) -> bool:
    """Whether copies of kind ``null`` void what row ``cid`` tests (its registration's ``nulls``; True for a row
    not registered here)."""
    return null in CLAIMS.get(cid).nulls if cid in CLAIMS else True


def calibration_table(runs: pd.DataFrame, alpha: float) -> pd.DataFrame:
    """Per claim row and null: copies, false "reproduced" count and rate with its Wilson interval, the share of
    p-values at or below alpha and the one-sided binomial p that it exceeds alpha, ``applies`` (the null voids
    what the row tests: :attr:`ckptgeo.claimtable.table.ClaimRow.nulls`) and ``ok`` (rate <= alpha where it
    applies; True elsewhere, where a "reproduced" is not false)."""
    from scipy.stats import binomtest

    out = []
    for (cid, null), g in runs.groupby(["id", "null"], sort=False):
        k = int((g["verdict"] == "reproduced").sum())
        r = stats.binomial_interval(k, len(g))
        p = g["p_value"].dropna()
        small = int((p <= alpha).sum())
        excess = binomtest(small, len(p), alpha, alternative="greater").pvalue if len(p) else math.nan
        out.append({"id": cid, "null": null, "copies": len(g), "false_reproduced": k, "rate": r.rate,
                    "low": r.low, "high": r.high, "n_p": len(p), "p_at_or_below_alpha": small,
                    "uniformity_p": float(excess), "applies": _applies(cid, null),
                    "ok": r.rate <= alpha or not _applies(cid, null)})
    return pd.DataFrame(out)
