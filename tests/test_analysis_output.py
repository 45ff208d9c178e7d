"""What `ckptgeo analyze` writes and prints, as a new reader meets it (issue 14)."""

from __future__ import annotations

import re

import pandas as pd
import pytest

from ckptgeo.analysis import analyze
from ckptgeo.cli import main
from ckptgeo.errors import DatasetLayoutError
from tests.test_analysis import _acc, _easy, _hard, _write_dataset


@pytest.fixture
def small(tmp_path):
    return _write_dataset(tmp_path / "ds", [("toy-2x16", "copy-L1", 0.1, _acc(20), _easy(2, 3.0), {}),
                                            ("toy-2x16", "sort-L2", 0.1, _acc(50), _hard(2, 4.0), {})])


def test_out_refuses_a_folder_of_other_files_and_leaves_it_untouched(small, tmp_path, capsys):
    mine = tmp_path / "notes"
    mine.mkdir()
    (mine / "report.md").write_text("my own report\n")
    assert main(["analyze", str(small), "--out", str(mine), "--no-plots"]) == 6   # DatasetLayoutError
    err = capsys.readouterr().err
    assert f"--out {mine} is not empty and is neither a ckptgeo dataset" in err and "report.md" in err
    assert [p.name for p in mine.iterdir()] == ["report.md"] and (mine / "report.md").read_text() == "my own report\n"
    with pytest.raises(DatasetLayoutError, match="is a file"):
        analyze(small, out=mine / "report.md")


def test_out_accepts_new_empty_earlier_analysis_and_dataset_folders(small, tmp_path):
    new = tmp_path / "new"
    assert main(["analyze", str(small), "--out", str(new), "--no-plots"]) == 0
    assert (new / "report.md").is_file() and (new / "events" / "events.parquet").is_file()
    assert main(["analyze", str(small), "--out", str(new), "--no-plots", "--window", "2"]) == 0   # again: an analysis
    assert pd.read_parquet(new / "summary" / "acquisitions.parquet")["window"].tolist() == [2, 2]
    (tmp_path / "empty" / ".hidden").mkdir(parents=True)
    assert main(["analyze", str(small), "--out", str(tmp_path / "empty"), "--no-plots"]) == 0
    assert main(["analyze", str(small), "--no-plots"]) == 0      # default: into the dataset itself


def _two_settings(tmp_path):
    """One model and suite scanned twice: uncentred (config hash g1) and centred (g2) RankMe."""
    import json

    root = _write_dataset(tmp_path / "two", [("toy-2x16", "sort-L2", 0.1, _acc(50), _hard(2, 4.0), {})])
    g = pd.concat([pd.read_parquet(p) for p in sorted((root / "geometry").glob("*.parquet"))])
    g.assign(config_hash="g2", centered=True).to_parquet(root / "geometry" / "part-c.parquet")
    (root / "runs").mkdir()
    for chash, centered in (("g1", False), ("g2", True)):
        (root / "runs" / f"{chash}.json").write_text(json.dumps(
            {"centered": centered, "n_samples": 200, "seed": 0, "metrics": {"rankme": {"centered": centered}},
             "source": "toy", "ckptgeo_version": "0.1.0"}))
    return root


def test_console_says_what_tells_rows_apart_explains_headers_and_matches_the_report(tmp_path, capsys):
    root = _two_settings(tmp_path)
    assert main(["analyze", str(root), "--no-plots"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    header = lines[0].split()
    assert header == ["model", "suite", "run", "metric", "layer", "acq", "acc_at_acq", "collapse", "floor", "onset", "half_onset",
                      "gap", "gap_ck", "gap_range", "res", "status"]
    rows = [ln for ln in lines[1:] if ln.startswith("toy-2x16")]
    assert len(rows) == 2 and "centered=False" in rows[0] and "centered=True" in rows[1]
    legend = out.split("\n\n")[1]
    for name in header:                                          # every header explained
        assert re.search(rf"(^|[ ,;]){name}[,:]", legend, re.M), name
    report = (root / "report.md").read_text()
    assert "| " + " | ".join(header) + " |" in report            # the same columns, same headers
    md_rows = [[c.strip() for c in ln.strip("|").split("|")] for ln in report.splitlines()
               if ln.startswith("| toy-2x16 | sort-L2 | centered=")]
    assert len(md_rows) == 2

    def same(a, b):
        if {a, b} <= {"-", "–"}:
            return True
        try:
            return float(a) == pytest.approx(float(b))
        except ValueError:
            return a == b

    for row, md in zip(rows, md_rows):                           # the same values
        cells = row.split()
        assert len(cells) == len(md) == len(header) and all(map(same, cells, md)), (cells, md)


def test_one_setting_has_no_run_column(small, capsys):
    assert main(["analyze", str(small), "--no-plots"]) == 0
    assert capsys.readouterr().out.splitlines()[0].split()[:3] == ["model", "suite", "metric"]


def test_across_sizes_pairs_only_one_task_at_two_sizes(tmp_path):
    root = _write_dataset(tmp_path / "ds", [("copy-2x16", "copy-L1", 0.1, _acc(20), _easy(2, 3.0), {}),
                                            ("sort-2x16", "sort-L2", 0.1, _acc(50), _hard(2, 4.0), {}),
                                            ("copy-4x32", "copy-L1", 0.1, _acc(30), _easy(4, 5.0), {})])
    a = analyze(root).across_sizes
    assert set(zip(a.model_small, a.model_large)) == {("copy-2x16", "copy-4x32")}
    acq = a.set_index("quantity").loc["acquisition_step"]
    assert (acq.suites, acq.n_suites, acq.value_small, acq.value_large) == ("copy-L1", 1, 20.0, 30.0)
    assert a.set_index("quantity").loc["collapse_floor", ["value_small", "value_large"]].tolist() == [3.0, 5.0]


def test_across_sizes_says_so_when_nothing_compares(small):
    from ckptgeo.analysis.report import write_report

    res = analyze(small)        # copy-L1 and sort-L2 on one model: two tasks, one size
    assert res.across_sizes.empty
    text = write_report(small, analysis=res, plots=False).read_text()
    assert "_No two runs of the same task at different model sizes in this dataset: nothing to compare._" in text


def test_figures_never_acquired_probe_vs_control_plain_ticks_constant_layer(tmp_path):
    from ckptgeo.analysis.figures import constant_layers, gap_marks, plot_all
    from ckptgeo.analysis.plotting import figure, log_x
    from ckptgeo.events.curves import summary_rows
    from tests.test_analysis import _probe_rows

    probes = (_probe_rows("toy-4x32", "sort-L2", 2, [0.5, 0.5, 0.6, 0.7, 0.8, 0.9, 0.9, 0.9, 0.9, 0.9])
              + _probe_rows("toy-4x32", "sort-L2", 1, [0.5] * 10))
    root = _write_dataset(tmp_path / "ds", [("toy-4x32", "sort-L2", 0.1, _acc(50), _hard(4, 4.0), {}),
                                            ("toy-4x32", "copy-L1", 0.1, _acc(None), _easy(4, 3.0), {}),
                                            ("toy-4x32", "parity-L1", 0.1, _acc(0), _easy(4, 3.0), {})],
                          probes=probes)
    res = analyze(root)
    e = summary_rows(res.events)
    marks = gap_marks(e[e.metric == "rankme"], ["toy-4x32"], ["copy-L1", "parity-L1", "sort-L2"])
    assert [(s, k) for k in marks for _, s, _ in marks[k]] == [
        ("sort-L2", "unresolved"), ("copy-L1", "never_acquired"), ("parity-L1", "no_gap")]   # unresolved: not a gap
    written = {p.name for p in plot_all(res)}
    assert {"toy-4x32__sort-L2__probe.png", "toy-4x32__sort-L2__rankme.png", "gaps.png"} <= written
    assert "toy-4x32__copy-L1__probe.png" not in written                             # not probed
    # layer 0 of these curves is 1.0 at every step: found constant, drawn as such
    rk = res.curves[(res.curves.metric == "rankme") & (res.curves.suite == "sort-L2")]
    assert constant_layers(rk) == {0}
    ax = figure().add_subplot(1, 1, 1)
    ax.plot([0, 1, 10, 1000], [1, 2, 3, 4])
    log_x(ax, [0, 1, 10, 1000])
    fmt = ax.xaxis.get_major_formatter()
    assert ax.get_xscale() == "symlog" and [fmt(v, 0) for v in (1, 10, 1000, 100000)] == ["1", "10", "1,000",
                                                                                           "100,000"]


def test_report_acquisitions_name_the_settings_of_each_run(tmp_path):
    import json

    from ckptgeo.analysis.report import write_report
    from tests.test_analysis import _COMMON, STEPS

    acc = _acc(70)
    extra = [dict(model="toy-2x16", revision=f"step{s}", step=s, suite="sort-L2", **{**_COMMON, "n_samples": 50},
                  config_hash="b2", metric="accuracy", value=acc[i], n_items=50, chance=0.1, kind="generation")
             for i, s in enumerate(STEPS)]
    root = _write_dataset(tmp_path / "ds", [("toy-2x16", "sort-L2", 0.1, _acc(50), _hard(2, 4.0), {})],
                          extra_behavior=extra)
    (root / "runs").mkdir()
    for chash, n in (("b1", 200), ("b2", 50)):
        (root / "runs" / f"{chash}.json").write_text(json.dumps({"n_samples": n, "seed": 0}))
    text = write_report(root, plots=False).read_text()
    assert "| toy-2x16 | sort-L2 | n_samples=200 | sort | L2 | 10 | 50 | acquired |" in text
    assert "| toy-2x16 | sort-L2 | n_samples=50 | sort | L2 | 10 | 70 | acquired |" in text


def test_run_labels_name_settings_not_how_or_from_where_a_run_ran():
    from ckptgeo.analysis.view import run_labels

    runs = {"b1": {"n_samples": 200, "seed": 0, "source": "org/m", "runtime": {"threads": 1, "batch_sizes": [16]},
                   "planned": {"m": ["step0"]}},
            "b2": {"n_samples": 50, "seed": 0, "source": "org/m", "runtime": {"threads": 2, "batch_sizes": [32]},
                   "planned": {"m": ["step0", "step1"]}}}
    assert run_labels(["b1", "b2"], runs) == {"b1": "n_samples=200", "b2": "n_samples=50"}
    # runs that differ only in how they ran are named by their hashes
    same = {h: {**r, "n_samples": 50} for h, r in runs.items()}
    assert run_labels(["b1", "b2"], same) == {"b1": "b1", "b2": "b2"}
