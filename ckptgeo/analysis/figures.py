"""Figures and the markdown report of an analysis.

Writes, under the analysis output folder (``DIR`` unless ``out`` was given)::

    DIR/
    ├── figures/
    │   ├── <model>__<suite>__rankme.png    RankMe per layer vs step, accuracy on a second axis,
    │   │                                    acquisition and recovery onset marked
    │   ├── <model>__<suite>__heatmap.png   layer x step RankMe
    │   ├── <model>__<suite>__probe.png     probe accuracy vs its shuffled-label control, per layer
    │   └── gaps.png                        precursor gap by task and model size
    └── report.md                           tables and figures together

matplotlib is imported inside the functions (Agg canvas, no pyplot state), so importing this module
is cheap and works without a display.
"""

from __future__ import annotations

import logging
import math
import os
import re
from pathlib import Path

import numpy as np
import pandas as pd

from ckptgeo._io import atomic_path, atomic_write_text

__all__ = ["plot_suite", "plot_heatmap", "plot_gaps", "plot_probes", "plot_grid", "plot_all", "gap_marks",
           "constant_layers", "write_report"]

logger = logging.getLogger(__name__)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.+-]+", "_", str(text)).strip("_") or "x"


def _figure(width: float = 8.0, height: float = 4.5):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def _save(fig, path: Path) -> Path:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", bbox_inches="tight")
    return path


def _plain(axis) -> None:
    """Tick labels of a log axis as plain numbers (``1000``, ``0.5``), not powers of ten."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 1 else f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


def _log_x(ax, steps) -> None:
    """symlog x axis when the positive steps span at least two decades (step 0 stays visible)."""
    pos = np.asarray([s for s in steps if s > 0], dtype=float)
    if pos.size and pos.max() / pos.min() >= 100:
        ax.set_xscale("symlog", linthresh=float(pos.min()))
        _plain(ax.xaxis)


def constant_layers(sub) -> set:
    """Layers whose curve does not move at all (relative range below
    :data:`ckptgeo.analysis.events.FLAT_TOLERANCE`): e.g. layer 0 read at a token every item ends with
    is one embedding row repeated, RankMe 1 by construction at every step."""
    from ckptgeo.analysis.events import FLAT_TOLERANCE

    out = set()
    for layer, g in sub.groupby("layer"):
        v = g["value"].to_numpy(dtype=float)
        v = v[np.isfinite(v)]
        if len(v) >= 2 and (v.max() - v.min()) <= FLAT_TOLERANCE * max(abs(v).max(), 1e-12):
            out.add(layer)
    return out


def _axis_label(metric: str) -> str:
    """``"rankme (effective dimensions)"``: the name and the unit the measure declares (name alone for a
    measure this installation does not know)."""
    from ckptgeo.errors import InvalidParameterError
    from ckptgeo.metrics.registry import get_metric

    try:
        unit = get_metric(metric).unit
    except InvalidParameterError:
        unit = ""
    return f"{metric} ({unit})" if unit else metric


def _pick_curves(analysis, model: str, suite: str, metric: str):
    """The (config_hash, curves frame) to draw: uncentred first, then the config with most rows."""
    c = analysis.curves
    sub = c[(c["model"] == model) & (c["suite"] == suite) & (c["metric"] == metric) & (c["layer"] >= 0)]
    if sub.empty:
        return None, sub
    if "centered" in sub.columns and sub["centered"].eq(False).fillna(False).astype(bool).any():
        sub = sub[sub["centered"].eq(False).fillna(False).astype(bool)]
    chash = sub.groupby("config_hash").size().sort_values(ascending=False, kind="stable").index[0]
    return chash, sub[sub["config_hash"] == chash]


def _summary_event(analysis, model, suite, chash, metric):
    e = analysis.events
    e = e[(e["model"] == model) & (e["suite"] == suite) & (e["config_hash"] == chash) & (e["metric"] == metric)]
    return None if e.empty else e.loc[e["layer"].astype(int).idxmax()]


def _isna(x) -> bool:
    import pandas as pd

    try:
        return x is None or bool(pd.isna(x))
    except (TypeError, ValueError):
        return False


def _int_or_none(x) -> int | None:
    return None if _isna(x) else int(x)


def _left_out_steps(analysis, model: str, xcol: str = "step") -> np.ndarray:
    """Steps (or tokens) of ``model``'s revisions the analysis left out (``model`` as the curves name it,
    ``name@stage`` where the run has stages)."""
    lo = getattr(analysis, "left_out", None)
    if lo is None or lo.empty:
        return np.array([], dtype=float)
    names = [m if _isna(st) else f"{m}@{st}" for m, st in zip(lo["model"], lo["stage"])]
    values = pd.to_numeric(lo[xcol], errors="coerce").to_numpy(dtype=float)
    return np.sort(values[[n == model for n in names]])


def with_gaps(x, y, gaps) -> tuple[np.ndarray, np.ndarray]:
    """``x``, ``y`` (sorted by x) with a NaN inserted between two points that have a left-out point (one of
    ``gaps``) between them, so the line breaks there instead of bridging revisions not analysed.

    >>> with_gaps([0, 1, 3], [5, 6, 7], [2])
    (array([0., 1., 2., 3.]), array([ 5.,  6., nan,  7.]))
    """
    x, y, gaps = (np.asarray(v, dtype=float) for v in (x, y, gaps))
    if x.size < 2 or gaps.size == 0:
        return x, y
    inside = [i for i in range(1, x.size) if ((gaps > x[i - 1]) & (gaps < x[i])).any()]
    brk = [float(gaps[(gaps > x[i - 1]) & (gaps < x[i])][0]) for i in inside]
    return np.insert(x, inside, brk), np.insert(y, inside, np.nan)


def plot_suite(analysis, model: str, suite: str, path: str | os.PathLike, *, metric: str = "rankme") -> Path | None:
    """RankMe per layer against step, accuracy on a second axis, acquisition and recovery marked.

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
    chash, sub = _pick_curves(analysis, model, suite, metric)
    if sub.empty:
        return None
    import matplotlib

    fig = _figure()
    ax = fig.add_subplot(1, 1, 1)
    layers = sorted(sub["layer"].unique())
    flat = constant_layers(sub)
    cmap = matplotlib.colormaps["viridis"]
    xcol = "tokens" if getattr(analysis, "x", "steps") == "tokens" else "step"
    gaps = _left_out_steps(analysis, model, xcol)   # revisions left out: the line breaks there
    for i, layer in enumerate(layers):
        g = sub[sub["layer"] == layer].sort_values("step")
        if layer in flat:   # constant by construction: drawn thin and grey, and said so
            ax.plot(*with_gaps(g[xcol], g["value"], gaps), color="0.6", lw=0.8, ls=":", label=f"L{layer} (constant)")
            continue
        ax.plot(*with_gaps(g[xcol], g["value"], gaps), color=cmap(i / max(1, len(layers) - 1)), lw=1.4,
                label=f"L{layer}", marker="." if len(g) < 40 else None)
    ax.set_xlabel("training tokens" if xcol == "tokens" else "training step")
    ax.set_ylabel(_axis_label(metric))
    ax.set_yscale("log")
    _plain(ax.yaxis)
    _log_x(ax, sub[xcol])
    acc_line = None
    acc = analysis.accuracy
    acc = acc[(acc["model"] == model) & (acc["suite"] == suite)]
    if not acc.empty:
        pick = chash if (acc["config_hash"] == chash).any() else acc["config_hash"].iloc[0]
        acc = acc[acc["config_hash"] == pick].sort_values("step")
        ax2 = ax.twinx()
        (acc_line,) = ax2.plot(*with_gaps(acc[xcol], acc["accuracy"], gaps), color="black", lw=2.0, ls="-",
                               label="accuracy")
        ax2.set_ylim(-0.02, 1.02)
        ax2.set_ylabel("accuracy")
    ev = _summary_event(analysis, model, suite, chash, metric)
    title = f"{model} · {suite}"
    if ev is not None:
        unit = "tokens" if xcol == "tokens" else "step"
        acq, rec, col = (_int_or_none(ev[f"acquisition_{unit}"]), _int_or_none(ev[f"onset_{unit}"]),
                         _int_or_none(ev[f"collapse_{unit}"]))
        if col is not None:
            ax.axvline(col, color="tab:blue", ls=":", lw=1.2, label=f"collapse (L{int(ev['layer'])}) {col}")
        if rec is not None:
            ax.axvline(rec, color="tab:green", ls="--", lw=1.5, label=f"recovery onset (L{int(ev['layer'])}) {rec}")
        if acq is not None:
            ax.axvline(acq, color="tab:red", ls="-", lw=1.5, label=f"acquisition {acq}")
        gap = _int_or_none(ev["gap_tokens" if xcol == "tokens" else "gap_steps"])
        title += f" — {ev['status']}" + (f", gap {gap:,} {'tokens' if xcol == 'tokens' else 'steps'}"
                                         if gap is not None else "")
    if gaps.size:
        title += f" ({gaps.size} revisions left out: line breaks)"
    ax.set_title(title, fontsize=10)
    handles, labels = ax.get_legend_handles_labels()
    if acc_line is not None:
        handles, labels = handles + [acc_line], labels + ["accuracy (right axis)"]
    ax.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, -0.14), fontsize=7,
              ncol=min(6, len(labels)), frameon=False)
    return _save(fig, Path(path))


def plot_heatmap(analysis, model: str, suite: str, path: str | os.PathLike, *,
                 metric: str = "rankme") -> Path | None:
    """A layer × step heatmap of ``metric`` (columns are the measured checkpoints, in order).

    Returns
    -------
    Path or None
        None when there is no curve of ``metric`` for this model and suite.
    """
    chash, sub = _pick_curves(analysis, model, suite, metric)
    if sub.empty:
        return None
    grid = sub.pivot_table(index="layer", columns="step", values="value", aggfunc="mean").sort_index()
    fig = _figure(9.0, 0.4 * len(grid) + 2.5)
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
    ax.set_title(f"{metric}: {model} · {suite}", fontsize=10)
    fig.colorbar(im, ax=ax, label=f"{metric} (log scale)" if norm is not None else metric)
    return _save(fig, Path(path))


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
    from ckptgeo.analysis.summary import _summary_rows, model_size

    e = _summary_rows(analysis.events)
    e = e[e["metric"] == metric] if len(e) else e
    if len(e) and e["centered"].eq(False).fillna(False).astype(bool).any():
        e = e[e["centered"].eq(False).fillna(False).astype(bool)]
    if e.empty:
        return None
    models = sorted(e["model"].unique(), key=lambda m: (math.isnan(model_size(m)), model_size(m)
                                                         if not math.isnan(model_size(m)) else 0.0, m))
    suites = sorted(e["suite"].unique())
    fig = _figure(max(6.0, 1.0 + 0.9 * len(suites) * max(1, len(models)) ** 0.5), 4.5)
    ax = fig.add_subplot(1, 1, 1)
    width = 0.8 / len(models)
    import matplotlib

    cmap = matplotlib.colormaps["plasma"]
    marks = gap_marks(e, models, suites)
    for j, model in enumerate(models):
        color = cmap(j / max(1, len(models) - 1) * 0.85)
        size = model_size(model)
        label = model if math.isnan(size) else f"{model} ({size / 1e6:.3g}M params)"
        at = {kind: [suites.index(s) - 0.4 + width * (j + 0.5) for m, s, _ in marks[kind] if m == model]
              for kind in marks}
        ax.bar(at["gap"], [g for m, _, g in marks["gap"] if m == model], width=width, color=color, label=label)
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
    ax.set_title(f"{metric} precursor gap by task and model (○ synchronous, ▼ never acquired: no gap, "
                 f"× no onset or acquired at start)", fontsize=9)
    ax.legend(fontsize=7)
    return _save(fig, Path(path))


def plot_probes(analysis, model: str, suite: str, path: str | os.PathLike) -> Path | None:
    """Probe accuracy (solid) against its shuffled-label control (dashed) per layer over training steps.

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
    import matplotlib

    p = p.groupby(["layer", "step"], sort=True)[["accuracy", "control_accuracy"]].mean().reset_index()
    fig = _figure()
    ax = fig.add_subplot(1, 1, 1)
    layers = sorted(p["layer"].unique())
    cmap = matplotlib.colormaps["viridis"]
    for i, layer in enumerate(layers):
        g = p[p["layer"] == layer]
        color = cmap(i / max(1, len(layers) - 1))
        ax.plot(g["step"], g["accuracy"], color=color, lw=1.4, label=f"L{layer} probe")
        ax.plot(g["step"], g["control_accuracy"], color=color, lw=1.0, ls="--", label=f"L{layer} control")
    _log_x(ax, p["step"])
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("training step")
    ax.set_ylabel("probe accuracy (held-out folds)")
    ax.set_title(f"probe vs shuffled-label control: {model} · {suite}", fontsize=10)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), fontsize=7, ncol=min(6, 2 * len(layers)),
              frameon=False)
    return _save(fig, Path(path))


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
        ``gap_steps`` (:func:`ckptgeo.studies.claims.runs_table`).
    path : path
        The PNG to write.

    Returns
    -------
    Path or None
        None when ``runs`` is empty.

    Notes
    -----
    With several seeds a cell takes the most common status and shows every seed's gap (``a/b``). The text
    is the precursor gap in steps (acquisition - recovery onset; negative: the recovery lags), or a short
    status: ``sync``, ``never``, ``start``, ``none``.
    """
    if runs is None or len(runs) == 0:
        return None
    rows = sorted({(t, int(lv)) for t, lv in zip(runs["task"], runs["level"])})
    sizes = (runs.drop_duplicates("size").sort_values(["n_parameters", "size"])["size"].tolist())
    short = {"synchronous": "sync", "never_acquired": "never", "acquired_at_start": "start", "no_onset": "none",
             "no_data": "-", "unresolved": "unres", "censored": "cens"}
    fig = _figure(1.6 + 1.3 * len(sizes), 0.8 + 0.32 * len(rows))
    ax = fig.add_subplot(1, 1, 1)
    from matplotlib.patches import Patch, Rectangle

    for i, (task, level) in enumerate(rows):
        for j, size in enumerate(sizes):
            cell = runs[(runs["task"] == task) & (runs["level"] == level) & (runs["size"] == size)]
            if cell.empty:
                continue
            status = cell["status"].mode().iloc[0]
            ax.add_patch(Rectangle((j, i), 1, 1, facecolor=STATUS_COLOURS.get(status, "#ffffff"), edgecolor="white"))
            gaps = [("-" if _isna(g) else str(int(g))) for g in cell["gap_steps"]]
            text = "/".join(gaps) if status in ("precursor", "lagging") else short.get(status, status)
            ax.text(j + 0.5, i + 0.5, text, ha="center", va="center", fontsize=7,
                    color="white" if status == "never_acquired" else "black")
    ax.set_xlim(0, len(sizes))
    ax.set_ylim(len(rows), 0)
    ax.set_xticks([j + 0.5 for j in range(len(sizes))])
    ax.set_xticklabels(sizes)
    ax.set_yticks([i + 0.5 for i in range(len(rows))])
    ax.set_yticklabels([f"{t}-L{lv}" for t, lv in rows], fontsize=7)
    ax.tick_params(length=0)
    ax.set_title("RankMe status per run (summary layer); number: precursor gap in steps", fontsize=9)
    ax.legend(handles=[Patch(facecolor=c, edgecolor="grey", label=k) for k, c in STATUS_COLOURS.items()],
              fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _save(fig, Path(path))


def plot_all(analysis, figures_dir: str | os.PathLike | None = None, *, metric: str = "rankme") -> list[Path]:
    """Every figure: per (model, suite) curves, heatmap and probes (when probed), then the gaps chart.

    Returns
    -------
    list of Path
        The PNG files written (figures with nothing to draw are skipped).
    """
    figures_dir = Path(figures_dir) if figures_dir is not None else analysis.out / "figures"
    written: list[Path] = []
    c = analysis.curves
    pairs = set(c.loc[c["metric"] == metric, ["model", "suite"]].itertuples(index=False, name=None))
    if analysis.probes is not None and not analysis.probes.empty:   # a `ckptgeo probe` dataset has no curves
        pairs |= set(analysis.probes[["model", "suite"]].astype(str).itertuples(index=False, name=None))
    for model, suite in sorted(pairs):
        stem = f"{_slug(model)}__{_slug(suite)}"
        for fn, tag in ((plot_suite, metric), (plot_heatmap, "heatmap")):
            p = fn(analysis, model, suite, figures_dir / f"{stem}__{tag}.png", metric=metric)
            if p is not None:
                written.append(p)
        p = plot_probes(analysis, model, suite, figures_dir / f"{stem}__probe.png")
        if p is not None:
            written.append(p)
    p = plot_gaps(analysis, figures_dir / "gaps.png", metric=metric)
    if p is not None:
        written.append(p)
    logger.info("wrote %d figures to %s", len(written), figures_dir)
    return written


def _md(df, max_rows: int = 60, floatfmt: str = "{:.3g}") -> str:
    """A pandas DataFrame as a GitHub markdown table (no tabulate dependency)."""
    if df is None or len(df) == 0:
        return "_(none)_\n"
    view = df.head(max_rows)

    def cell(v) -> str:
        if v is None or (not isinstance(v, str) and _isna(v)):
            return "–"
        if isinstance(v, (float, np.floating)):
            return floatfmt.format(float(v))
        return str(v).replace("|", "\\|")

    lines = ["| " + " | ".join(map(str, view.columns)) + " |", "|" + "---|" * len(view.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in view.itertuples(index=False)]
    if len(df) > max_rows:
        lines.append(f"\n_{len(df) - max_rows} more rows in the Parquet table._")
    return "\n".join(lines) + "\n"


def _with_run(table, runs):
    """``table`` with its config_hash column replaced by a ``run`` label (:func:`run_labels`) where one model
    and suite has rows of several settings, and dropped otherwise."""
    from ckptgeo.analysis.summary import run_labels

    if "config_hash" not in table.columns or table.empty:
        return table.drop(columns=["config_hash"], errors="ignore")
    if table.groupby(["model", "suite"])["config_hash"].nunique().max() <= 1:
        return table.drop(columns=["config_hash"])
    labels = run_labels(table["config_hash"], runs)
    out = table.drop(columns=["config_hash"])
    out.insert(2, "run", [labels[h] for h in table["config_hash"]])
    return out


def _left_out_md(analysis) -> str:
    """The report's "N revisions left out and why" and the table of them."""
    from ckptgeo.analysis.tables import left_out_text

    lo = getattr(analysis, "left_out", None)
    text = left_out_text(lo).replace("\n  ", "\n- ") + "\n"
    return text + ("\n" + _md(lo.drop(columns=["reason"]), max_rows=200) if lo is not None and len(lo) else "")


def write_report(dir: str | os.PathLike, analysis=None, *, plots: bool = True, **analyze_kwargs) -> Path:
    """Write ``report.md`` (and, with ``plots``, ``figures/``) for a dataset.

    Parameters
    ----------
    dir : path
        The dataset folder.
    analysis : Analysis or None, default=None
        A finished analysis; None runs :func:`ckptgeo.analysis.analyze` on ``dir`` with ``analyze_kwargs``.
    plots : bool, default=True
        Draw the figures and link them.

    Returns
    -------
    Path
        The report, in the analysis output folder.
    """
    from ckptgeo.analysis.summary import analyze, events_legend, events_view, read_runs

    if analysis is None:
        analysis = analyze(dir, **analyze_kwargs)
    out = analysis.out
    figures = plot_all(analysis, out / "figures") if plots else []
    cfg = analysis.config
    e = analysis.events
    runs = read_runs(analysis.root)
    thr = ("0.5 (halfway between chance and 1 where chance ≥ 0.5)" if cfg.acc_threshold is None
           else str(cfg.acc_threshold))
    parts = [f"# ckptgeo analysis of `{analysis.root}`\n",
             "Definitions: the docstrings of `ckptgeo.analysis.events` (after Billa, arXiv:2602.15997). "
             "Tables: `events/events.parquet` and "
             "`summary/*.parquet` (read with `pandas.read_parquet`).\n",
             "## Settings\n",
             f"- accuracy threshold: {thr}; "
             f"window {cfg.window} checkpoints\n- recovery / onset fraction: {cfg.recovery}; collapse onset at "
             f"{cfg.collapse_fraction} of the first value; min drop {cfg.min_drop}; a gap within "
             f"{cfg.resolution_checkpoints} checkpoint is unresolved\n- nulls: {cfg.n_permutations} permutations, "
             f"{cfg.n_noise_curves} {cfg.noise_kind} noise curves per curve, seed {cfg.seed}; intervals "
             f"{cfg.confidence:g}; verdicts at alpha {cfg.alpha:g}\n- probe margin over control: "
             f"{cfg.probe_margin}\n- models: {', '.join(sorted(e['model'].unique())) if len(e) else '–'}; "
             f"{len(e)} event rows\n",
             "## Revisions left out\n", _left_out_md(analysis),
             "## Acquisition\n", _md(_with_run(analysis.acquisitions, runs).drop(columns=["reason"], errors="ignore")),
             "## Events (summary layer: deepest layer, or -1 for whole-model measures)\n",
             "The table `ckptgeo analyze` prints, with the same headers:\n\n",
             "".join(f"- {line}\n" for line in events_legend(cfg).splitlines()) + "\n",
             _md(events_view(e, runs=runs), max_rows=200) if len(e) else _md(e),
             "## Precursor rate by metric and difficulty\n",
             "Each rate with its Wilson interval; null_rate/p_value: acquisition steps permuted across the counted "
             "runs (one-sided); noise_rate: the rule on noise curves at each run's own schedule and noise level; "
             "verdict from the permutation test.\n\n", _md(analysis.precursor_rates),
             "### By model\n", _md(analysis.precursor_rates_by_model),
             "## Top-down propagation\n",
             "Collapse onset per layer (first checkpoint at half the first RankMe; layer 0 excluded). direction: "
             "Kendall's tau of block depth with onset over layers 1..L-1 (the post-final-norm layer L apart) with a "
             "permutation p-value; negative = deeper layers collapse first.\n\n",
             _md(analysis.top_down.drop(columns=["config_hash"], errors="ignore")),
             "## Probe lead\n",
             f"First checkpoint where a layer's probe beats the better of majority-class chance and its "
             f"shuffled-label control by {cfg.probe_margin} with p < {cfg.probe_alpha}, against acquisition "
             "(lead = acquisition − probe onset). *not_measured*: the probe was undefined at every checkpoint; "
             "*no_probe_onset*: measured, never beat its baseline; *readable_at_start*: beats it already at the first "
             "measured checkpoint (no rise to see, not a lead).\n\n",
             _md(analysis.probe_lead.drop(columns=["config_hash", "reason"], errors="ignore")),
             "## Across model sizes\n",
             "Runs of the same task (suite) at different model sizes (parameters from the model name, else depth): "
             "collapse floors and acquisition steps of the smaller and larger model, averaged over the suites they "
             "share, and their Spearman correlation across those suites where there are three or more "
             "(never-acquired suites rank last).\n\n",
             _md(analysis.across_sizes) if len(analysis.across_sizes) else
             "_No two runs of the same task at different model sizes in this dataset: nothing to compare._\n",
             "## Difficulty as continuous\n",
             "Slope of the gap (checkpoints) on the acquisition step, per 1000 steps, beside the slope of the "
             "permutation null (later acquisition leaves room for longer gaps by construction).\n\n",
             _md(analysis.difficulty_slope),
             "## Seeds\n", _md(analysis.seed_spread), _md(analysis.seed_events)]
    if figures:
        parts.append("## Figures\n")
        for p in figures:
            rel = p.relative_to(out).as_posix()
            parts.append(f"### {p.stem}\n\n![{p.stem}]({rel})\n")
    return atomic_write_text(out / "report.md", "\n".join(parts))
