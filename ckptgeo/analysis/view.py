"""The events as a reader sees them, on the console and in report.md.

:data:`EVENT_VIEW` names the columns shown, :func:`events_view` selects them (one row per curve family's summary
layer), :func:`run_labels` says what tells runs of one model apart (from :func:`read_runs`), :func:`events_legend`
what each header means, and :func:`events_text` puts it together for a terminal.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Mapping

import pandas as pd

from ckptgeo._settings import flat_settings
from ckptgeo.analysis.config import AnalysisConfig
from ckptgeo.events.curves import summary_rows
from ckptgeo.store.dataset import run_settings

__all__ = ["EVENT_VIEW", "read_runs", "run_labels", "events_view", "events_legend", "events_text"]


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
    flat = {h: flat_settings(run_settings(runs[h])) for h in hashes}
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
    rows = events if all_layers else summary_rows(events)
    view = rows[list(EVENT_VIEW)].rename(columns=EVENT_VIEW)
    view = view.assign(floor=view["floor"].astype("float64").round(2))
    if "acc_at_acquisition" in rows.columns and "acc_low" in rows.columns:
        acc, lo, hi = (pd.to_numeric(rows[c]) for c in ("acc_at_acquisition", "acc_low", "acc_high"))
        view.insert(view.columns.get_loc("acq") + 1, "acc_at_acq",
                    [f"{a:.2f}[{b:.2f},{c:.2f}]" if pd.notna(a) and pd.notna(b) else "-"
                     for a, b, c in zip(acc, lo, hi)])
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
        f"acq: acquisition, first of {cfg.window} checkpoints in a row with accuracy above {thr}; acc_at_acq: the "
        f"accuracy there with its {cfg.confidence:.0%} Wilson interval over the items",
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
