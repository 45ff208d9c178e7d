"""``ckptgeo.forecast(DIR)``: forecast acquisition on a dataset of runs and say whether the geometry helps."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ckptgeo.forecasting.evaluate import ForecastConfig
from ckptgeo.forecasting.tables import FORECAST_TABLES, config_from_analysis, forecast_tables

__all__ = ["forecast", "ForecastResult", "forecast_text"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ForecastResult:
    """What :func:`forecast` returns.

    Attributes
    ----------
    tables : dict of str to DataFrame
        :data:`ckptgeo.forecasting.tables.FORECAST_TABLES` by name (``forecast``, ``forecast_evaluation``, ...).
    config : ForecastConfig
    out : Path
        The analysis output folder (``forecast/``, ``figures/forecast/`` and ``report.md`` in it).
    figures : tuple of Path
    n_runs, n_acquired : int
        The runs (model and suite) of the dataset, and how many of them acquired: with none acquired there is no
        acquisition to forecast or learn from, and :func:`forecast_text` says so.
    """

    tables: dict
    config: ForecastConfig
    out: Path
    figures: tuple = ()
    n_runs: int = 0
    n_acquired: int = 0

    def __getattr__(self, name):
        tables = object.__getattribute__(self, "tables")
        if name in tables:
            return tables[name]
        raise AttributeError(name)


def forecast(dir: str | os.PathLike, *, out: str | os.PathLike | None = None, horizon: int | None = None,
             max_horizon: int | None = None, coverage: float | None = None, plots: bool = True,
             **analyze_kwargs) -> ForecastResult:
    """Forecast each run's acquisition from what is known at each checkpoint, and evaluate it on held-out runs.

    Runs :func:`ckptgeo.analysis.analyze` on ``dir`` (its ``forecast`` step fits a discrete-time hazard model per
    feature set, behaviour and behaviour + geometry; :mod:`ckptgeo.forecasting.model`), writes ``forecast/`` (the
    tables, :mod:`ckptgeo.forecasting.tables`), a figure per run (``figures/forecast/``) and ``report.md`` with a
    forecast section.

    Parameters
    ----------
    dir : path
        A ckptgeo dataset of two runs or more (a study's ``dataset/``, a folder of scans, a Pythia family).
    out : path, optional
        The analysis output folder (default ``dir``).
    horizon : int, optional
        h of P(acquired within the next h checkpoints) (default 5).
    max_horizon : int, optional
        Checkpoints ahead the hazard is modelled (default 48).
    coverage : float, optional
        The forecast interval's coverage (default 0.8).
    plots : bool, default=True
    **analyze_kwargs
        Passed to :func:`ckptgeo.analysis.analyze` (``acc_threshold``, ``window``, ``seed`` ...).

    Returns
    -------
    ForecastResult

    Raises
    ------
    DatasetLayoutError
        ``dir`` is not a ckptgeo dataset (as :func:`~ckptgeo.analysis.analyze`).
    InvalidParameterError
        ``horizon`` or ``max_horizon`` not a positive int, ``coverage`` not in (0, 1).

    Examples
    --------
    >>> res = ckptgeo.forecast("results/reproduce/dataset")          # doctest: +SKIP
    >>> res.forecast_skill[["split", "delta_log_score", "p_value", "verdict"]]   # doctest: +SKIP
    """
    from ckptgeo.analysis import write_report
    from ckptgeo.analysis.config import write_table
    from ckptgeo.analysis.pipeline import analyze

    overrides = {k: v for k, v in (("horizon", horizon), ("max_horizon", max_horizon), ("coverage", coverage))
                 if v is not None}
    config_from_analysis(None, **overrides)   # checks them against their declarations before any work
    analysis = analyze(dir, out=out, **analyze_kwargs)
    cfg = config_from_analysis(analysis.config, **overrides)
    tables = {t: analysis.tables[t] for t in FORECAST_TABLES}
    if overrides:   # the step ran at the defaults: redo it with these settings and rewrite its files
        tables = forecast_tables(analysis.tables["accuracy"], analysis.tables["curves"],
                                 analysis.tables["acquisitions"], cfg, compare=analysis.tables.get("compare"))
        analysis.tables.update(tables)
        for name, table in tables.items():
            write_table(table, analysis.out / "forecast" / f"{name}.parquet", None, analysis.config.rules())
    write_report(dir, analysis, plots=plots)
    figures = tuple(sorted((analysis.out / "figures" / "forecast").glob("*.png"))) if plots else ()
    n_runs, n_acquired = acquired_runs(analysis.tables["acquisitions"])
    return ForecastResult(tables=tables, config=cfg, out=analysis.out, figures=figures, n_runs=n_runs,
                          n_acquired=n_acquired)


def acquired_runs(acquisitions) -> tuple[int, int]:
    """(runs, runs acquired) of an analysis's ``acquisitions`` table: one run per (model, suite)."""
    if acquisitions is None or acquisitions.empty:
        return 0, 0
    per_run = acquisitions.groupby(["model", "suite"])["acquisition_step"].apply(lambda s: bool(s.notna().any()))
    return int(len(per_run)), int(per_run.sum())


def forecast_text(result: ForecastResult) -> str:
    """The console summary: evaluation per split and feature set, the skill tests, the concordance."""
    cols = ["split", "feature_set", "n_runs", "log_score", "brier", "rel_error_25", "rel_error_50", "rel_error_75",
            "coverage", "coverage_low", "coverage_high", "coverage_model", "widening", "n_intervals"]
    parts = []
    if result.n_runs and not result.n_acquired:
        return (f"forecast: none of the {result.n_runs} runs acquired (accuracy never held above its threshold), so "
                "there is no acquisition to forecast, nor one to learn from: a log score here would only score "
                "'not yet'. Train or scan runs that reach acquisition (more steps, an easier level).")
    ev = result.tables.get("forecast_evaluation")
    if ev is None or ev.empty:
        return "forecast: fewer than two runs, or no split with two groups: nothing held out to evaluate on"
    with pd.option_context("display.width", 160, "display.max_columns", 20, "display.float_format", "{:.3g}".format):
        parts.append("held-out evaluation (lower log score / Brier / error is better; coverage of the "
                     f"{result.config.coverage:.0%} intervals widened by an inner leave-one-group-out on the training "
                     "runs, with its 95% interval, and of the model's own):\n" + ev[[c for c in cols if c in ev]].to_string(index=False))
        sk = result.tables.get("forecast_skill")
        if sk is not None and len(sk):
            keep = ["split", "n_runs", "n_units", "delta_log_score", "p_value", "null_delta_log_score", "null_p_value",
                    "sibling_n_runs", "sibling_delta_log_score", "timing_delta_log_score", "timing_p_value",
                    "timing_mde", "verdict"]
            parts.append("skill of geometry over behaviour (log-score difference, one-sided sign-flip test over held-out "
                         "tasks, else settings: the seeds of a setting are one unit), on the "
                         "null copy (noise: must show none), of a sibling's geometry (another seed of the setting), and "
                         "of the run's own geometry over the sibling's (timing):\n"
                         + sk[[c for c in keep if c in sk]].to_string(index=False))
        cc = result.tables.get("forecast_concordance")
        if cc is not None and len(cc):
            parts.append("concordance of forecast and actual acquisition order within difficulty class (hard / easy), "
                         "95% interval and permutation p (whole settings exchanged), beside the paper's figure:\n"
                         + cc.to_string(index=False))
        sz = result.tables.get("forecast_sizes")
        if sz is not None and len(sz):
            parts.append("across sizes (fitted on the smaller sizes only):\n" + sz.to_string(index=False))
    return "\n\n".join(parts)
