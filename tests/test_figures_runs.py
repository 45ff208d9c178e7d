"""Figures a researcher can read and paste, and the one-row-per-run table (issue 25, item 3).

The figures are inspected as drawn: every matplotlib Figure the module creates is kept (``_figure`` is
wrapped, not replaced) and its axes, tick labels, lines and patches are read after drawing.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ckptgeo.analysis import analyze
from ckptgeo.analysis import figures as fig_mod
from ckptgeo.analysis import plotting
from ckptgeo.events.runs import RUNS_COLUMNS, params_text
from tests.test_analysis import _acc, _hard, _probe_rows, _write_dataset

LONG = "an-organisation-with-a-long-name/pythia-2.8b-deduped-with-a-very-long-suffix-s0"


@pytest.fixture
def drawn(monkeypatch):
    figs = []
    real = plotting.figure

    def keep(*args, **kwargs):
        figs.append(real(*args, **kwargs))
        return figs[-1]

    monkeypatch.setattr(plotting, "figure", keep)
    return figs


@pytest.fixture
def ds(tmp_path):
    probes = _probe_rows("toy-2x16-s0", "sort-L2", 2, [0.5, 0.5, 0.5, 0.9, 0.95, 0.95, 0.95, 0.95, 0.95, 0.95])
    return _write_dataset(tmp_path / "ds", [("toy-2x16-s0", "sort-L2", 0.1, _acc(50), _hard(2, 4.0), {}),
                                            ("toy-2x16-s1", "sort-L2", 0.1, _acc(60), _hard(2, 3.0), {}),
                                            (LONG, "sort-L2", 0.1, _acc(50), _hard(2, 4.0), {})], probes=probes)


def _labels(ax):
    return ax.get_legend_handles_labels()[1]


def test_rankme_figure_ticks_events_gap_and_linear_window(ds, tmp_path, drawn):
    a = analyze(ds, write=False)
    assert fig_mod.plot_suite(a, "toy-2x16-s0", "sort-L2", tmp_path / "f.png") is not None
    fig = drawn[-1]
    fig.canvas.draw()
    main = fig.axes[0]
    zoom = next(ax for ax in fig.axes if "linear scale" in ax.get_title())
    lo, hi = main.get_ylim()
    ticks = [t.get_text() for t, v in zip(main.get_yticklabels(), main.get_yticks()) if lo <= v <= hi]
    assert {"1", "2", "5", "10"} <= set(ticks), ticks          # not only "1"
    lines = {ln.get_label(): ln for ln in main.get_lines()}
    assert lines["L2 collapse 10"].get_color() == lines["L2"].get_color(), "the collapse line is its layer's colour"
    assert lines["L2 recovery onset 60"].get_color() == lines["L2"].get_color()
    labels = _labels(main)
    assert "acquisition 50" in labels
    # _hard: layer 2 collapses at 10, recovers at 60, acquired at 50 -> it lags: shaded and said so
    assert any(lab.startswith("recovery lags by 10 steps") for lab in labels), labels
    assert zoom.get_xscale() == "linear" and zoom.get_yscale() == "linear"
    assert zoom.get_xlim()[0] <= 10 and zoom.get_xlim()[1] >= 60


def test_precursor_gap_is_shaded_and_long_titles_wrap(tmp_path, drawn):
    early = {0: [1.0] * 10, 1: [20, 4, 4, 10, 15, 18, 19, 19, 19, 19], 2: [20, 4, 4, 10, 15, 18, 19, 19, 19, 19]}
    root = _write_dataset(tmp_path / "p", [(LONG, "copy-L1", 0.1, _acc(60), early, {})])
    a = analyze(root, write=False)
    fig_mod.plot_suite(a, LONG, "copy-L1", tmp_path / "f.png")
    main = drawn[-1].axes[0]
    assert any(lab.startswith("precursor gap") for lab in _labels(main)), _labels(main)
    assert "\n" in main.get_title() and all(len(line) <= 80 for line in main.get_title().splitlines())


def test_heatmap_probe_and_gaps_figures_mark_events_and_say_sizes_plainly(ds, tmp_path, drawn):
    a = analyze(ds, write=False)
    fig_mod.plot_heatmap(a, "toy-2x16-s0", "sort-L2", tmp_path / "h.png")
    assert {"L2 collapse 10", "acquisition 50"} <= set(_labels(drawn[-1].axes[0]))
    fig_mod.plot_probes(a, "toy-2x16-s0", "sort-L2", tmp_path / "p.png")
    labels = _labels(drawn[-1].axes[0])
    assert "acquisition 50" in labels, labels
    [onset] = [line for line in drawn[-1].axes[0].lines if line.get_label().startswith("probe onset")]
    assert list(onset.get_xdata()) == [3] and list(onset.get_ydata()) == [0]   # step 30's column, L2's row
    fig_mod.plot_gaps(a, tmp_path / "g.png")
    labels = _labels(drawn[-1].axes[0])
    from matplotlib.container import ErrorbarContainer

    whiskers = [c for c in drawn[-1].axes[0].containers if isinstance(c, ErrorbarContainer)]
    spans = {tuple(sorted(np.round(seg[:, 1], 6))) for c in whiskers for seg in c.lines[2][0].get_segments()}
    from ckptgeo.events.curves import summary_rows

    e = summary_rows(a.events)
    e = e[(e.metric == "rankme") & e.gap_steps.notna() & (e.gap_steps != 0)]
    expected = {(float(lo), float(hi)) for lo, hi in zip(e.gap_low_steps, e.gap_high_steps)}
    assert whiskers and expected and spans == expected, (spans, expected)   # the grid interval of each gap bar
    assert f"{LONG} (2.8B params)" in labels and not any("e+0" in lab for lab in labels), labels
    assert params_text(2.8e9) == "2.8B" and params_text(1.6e8) == "160M"


def test_seeds_overlay_and_runs_table(ds, tmp_path, drawn):
    a = analyze(ds)
    written = fig_mod.plot_all(a, tmp_path / "figures")
    assert tmp_path / "figures" / "toy-2x16__sort-L2__seeds.png" in written
    seeds_fig = next(f for f in drawn if "seeds" in f.axes[0].get_title())
    assert any("mean of 2 seeds" in lab for lab in _labels(seeds_fig.axes[0]))
    runs = pd.read_csv(ds / "summary" / "runs.csv")
    assert list(runs.columns) == RUNS_COLUMNS
    row = runs[runs.model == "toy-2x16-s1"].iloc[0]
    assert (row.task, row.level, row.seed, row.measure, row.layer, row.acquisition_step, row.collapse_step, row.floor,
            row.onset_step, row.spacing_steps) == ("sort", 2, 1, "rankme", 2, 60, 10, 3.0, 60, 10)
    assert runs[runs.model == LONG].iloc[0]["size"] == "2.8B"
    tex = (ds / "summary" / "runs.tex").read_text()
    assert tex.startswith("\\begin{tabular}{llrlrlrrrrrrrl}") and "\\toprule" in tex and "toy-2x16-s1 & sort & 2" in tex
    units = tex.splitlines()[3]   # the row of units under the header
    assert "(step)" in units and "(eff. dim.)" in units and "(hidden state)" in units, units


def _deep_dataset(root, n_layers: int):
    """A model of ``n_layers`` blocks (RankMe of layers 0..n, probes of every layer) whose first and last
    revisions (step0, step90) serve the same weights: the analysis leaves both out, at the two ends."""
    from tests.test_analysis import STEPS

    rank = _hard(n_layers, 4.0)
    probes = [row for layer in range(n_layers + 1)
              for row in _probe_rows("deep", "sort-L2", layer, [0.5, 0.5, 0.5] + [0.5 + 0.4 * (layer / n_layers)] * 7)]
    revisions = [dict(model="deep", revision=f"step{s}", step=s, status="ok",
                      weights_sha256="same" if s in (0, 90) else f"sha{s}") for s in STEPS]
    return _write_dataset(root, [("deep", "sort-L2", 0.1, _acc(50), rank, {})], probes=probes, revisions=revisions)


@pytest.mark.parametrize("n_layers", [12, 32])
def test_figures_of_a_deep_model_are_readable_and_mark_left_out_revisions_at_the_ends(tmp_path, drawn, n_layers):
    a = analyze(_deep_dataset(tmp_path / "ds", n_layers), write=False)
    assert sorted(a.left_out.step) == [0, 90]
    fig_mod.plot_suite(a, "deep", "sort-L2", tmp_path / "r.png")
    ax = drawn[-1].axes[0]
    labels = _labels(ax)
    assert not any(lab.startswith("L") and lab[1:].isdigit() for lab in labels), labels   # no entry per layer
    assert len(labels) <= 8, labels
    bar = [x for x in drawn[-1].axes if x.get_ylabel() == "layer (line colour)"]
    assert bar, [x.get_ylabel() for x in drawn[-1].axes]
    marks = sorted(line.get_xdata()[0] for line in ax.lines if line.get_linestyle() != "-"
                   and line.get_color() == "0.55")
    assert marks == [0, 90] and "left out (2 revisions)" in labels   # both ends marked, though no line breaks there
    assert "grey dotted lines" in ax.get_title()
    assert ax.get_xlim()[0] <= 0 and ax.get_xlim()[1] >= 90

    fig_mod.plot_probes(a, "deep", "sort-L2", tmp_path / "p.png")
    fig = drawn[-1]
    images = [x.images[0] for x in fig.axes if x.images]
    assert [im.get_array().shape for im in images] == [(n_layers + 1, 8)] * 2   # layer x analysed checkpoint, 2 panels
    assert len(fig.legends) == 1 and len(fig.legends[0].get_texts()) <= 2
    onset = [line for line in fig.axes[0].lines if line.get_label().startswith("probe onset")]
    assert onset and len(onset[0].get_xdata()) >= n_layers // 2   # one triangle per layer with an onset


@pytest.mark.parametrize("n_layers", [12, 32])
def test_deep_rankme_lines_are_named_at_their_ends_without_overlap(tmp_path, drawn, n_layers):
    """Every block of the deep model ends at RankMe 18 (step 80, the last analysed): the lines end on one point,
    so a colour bar alone cannot tell them apart. Each drawn layer (12 layers), or every k-th from the deepest
    with the summary layer (32 layers: the names would not fit), is named at its end in its line's colour, the
    names spread apart (no two overlap on screen) and inside the axes; the legend stays short."""
    from matplotlib.colors import to_rgba
    from matplotlib.text import Text

    a = analyze(_deep_dataset(tmp_path / "ds", n_layers), write=False)
    fig_mod.plot_suite(a, "deep", "sort-L2", tmp_path / "r.png")
    fig = drawn[-1]
    fig.canvas.draw()
    ax = fig.axes[0]
    assert len(_labels(ax)) <= 8, _labels(ax)
    names = [t for t in ax.texts if getattr(t, "layer", None) is not None]
    layers = [t.layer for t in names]
    assert [t.get_text() for t in names] == [f"L{layer}" for layer in layers]
    drawn_layers = list(range(1, n_layers + 1))   # layer 0 is constant (grey, in the legend as such)
    if n_layers == 12:
        assert sorted(layers) == drawn_layers
    else:
        from ckptgeo.events.curves import summary_rows

        summary = int(summary_rows(a.events[a.events.metric == "rankme"])["layer"].iloc[0])
        assert n_layers in layers and summary in layers and 10 <= len(layers) < n_layers, layers
        steps = np.diff(sorted(set(layers) - {summary}))
        assert len(set(steps)) == 1, layers   # every k-th layer
    deep_lines = [ln for ln in ax.lines if ln.get_linestyle() == "-" and len(ln.get_xdata()) > 2]
    for t in names:   # in its line's colour, its leader from the line's end: step 80 (90 is left out), RankMe 18
        assert any(np.allclose(to_rgba(t.get_color()), to_rgba(ln.get_color())) for ln in deep_lines), t.layer
        assert t.xy == (80.0, 18.0), t.xy
    renderer = fig.canvas.get_renderer()
    boxes = sorted((Text.get_window_extent(t, renderer) for t in names), key=lambda b: b.y0)   # the name, no leader
    for below, above in zip(boxes, boxes[1:]):
        assert above.y0 >= below.y1 - 0.5, (below, above)   # no two names overlap
    axbox = ax.get_window_extent(renderer)
    assert all(axbox.y0 - 1 <= b.y0 and b.y1 <= axbox.y1 + 1 for b in boxes)
    assert all(b.x0 >= ax.transData.transform((80.0, 19.0))[0] for b in boxes)   # right of the lines' ends
    assert all(b.x1 <= axbox.x1 + 1 for b in boxes), "names inside the axes, clear of the accuracy axis' ticks"


def test_spread_keeps_order_and_gap_and_stays_inside():
    from ckptgeo.analysis.plotting import spread

    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(1, 20))
        t = np.sort(rng.uniform(0, 100, n))
        y = spread(t, 4.0, 0.0, 100.0)
        assert (np.diff(y) >= 4.0 - 1e-9).all() and y[0] >= -1e-9 and y[-1] <= 100 + 1e-9, (t, y)
    assert spread([50.0] * 3, 4.0, 0.0, 100.0).tolist() == [46.0, 50.0, 54.0]   # centred on where they end
    assert spread([99.0, 99.5], 4.0, 0.0, 100.0).tolist() == [96.0, 100.0]      # pushed inside at the top


def test_a_narrow_log_axis_has_distinct_tick_labels():
    """A 160m-shaped three_objects RankMe spans 1.9-2.25: every tick of its log axis read "2" (no digits below 1)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ckptgeo.analysis.plotting import log_ticks

    for lo, hi in ((1.9, 2.25), (1.3, 1.9), (1.0, 15.0), (120.0, 180.0)):
        fig, ax = plt.subplots()
        ax.plot([0, 1], [lo, hi])
        ax.set_yscale("log")
        log_ticks(ax.yaxis, [lo, hi])
        fig.canvas.draw()
        lo_v, hi_v = ax.get_ylim()
        labels = [t.get_text() for t, v in zip(ax.get_yticklabels(), ax.get_yticks()) if lo_v <= v <= hi_v]
        plt.close(fig)
        assert len(labels) >= 2 and len(set(labels)) == len(labels), (lo, hi, labels)


def test_a_log_axis_over_a_factor_of_three_labels_at_least_three_ticks():
    """A RankMe figure whose values span about 1 to 3.3 (pythia-2.8b-shaped, 4 layers) labelled only "1" and "2":
    the upper half, where every layer lay, had no label. Now 1, 2, 3 (and 2, 3, 5 for 2 to 9)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ckptgeo.analysis.plotting import log_ticks

    for lo, hi, want in ((1.0, 3.3, ["1", "2", "3"]), (2.0, 9.0, ["2", "3", "5"]), (1.0, 15.0, ["1", "2", "5", "10"])):
        fig, ax = plt.subplots()
        ax.plot([0, 1, 2], [lo, (lo * hi) ** 0.5, hi])
        ax.set_yscale("log")
        log_ticks(ax.yaxis, [lo, hi])
        fig.canvas.draw()
        lo_v, hi_v = ax.get_ylim()
        labels = [t.get_text() for t, v in zip(ax.get_yticklabels(), ax.get_yticks()) if lo_v <= v <= hi_v and t.get_text()]
        plt.close(fig)
        assert labels == want, (lo, hi, labels)
