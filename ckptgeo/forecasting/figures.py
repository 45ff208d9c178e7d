"""A forecast figure per run: the forecast's fan over the real accuracy curve, both feature sets.

::

    OUT/figures/forecast/<model>__<suite>.png

Top panel: accuracy against step (log-scaled step axis, as the other figures), the acquisition threshold, the
acquisition marked, and P(acquired within the next h checkpoints) of each feature set on a second axis. Bottom
panel: at each checkpoint (x), the forecast acquisition step (y): the median and the 80% band of each feature set,
the line y = x (the present) and the true acquisition step; a forecast that converges on the true line early is a
good one. Drawn from the ``forecast`` table (:mod:`ckptgeo.forecasting.tables`).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from ckptgeo._io import atomic_path, safe_name
from ckptgeo.analysis.figures import register_figure

__all__ = ["plot_forecast", "COLOURS"]

#: one colour per feature set
COLOURS = {"behaviour": "#1f77b4", "geometry": "#d62728"}


def plot_forecast(table: pd.DataFrame, accuracy: pd.DataFrame, model: str, suite: str, path: str | Path,
                  *, threshold: float | None = None) -> Path | None:
    """Draw one run's forecast figure (module docstring) to ``path``; None when the table has no row of it.

    Parameters
    ----------
    table : DataFrame
        The ``forecast`` table.
    accuracy : DataFrame
        ``Analysis.tables["accuracy"]`` (the real curve, every checkpoint).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    t = table[(table["model"] == model) & (table["suite"] == suite)]
    if t.empty:
        return None
    acc = accuracy[(accuracy["model"] == model) & (accuracy["suite"] == suite)]
    chash = t["config_hash"].iloc[0]
    if (acc["config_hash"] == chash).any():
        acc = acc[acc["config_hash"] == chash]
    acc = acc.sort_values("step")
    acq = t["acquisition_step"].iloc[0]
    h = int(t["horizon"].iloc[0])
    fig = Figure(figsize=(7.5, 6.0), dpi=100)
    FigureCanvasAgg(fig)
    top, bottom = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [1, 1.3]})
    x0 = max(1.0, float(acc["step"][acc["step"] > 0].min()) if (acc["step"] > 0).any() else 1.0)

    def xs(v):
        return np.maximum(np.asarray(v, float), x0 / 2)

    top.plot(xs(acc["step"]), acc["accuracy"], color="black", lw=1.8, label="accuracy")
    if threshold is not None and math.isfinite(threshold):
        top.axhline(threshold, color="grey", lw=0.8, ls=":", label=f"threshold {threshold:.2g}")
    p_ax = top.twinx()
    for fset, g in t.groupby("feature_set", sort=False):
        p_ax.plot(xs(g["step"]), g["p_next"], color=COLOURS.get(fset, "grey"), lw=1.0, alpha=0.8,
                  label=f"P(next {h}) {fset}")
    p_ax.set_ylim(0, 1.02)
    p_ax.set_ylabel(f"P(acquired within next {h} checkpoints)", fontsize=8)
    top.set_ylim(-0.02, 1.02)
    top.set_ylabel("accuracy")
    lo_y, hi_y = [], []
    for fset, g in t.groupby("feature_set", sort=False):
        c = COLOURS.get(fset, "grey")
        bottom.fill_between(xs(g["step"]), xs(g["low_step"].fillna(g["step"].max() * 50)),
                            xs(g["high_step"].fillna(g["step"].max() * 50)), color=c, alpha=0.18, lw=0,
                            label=f"{fset}: 80% interval")
        bottom.plot(xs(g["step"]), xs(g["median_step"]), color=c, lw=1.6, label=f"{fset}: median forecast")
        lo_y += list(g["low_step"].dropna())
        hi_y += list(g["median_step"].dropna())
    steps = xs(t["step"])
    bottom.plot([steps.min(), steps.max()], [steps.min(), steps.max()], color="grey", lw=0.8, ls="--",
                label="now (y = x)")
    for ax in (top, bottom):
        if math.isfinite(acq):
            ax.axvline(max(acq, x0 / 2), color="black", lw=1.0, ls="-.")
    if math.isfinite(acq):
        bottom.axhline(max(acq, x0 / 2), color="black", lw=1.0, ls="-.", label=f"acquisition (step {acq:.0f})")
    bottom.set_xscale("log")
    bottom.set_yscale("log")
    ymax = max([float(acq) if math.isfinite(acq) else 0.0, *hi_y, float(steps.max())]) * 2
    ymin = min([float(acq) if math.isfinite(acq) else math.inf, *lo_y, *hi_y] or [x0]) / 2
    bottom.set_ylim(max(x0 / 2, ymin), ymax)
    bottom.set_xlabel("training step (forecast made here)")
    bottom.set_ylabel("forecast acquisition step")
    cls = str(t["difficulty_class"].iloc[0]) if "difficulty_class" in t else ""
    held = str(t["fitted_without"].iloc[0]) if "fitted_without" in t else ""
    top.set_title(f"{model} · {suite}" + (f" · {cls}" if cls else "")
                  + ("" if math.isfinite(acq) else " (not acquired in the run)")
                  + (f"\nforecast by models fitted without this run's {held}; 80% intervals widened for that"
                     if held else ""), fontsize=9)
    top.legend(fontsize=7, loc="upper left")
    p_ax.legend(fontsize=7, loc="center left")
    bottom.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    path = Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", bbox_inches="tight")
    return path


@register_figure(name="forecast", reads=("forecast", "accuracy", "acquisitions"))
def _forecast_figures(analysis, figures_dir: Path, metric: str) -> list[Path]:
    table = analysis.tables.get("forecast")
    if table is None or table.empty:
        return []
    acq = analysis.tables["acquisitions"]
    if acq.empty or acq["acquisition_step"].isna().all():   # no run acquired: every figure would be empty
        return []
    thr = {(r.model, r.suite): float(r.acc_threshold) for r in acq.itertuples(index=False)}
    written = []
    for (model, suite), _ in table.groupby(["model", "suite"], sort=True):
        name = f"{safe_name(str(model), what='model name')}__{safe_name(str(suite), what='suite name')}.png"
        p = plot_forecast(table, analysis.tables["accuracy"], model, suite, Path(figures_dir) / "forecast" / name,
                          threshold=thr.get((model, suite)))
        if p is not None:
            written.append(p)
    return written
