"""The figures of an analysis (``report.md``, which links them, is :mod:`ckptgeo.analysis.report`).

Writes, under the analysis output folder (``DIR`` unless ``out`` was given)::

    DIR/
    ├── figures/
    │   ├── <model>__<suite>__rankme.png    RankMe per layer vs step (log axes, ticks 1, 2, 5, 10 ...), accuracy
    │   │                                    on a second axis, collapse / recovery onset / acquisition marked and
    │   │                                    the precursor gap shaded; below, collapse -> acquisition at linear scale
    │   ├── <model>__<suite>__heatmap.png   layer x step RankMe, the same events marked
    │   ├── <model>__<suite>__probe.png     probe accuracy vs its shuffled-label control, per layer, with each
    │   │                                    layer's probe onset and the acquisition marked
    │   ├── <base>__<suite>__seeds.png      runs differing only by seed: mean and min-max band
    │   └── gaps.png                        precursor gap by task and model size (sizes as 160M, 2.8B)
    └── report.md                           tables and figures together (ckptgeo.analysis.report)

matplotlib is imported inside the functions (Agg canvas, no pyplot state), so importing this module
is cheap and works without a display.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from ckptgeo._registry import Registry
from ckptgeo.analysis import plotting as pl
from ckptgeo.events.curves import preferred_variant, run_accuracy, run_curves, summary_event, summary_rows
from ckptgeo.analysis.plotting import constant_layers, with_gaps

__all__ = ["plot_suite", "plot_heatmap", "plot_gaps", "plot_probes", "plot_seeds", "plot_grid", "plot_all",
           "gap_marks", "seed_groups", "constant_layers", "with_gaps", "Figure", "FIGURES", "register_figure"]

logger = logging.getLogger(__name__)


def plot_suite(analysis, model: str, suite: str, path: str | os.PathLike, *, metric: str = "rankme") -> Path | None:
    """RankMe per layer against step (log scales), accuracy on a second axis, events marked; below it, the
    collapse -> acquisition window of the summary layer at linear scale.

    Up to :data:`~ckptgeo.analysis.plotting.MAX_LAYER_LEGEND` layers get a legend entry each; deeper models'
    layers are named at their lines' ends (:func:`~ckptgeo.analysis.plotting.end_labels`) and by a colour bar.

    The summary layer's collapse (dotted) and recovery onset (dashed) are drawn in that layer's colour,
    acquisition in red, the precursor gap (recovery onset -> acquisition) shaded green. The lower panel
    appears when the curve has a collapse and an acquisition.

    Parameters
    ----------
    analysis : Analysis
    model, suite : str
    path : path
        PNG to write.
    metric : str, default="rankme"

    Returns
    -------
    Path or None
        None when there is no curve of ``metric`` for this model and suite.
    """
    chash, sub = run_curves(analysis, model, suite, metric)
    if sub.empty:
        return None
    layers = sorted(sub["layer"].unique())
    colours = pl.layer_colours(layers)
    flat = pl.constant_layers(sub)
    xcol = "tokens" if getattr(analysis, "x", "steps") == "tokens" else "step"
    gaps = pl.left_out_steps(analysis, model, xcol)   # revisions left out: the line breaks there
    marks = pl.events_of(summary_event(analysis, model, suite, chash, metric), "tokens" if xcol == "tokens" else "step")
    window = marks and marks["collapse"] is not None and marks["acquisition"] is not None
    fig = pl.figure(8.0, 7.0 if window else 4.8)
    if window:
        grid = fig.add_gridspec(2, 1, height_ratios=(3, 2), hspace=0.55)
        ax, zoom = fig.add_subplot(grid[0]), fig.add_subplot(grid[1])
    else:
        ax, zoom = fig.add_subplot(1, 1, 1), None
    many = len(layers) > pl.MAX_LAYER_LEGEND   # deep models: a colour bar and names at the lines' ends, no legend
    for layer in layers:
        g = sub[sub["layer"] == layer].sort_values("step")
        if layer in flat:   # constant by construction: drawn thin and grey, and said so
            ax.plot(*pl.with_gaps(g[xcol], g["value"], gaps), color="0.6", lw=0.8, ls=":",
                    label=f"L{layer} (constant)" if not many or layer == min(flat) else None)
            continue
        ax.plot(*pl.with_gaps(g[xcol], g["value"], gaps), color=colours[layer], lw=1.1 if many else 1.4,
                label=None if many else f"L{layer}", marker="." if len(g) < 40 and not many else None)
    if many:
        pl.layer_bar(fig, ax, layers, colours)
    for i, step in enumerate(gaps):   # every left-out revision, also before the first or after the last
        ax.axvline(step, color="0.55", lw=0.7, ls=(0, (1, 2)), zorder=0,
                   label=f"left out ({gaps.size} revisions)" if i == 0 else None)
    ax.set_xlabel("training tokens" if xcol == "tokens" else "training step")
    ax.set_ylabel(pl.axis_label(metric))
    ax.set_yscale("log")
    pl.log_ticks(ax.yaxis, sub["value"])
    pl.log_x(ax, sub[xcol])
    acc = run_accuracy(analysis, model, suite, chash)
    acc_line = None
    if not acc.empty:
        ax2 = ax.twinx()
        (acc_line,) = ax2.plot(*pl.with_gaps(acc[xcol], acc["accuracy"], gaps), color="black", lw=2.0, ls="-",
                               label="accuracy")
        ax2.set_ylim(-0.02, 1.02)
        ax2.set_ylabel("accuracy")
    pl.mark_events(ax, marks, colours.get(marks.get("layer"), "tab:blue") if marks else None)
    title = f"{model} · {suite}"
    if marks:
        title += f" — {marks['status']}" + (f", gap {marks['gap']:,} {marks['unit']}" if marks["gap"] is not None
                                            else "")
    if gaps.size:
        title += f" ({gaps.size} revisions left out: grey dotted lines)"
    pl.title(ax, title)
    if many:   # last: the names are placed for the axes' final limits
        pl.end_labels(ax, pl.line_ends(sub, xcol, skip=flat), colours, keep=(marks["layer"],) if marks else ())
    handles, labels = ax.get_legend_handles_labels()
    if acc_line is not None:
        handles, labels = handles + [acc_line], labels + ["accuracy (right axis)"]
    ax.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, -0.16), fontsize=7,
              ncol=min(4, len(labels)), frameon=False)
    if zoom is not None:
        _plot_window(zoom, sub, acc, marks, colours, metric, xcol)
    return pl.save(fig, Path(path))


def _plot_window(ax, sub, acc, marks: dict, colours: dict, metric: str, xcol: str = "step") -> None:
    """The summary layer from a little before its collapse to a little after acquisition, linear axes
    (``xcol``: ``"step"`` or ``"tokens"``, as the upper panel)."""
    steps = np.sort(sub[xcol].dropna().unique())
    points = [s for s in (marks["collapse"], marks["onset"], marks["acquisition"]) if s is not None]
    lo, hi = min(points), max(points)
    i0 = max(0, int(np.searchsorted(steps, lo)) - 2)
    i1 = min(len(steps) - 1, int(np.searchsorted(steps, hi)) + 2)
    lo, hi = steps[i0], steps[i1]
    layer = marks["layer"]
    g = sub[(sub["layer"] == layer) & sub[xcol].between(lo, hi)].sort_values(xcol)
    ax.plot(g[xcol], g["value"], color=colours.get(layer, "tab:blue"), lw=1.6, marker=".", label=f"L{layer}")
    ax.set_xlim(lo, hi)
    ax.set_xlabel(f"training {'tokens' if xcol == 'tokens' else 'step'} (linear)")
    ax.set_ylabel(f"L{layer} {metric}")
    if not acc.empty:
        a = acc[acc[xcol].between(lo, hi)]
        ax2 = ax.twinx()
        ax2.plot(a[xcol], a["accuracy"], color="black", lw=1.6, marker=".")
        ax2.set_ylim(-0.02, 1.02)
        ax2.set_ylabel("accuracy")
    pl.mark_events(ax, marks, colours.get(layer, "tab:blue"), labels=False)
    pl.title(ax, f"collapse → acquisition, {marks['unit']} {lo:,.0f}–{hi:,.0f} at linear scale", fontsize=9)


def plot_heatmap(analysis, model: str, suite: str, path: str | os.PathLike, *,
                 metric: str = "rankme") -> Path | None:
    """A layer × step heatmap of ``metric`` (columns are the measured checkpoints, in order).

    Returns
    -------
    Path or None
        None when there is no curve of ``metric`` for this model and suite.
    """
    chash, sub = run_curves(analysis, model, suite, metric)
    if sub.empty:
        return None
    grid = sub.pivot_table(index="layer", columns="step", values="value", aggfunc="mean").sort_index()
    fig = pl.figure(9.0, 0.4 * len(grid) + 2.5)
    ax = fig.add_subplot(1, 1, 1)
    from matplotlib.colors import LogNorm

    values = grid.to_numpy(dtype=float)
    finite = values[np.isfinite(values) & (values > 0)]
    norm = LogNorm(vmin=finite.min(), vmax=finite.max()) if finite.size and finite.min() < finite.max() else None
    im = ax.imshow(values, aspect="auto", origin="lower", cmap="magma", interpolation="nearest", norm=norm)
    steps = list(grid.columns)
    ticks = np.unique(np.linspace(0, len(steps) - 1, num=min(len(steps), 10)).round().astype(int))
    ax.set_xticks(ticks)
    ax.set_xticklabels([str(steps[i]) for i in ticks], rotation=45, fontsize=7)
    ax.set_yticks(range(len(grid)))
    ax.set_yticklabels([f"L{layer}" for layer in grid.index], fontsize=7)
    ax.set_xlabel("checkpoint (training step)")
    ax.set_ylabel("layer")
    pl.title(ax, f"{metric}: {model} · {suite}", width=90)
    bar = fig.colorbar(im, ax=ax, label=f"{metric} (log scale)" if norm is not None else metric)
    if norm is not None:
        pl.log_ticks(bar.ax.yaxis, finite)
    marks = pl.events_of(summary_event(analysis, model, suite, chash, metric))
    styles = {"collapse": ("#00d5ff", ":"), "onset": ("#00d5ff", "--"), "acquisition": ("#ff2d2d", "-")}  # on magma
    names = {"collapse": f"L{marks.get('layer')} collapse", "onset": f"L{marks.get('layer')} recovery onset",
             "acquisition": "acquisition"}
    for kind, (colour, ls) in styles.items():
        step = marks.get(kind)
        if step is None or step not in steps:
            continue
        x = steps.index(step)   # columns are checkpoints: the event's column
        ax.axvline(x, color=colour, ls=ls, lw=1.8, label=f"{names[kind]} {step}")
        if kind != "acquisition":
            ax.plot([x], [list(grid.index).index(marks["layer"])], marker="o", ms=5, mfc="none", mec=colour)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22), fontsize=7, ncol=3, frameon=False)
    return pl.save(fig, Path(path))


def plot_gaps(analysis, path: str | os.PathLike, *, metric: str = "rankme") -> Path | None:
    """Precursor gap (steps) at the summary layer, by task (x) and model size (bars).

    Negative gaps lag acquisition; a gap of 0 is a circle; a never-acquired curve is a "▼" marked "never
    acquired" (it has no gap, not a gap of 0); no onset or acquisition at the first checkpoint is an "×"
    (:func:`gap_marks`).

    Returns
    -------
    Path or None
        None when there is no event for ``metric``.
    """
    from ckptgeo.events.runs import params_text
    from ckptgeo.events.curves import model_size

    e = summary_rows(analysis.events)
    e = preferred_variant(e[e["metric"] == metric]) if len(e) else e
    if e.empty:
        return None
    models = sorted(e["model"].unique(), key=lambda m: (math.isnan(model_size(m)), model_size(m)
                                                         if not math.isnan(model_size(m)) else 0.0, m))
    suites = sorted(e["suite"].unique())
    fig = pl.figure(max(6.0, 1.0 + 0.9 * len(suites) * max(1, len(models)) ** 0.5), 4.5)
    ax = fig.add_subplot(1, 1, 1)
    width = 0.8 / len(models)
    import matplotlib

    cmap = matplotlib.colormaps["plasma"]
    marks = gap_marks(e, models, suites)
    for j, model in enumerate(models):
        color = cmap(j / max(1, len(models) - 1) * 0.85)
        size = model_size(model)
        label = model if math.isnan(size) else f"{model} ({params_text(size)} params)"
        at = {kind: [suites.index(s) - 0.4 + width * (j + 0.5) for m, s, _ in marks[kind] if m == model]
              for kind in marks}
        gaps = [(s, g) for m, s, g in marks["gap"] if m == model]
        ax.bar(at["gap"], [g for _, g in gaps], width=width, color=color, label=label)
        low, high = _grid_interval(e, model, [s for s, _ in gaps])
        if np.isfinite(low).any():   # the gap's interval from the checkpoint grid (gap_low_steps..gap_high_steps)
            g = np.array([g for _, g in gaps])
            ax.errorbar(at["gap"], g, yerr=[np.clip(g - low, 0, None), np.clip(high - g, 0, None)], fmt="none",
                        ecolor="black", elinewidth=0.8, capsize=2)
        if at["synchronous"]:
            ax.scatter(at["synchronous"], [0] * len(at["synchronous"]), marker="o", facecolors="none",
                       edgecolors=[color])
        if at["never_acquired"]:
            ax.scatter(at["never_acquired"], [0] * len(at["never_acquired"]), marker="v", color=color, s=40)
            for xi in at["never_acquired"]:
                ax.annotate("never\nacquired", (xi, 0), xytext=(0, -22), textcoords="offset points", ha="center",
                            fontsize=6, color=color)
        if at["no_gap"]:
            ax.scatter(at["no_gap"], [0] * len(at["no_gap"]), marker="x", color=color)
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xticks(range(len(suites)))
    ax.set_xticklabels(suites, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("precursor gap (steps): acquisition − recovery onset")
    pl.title(ax, f"{metric} precursor gap by task and model; whiskers: the gap's interval from the checkpoint grid "
               f"(○ synchronous, ▼ never acquired: no gap, × no onset or acquired at start)", width=70, fontsize=9)
    ax.legend(fontsize=7)
    return pl.save(fig, Path(path))


def plot_probes(analysis, model: str, suite: str, path: str | os.PathLike) -> Path | None:
    """Probe accuracy per layer and checkpoint as a layer x checkpoint heatmap (left), and its margin over the
    shuffled-label control (right, accuracy − control: red above, blue below); each layer's probe onset (the first
    checkpoint beating chance and control by the margin) a black triangle in its row, acquisition a red line.
    Readable at any depth: one row per layer, no legend entry per layer.

    Returns
    -------
    Path or None
        None when the dataset has no probe rows for this model and suite.
    """
    p = analysis.probes
    if p is None or p.empty:
        return None
    p = p[(p["model"] == model) & (p["suite"] == suite) & p["step"].notna()]
    if p.empty:
        return None
    p = p.groupby(["layer", "step"], sort=True)[["accuracy", "control_accuracy"]].mean().reset_index()
    acc = p.pivot_table(index="layer", columns="step", values="accuracy", aggfunc="mean", dropna=False).sort_index()
    ctl = p.pivot_table(index="layer", columns="step", values="control_accuracy", aggfunc="mean",
                        dropna=False).reindex(index=acc.index, columns=acc.columns)
    layers, steps = list(acc.index), list(acc.columns)
    lead = analysis.probe_lead if analysis.probe_lead is not None else None
    lead = lead[(lead["model"] == model) & (lead["suite"] == suite)] if lead is not None and len(lead) else None
    fig = pl.figure(11.0, min(0.22 * len(layers), 9.0) + 2.8)
    grid = fig.add_gridspec(1, 2, wspace=0.3)
    margin = acc.to_numpy(dtype=float) - ctl.to_numpy(dtype=float)
    panels = [("probe accuracy (held-out folds)", acc.to_numpy(dtype=float), "viridis", 0.0, 1.0),
              ("probe − shuffled-label control", margin, "RdBu_r", -0.5, 0.5)]
    onsets = []
    if lead is not None:
        for layer, step in zip(lead["layer"], lead["probe_step"]):
            if not pl.isna(step) and int(step) in steps and layer in layers:
                onsets.append((steps.index(int(step)), layers.index(layer)))
    acq = lead["acquisition_step"].dropna() if lead is not None else ()
    ticks = np.unique(np.linspace(0, len(steps) - 1, num=min(len(steps), 8)).round().astype(int))
    ystep = max(1, int(np.ceil(len(layers) / 16)))
    for i, (label, values, cmap, lo, hi) in enumerate(panels):
        ax = fig.add_subplot(grid[i])
        im = ax.imshow(values, aspect="auto", origin="lower", cmap=cmap, vmin=lo, vmax=hi, interpolation="nearest")
        fig.colorbar(im, ax=ax, label=label, fraction=0.05)
        ax.set_xticks(ticks)
        ax.set_xticklabels([f"{int(steps[t]):,}" for t in ticks], rotation=45, fontsize=7)
        ax.set_yticks(range(0, len(layers), ystep))
        ax.set_yticklabels([f"L{layers[j]}" for j in range(0, len(layers), ystep)], fontsize=7)
        ax.set_xlabel("checkpoint (training step)")
        ax.set_ylabel("layer")
        if onsets:
            ax.plot([x for x, _ in onsets], [y for _, y in onsets], marker="^", ms=6, color="black", mec="white",
                    ls="none", label="probe onset (beats chance and control)")
        if len(acq) and int(acq.iloc[0]) in steps:
            ax.axvline(steps.index(int(acq.iloc[0])), color="tab:red", lw=1.6, label=f"acquisition {int(acq.iloc[0])}")
        elif len(acq):
            ax.set_xlabel(f"checkpoint (training step); acquisition at {int(acq.iloc[0]):,}, not a probed checkpoint")
        pl.title(ax, label, width=60)
    left = pl.left_out_steps(analysis, model)
    fig.suptitle(f"probes per layer: {model} · {suite}" + (f" ({left.size} revisions left out: no column)"
                                                           if left.size else ""), fontsize=10)
    handles, labels = fig.axes[0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=len(labels), fontsize=8,
                   frameon=False)   # below the axes' labels
    return pl.save(fig, Path(path))


def seed_groups(curves) -> dict[str, list[str]]:
    """Models that differ only by their seed (``-s0``, ``-seed1``): base name -> the models, for groups of
    two or more (:func:`ckptgeo.analysis.inputs.split_seed`)."""
    from ckptgeo.analysis.inputs import split_seed

    groups: dict[str, list[str]] = {}
    for m in sorted(curves["model"].unique()) if len(curves) else []:
        base, seed = split_seed(m)
        if seed is not None:
            groups.setdefault(base, []).append(m)
    return {b: ms for b, ms in groups.items() if len(ms) >= 2}


def plot_seeds(analysis, base: str, models, suite: str, path: str | os.PathLike, *,
               metric: str = "rankme") -> Path | None:
    """Runs that differ only by seed on one axis: the mean of the summary layer's ``metric`` across seeds
    with its min-max band (log scale), and the mean accuracy with its band on a second axis.

    Steps measured in every seed are drawn (the seeds' checkpoints are usually the same).

    Returns
    -------
    Path or None
        None when fewer than two of ``models`` have a curve for ``suite``.
    """
    per_model = {}
    for m in models:
        chash, sub = run_curves(analysis, m, suite, metric)
        if sub.empty:
            continue
        deepest = summary_rows(sub)
        per_model[m] = (deepest.groupby("step")["value"].mean(), run_accuracy(analysis, m, suite, chash),
                        int(deepest["layer"].iloc[0]))
    if len(per_model) < 2:
        return None
    values = pl.aligned([v for v, _, _ in per_model.values()])
    if values.empty:
        return None
    fig = pl.figure(8.0, 4.8)
    ax = fig.add_subplot(1, 1, 1)
    layer = next(iter(per_model.values()))[2]
    mean, lo, hi = values.mean(axis=1), values.min(axis=1), values.max(axis=1)
    ax.fill_between(values.index, lo, hi, color="tab:blue", alpha=0.2, lw=0, label="min–max over seeds")
    ax.plot(values.index, mean, color="tab:blue", lw=1.6, label=f"L{layer} {metric}, mean of {len(per_model)} seeds")
    ax.set_yscale("log")
    pl.log_ticks(ax.yaxis, values.to_numpy().ravel())
    pl.log_x(ax, values.index)
    ax.set_xlabel("training step")
    ax.set_ylabel(pl.axis_label(metric))
    accs = [a.groupby("step")["accuracy"].mean() for _, a, _ in per_model.values() if not a.empty]
    handles, labels = ax.get_legend_handles_labels()
    if len(accs) >= 2:
        acc = pl.aligned(accs)
        ax2 = ax.twinx()
        ax2.fill_between(acc.index, acc.min(axis=1), acc.max(axis=1), color="0.3", alpha=0.15, lw=0)
        (line,) = ax2.plot(acc.index, acc.mean(axis=1), color="black", lw=1.8)
        ax2.set_ylim(-0.02, 1.02)
        ax2.set_ylabel("accuracy")
        handles, labels = handles + [line], labels + ["accuracy, mean (band: min–max; right axis)"]
    pl.title(ax, f"{base} · {suite}: seeds {', '.join(per_model)}")
    ax.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, -0.14), fontsize=7, ncol=2, frameon=False)
    return pl.save(fig, Path(path))


def _grid_interval(e, model: str, suites: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Mean ``gap_low_steps`` and ``gap_high_steps`` of ``model``'s rows per suite (NaN where absent)."""
    low, high = [], []
    for suite in suites:
        r = e[(e["model"] == model) & (e["suite"] == suite)]
        for out, col in ((low, "gap_low_steps"), (high, "gap_high_steps")):
            v = pd.to_numeric(r[col], errors="coerce").dropna() if col in r.columns else pd.Series(dtype=float)
            out.append(float(v.mean()) if len(v) else math.nan)
    return np.array(low, dtype=float), np.array(high, dtype=float)


def gap_marks(e, models, suites) -> dict[str, list]:
    """How :func:`plot_gaps` draws each (model, suite): ``gap`` (a bar of its mean gap in steps),
    ``synchronous`` (gap 0), ``never_acquired`` (no acquisition: no gap at all, not a gap of 0) or
    ``no_gap`` (acquired, but no onset or acquired at the first checkpoint). Lists of (model, suite, gap)."""
    out: dict[str, list] = {"gap": [], "synchronous": [], "never_acquired": [], "no_gap": []}
    for model in models:
        for suite in suites:
            r = e[(e["model"] == model) & (e["suite"] == suite)]
            if r.empty:
                continue
            gap = r["gap_steps"].dropna()
            if len(gap):
                g = float(gap.astype(float).mean())
                out["synchronous" if g == 0.0 else "gap"].append((model, suite, g))
            elif r["acquisition_step"].isna().all() and (r["status"] == "never_acquired").any():
                out["never_acquired"].append((model, suite, None))
            else:
                out["no_gap"].append((model, suite, None))
    return out


#: colour of each event status in the grid figure.
STATUS_COLOURS = {"precursor": "#1a9850", "unresolved": "#d9ef8b", "synchronous": "#fee08b", "lagging": "#f46d43",
                  "no_onset": "#d9d9d9", "acquired_at_start": "#abd9e9", "censored": "#969696",
                  "never_acquired": "#636363", "no_data": "#ffffff"}


def plot_grid(runs, path: str | os.PathLike) -> Path | None:
    """The grid at a glance: one cell per (task, level) row and model size column, coloured by status.

    Parameters
    ----------
    runs : DataFrame
        One row per run with ``task``, ``level``, ``size``, ``n_parameters``, ``seed``, ``status`` and
        ``gap_steps`` (:func:`ckptgeo.claimtable.table.runs_table`).
    path : path
        The PNG to write.

    Returns
    -------
    Path or None
        None when ``runs`` is empty.

    Notes
    -----
    A cell is one setting (task, level, size) and holds all its seeds: the colour is their most common status
    (outlined in black when the seeds disagree), the text each seed's result in seed order (``a/b/c``): its
    precursor gap in steps (acquisition - recovery onset; negative: the recovery lags), or a short status:
    ``sync``, ``never``, ``start``, ``none``.
    """
    if runs is None or len(runs) == 0:
        return None
    rows = sorted({(t, int(lv)) for t, lv in zip(runs["task"], runs["level"])})
    sizes = (runs.drop_duplicates("size").sort_values(["n_parameters", "size"])["size"].tolist())
    short = {"synchronous": "sync", "never_acquired": "never", "acquired_at_start": "start", "no_onset": "none",
             "no_data": "-", "unresolved": "unres", "censored": "cens"}
    fig = pl.figure(3.0 + 2.0 * len(sizes), 1.6 + 0.42 * len(rows))
    ax = fig.add_subplot(1, 1, 1)
    from matplotlib.patches import Patch, Rectangle

    for i, (task, level) in enumerate(rows):
        for j, size in enumerate(sizes):
            cell = runs[(runs["task"] == task) & (runs["level"] == level) & (runs["size"] == size)]
            if cell.empty:
                continue
            cell = cell.sort_values("seed") if "seed" in cell.columns else cell
            status = cell["status"].mode().iloc[0]
            mixed = cell["status"].nunique() > 1
            ax.add_patch(Rectangle((j, i), 1, 1, facecolor=STATUS_COLOURS.get(status, "#ffffff"),
                                   edgecolor="black" if mixed else "white", lw=1.5 if mixed else 1.0))
            text = "/".join(("-" if pl.isna(g) else str(int(g))) if st in ("precursor", "lagging")
                            else short.get(st, st) for st, g in zip(cell["status"], cell["gap_steps"]))
            ax.text(j + 0.5, i + 0.5, text, ha="center", va="center", fontsize=8,
                    color="white" if status == "never_acquired" else "black")
    ax.set_xlim(0, len(sizes))
    ax.set_ylim(len(rows), 0)
    ax.set_xticks([j + 0.5 for j in range(len(sizes))])
    ax.set_xticklabels(sizes)
    ax.set_yticks([i + 0.5 for i in range(len(rows))])
    ax.set_yticklabels([f"{t}-L{lv}" for t, lv in rows], fontsize=8)
    ax.tick_params(length=0)
    n_seeds = int(runs.groupby(["task", "level", "size"]).size().max())
    ax.set_title("RankMe status per setting (summary layer): colour = most common over its "
                 f"{n_seeds} seed{'s' if n_seeds != 1 else ''} (black outline: seeds disagree); text = each seed's "
                 "precursor gap in steps or its status", fontsize=9, wrap=True)
    ax.legend(handles=[Patch(facecolor=c, edgecolor="grey", label=k) for k, c in STATUS_COLOURS.items()],
              fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return pl.save(fig, Path(path))


@dataclass(frozen=True)
class Figure:
    """A registered figure: ``fn(analysis, figures_dir: Path, metric: str) -> list[Path]`` (the PNG files it
    wrote) and the analysis tables it ``reads`` (``Analysis.tables`` names)."""

    name: str
    fn: Callable
    reads: tuple[str, ...] = ()


def _check_figure(name: str, obj) -> None:
    if not isinstance(obj, Figure):
        raise TypeError(f"expected a figure registered with @register_figure(name={name!r}, ...), got "
                        f"{type(obj).__name__} {getattr(obj, '__qualname__', obj)!r}")


#: Every figure :func:`plot_all` draws, in order: the built-ins below, then those installed packages declare in the
#: ``ckptgeo.figures`` entry-point group, then those registered in this process (:func:`register_figure`; the
#: forecast figure of :mod:`ckptgeo.forecasting.figures` registers so when imported).
FIGURES = Registry("figure", "ckptgeo.figures", {name: "ckptgeo.analysis.figures" for name in ("suites", "seeds", "gaps")},
                   check=_check_figure)


def register_figure(*, name: str, reads: tuple[str, ...] = ()):
    """Decorator registering ``fn(analysis, figures_dir, metric) -> list[Path]`` as figure ``name`` in
    :data:`FIGURES` (``fn`` is returned); ``reads``: the analysis tables it draws from.

    Raises
    ------
    DuplicateNameError
        ``name`` already registered to another function.
    """
    def deco(fn):
        FIGURES.register(name, Figure(name=name, fn=fn, reads=tuple(reads)))
        return fn
    return deco


@register_figure(name="suites", reads=("curves", "accuracy", "events", "probes"))
def _suite_figures(analysis, figures_dir: Path, metric: str) -> list[Path]:
    """Per (model, suite): the curves, the heatmap and, when probed, the probes."""
    written: list[Path] = []
    c = analysis.curves
    pairs = set(c.loc[c["metric"] == metric, ["model", "suite"]].itertuples(index=False, name=None))
    if analysis.probes is not None and not analysis.probes.empty:   # a `ckptgeo probe` dataset has no curves
        pairs |= set(analysis.probes[["model", "suite"]].astype(str).itertuples(index=False, name=None))
    for model, suite in sorted(pairs):
        stem = f"{pl.slug(model)}__{pl.slug(suite)}"
        for fn, tag in ((plot_suite, metric), (plot_heatmap, "heatmap")):
            written.append(fn(analysis, model, suite, figures_dir / f"{stem}__{tag}.png", metric=metric))
        written.append(plot_probes(analysis, model, suite, figures_dir / f"{stem}__probe.png"))
    return [p for p in written if p is not None]


@register_figure(name="seeds", reads=("curves", "events"))
def _seed_figures(analysis, figures_dir: Path, metric: str) -> list[Path]:
    """Runs that differ only by seed, per suite: mean and band."""
    c = analysis.curves
    written = [plot_seeds(analysis, base, models, suite, figures_dir / f"{pl.slug(base)}__{pl.slug(suite)}__seeds.png",
                          metric=metric)
               for base, models in sorted(seed_groups(c[c["metric"] == metric]).items())
               for suite in sorted(c.loc[c["model"].isin(models), "suite"].unique())]
    return [p for p in written if p is not None]


@register_figure(name="gaps", reads=("events",))
def _gap_figure(analysis, figures_dir: Path, metric: str) -> list[Path]:
    p = plot_gaps(analysis, figures_dir / "gaps.png", metric=metric)
    return [p] if p is not None else []


def plot_all(analysis, figures_dir: str | os.PathLike | None = None, *, metric: str = "rankme") -> list[Path]:
    """Every registered figure (:data:`FIGURES`): per (model, suite) curves, heatmap and probes (when probed),
    seeds, the gaps chart, then those installed packages add.

    Returns
    -------
    list of Path
        The PNG files written (figures with nothing to draw are skipped).

    Raises
    ------
    AnalysisStepError
        A figure reads a table the analysis does not hold (no analysis step wrote it).
    """
    from ckptgeo.errors import AnalysisStepError

    figures_dir = Path(figures_dir) if figures_dir is not None else analysis.out / "figures"
    figures = [FIGURES.get(name) for name in FIGURES.names(sorted_=False)]
    for fig in figures:   # before drawing anything
        missing = [t for t in fig.reads if t not in analysis.tables]
        if missing:
            raise AnalysisStepError(f"figure {fig.name!r} reads {', '.join(missing)}, which no analysis step "
                                    f"writes; register a step that writes it, or remove the figure")
    written = [p for fig in figures for p in fig.fn(analysis, figures_dir, metric)]
    logger.info("wrote %d figures to %s", len(written), figures_dir)
    return written
