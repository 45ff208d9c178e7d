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
from ckptgeo.analysis.runs_table import RUNS_COLUMNS, params_text
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
    assert "L2 probe onset 30" in labels and "acquisition 50" in labels, labels
    fig_mod.plot_gaps(a, tmp_path / "g.png")
    labels = _labels(drawn[-1].axes[0])
    from matplotlib.container import ErrorbarContainer

    whiskers = [c for c in drawn[-1].axes[0].containers if isinstance(c, ErrorbarContainer)]
    spans = {tuple(sorted(np.round(seg[:, 1], 6))) for c in whiskers for seg in c.lines[2][0].get_segments()}
    from ckptgeo.analysis.summary_tables import summary_rows

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
    assert (row.task, row.level, row.seed, row.acquisition, row.collapse, row.floor, row.onset, row.spacing) == (
        "sort", 2, 1, 60, 10, 3.0, 60, 10)
    assert runs[runs.model == LONG].iloc[0]["size"] == "2.8B"
    tex = (ds / "summary" / "runs.tex").read_text()
    assert tex.startswith("\\begin{tabular}{llrlrrrrrrrl}") and "\\toprule" in tex and "toy-2x16-s1 & sort & 2" in tex
