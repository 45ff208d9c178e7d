"""The forecast's tables, from an analysis's tables (:func:`forecast_tables`), and the analysis step that writes them.

::

    OUT/forecast/
    ├── forecast.parquet              per run, checkpoint and feature set: the forecast made there by a model not
    │                                 fitted to the run (the primary split: leave one task out, else one seed, else
    │                                 one size, else one run): median acquisition step, 80% interval (widened
    │                                 by the fold's inner calibration; the model's own beside it), P(next h)
    ├── forecast_evaluation.parquet   per split and feature set: log score, Brier, errors at 25/50/75%, coverage
    │                                 (widened and the model's own), the widening
    ├── forecast_skill.parquet        per split: geometry over behaviour, paired Wilcoxon test, the null copy's
    ├── forecast_concordance.parquet  per feature set and class (hard / easy): order concordance with its interval
    │                                 and p, the paper's figure
    └── forecast_sizes.parquet        per larger size: forecast from the smaller sizes only
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd

import ckptgeo.forecasting.figures  # noqa: F401  (the forecast figure registers with the step)
from ckptgeo.analysis.config import AnalysisConfig
from ckptgeo.analysis.report import markdown_table
from ckptgeo.analysis.steps import register_step
from ckptgeo.forecasting.data import RunCurves, runs_from_tables
from ckptgeo.forecasting.evaluate import FEATURE_SETS, ForecastConfig, evaluate

__all__ = ["FORECAST_TABLES", "forecast_tables", "config_from_analysis", "forecast_frame"]

#: the tables of the forecast step, in the order the report shows them
FORECAST_TABLES = ("forecast_evaluation", "forecast_skill", "forecast_concordance", "forecast_sizes", "forecast")


def config_from_analysis(analysis_config, **overrides) -> ForecastConfig:
    """A :class:`ForecastConfig` with the analysis's settings (``analysis_config``, default the declared ones) and
    the forecast's own ``overrides`` by name, checked against their declarations."""
    from ckptgeo._settings import replace_params

    base = {} if analysis_config is None else {f.name: getattr(analysis_config, f.name)
                                                for f in dataclasses.fields(AnalysisConfig)}
    return replace_params(ForecastConfig(**base), overrides, owner="forecast")


def forecast_frame(runs: list[RunCurves], forecasts: dict[str, list], split: str, cfg: ForecastConfig) -> pd.DataFrame:
    """The ``forecast`` table: one row per run, checkpoint before its acquisition is known, and feature set."""
    frames = []
    for fset in FEATURE_SETS:
        for run, fc in zip(runs, forecasts.get(fset, [])):
            if fc is None or not len(fc):
                continue
            fc = fc.copy()
            fc.insert(0, "feature_set", fset)
            for col, val in reversed((("model", run.key[0]), ("suite", run.key[1]), ("config_hash", run.key[2]),
                                      ("task", run.task), ("size", run.size),
                                      ("seed", -1 if run.seed is None else run.seed),
                                      ("difficulty", run.difficulty), ("difficulty_class", run.difficulty_class),
                                      ("fitted_without", split))):
                fc.insert(0, col, val)
            fc["accuracy"] = run.accuracy[fc["checkpoint"].to_numpy()]
            fc["acquisition_step"] = math.nan if run.acquisition_step is None else float(run.acquisition_step)
            fc["horizon"] = cfg.horizon
            frames.append(fc)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        columns=["model", "suite", "config_hash", "task", "size", "seed", "difficulty", "difficulty_class",
                 "fitted_without", "feature_set", "checkpoint", "step", "median_step", "low_step", "high_step", "p_next",
                 "beyond_horizon", "low_step_model", "high_step_model", "widening", "accuracy", "acquisition_step",
                 "horizon"])


def forecast_tables(accuracy: pd.DataFrame, curves: pd.DataFrame, acquisitions: pd.DataFrame,
                    config: ForecastConfig | None = None,
                    compare: pd.DataFrame | None = None) -> dict[str, pd.DataFrame]:
    """Every forecast table (:data:`FORECAST_TABLES`) of an analysis's tables.

    Parameters
    ----------
    accuracy, curves, acquisitions : DataFrame
        ``Analysis.tables["accuracy"]``, ``["curves"]``, ``["acquisitions"]``.
    config : ForecastConfig, optional
    compare : DataFrame, optional
        ``Analysis.tables["compare"]``: the cross-checkpoint measures (None where the dataset has none).

    Returns
    -------
    dict of str to DataFrame
        Empty tables where there are fewer than two runs (nothing to hold out).
    """
    cfg = config or ForecastConfig()
    runs = runs_from_tables(accuracy, curves, acquisitions, compare)
    if len(runs) < 2:
        return {t: pd.DataFrame() for t in FORECAST_TABLES}
    ev = evaluate(runs, cfg)
    primary = ev["primary"]
    table = forecast_frame(runs, ev["forecasts"].get(primary, {}), primary, cfg) if primary else forecast_frame(
        runs, {}, "", cfg)
    return {"forecast_evaluation": ev["evaluation"], "forecast_skill": ev["skill"],
            "forecast_concordance": ev["concordance"], "forecast_sizes": ev["sizes"], "forecast": table}


def forecast_section(analysis) -> list[str]:
    """report.md's forecast section: the held-out evaluation, the skill test, concordance and sizes in full; the
    per-checkpoint forecasts (one row per run, checkpoint and feature set) only by where they are."""
    parts = ["## Forecast of acquisition (held out: never on the runs a model was fitted to)\n"]
    for table in FORECAST_TABLES[:-1]:
        df = analysis.tables.get(table)
        if isinstance(df, pd.DataFrame):
            parts += [f"### {table}\n", markdown_table(df)]
    per = analysis.tables.get("forecast")
    if isinstance(per, pd.DataFrame):
        parts.append(f"Per run and checkpoint ({len(per)} rows): `forecast/forecast.parquet`; a figure per run in "
                     "`figures/forecast/`.\n")
    return parts


@register_step(name="forecast", reads=("accuracy", "curves", "acquisitions", "compare"), writes=FORECAST_TABLES,
               folder="forecast", report=forecast_section)
def _forecast_step(ctx):
    return forecast_tables(ctx["accuracy"], ctx["curves"], ctx["acquisitions"], config_from_analysis(ctx.config),
                           compare=ctx["compare"])
