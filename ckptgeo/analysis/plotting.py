"""Drawing pieces every figure of :mod:`ckptgeo.analysis.figures` shares: an Agg figure with no pyplot state, an
atomic PNG save, plain-number log ticks, wrapped titles, one colour per layer, a line broken at left-out revisions,
the event marks (collapse, recovery onset, acquisition, the precursor gap shaded), and a deep model's layers named at
their lines' ends (spread apart where the lines end close together).

matplotlib is imported inside the functions, so importing this module is cheap and works without a display.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ckptgeo._io import atomic_path, safe_name

__all__ = ["slug", "figure", "save", "plain", "log_ticks", "title", "layer_colours", "log_x", "constant_layers",
           "axis_label", "isna", "int_or_none", "left_out_steps", "aligned", "with_gaps", "events_of", "mark_events",
           "layer_bar", "MAX_LAYER_LEGEND", "spread", "labelled_layers", "line_ends", "end_labels",
           "END_LABEL_FONTSIZE", "MAX_END_LABELS"]


def slug(text: str) -> str:
    """A model or suite name read from a table, as one safe part of a figure's file name."""
    return safe_name(str(text) or "x", what="model or suite name")


def figure(width: float = 8.0, height: float = 4.5):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def save(fig, path: Path) -> Path:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", bbox_inches="tight")
    return path


def plain(axis) -> None:
    """Tick labels of a log axis as plain numbers (``1000``, ``0.5``), not powers of ten."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 1 else f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


def log_ticks(axis, values) -> None:
    """Major ticks of a log axis at 1, 2, 5 x 10^k, or 1, 2, 3, 5 x 10^k, or every integer multiple: the first of
    these that puts at least 3 ticks within the data (the last otherwise), labelled as plain numbers: a RankMe axis
    from 1 to 15 reads 1, 2, 5, 10, from 1 to 3.3 reads 1, 2, 3 (not only 1 and 2)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v) & (v > 0)]
    subs = (1.0, 2.0, 5.0)
    if v.size:
        lo, hi = float(v.min()), float(v.max())
        decades = range(int(np.floor(np.log10(lo))), int(np.ceil(np.log10(hi))) + 1)
        for subs in ((1.0, 2.0, 5.0), (1.0, 2.0, 3.0, 5.0), tuple(float(k) for k in range(1, 10))):
            if sum(lo <= m * 10.0 ** d <= hi for d in decades for m in subs) >= 3:
                break
    axis.set_major_locator(LogLocator(base=10.0, subs=subs))
    # 3 significant digits below 100: where the span is under one tick of 1..9 matplotlib places ticks at 1.5, 1.6,
    # ... (a RankMe of 1.3-1.9 read "2" at every tick)
    axis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:,.0f}" if x >= 100 else f"{x:.3g}"))
    axis.set_minor_formatter(NullFormatter())


def title(ax, text: str, *, width: int = 80, fontsize: float = 9.5) -> None:
    """A title wrapped to ``width`` characters, so a long model or suite name does not run over the axes."""
    import textwrap

    ax.set_title("\n".join(textwrap.wrap(text, width)) or text, fontsize=fontsize)


def layer_colours(layers) -> dict:
    """One viridis colour per layer (the same in every panel, and for that layer's event lines)."""
    import matplotlib

    cmap = matplotlib.colormaps["viridis"]
    layers = list(layers)
    return {layer: cmap(0.9 * i / max(1, len(layers) - 1)) for i, layer in enumerate(layers)}


def log_x(ax, steps) -> None:
    """symlog x axis when the positive steps span at least two decades (step 0 stays visible)."""
    pos = np.asarray([s for s in steps if s > 0], dtype=float)
    if pos.size and pos.max() / pos.min() >= 100:
        ax.set_xscale("symlog", linthresh=float(pos.min()))
        plain(ax.xaxis)


def constant_layers(sub) -> set:
    """Layers whose curve does not move at all (relative range below
    :data:`ckptgeo.events.detect.FLAT_TOLERANCE`): e.g. layer 0 read at a token every item ends with
    is one embedding row repeated, RankMe 1 by construction at every step."""
    from ckptgeo.events.detect import FLAT_TOLERANCE

    out = set()
    for layer, g in sub.groupby("layer"):
        v = g["value"].to_numpy(dtype=float)
        v = v[np.isfinite(v)]
        if len(v) >= 2 and (v.max() - v.min()) <= FLAT_TOLERANCE * max(abs(v).max(), 1e-12):
            out.add(layer)
    return out


def axis_label(metric: str) -> str:
    """``"rankme (effective dimensions)"``: the name and the unit the measure declares (name alone for a
    measure this installation does not know)."""
    from ckptgeo.errors import InvalidParameterError
    from ckptgeo.metrics.registry import get_metric

    try:
        unit = get_metric(metric).unit
    except InvalidParameterError:
        unit = ""
    return f"{metric} ({unit})" if unit else metric


def isna(x) -> bool:
    import pandas as pd

    try:
        return x is None or bool(pd.isna(x))
    except (TypeError, ValueError):
        return False


def int_or_none(x) -> int | None:
    return None if isna(x) else int(x)


def left_out_steps(analysis, model: str, xcol: str = "step") -> np.ndarray:
    """Steps (or tokens) of ``model``'s revisions the analysis left out (``model`` as the curves name it,
    ``name@stage`` where the run has stages)."""
    lo = getattr(analysis, "left_out", None)
    if lo is None or lo.empty:
        return np.array([], dtype=float)
    names = [m if isna(st) else f"{m}@{st}" for m, st in zip(lo["model"], lo["stage"])]
    values = pd.to_numeric(lo[xcol], errors="coerce").to_numpy(dtype=float)
    return np.sort(values[[n == model for n in names]])


def aligned(series) -> pd.DataFrame:
    """Series indexed by step side by side (one column each), on the steps all of them have."""
    return pd.concat(list(series), axis=1, join="inner").sort_index()


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


def events_of(ev, unit: str = "step") -> dict:
    """The steps (``unit="step"``) or tokens (``"tokens"``) of a summary event row: collapse, recovery onset,
    acquisition, gap (None when absent)."""
    if ev is None:
        return {}
    return {"collapse": int_or_none(ev[f"collapse_{unit}"]), "onset": int_or_none(ev[f"onset_{unit}"]),
            "acquisition": int_or_none(ev[f"acquisition_{unit}"]),
            "gap": int_or_none(ev["gap_tokens" if unit == "tokens" else "gap_steps"]),
            "unit": "tokens" if unit == "tokens" else "steps", "layer": int(ev["layer"]), "status": ev["status"]}


def mark_events(ax, marks: dict, colour, *, labels: bool = True) -> None:
    """Collapse (dotted) and recovery onset (dashed) in the colour of the layer they belong to, acquisition
    (solid red), and the precursor gap (onset -> acquisition) shaded green, a lag (acquisition -> onset) grey."""
    if not marks:
        return
    layer, col, rec, acq, gap = (marks["layer"], marks["collapse"], marks["onset"], marks["acquisition"],
                                 marks["gap"])
    if rec is not None and acq is not None and rec != acq:
        lo, hi = sorted((rec, acq))
        lead = rec < acq
        ax.axvspan(lo, hi, color="tab:green" if lead else "0.5", alpha=0.15, lw=0,
                   label=(f"precursor gap {acq - rec:,} {marks['unit']}" if lead
                          else f"recovery lags by {rec - acq:,} {marks['unit']}") if labels else None)
    if col is not None:
        ax.axvline(col, color=colour, ls=":", lw=1.6, label=f"L{layer} collapse {col}" if labels else None)
    if rec is not None:
        ax.axvline(rec, color=colour, ls="--", lw=1.6, label=f"L{layer} recovery onset {rec}" if labels else None)
    if acq is not None:
        ax.axvline(acq, color="tab:red", ls="-", lw=1.6, label=f"acquisition {acq}" if labels else None)


#: above this many layers a figure's lines get a colour bar of layers, not a legend entry each
MAX_LAYER_LEGEND = 8


def layer_bar(fig, ax, layers, colours) -> None:
    """A colour bar naming the layers by their line colour (for deep models, instead of a legend entry each)."""
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import BoundaryNorm, ListedColormap

    cmap = ListedColormap([colours[layer] for layer in layers])
    bar = fig.colorbar(ScalarMappable(norm=BoundaryNorm(np.arange(len(layers) + 1) - 0.5, len(layers)), cmap=cmap),
                       ax=ax, fraction=0.04, pad=0.13)   # room for the accuracy axis on the right
    every = max(1, int(np.ceil(len(layers) / 12)))
    bar.set_ticks(range(0, len(layers), every))
    bar.set_ticklabels([f"L{layers[i]}" for i in range(0, len(layers), every)], fontsize=7)
    bar.set_label("layer (line colour)")


#: font size (points) of the layer names at the ends of a deep model's lines
END_LABEL_FONTSIZE = 7.0


def spread(targets, gap: float, low: float, high: float) -> np.ndarray:
    """Positions as near ``targets`` as possible, in the same order, at least ``gap`` apart and inside
    ``[low, high]`` where there is room (one axis, any unit: the display pixels of labels' centres).

    Labels that would overlap are gathered into a block centred on their targets' mean; blocks that then
    overlap merge, and a block past an end is pushed inside. With more labels than ``(high - low) / gap + 1``
    the block overruns the ends equally (choose fewer: :func:`labelled_layers`).

    Parameters
    ----------
    targets : array-like of float, shape (n,)
        Sorted ascending.
    gap : float
        The least distance between two neighbours (> 0).
    low, high : float

    Returns
    -------
    ndarray of float, shape (n,)

    Examples
    --------
    >>> spread([5.0, 5.0, 5.0], 2.0, 0.0, 100.0).tolist()
    [3.0, 5.0, 7.0]
    >>> spread([0.0, 0.5, 50.0], 2.0, 0.0, 100.0).tolist()
    [0.0, 2.0, 50.0]
    """
    t = np.asarray(targets, dtype=float)
    blocks: list[list[float]] = []   # [first position, count, sum of targets]
    for v in t:
        blocks.append([v, 1, v])
        while True:
            b = blocks[-1]
            b[0] = b[2] / b[1] - gap * (b[1] - 1) / 2   # centred on its targets' mean
            b[0] = min(max(b[0], low), high - gap * (b[1] - 1)) if gap * (b[1] - 1) <= high - low else \
                (low + high) / 2 - gap * (b[1] - 1) / 2
            if len(blocks) < 2 or blocks[-2][0] + gap * blocks[-2][1] <= b[0]:
                break
            prev = blocks[-2]
            blocks[-2:] = [[prev[0], prev[1] + b[1], prev[2] + b[2]]]
    return np.concatenate([b[0] + gap * np.arange(b[1]) for b in blocks]) if blocks else t


def labelled_layers(layers, capacity: int, keep=()) -> list:
    """The layers to name at their lines' ends when at most ``capacity`` names fit: every layer if they fit,
    else every k-th counted from the deepest (which is always named), with the smallest k that fits, plus
    ``keep`` (the summary layer, whose events are marked).

    >>> labelled_layers(list(range(1, 33)), 12, keep=(32,))
    [2, 5, 8, 11, 14, 17, 20, 23, 26, 29, 32]
    >>> labelled_layers([1, 2, 3], 12)
    [1, 2, 3]
    """
    layers = sorted(layers)
    keep = [k for k in keep if k in layers]
    for k in range(1, len(layers) + 1):
        chosen = sorted(set(layers[::-1][::k]) | set(keep))
        if len(chosen) <= max(capacity, 1 + len(keep)):
            return chosen
    return sorted(set(layers[-1:]) | set(keep))


def _make_room_right(ax, x_end: float, pixels: float) -> None:
    """Widen the x axis (in its own scale: linear, log or symlog) so ``pixels`` of it lie right of ``x_end``."""
    width = ax.bbox.width
    if width <= pixels * 1.5:
        return
    scale = ax.xaxis.get_transform()
    lo, hi = ax.get_xlim()
    a, b, e = (float(v) for v in scale.transform(np.array([lo, hi, x_end], dtype=float)))
    need = a + (e - a) / (1.0 - pixels / width)
    if need > b:
        ax.set_xlim(lo, float(scale.inverted().transform(np.array([need]))[0]))


def line_ends(sub, xcol: str = "step", *, skip=()) -> dict:
    """layer -> (x, value) of each layer's last finite point in ``sub`` (a curve's rows: ``layer``, ``value``,
    ``xcol``), leaving out the layers in ``skip``."""
    v = sub[np.isfinite(pd.to_numeric(sub["value"], errors="coerce").to_numpy(dtype=float))]
    last = v.sort_values(xcol).groupby("layer").tail(1)
    return {layer: (float(x), float(y)) for layer, x, y in zip(last["layer"], last[xcol], last["value"])
            if layer not in skip}


#: at most this many layer names at the lines' ends (every k-th layer beyond; the colour bar names them all)
MAX_END_LABELS = 12


def _reading_order(layers, y: dict, gap: float) -> list:
    """``layers`` bottom to top by where their lines end (``y``, display units); lines ending within ``gap`` of
    each other (a run of them) are put in layer order instead, deeper on top where the deeper ones of the run end
    higher on average, so that names of lines ending on nearly one point read L1, L2, ... rather than in the
    order of their noise."""
    order = sorted(layers, key=lambda layer: (y[layer], layer))
    runs: list[list] = []
    for layer in order:
        if runs and y[layer] - y[runs[-1][-1]] < gap:
            runs[-1].append(layer)
        else:
            runs.append([layer])
    out = []
    for run in runs:
        up = len(run) < 2 or np.corrcoef(run, [y[layer] for layer in run])[0, 1] >= 0 \
            if len(set(y[layer] for layer in run)) > 1 else True
        out += sorted(run, reverse=not up)
    return out


def end_labels(ax, ends: dict, colours: dict, *, keep=(), fontsize: float = END_LABEL_FONTSIZE) -> list:
    """Name lines at their ends: ``L{layer}`` in the line's colour, in one column right of the last point, each
    joined to its line's end by a thin leader; names of lines that end close together are spread apart (at
    least 1.25 font heights between centres, order kept; lines ending within that of each other named in layer
    order), and where more than :data:`MAX_END_LABELS` or more than fit, every k-th layer from the deepest
    (:func:`labelled_layers`; ``keep``: layers always named).

    Call it last, once the axes hold everything that sets their limits (it fixes them: the names sit at
    positions computed for these limits).

    Parameters
    ----------
    ax : matplotlib Axes
    ends : dict
        layer -> (x, y) of its line's last finite point, in data coordinates.
    colours : dict
        layer -> colour.

    Returns
    -------
    list of matplotlib Annotation
        The names drawn, bottom to top; each carries its layer as ``.layer``.
    """
    ends = {layer: (float(x), float(y)) for layer, (x, y) in ends.items() if np.isfinite(x) and np.isfinite(y)}
    if not ends:
        return []
    px = ax.figure.dpi / 72.0
    gap = 1.25 * fontsize * px
    x_end = max(x for x, _ in ends.values())
    _make_room_right(ax, x_end, (8 + 3.2 * fontsize) * px)   # a leader of 8 pt and a name like "L32"
    ax.set_ylim(*ax.get_ylim())   # fixed: the names are placed for these limits
    ax.set_xlim(*ax.get_xlim())
    box = ax.bbox
    chosen = labelled_layers(list(ends), min(MAX_END_LABELS, int((box.height - gap) // gap) + 1), keep=keep)
    at = {layer: ax.transData.transform(ends[layer]) for layer in chosen}
    order = _reading_order(chosen, {layer: at[layer][1] for layer in chosen}, gap)
    ys = spread([at[layer][1] for layer in order], gap, box.y0 + gap / 2, box.y1 - gap / 2)
    column = ax.transData.transform((x_end, 0.0))[0] + 8 * px
    out = []
    for layer, y in zip(order, ys):
        x0, y0 = at[layer]
        note = ax.annotate(f"L{layer}", xy=ends[layer], xycoords="data",
                           xytext=((column - x0) / px, (y - y0) / px), textcoords="offset points",
                           fontsize=fontsize, color=colours.get(layer, "black"), va="center", ha="left",
                           arrowprops=dict(arrowstyle="-", color=colours.get(layer, "0.5"), lw=0.5, alpha=0.6,
                                           ls=(0, (2, 1)), shrinkA=0, shrinkB=1))
        note.layer = layer
        out.append(note)
    return out
