"""The forecast's feature sets (task loss, accuracy interval, cross-checkpoint measures) and how it reads a dataset."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from ckptgeo.forecasting.data import CROSS_CURVES, RunCurves, cross_curves, plan_clock, runs_from_tables
from ckptgeo.forecasting.evaluate import ForecastConfig, evaluate
from ckptgeo.forecasting.features import feature_names, null_copy, run_features

STEPS = np.arange(0, 800, 20)   # 40 checkpoints
CFG = ForecastConfig(n_permutations=19, max_horizon=32)


def _run(**kw) -> RunCurves:
    n = kw.pop("n", 6)
    base = dict(key=("m", "copy-L1", "h"), steps=np.arange(n) * 10, accuracy=np.linspace(0.15, 0.55, n),
                n_items=np.full(n, 100.0), chance=0.1, threshold=0.5, window=3)
    return RunCurves(**{**base, **kw})


def _col(feature_set: str, name: str) -> int:
    return feature_names(feature_set).index(name)


def test_the_task_loss_and_its_slope_are_behaviour_features_and_a_run_without_loss_gets_zeros():
    loss = np.array([2.0, np.nan, 1.0, 0.5, 0.5, 0.25])
    run = _run(loss=loss)
    f = run_features(run, "behaviour")
    x = plan_clock(run.steps, run.plan)
    lg, sl, kn = (f[:, _col("behaviour", c)] for c in ("log_loss", "loss_slope", "loss_known"))
    # the last measured loss, carried over the checkpoint not measured (1)
    np.testing.assert_allclose(lg, np.log([2.0, 2.0, 1.0, 0.5, 0.5, 0.25]))
    np.testing.assert_allclose(kn, 1.0)
    # slope of log loss per unit of the clock over the last two checkpoints
    assert sl[0] == 0.0
    assert sl[2] == pytest.approx((math.log(1.0) - math.log(2.0)) / (x[2] - x[0]))
    assert sl[5] == pytest.approx((math.log(0.25) - math.log(0.5)) / (x[5] - x[3]))
    # causal: cutting later checkpoints off changes nothing before the cut
    short = _run(n=4, accuracy=run.accuracy[:4], loss=loss[:4], planned_steps=50)
    np.testing.assert_allclose(run_features(short, "behaviour"), f[:4])
    # a loss first measured at checkpoint 2: unknown (zeros) before it
    late = run_features(_run(loss=np.array([np.nan, np.nan, 1.0, 0.5, 0.5, 0.5])), "behaviour")
    for c in ("loss_known", "log_loss"):
        assert (late[:2, _col("behaviour", c)] == 0).all()
    # no loss curve (a dataset written before the scan recorded it): the three columns are 0, nothing else changes
    none = run_features(_run(), "behaviour")
    assert np.isfinite(none).all()
    for c in ("log_loss", "loss_slope", "loss_known"):
        assert (none[:, _col("behaviour", c)] == 0).all()
    others = [i for i, c in enumerate(feature_names("behaviour")) if "loss" not in c]
    np.testing.assert_allclose(none[:, others], f[:, others])


def test_the_accuracy_interval_is_a_behaviour_feature():
    f = run_features(_run(), "behaviour")
    prog, lo, hi = (f[:, _col("behaviour", c)] for c in ("progress", "progress_low", "progress_high"))
    assert (lo < prog).all() and (prog < hi).all()
    # 95% Wilson interval of 50/100 correct, on the progress scale (chance 0.1, threshold 0.5)
    one = run_features(_run(n=2, accuracy=np.array([0.5, 0.5])), "behaviour")
    assert one[0, _col("behaviour", "progress_low")] == pytest.approx((0.4038 - 0.1) / 0.4, abs=1e-3)
    assert one[0, _col("behaviour", "progress_high")] == pytest.approx((0.5962 - 0.1) / 0.4, abs=1e-3)
    # item count unknown: the interval is the point
    nan = run_features(_run(n_items=np.full(6, np.nan)), "behaviour")
    np.testing.assert_allclose(nan[:, _col("behaviour", "progress_low")], nan[:, _col("behaviour", "progress")])


def _compare_rows() -> pd.DataFrame:
    """A compare table as ckptgeo.metrics.cross.combine writes it: CKA at layers 1 and 2 of suite copy-L1 against
    the previous, first and last revision; the whole model's weight distance (no suite) and one block's."""
    rows = []
    for i, step in enumerate((0, 10, 20)):
        for layer in (1, 2):
            rows.append(dict(model="m", step=step, suite="copy-L1", layer=layer, block=None, metric="cka",
                             against="first", value=1.0 - 0.1 * i * layer, config_hash="h"))
            rows.append(dict(model="m", step=step, suite="copy-L1", layer=layer, block=None, metric="cka",
                             against="reference", value=0.5, config_hash="h"))
            if i:
                rows.append(dict(model="m", step=step, suite="copy-L1", layer=layer, block=None, metric="cka",
                                 against="previous", value=0.9 - 0.01 * layer, config_hash="h"))
        rows.append(dict(model="m", step=step, suite=None, layer=-1, block="model", metric="weight_distance",
                         against="first", value=0.2 * i, config_hash="h"))
        rows.append(dict(model="m", step=step, suite=None, layer=0, block="attn", metric="weight_distance",
                         against="first", value=9.0, config_hash="h"))
    return pd.DataFrame(rows)


def test_cross_checkpoint_measures_are_read_from_the_compare_table_and_are_geometry_features():
    cc = cross_curves(_compare_rows())
    # CKA at the summary (deepest) layer only; partners previous and first; the reference (last) is not causal
    assert set(cc["name"]) == {"cka_first", "cka_previous", "weight_distance_first"}
    steps = np.array([0, 10, 20, 30])
    accuracy = pd.DataFrame({"model": "m", "suite": "copy-L1", "config_hash": "h", "step": steps,
                             "accuracy": [0.1, 0.2, 0.3, 0.4], "chance": 0.1, "n_items": 100.0})
    acq = pd.DataFrame([{"model": "m", "suite": "copy-L1", "config_hash": "h", "acquisition_step": None,
                         "status": "never_acquired", "acc_threshold": 0.5, "chance": 0.1, "window": 3,
                         "task": "copy", "difficulty": "L1"}])
    loss = pd.DataFrame({"model": "m", "suite": "copy-L1", "config_hash": "h", "metric": "loss", "layer": -1,
                         "step": steps, "value": [3.0, 2.0, 1.5, 1.0]})
    (run,) = runs_from_tables(accuracy, loss, acq, _compare_rows())
    np.testing.assert_allclose(run.loss, [3.0, 2.0, 1.5, 1.0])
    np.testing.assert_allclose(run.cross["cka_first"], [1.0, 0.8, 0.6, np.nan])
    np.testing.assert_allclose(run.cross["cka_previous"], [np.nan, 0.88, 0.88, np.nan])
    np.testing.assert_allclose(run.cross["weight_distance_first"], [0.0, 0.2, 0.4, np.nan])
    assert "weight_distance_previous" not in run.cross
    g = run_features(run, "geometry")
    col = {c: g[:, _col("geometry", c)] for c in (*CROSS_CURVES, "cross_known")}
    np.testing.assert_allclose(col["cka_first"], [1.0, 0.8, 0.6, 0.6])   # the last value carried forward
    np.testing.assert_allclose(col["cka_previous"], [0.0, 0.88, 0.88, 0.88])
    np.testing.assert_allclose(col["weight_distance_previous"], 0.0)
    np.testing.assert_allclose(col["cross_known"], 1.0)
    assert not set(CROSS_CURVES) & set(feature_names("behaviour"))
    # a run with no cross-checkpoint measure: five zeros, no error
    (bare,) = runs_from_tables(accuracy, loss, acq, None)
    assert bare.cross == {}
    np.testing.assert_allclose(run_features(bare, "geometry")[:, [_col("geometry", c) for c in col]], 0.0)
    # the null copy replaces them by noise too (they are geometry), and keeps the loss
    (z,) = null_copy([run], seed=0)
    assert not np.allclose(np.nan_to_num(z.cross["cka_first"]), np.nan_to_num(run.cross["cka_first"]))
    assert np.isnan(z.cross["cka_first"][3]) and np.isnan(z.cross["cka_previous"][0])
    np.testing.assert_allclose(z.loss, run.loss)


def _cka_lead_runs(seed: int = 0, lead: int | None = 6) -> list[RunCurves]:
    """8 runs (4 tasks x 2 seeds) whose accuracy jumps from chance at a random checkpoint (10..33) without
    warning; RankMe is flat noise; CKA against the previous checkpoint drops from 0.99 to 0.7 and CKA against the
    first falls by 0.05 per checkpoint from ``lead`` checkpoints before the jump (``None``: from a random one)."""
    rng = np.random.default_rng(seed)
    n, runs = len(STEPS), []
    for t in range(4):
        for s in (1, 2):
            a = int(rng.integers(10, 34))
            acc = np.clip(0.02 + rng.normal(0, 0.01, n), 0, 1)
            acc[a:] = 0.95
            onset = a - lead if lead is not None else int(rng.integers(4, 34))
            since = np.maximum(np.arange(n) - onset, 0)
            prev = np.where(np.arange(n) >= onset, 0.7, 0.99) + rng.normal(0, 0.005, n)
            prev[0] = np.nan
            first = 1.0 - 0.05 * since + rng.normal(0, 0.005, n)
            rankme = {k: 10.0 * np.exp(rng.normal(0, 0.03, n)) for k in (1, 2)}
            runs.append(RunCurves(
                key=(f"t{t}-L1-tiny-s{s}", f"t{t}-L1", "h"), steps=STEPS.copy(), accuracy=acc,
                n_items=np.full(n, 200.0), chance=0.01, threshold=0.5, rankme=rankme, acquisition_index=a, window=3,
                task=f"t{t}", level=1, size="tiny", seed=s, difficulty="L1", size_order=1.0,
                cross={"cka_previous": prev, "cka_first": first}))
    return runs


def test_a_planted_lead_in_cka_alone_makes_the_geometry_model_win_and_its_null_copy_tie():
    sk = evaluate(_cka_lead_runs(), CFG)["skill"].set_index("split")
    task = sk.loc["task"]
    assert task["n_runs"] == 8
    # 8 runs in 4 held-out tasks: the sign-flip test over tasks reaches its smallest p, 1/16, and no lower
    assert task["n_units"] == 4 and task["delta_log_score"] > 0, task.to_dict()
    assert task["p_value"] == task["min_p"] == 1 / 16, task.to_dict()
    assert task["null_p_value"] > task["p_value"], task.to_dict()


def test_cka_unrelated_to_acquisition_ties():
    for _, row in evaluate(_cka_lead_runs(seed=1, lead=None), CFG)["skill"].iterrows():
        assert not (row["p_value"] < 0.05), row.to_dict()


# ------------------------------------------------------------------- the live forecast reads as analyze does

_COMMON = dict(commit="0" * 40, tokens=None, ckptgeo_version="0.1.0", n_samples=200, position="last",
               dtype="float64", seed=0)


def _dataset(root):
    """Three runs written as a scan writes them, with what analyze reads its own way: one LM-style suite scored
    by normalised accuracy only, a RankMe value a budget cut short (converged False), both RankMe variants (two
    settings hashes), and the task loss."""
    rng = np.random.default_rng(3)
    beh, geo = [], []
    for r, (model, suite, metric) in enumerate((("copy-L1-tiny-s1", "copy-L1", "accuracy"),
                                                ("copy-L1-tiny-s2", "copy-L1", "accuracy"),
                                                ("lm-tiny-s1", "cloze", "accuracy_norm"))):
        a = 6 + 2 * r
        for i, step in enumerate(range(0, 300, 20)):
            row = dict(model=model, revision=f"step{step}", step=step, suite=suite, **_COMMON)
            acc = 0.9 if i >= a else 0.05 + 0.01 * rng.random()
            beh.append(row | dict(config_hash="c1", metric=metric, value=acc, n_items=200, chance=0.05,
                                  kind="generation", centered=False))
            beh.append(row | dict(config_hash="c1", metric="loss", value=3.0 / (1 + i), n_items=200, chance=None,
                                  kind="generation", centered=False))
            for chash, centered in (("c1", False), ("c2", True)):
                for layer in (1, 2):
                    value = (20.0 if i < 3 else 5.0 + i) * (2 if centered else 1)
                    geo.append(row | dict(config_hash=chash, centered=centered, layer=layer, metric="rankme",
                                          index=None, value=1e6 if (r, i, layer) == (0, 5, 2) else value,
                                          converged=(r, i, layer) != (0, 5, 2), reason=None, settings="{}",
                                          seconds=0.01))
    (root / "geometry").mkdir(parents=True)
    (root / "behavior").mkdir()
    pd.DataFrame(geo).to_parquet(root / "geometry" / "part.parquet")
    pd.DataFrame(beh).to_parquet(root / "behavior" / "part.parquet")
    return root


def test_read_runs_sees_the_runs_variants_and_acquisitions_that_analyze_sees(tmp_path):
    import ckptgeo
    from ckptgeo.forecasting.live import read_runs

    ds = _dataset(tmp_path / "ds")
    an = ckptgeo.analyze(ds, write=False, n_noise_curves=0, n_permutations=19)
    want = runs_from_tables(an.tables["accuracy"], an.tables["curves"], an.tables["acquisitions"],
                            an.tables.get("compare"))
    got = read_runs(ds)
    assert [r.key for r in got] == [r.key for r in want]
    assert {r.key[0] for r in got} == {"copy-L1-tiny-s1", "copy-L1-tiny-s2", "lm-tiny-s1"}
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g.steps, w.steps)
        np.testing.assert_allclose(g.accuracy, w.accuracy)
        assert g.acquisition_index == w.acquisition_index is not None
        assert (g.task, g.difficulty, g.seed, g.size) == (w.task, w.difficulty, w.seed, w.size)
        assert g.difficulty != ""
        assert sorted(g.rankme) == sorted(w.rankme) == [1, 2]
        for k in g.rankme:   # the uncentred variant; the unconverged value left out (NaN)
            np.testing.assert_allclose(g.rankme[k], w.rankme[k])
            assert np.nanmax(g.rankme[k]) < 100
        np.testing.assert_allclose(g.loss, w.loss)
        np.testing.assert_allclose(g.loss, 3.0 / (1 + np.arange(len(g.steps))))
    assert np.isnan(got[0].rankme[2][5])


def test_the_live_forecaster_reads_the_loss_of_the_live_run(tmp_path):
    from ckptgeo.forecasting.live import LiveForecaster

    live = LiveForecaster.from_dataset(_dataset(tmp_path / "ds"), feature_set="behaviour")
    assert live.n_runs == 3
    steps, acc = np.arange(0, 100, 20), np.full(5, 0.05)
    kw = dict(chance=0.05, rankme={}, n_items=200.0)
    without = live.forecast("copy-L1", steps, acc, **kw)
    falling = live.forecast("copy-L1", steps, acc, loss=3.0 / (1 + np.arange(5)), **kw)
    flat = live.forecast("copy-L1", steps, acc, loss=np.full(5, 3.0), **kw)
    assert 0 <= without.p_next <= 1 and 0 <= falling.p_next <= 1
    # the loss reaches the model: the same accuracy with another loss curve is another forecast
    assert falling.p_next != flat.p_next and falling.p_next != without.p_next
