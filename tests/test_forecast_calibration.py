"""The forecast's interval widening for held-out groups (ckptgeo.forecasting.calibrate) and the concordance
within hard / easy classes, on synthetic runs with known answers."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from ckptgeo.forecasting.calibrate import conformal_quantile, conformity_score, inner_labels, widen
from ckptgeo.forecasting.data import RunCurves
from ckptgeo.forecasting.evaluate import (ForecastConfig, concordance, concordance_table, out_of_fold, run_scores,
                                          split_groups)

STEPS = np.arange(0, 800, 20)   # 40 checkpoints


def _run(task: str, seed: int, a: int | None, *, level: int = 1, difficulty: str = "", rng=None) -> RunCurves:
    rng = rng or np.random.default_rng(seed)
    n = len(STEPS)
    acc = np.clip(0.02 + rng.normal(0, 0.01, n), 0, 1)
    if a is not None:
        acc[a:] = 0.95
    return RunCurves(key=(f"{task}-L{level}-tiny-s{seed}", f"{task}-L{level}", "h"), steps=STEPS.copy(),
                     accuracy=acc, n_items=np.full(n, 200.0), chance=0.01, threshold=0.5,
                     rankme={1: np.full(n, 10.0)}, acquisition_index=a, window=3, task=task, level=level,
                     size="tiny", seed=seed, difficulty=difficulty or f"L{level}", size_order=1.0)


def test_widening_is_conformal_in_log_step_and_keeps_the_models_interval():
    assert conformity_score(99.0, 399.0, 199.0) == pytest.approx(math.log(0.5))   # inside: both ends a factor 2 off
    assert conformity_score(299.0, 399.0, 199.0) == pytest.approx(math.log(1.5))  # below the lower end
    assert conformity_score(99.0, math.inf, 999.0) == pytest.approx(math.log(0.1))  # open above: the lower end only
    # 9 scores at coverage 0.8: the ceil(10 * 0.8) = 8th smallest; negative ones floor at 0 (never narrower)
    assert conformal_quantile(np.arange(1, 10) / 10, 0.8) == 0.8
    assert conformal_quantile([-0.5, -0.2, -0.1], 0.5) == 0.0
    assert conformal_quantile([0.1, 0.2], 0.8) == math.inf
    run = _run("copy", 1, 20)
    fc = pd.DataFrame({"checkpoint": [5, 10], "step": [100, 200], "median_step": [300.0, 400.0],
                       "low_step": [199.0, 299.0], "high_step": [399.0, np.nan], "p_next": [0.1, 0.2]})
    w = widen(fc, math.log(2), run)
    # expm1(log1p(low) - log 2) = 99 and 149, the second raised to the earliest step the acquisition can still be at
    # (checkpoint 10 - window + 2 = 9: step 180)
    np.testing.assert_allclose(w["low_step"], [99.0, 180.0])
    np.testing.assert_allclose(w["high_step"], [799.0, np.nan])        # an open end stays open
    np.testing.assert_allclose(w["low_step_model"], [199.0, 299.0])
    assert (w["widening"] == math.log(2)).all() and (w["median_step"] == fc["median_step"]).all()
    # the lower end is never before the earliest checkpoint the acquisition can still be at (i - window + 2)
    low = widen(fc, 10.0, run)["low_step"].to_numpy()
    np.testing.assert_allclose(low, STEPS[[4, 9]])


def test_inner_groups_are_the_splits_own_else_tasks():
    runs = [_run(t, s, 10) for t in ("a", "b", "c") for s in (1, 2)]
    sizes = ["tiny", "tiny", "mini", "mini", "tiny", "mini"]
    # leaving one size out of two: one size to train on, so its tasks are the inner groups
    assert inner_labels(runs, [0, 1, 4], sizes) == ["a", "a", "c"]
    assert inner_labels(runs, [0, 2, 3], [r.seed for r in runs]) == [1, 1, 2]
    assert inner_labels(runs[:2], [0, 1], ["x", "x"]) == [1, 2]     # one task: its seeds
    assert inner_labels(runs[:1], [0], ["x"]) is None


def _shifted_runs():
    """5 tasks x 4 seeds; a task's acquisition is at checkpoint 6 + 6 t (+-2 by seed), and nothing before it says
    so: held out, the first and the last task fall outside the timing of the tasks the model was fitted to."""
    rng = np.random.default_rng(0)
    return [_run(f"t{t}", s, 6 + 6 * t + int(rng.integers(-2, 3)), rng=rng) for t in range(5) for s in (1, 2, 3, 4)]


def _coverage(runs, cfg):
    groups = split_groups(runs, "task")
    fcs = out_of_fold(runs, groups, cfg, sets=("behaviour",))["behaviour"]
    sc = pd.DataFrame([run_scores(r, fc, cfg) for r, fc in zip(runs, fcs)])
    n = sc["n_covered"].sum()
    return sc["covered"].sum() / n, sc["covered_model"].sum() / n, sc["widening"].to_numpy(), n


def test_widening_restores_coverage_when_the_held_out_task_is_outside_the_training_timing():
    cfg = ForecastConfig(max_horizon=32, n_permutations=19)
    cov, cov_model, q, n = _coverage(_shifted_runs(), cfg)
    assert n == 60                                 # 20 acquired runs x 3 scoring checkpoints
    assert cov_model < 0.7, cov_model              # the model's own 80% intervals under-cover held-out tasks
    assert (q > 0).all()
    assert 0.72 <= cov <= 0.92 and cov > cov_model + 0.1, (cov, cov_model)   # 0.80 and 0.52 here
    # off: the model's own intervals, no widening
    off, off_model, q0, _ = _coverage(_shifted_runs(), ForecastConfig(max_horizon=32, calibrate=False))
    assert off == off_model == cov_model and (q0 == 0).all()


def test_concordance_within_hard_and_easy_classes_by_the_studies_rule():
    # copy and reverse at level 1 are easy; level 2, and parity at level 1 (the pilot's hard list), are hard
    runs = [_run("copy", 1, 8), _run("reverse", 1, 14), _run("compare", 1, 20), _run("copy", 1, 26, level=2),
            _run("parity", 1, 30), _run("reverse", 2, 12, level=2), _run("sort", 2, 18, level=2)]
    assert [r.difficulty for r in runs] == ["L1", "L1", "L1", "L2", "L1", "L2", "L2"]
    assert [r.difficulty_class for r in runs] == ["easy", "easy", "easy", "hard", "hard", "hard", "hard"]
    assert _run("copy", 1, 8, difficulty="hard").difficulty_class == "hard"   # a label that is a class stays
    cfg = ForecastConfig(n_permutations=199)

    def perfect(r):   # forecasts at every checkpoint naming the true acquisition step
        return pd.DataFrame({"checkpoint": np.arange(len(STEPS)), "step": STEPS,
                             "median_step": float(r.acquisition_step)})

    tab = concordance_table(runs, {"geometry": [perfect(r) for r in runs]}, "task", cfg).set_index("difficulty")
    assert list(tab.index) == ["easy", "hard"]
    assert tab.loc["easy", "n_pairs"] == 3 and tab.loc["hard", "n_pairs"] == 6
    assert (tab["concordance"] == 1.0).all() and (tab["concordance_high"] == 1.0).all()
    assert tab.loc["hard", "p_value"] < 0.1 and tab.loc["easy", "paper"] == 0.52 and tab.loc["hard", "paper"] == 0.69
    # forecasts in the reverse order
    rev = concordance([(STEPS, np.full(len(STEPS), 1000.0 - r.acquisition_step), r.acquisition_step)
                       for r in runs[3:]], cfg, clusters=[r.task for r in runs[3:]])
    assert rev.concordance == 0.0 and rev.p_value > 0.9 and rev.low == 0.0


def test_the_live_forecast_is_widened_as_a_held_out_fold_is():
    from ckptgeo.forecasting.live import LiveForecaster

    runs = _shifted_runs()
    cfg = ForecastConfig(max_horizon=32)
    live = LiveForecaster(runs, feature_set="behaviour", config=cfg)
    raw = LiveForecaster(runs, feature_set="behaviour", config=ForecastConfig(max_horizon=32, calibrate=False))
    assert live.widening > 0 and raw.widening == 0
    r = _run("t9", 1, 30)
    kw = dict(chance=0.01, rankme={}, n_items=200.0)
    a = live.forecast("t", r.steps[:12], r.accuracy[:12], **kw)
    b = raw.forecast("t", r.steps[:12], r.accuracy[:12], **kw)
    assert a.median_step == b.median_step
    assert a.low_step <= b.low_step and (math.isnan(a.high_step) or a.high_step > b.high_step), (a, b)
    assert math.isnan(b.high_step) or math.isnan(a.high_step) or math.isclose(
        math.log1p(a.high_step) - math.log1p(b.high_step), live.widening)
