"""analyze(), figures and report on synthetic datasets written with pandas.to_parquet."""

from __future__ import annotations

import argparse
import math

import pandas as pd
import pytest

from ckptgeo.analysis import analyze
from ckptgeo.cli.analyze import add_parser as add_analyze_parser
from ckptgeo.errors import DatasetLayoutError, InvalidParameterError

STEPS = [0, 10, 20, 30, 40, 50, 60, 70, 80, 90]
NEVER = [0.0, 0.0, 0.1, 0.1, 0.2, 0.2, 0.3, 0.3, 0.3, 0.3]


def _acc(acquire_at: int | None) -> list[float]:
    if acquire_at is None:
        return list(NEVER)
    return [0.9 if s >= acquire_at else 0.05 for s in STEPS]


def _hard(n_layers: int, floor: float, recover_at: int = 60) -> dict[int, list[float]]:
    """Layer k reaches its floor at step 10 * (n_layers + 1 - k) (deeper first), recovers at ``recover_at``."""
    out = {0: [1.0] * len(STEPS)}
    for k in range(1, n_layers + 1):
        onset = 10 * (n_layers + 1 - k)
        vals = [20.0 if s < onset else floor for s in STEPS if s < recover_at]
        out[k] = vals + [10.0, 15.0, 18.0, 19.0, 19.0, 19.0][:len(STEPS) - len(vals)]
    return out


def _easy(n_layers: int, floor: float) -> dict[int, list[float]]:
    """Every layer collapses at step 10 and is back at 15 by step 20."""
    return {0: [1.0] * len(STEPS), **{k: [20.0, floor, 15.0, 18, 19, 19, 19, 19, 19, 19]
                                         for k in range(1, n_layers + 1)}}


_COMMON = dict(commit="0" * 40, tokens=None, ckptgeo_version="0.1.0", n_samples=200, position="last",
               centered=False, dtype="float64", epsilon=1e-7, seed=0)


def _write_dataset(root, curves, *, probes=None, extra_geometry=(), extra_behavior=(), revisions=None):
    """curves: list of (model, suite, chance, accuracy list, {layer: rankme list}, {metric: (layer, index, values)})."""
    geo, beh = [], []
    for model, suite, chance, acc, rank, others in curves:
        for i, step in enumerate(STEPS):
            row = dict(model=model, revision=f"step{step}", step=step, suite=suite, **_COMMON)
            beh.append(row | dict(config_hash="b1", metric="accuracy", value=acc[i], n_items=200, chance=chance,
                                  kind="generation"))
            for layer, vals in rank.items():
                geo.append(row | dict(config_hash="g1", layer=layer, metric="rankme", index=None, value=vals[i],
                                      reason=None, settings="{}", seconds=0.01))
            for metric, series in others.items():
                for layer, index, vals in series:
                    geo.append(row | dict(config_hash="g1", layer=layer, metric=metric, index=index, value=vals[i],
                                          reason=None, settings="{}", seconds=0.01))
    geo += list(extra_geometry)
    beh += list(extra_behavior)
    (root / "geometry").mkdir(parents=True)
    (root / "behavior").mkdir()
    half = len(geo) // 2  # two parts, as the engine writes one per revision
    pd.DataFrame(geo[:half]).to_parquet(root / "geometry" / "part-a.parquet")
    pd.DataFrame(geo[half:]).to_parquet(root / "geometry" / "part-b.parquet")
    pd.DataFrame(beh).to_parquet(root / "behavior" / "part.parquet")
    if probes is not None:
        (root / "probes").mkdir()
        pd.DataFrame(probes).to_parquet(root / "probes" / "part.parquet")
    if revisions is not None:
        (root / "revisions").mkdir()
        pd.DataFrame(revisions).to_parquet(root / "revisions" / "part.parquet")
    return root


def _probe_rows(model, suite, layer, accs):
    return [dict(model=model, revision=f"step{s}", step=s, suite=suite, config_hash="p1", layer=layer,
                 accuracy=a, accuracy_std=0.01, chance=0.5, control_accuracy=0.5, n=200, k=5, reason=None, **_COMMON)
            for s, a in zip(STEPS, accs)]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("ds")
    llc = [1, 1, 1, 1, 2, 5, 9, 10, 10, 10]
    hess0 = [1, 1, 1, 1, 1, 1, 3, 9, 9, 9]     # top eigenvalue: departs at step 60
    hess1 = [1, 5, 9, 9, 9, 9, 9, 9, 9, 9]     # second eigenvalue: would give step 10
    curves = [
        ("toy-4x32", "modular-L3", 0.01, _acc(70), _hard(4, 2.0, recover_at=50),
         {"llc": [(-1, None, llc)], "hessian": [(-1, 0, hess0), (-1, 1, hess1)]}),
        ("toy-4x32", "copy-L1", 0.1, _acc(20), _easy(4, 3.0), {}),
        ("toy-4x32", "sort-L2", 0.1, _acc(50), _hard(4, 4.0), {}),
        ("toy-4x32", "parity-L1", 0.5, [0.5, 0.6, 0.6, 0.6, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8],
         {0: [1.0] * 10, 1: [5.0] * 10, 2: [5.0 + i for i in range(10)], 3: [5.0] * 10, 4: [6.0] * 10}, {}),
        ("toy-2x16", "modular-L3", 0.01, _acc(None), _hard(2, 2.2), {}),
        ("toy-2x16", "copy-L1", 0.1, _acc(20), _easy(2, 3.1), {}),
        ("toy-2x16", "sort-L2", 0.1, _acc(50), _hard(2, 4.5), {}),
    ]
    # a revision flagged duplicate at step 45: were it kept, RankMe 100 would move recovery to step 45
    dup = dict(model="toy-4x32", revision="step45-dup", step=45, suite="modular-L3", **_COMMON)
    extra_geo = [dup | dict(config_hash="g1", layer=k, metric="rankme", index=None, value=100.0, reason=None,
                            settings="{}", seconds=0.0) for k in range(5)]
    extra_beh = [dup | dict(config_hash="b1", metric="accuracy", value=1.0, n_items=200, chance=0.01,
                            kind="generation")]
    revisions = [dict(model="toy-4x32", revision="step45-dup", step=45, status="duplicate", error=None,
                      duplicate_of="step40"),
                 dict(model="toy-4x32", revision="step40", step=40, status="ok", error=None, duplicate_of=None)]
    probes = (_probe_rows("toy-4x32", "modular-L3", 2, [0.5, 0.5, 0.5, 0.55, 0.65, 0.8, 0.9, 0.9, 0.9, 0.9])
              + _probe_rows("toy-4x32", "modular-L3", 1, [0.5] * 10))
    _write_dataset(root, curves, probes=probes, extra_geometry=extra_geo, extra_behavior=extra_beh,
                   revisions=revisions)
    return root


@pytest.fixture(scope="module")
def result(dataset):
    return analyze(dataset)


def _event(res, model, suite, metric="rankme", layer=None):
    e = res.events
    e = e[(e["model"] == model) & (e["suite"] == suite) & (e["metric"] == metric)]
    layer = e["layer"].max() if layer is None else layer
    rows = e[e["layer"] == layer]
    assert len(rows) == 1, rows
    return rows.iloc[0]


def test_hard_task_is_a_precursor_with_exact_gap(result):
    r = _event(result, "toy-4x32", "modular-L3")
    assert (r["layer"], r["acquisition_step"], r["collapse_step"], r["collapse_floor"]) == (4, 70, 10, 2.0)
    # duplicate revision step45 excluded: recovery at 50, not 45; two checkpoints before acquisition: resolved
    assert (r["onset_step"], r["gap_steps"], r["resolution_steps"], r["status"]) == (50, 20, 10, "precursor")
    assert (r["gap_checkpoints"], r["gap_low_steps"], r["gap_high_steps"]) == (2, 10, 30)
    assert (r["acquisition_spacing_before"], r["acquisition_spacing_after"], r["onset_spacing_after"]) == (10, 10, 10)
    assert bool(r["precursor"]) and r["difficulty"] == "L3" and r["task"] == "modular"
    assert (r["acc_threshold"], r["window"], r["recovery"], r["min_drop"]) == (0.5, 3, 0.1, 0.25)
    assert r["collapse_onset_step"] == 10 and r["collapse_drop_fraction"] == pytest.approx(0.9)
    # accuracy 0.9 of 200 items at acquisition: Wilson interval
    assert (r["acc_at_acquisition"], r["n_items"]) == (0.9, 200)
    assert r["acc_low"] == pytest.approx(0.8506, abs=1e-3) and r["acc_high"] == pytest.approx(0.9346, abs=1e-3)
    # accuracy's own onset (10% of the way from chance 0.01 to 0.9) is the jump at 70 too
    assert (r["acc_onset_step"], r["gap_acc_onset_steps"], r["status_acc_onset"]) == (70, 20, "precursor")
    l1 = _event(result, "toy-4x32", "modular-L3", layer=1)
    assert (l1["collapse_step"], l1["collapse_onset_step"], l1["onset_step"]) == (40, 40, 50)
    assert pd.isna(l1["iid_fpr"])  # the noise null runs on the summary layer only


def test_easy_task_synchronous_and_lagging(result):
    r = _event(result, "toy-4x32", "copy-L1")
    assert (r["acquisition_step"], r["collapse_step"], r["onset_step"], r["gap_steps"], r["status"]) == \
        (20, 10, 20, 0, "synchronous")
    r = _event(result, "toy-4x32", "sort-L2")
    # the recovery one checkpoint after acquisition: within one spacing, unresolved (was "lagging")
    assert (r["acquisition_step"], r["onset_step"], r["gap_steps"], r["status"]) == (50, 60, -10, "unresolved")


def test_never_acquired_and_chance_aware(result):
    r = _event(result, "toy-2x16", "modular-L3")
    assert (r["status"], pd.isna(r["acquisition_step"]), r["collapse_step"], r["onset_step"]) == \
        ("never_acquired", True, 10, 60)
    p = _event(result, "toy-4x32", "parity-L1")
    # chance 0.5 -> threshold 0.75 -> acquisition at step 40; RankMe never falls -> no onset
    assert (p["acc_threshold"], p["chance"], p["acquisition_step"], p["status"]) == (0.75, 0.5, 40, "no_onset")
    assert pd.isna(p["collapse_step"])


def test_whole_model_measures_use_onset_of_change(result):
    llc = _event(result, "toy-4x32", "modular-L3", metric="llc")
    # departure before step 70 is 8 (at step 60); 10 % = 0.8: step 40 (+1) is first
    assert (llc["layer"], llc["onset_kind"], llc["onset_step"], llc["gap_steps"]) == (-1, "change", 40, 30)
    h = _event(result, "toy-4x32", "modular-L3", metric="hessian")
    # index 0 (top eigenvalue), not index 1; one checkpoint before acquisition: unresolved
    assert (h["onset_step"], h["gap_steps"], h["status"]) == (60, 10, "unresolved")


def test_top_down_sign(result):
    td = result.top_down.set_index(["model", "suite"])
    big = td.loc[("toy-4x32", "modular-L3")]
    assert big["onsets"] == "L1:40 L2:30 L3:20 L4:10"
    assert big["spearman_rho"] == pytest.approx(-1.0)
    assert big["n_layers"] == 4  # layer 0 excluded
    # Kendall over the blocks L1..L3 (L4, after the final norm, apart): tau -1, but 3! = 6 orders give an exact
    # two-sided p of 2/6, so three blocks cannot show a direction (issue 19: two layers gave "top-down" always)
    assert (big["n_blocks_tested"], big["kendall_tau"], big["kendall_exact"]) == (3, -1.0, True)
    assert big["kendall_p"] == pytest.approx(1 / 3) and big["direction"] == "not_significant"
    assert (big["final_norm_layer"], big["final_norm_onset_step"]) == (4, 10)
    easy = td.loc[("toy-4x32", "copy-L1")]
    assert math.isnan(easy["spearman_rho"]) and easy["direction"] == "simultaneous"
    assert td.loc[("toy-2x16", "copy-L1"), "direction"] == "undetermined"  # one block


def test_probe_lead(result):
    pl = result.probe_lead.set_index("layer")
    assert (pl.loc[2, "probe_step"], pl.loc[2, "acquisition_step"], pl.loc[2, "lead_steps"]) == (40, 70, 30)
    assert bool(pl.loc[2, "leads"]) and pl.loc[2, "status"] == "leads"
    assert pd.isna(pl.loc[1, "probe_step"]) and pl.loc[1, "status"] == "no_probe_onset"


def test_probe_lead_needs_chance_control_and_significance(tmp_path):
    """The onset beats max(chance, control) by the margin with p < alpha; an undefined probe is "not measured"."""
    def rows(layer, accs, ctl, chance, pvals, reason=None):
        return [dict(model="toy-2x16", revision=f"step{s}", step=s, suite="modular-L1", config_hash="p1",
                     layer=layer, accuracy=a, accuracy_std=0.01, chance=chance, control_accuracy=c, n=200, k=5,
                     reason=reason, p_value=pv, **_COMMON) for s, a, c, pv in zip(STEPS, accs, ctl, pvals)]

    nan = float("nan")
    probes = (
        # the case: control below chance (0.17 < 0.28); a probe at 0.3 beats the control by 0.13 only
        rows(0, [0.3] * 10, [0.17] * 10, 0.28, [0.4] * 10)
        # beats chance by the margin from step 20, significantly only from step 40
        + rows(1, [0.3, 0.3, 0.45, 0.45, 0.5, 0.6, 0.9, 0.9, 0.9, 0.9], [0.2] * 10, 0.28,
               [0.5, 0.5, 0.2, 0.1, 0.01, 0.01, 0.001, 0.001, 0.001, 0.001])
        # every checkpoint undefined (97 classes over 200 items)
        + rows(2, [nan] * 10, [nan] * 10, 0.02, [nan] * 10, reason="class 5 has a single member")
        # readable at the first checkpoint already (the inputs carry the label): no rise, so no lead
        + rows(3, [0.8] * 10, [0.2] * 10, 0.28, [0.001] * 10))
    root = _write_dataset(tmp_path / "ds", [("toy-2x16", "modular-L1", 0.01, _acc(70), _easy(2, 3.0), {})],
                          probes=probes)
    pl = analyze(root).probe_lead.set_index("layer")
    assert pl.loc[0, "status"] == "no_probe_onset" and pd.isna(pl.loc[0, "probe_step"])
    assert (pl.loc[1, "probe_step"], pl.loc[1, "lead_steps"], pl.loc[1, "status"]) == (40, 30, "leads")
    assert pl.loc[1, "p_value_at_onset"] == pytest.approx(0.01) and pl.loc[1, "probe_alpha"] == 0.05
    assert pl.loc[2, "status"] == "not_measured" and "single member" in pl.loc[2, "reason"]
    assert (pl.loc[3, "probe_step"], pl.loc[3, "status"], bool(pl.loc[3, "leads"])) == (0, "readable_at_start", False)
    strict = analyze(root, probe_alpha=0.005, write=False).probe_lead.set_index("layer")
    assert strict.loc[1, "probe_step"] == 60


def test_precursor_rates(result):
    r = result.precursor_rates
    r = r[r["metric"] == "rankme"].set_index("difficulty")
    assert (r.loc["L3", "n_counted"], r.loc["L3", "n_precursor"], r.loc["L3", "precursor_rate"]) == (1, 1, 1.0)
    assert r.loc["L3", "n_never_acquired"] == 1 and r.loc["L3", "median_gap_steps"] == 20.0
    # 1 of 1 with its Wilson interval, and no test: a single run has nothing to permute against
    assert r.loc["L3", "rate_low"] == pytest.approx(0.2065, abs=1e-3) and r.loc["L3", "rate_high"] == 1.0
    assert r.loc["L3", "verdict"] == "too_few_runs" and math.isnan(r.loc["L3", "p_value"])
    # L1: copy (2 models, synchronous) + parity (no onset) -> 0 of 3; L2: sort unresolved in both -> 0 of 2
    assert (r.loc["L1", "n_counted"], r.loc["L1", "precursor_rate"]) == (3, 0.0)
    assert (r.loc["L2", "n_counted"], r.loc["L2", "precursor_rate"]) == (2, 0.0)
    bm = result.precursor_rates_by_model
    row = bm[(bm["model"] == "toy-4x32") & (bm["metric"] == "rankme") & (bm["difficulty"] == "L3")].iloc[0]
    assert row["precursor_rate"] == 1.0 and row["size"] == 12 * 4 * 32 ** 2


def test_across_sizes(result):
    a = result.across_sizes.set_index("quantity")
    floors = a.loc["collapse_floor"]
    assert (floors["model_small"], floors["model_large"], floors["n_suites"]) == ("toy-2x16", "toy-4x32", 3)
    assert floors["spearman_rho"] == pytest.approx(1.0)
    acq = a.loc["acquisition_step"]  # small never acquires modular: ranked last, as modular is last in large
    assert acq["n_suites"] == 3 and acq["spearman_rho"] == pytest.approx(1.0)
    # the same order in 3 suites: Kendall tau 1, but an exact permutation p of 2/6 (3! orders): no evidence yet
    assert (acq["kendall_tau"], acq["kendall_p"], acq["n_tied"]) == (1.0, pytest.approx(1 / 3), 0)


def test_tables_written_and_readable(result, dataset):
    ev = pd.read_parquet(dataset / "events")
    assert len(ev) == len(result.events) == 31  # 4 suites x 5 layers + llc + hessian; 3 suites x 3 layers
    hard = ev[(ev["model"] == "toy-4x32") & (ev["suite"] == "modular-L3") & (ev["metric"] == "rankme")]
    assert sorted(hard["layer"]) == [0, 1, 2, 3, 4] and set(hard.loc[hard["layer"] > 0, "gap_steps"]) == {20}
    for name in ("acquisitions", "precursor_rates", "top_down", "probe_lead", "across_sizes", "seed_spread",
                 "difficulty_slope", "seed_events"):
        assert (dataset / "summary" / f"{name}.parquet").stat().st_size > 0
    assert not [p for p in (dataset / "events").iterdir() if p.name.startswith(".")]  # no temp files left
    acq = result.acquisitions.set_index(["model", "suite"])
    assert acq.loc[("toy-4x32", "modular-L3"), "acquisition_step"] == 70
    assert acq.loc[("toy-2x16", "modular-L3"), "status"] == "never_acquired"


def test_thresholds_recorded(dataset, tmp_path):
    res = analyze(dataset, acc_threshold=0.95, window=2, recovery=0.3, out=tmp_path / "o")
    r = _event(res, "toy-4x32", "modular-L3")
    # accuracy 0.9 never exceeds 0.95 -> never acquired
    assert (r["acc_threshold"], r["window"], r["recovery"], r["status"]) == (0.95, 2, 0.3, "never_acquired")
    assert (tmp_path / "o" / "events" / "events.parquet").is_file()


def test_report_and_figures(tmp_path):
    from ckptgeo.analysis.report import write_report

    curves = [("toy-4x32", "modular-L3", 0.01, _acc(70), _hard(4, 2.0, recover_at=50), {}),
              ("toy-2x16", "copy-L1", 0.1, _acc(20), _easy(2, 3.0), {})]
    root = _write_dataset(tmp_path / "ds", curves)
    report = write_report(root)  # runs analyze() itself
    text = report.read_text()
    assert report == root / "report.md"
    assert "## Top-down propagation" in text and "](figures/gaps.png)" in text
    assert ("| toy-4x32 | modular-L3 | rankme | 4 | 70 | 0.90[0.85,0.93] | 10 | 2 | 50 | 10 | 20 | 2 | 10..30 | 10 "
            "| precursor |") in text
    figs = sorted((root / "figures").glob("*.png"))
    assert [p.name for p in figs] == ["gaps.png", "toy-2x16__copy-L1__heatmap.png", "toy-2x16__copy-L1__rankme.png",
                                      "toy-4x32__modular-L3__heatmap.png", "toy-4x32__modular-L3__rankme.png"]
    for p in figs:
        assert p.stat().st_size > 5000, p
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (root / "events" / "events.parquet").is_file()


def test_seed_spread(tmp_path):
    curves = [
        ("add-2x16-s0", "add-L3", 0.01, _acc(70), _hard(2, 2.0, recover_at=50), {}),   # precursor
        ("add-2x16-s1", "add-L3", 0.01, _acc(60), _hard(2, 2.0), {}),   # synchronous
        ("add-2x16-s2", "add-L3", 0.01, _acc(80), _hard(2, 2.0), {}),   # censored: 80, 90 < window 3
    ]
    res = analyze(_write_dataset(tmp_path / "ds", curves))
    s = res.seed_spread
    s = s[s["metric"] == "rankme"].iloc[0]
    assert (s["base_model"], s["seed_source"], s["n_seeds"]) == ("add-2x16", "model name", 2)
    assert (s["rate_mean"], s["rate_min"], s["rate_max"]) == (0.5, 0.0, 1.0)
    assert s["rate_std"] == pytest.approx(math.sqrt(0.5))
    assert (s["n_counted"], s["n_precursor"], s["pooled_rate"]) == (2, 1, 0.5)
    e = res.seed_events
    e = e[e["metric"] == "rankme"].iloc[0]
    # each event across the three seeds: acquisition 60..70 (80 censored), gap 0..20 steps
    assert (e["n_seeds"], e["seeds"], e["statuses"]) == (3, "0,1,2", "precursor,synchronous,censored")
    assert (e["acquisition_step_min"], e["acquisition_step_max"], e["gap_steps_min"], e["gap_steps_max"]) == \
        (60, 70, 0, 20)


def test_lm_suites_split_early_late(tmp_path):
    curves = [("lm", name, 0.25, _acc(step), _easy(2, 3.0), {})
              for name, step in (("alpha", 20), ("beta", 40), ("gamma", 60), ("delta", None))]
    res = analyze(_write_dataset(tmp_path / "ds", curves), write=False)
    cls = res.acquisitions.set_index("suite")["difficulty"].to_dict()
    assert cls == {"alpha": "early", "beta": "early", "gamma": "late", "delta": "not acquired"}
    res = analyze(tmp_path / "ds", difficulty={"alpha": "hard"}, write=False)
    assert res.acquisitions.set_index("suite").loc["alpha", "difficulty"] == "hard"
    assert not (tmp_path / "ds" / "events").exists()


def test_errors(tmp_path):
    with pytest.raises(DatasetLayoutError, match="does not exist"):
        analyze(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetLayoutError, match="neither a geometry"):
        analyze(tmp_path / "empty")
    (tmp_path / "study" / "dataset").mkdir(parents=True)    # a study folder: the error names its dataset/
    with pytest.raises(DatasetLayoutError, match=r"study folder: give .*study/dataset"):
        analyze(tmp_path / "study")
    with pytest.raises(InvalidParameterError, match="window"):
        analyze(tmp_path / "empty", window=0)
    (tmp_path / "bad" / "geometry").mkdir(parents=True)
    pd.DataFrame({"model": ["m"], "step": [0]}).to_parquet(tmp_path / "bad" / "geometry" / "p.parquet")
    with pytest.raises(DatasetLayoutError, match="lacks column"):
        analyze(tmp_path / "bad")


def test_cli_parser(result, dataset, capsys):
    parser = argparse.ArgumentParser(prog="ckptgeo")
    sub = parser.add_subparsers()
    add_analyze_parser(sub)
    args = parser.parse_args(["analyze", str(dataset), "--no-plots", "--window", "3"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "modular-L3" in out and "precursor" in out and "report.md" in out
    line = next(l for l in out.splitlines() if "toy-4x32" in l and "modular-L3" in l and "rankme" in l)
    assert line.split()[-1] == "precursor" and " 70 " in line


def test_geometry_without_behavior_and_behavior_without_geometry(tmp_path):
    from ckptgeo.analysis.report import write_report

    root = _write_dataset(tmp_path / "ds", [("toy-2x16", "copy-L1", 0.1, _acc(20), _easy(2, 3.0), {})])
    import shutil

    shutil.rmtree(root / "behavior")
    res = analyze(root)
    assert set(res.events["status"]) == {"no_data"} and set(res.events["difficulty"]) == {"unclassified"}
    assert res.acquisitions.empty and write_report(root, analysis=res, plots=False).is_file()

    root2 = _write_dataset(tmp_path / "ds2", [("toy-2x16", "copy-L1", 0.1, _acc(20), _easy(2, 3.0), {})])
    shutil.rmtree(root2 / "geometry")
    res = analyze(root2)
    assert res.events.empty and res.acquisitions["acquisition_step"].tolist() == [20]
    assert "_(none)_" in write_report(root2, analysis=res).read_text()


def test_the_console_in_tokens_gives_spacing_and_gap_range_in_tokens_and_the_acquisition_interval(dataset, tmp_path,
                                                                                                  capsys):
    """--x tokens: res and gap_range in tokens too (they were '-' and steps), and acc_at_acq with its interval."""
    import shutil

    from ckptgeo.cli import main

    root = tmp_path / "ds"
    shutil.copytree(dataset, root)
    for table in ("geometry", "behavior"):
        for part in (root / table).glob("*.parquet"):   # a stage that starts at 5,000 tokens, 1,000 a step
            df = pd.read_parquet(part)
            df.assign(tokens=5000 + 1000 * df["step"]).to_parquet(part)
    assert main(["analyze", str(root), "--x", "tokens", "--no-plots", "--noise-curves", "0",
                 "--n-permutations", "9", "--out", str(tmp_path / "an")]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    header = next(line.split() for line in lines if line.split()[:3] == ["model", "suite", "metric"])
    row = next(line.split() for line in lines if line.startswith("toy-4x32") and " modular-L3 " in line
               and " rankme " in line)
    cells = dict(zip(header, row))
    e = analyze(root, write=False, n_noise_curves=0, n_permutations=9).events
    e = e[(e.model == "toy-4x32") & (e.suite == "modular-L3") & (e.metric == "rankme")]
    e = e[e.layer == e.layer.max()].iloc[0]
    assert cells["acq"] == str(5000 + 1000 * int(e.acquisition_step))
    assert cells["res"] == str(1000 * int(e.resolution_steps)) != "-"
    assert cells["gap_range"] == f"{1000 * int(e.gap_low_steps)}..{1000 * int(e.gap_high_steps)}"
    assert cells["acc_at_acq"].startswith("0.90[") and cells["acc_at_acq"].endswith("]")
    lo, hi = (float(x) for x in cells["acc_at_acq"][5:-1].split(","))
    assert lo < 0.9 < hi and (lo, hi) == (round(e.acc_low, 2), round(e.acc_high, 2))


def test_a_hand_run_analyze_uses_the_difficulty_the_dataset_records(tmp_path, capsys):
    """`ckptgeo demo` records hard/easy (the studies' rule) in difficulty.json; a later `ckptgeo analyze` of that
    dataset labels the same (before: copy-L1 and addition-L1 both "L1", by level); --difficulty overrides."""
    from ckptgeo.cli import main
    from ckptgeo.store.dataset import Dataset, read_difficulty

    ds = Dataset(tmp_path / "ds")
    _write_dataset(ds.root, [("toy-2x16", "copy-L1", 0.1, _acc(20), _easy(2, 3.0), {}),
                             ("toy-2x16", "addition-L1", 0.1, _acc(70), _hard(2, 2.0), {})])
    assert set(analyze(ds.root, write=False).acquisitions.difficulty) == {"L1"}   # nothing recorded: by level
    ds.record_difficulty({"copy-L1": "easy", "addition-L1": "hard"})
    assert read_difficulty(ds.root) == {"addition-L1": "hard", "copy-L1": "easy"}
    assert main(["analyze", str(ds.root), "--no-plots"]) == 0
    events = pd.read_parquet(ds.root / "events")
    assert events.groupby("suite").difficulty.unique().map(list).to_dict() == {"addition-L1": ["hard"],
                                                                                "copy-L1": ["easy"]}
    rates = pd.read_parquet(ds.root / "summary" / "precursor_rates.parquet")
    assert set(rates.difficulty) == {"easy", "hard"}
    capsys.readouterr()
    assert main(["analyze", str(ds.root), "--no-plots", "--difficulty", "copy-L1=L1"]) == 0
    events = pd.read_parquet(ds.root / "events")
    assert dict(zip(events.suite, events.difficulty)) == {"copy-L1": "L1", "addition-L1": "hard"}
    with pytest.raises(SystemExit) as exc:
        main(["analyze", str(ds.root), "--difficulty", "copy-L1"])
    assert exc.value.code == 2 and "is not SUITE=CLASS" in capsys.readouterr().err


def test_a_difficulty_class_or_suite_that_is_not_one_is_refused_before_any_work(tmp_path, capsys):
    """Issue 45 item 10: `analyze --difficulty logic=hardd` was accepted (a class of its own in every rate table);
    now a class other than easy, hard or L<k>, or a suite the dataset does not hold, is refused with the nearest
    valid name, and nothing is written."""
    from ckptgeo.cli import main
    from ckptgeo.errors import InvalidParameterError
    from ckptgeo.store.dataset import Dataset

    ds = Dataset(tmp_path / "ds")
    _write_dataset(ds.root, [("toy-2x16", "copy-L1", 0.1, _acc(20), _easy(2, 3.0), {})])
    assert main(["analyze", str(ds.root), "--no-plots", "--difficulty", "copy-L1=hardd"]) == 2
    err = capsys.readouterr().err
    assert "'hardd' is not a difficulty class; use easy, hard or L<k> (e.g. L2). Did you mean 'hard'?" in err
    assert not (ds.root / "events").exists() and not (ds.root / "summary").exists()
    with pytest.raises(InvalidParameterError, match="the dataset holds no suite 'copy-L2'; did you mean 'copy-L1'"):
        analyze(ds.root, difficulty={"copy-L2": "hard"}, write=False)
    assert set(analyze(ds.root, difficulty={"copy-L1": "L3"}, write=False).acquisitions.difficulty) == {"L3"}


def test_nothing_to_forecast_when_no_run_acquired(tmp_path, capsys):
    """Issue 45 item 8: on runs of which none acquired, `ckptgeo forecast` printed log scores and suggested a
    --forecast-from that then refused, and analyze wrote an empty forecast figure per run. Now it says there is
    nothing to forecast, suggests no --forecast-from, and writes no forecast figure."""
    from ckptgeo.cli import main
    from ckptgeo.store.dataset import Dataset

    ds = Dataset(tmp_path / "ds")
    _write_dataset(ds.root, [(f"toy-s{k}", "copy-L1", 0.1, _acc(None), _easy(2, 3.0), {}) for k in (1, 2, 3)])
    assert main(["forecast", str(ds.root)]) == 0
    out = capsys.readouterr().out
    assert "forecast: none of the 3 runs acquired" in out and "no acquisition to forecast" in out
    assert "--forecast-from" not in out and "log_score" not in out
    assert not list((ds.root / "figures" / "forecast").glob("*.png"))
    assert main(["analyze", str(ds.root)]) == 0
    assert not list((ds.root / "figures" / "forecast").glob("*.png"))
