"""The acquisition forecast (ckptgeo.forecasting) on synthetic runs with known answers."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from ckptgeo.forecasting.data import RunCurves
from ckptgeo.forecasting.evaluate import ForecastConfig, evaluate, split_groups
from ckptgeo.forecasting.features import feature_names, null_copy, run_features, sibling_copy
from ckptgeo.forecasting.model import HazardModel
from tests._models import single_thread  # noqa: F401  (fixture)

STEPS = np.arange(0, 800, 20)   # 40 checkpoints
CFG = ForecastConfig(n_permutations=19, max_horizon=32)


def _runs(*, lead: int | None = 6, never=(), n_tasks: int = 4, seeds=(1, 2), seed: int = 0, sizes=("tiny",)):
    """Runs whose accuracy jumps from chance to 0.95 at a random checkpoint (10..33), with no warning in the
    accuracy; RankMe (layers 1, 2) collapses at checkpoint 3 and recovers ``lead`` checkpoints before the jump
    (``lead=None``: at a random checkpoint, unrelated to it). A (task, seed) in ``never`` never acquires and its
    RankMe never recovers."""
    rng = np.random.default_rng(seed)
    runs = []
    n = len(STEPS)
    for si, size in enumerate(sizes):
        for t in range(n_tasks):
            for s in seeds:
                a = int(rng.integers(10, 34))
                acc = np.clip(0.02 + rng.normal(0, 0.01, n), 0, 1)
                no = (t, s) in never
                if not no:
                    acc[a:] = 0.95
                onset = n + 5 if no else (a - lead if lead is not None else int(rng.integers(6, 34)))
                layers = {}
                for k in (1, 2):
                    v = np.full(n, 20.0)
                    v[3:] = 3.0
                    if onset < n:
                        v[onset:] = 3.0 + np.minimum(1.0, np.arange(n - onset) / 3.0) * 15.0
                    layers[k] = v * np.exp(rng.normal(0, 0.03, n))
                runs.append(RunCurves(
                    key=(f"t{t}-L1-{size}-s{s}", f"t{t}-L1", "h"), steps=STEPS.copy(), accuracy=acc,
                    n_items=np.full(n, 200.0), chance=0.01, threshold=0.5, rankme=layers,
                    acquisition_index=None if no else a, window=3, task=f"t{t}", level=1, size=size, seed=s,
                    difficulty="hard" if t % 2 else "easy", size_order=float(si + 1)))
    return runs


def test_features_are_causal_and_finite():
    run = _runs()[0]
    full = run_features(run, "geometry")
    assert full.shape == (len(STEPS), len(feature_names("geometry")))
    assert np.isfinite(full).all()
    cut = 20
    short = RunCurves(**{**run.__dict__, "steps": run.steps[:cut], "accuracy": run.accuracy[:cut],
                         "n_items": run.n_items[:cut], "rankme": {k: v[:cut] for k, v in run.rankme.items()},
                         "planned_steps": int(run.steps[-1])})
    # the features at checkpoint i do not change when later checkpoints are cut off (the plan is known from the start)
    np.testing.assert_allclose(run_features(short, "geometry"), full[:cut])
    # without its plan, a cut run reads its last step as the plan: the clock and the slopes per unit of it move
    guessed = run_features(RunCurves(**{**short.__dict__, "planned_steps": None}), "geometry")
    moved = [n for n, a, b in zip(feature_names("geometry"), guessed.T, full[:cut].T) if not np.allclose(a, b)]
    assert moved == ["progress_slope", "plan_clock", "rankme_first_slope", "rankme_middle_slope",
                     "rankme_last_slope"], moved


def test_the_clock_is_the_share_of_the_plan_so_a_longer_schedule_reads_the_same():
    """A run 10 times longer, checkpoints at the same shares of its plan and the same curves, has the same features
    (slopes per unit of the clock included), so a model fitted on short runs does not extrapolate in steps."""
    run = _runs()[0]
    longer = RunCurves(**{**run.__dict__, "steps": run.steps * 10})
    np.testing.assert_allclose(run_features(longer, "geometry"), run_features(run, "geometry"))
    clock = run_features(run, "behaviour")[:, feature_names("behaviour").index("plan_clock")]
    # log1p of the step in thousandths of the plan (the last step, 780): step 390 is 500 thousandths
    assert clock[0] == 0.0 and clock[-1] == pytest.approx(math.log1p(1000)), clock
    assert clock[list(run.steps).index(380)] == pytest.approx(math.log1p(1000 * 380 / 780))


def test_the_hazard_model_learns_a_fixed_acquisition_step():
    runs = _runs(lead=6)
    for r in runs:   # every run acquires at checkpoint 20 (step 400)
        r.acquisition_index = 20
        r.accuracy[:20], r.accuracy[20:] = 0.02, 0.95
    feats = [run_features(r, "behaviour") for r in runs]
    model = HazardModel(max_horizon=32).fit(runs[1:], feats[1:])
    fc = model.forecast_run(runs[0], feats[0])
    at0 = fc.iloc[0]
    assert abs(at0["median_step"] - 400) <= 40, at0.to_dict()
    assert at0["low_step"] <= 400 <= at0["high_step"], at0.to_dict()


@pytest.fixture(scope="module")
def planted():
    return evaluate(_runs(lead=6), CFG)


def test_a_planted_geometric_lead_makes_the_geometry_model_win(planted):
    sk = planted["skill"].set_index("split")
    task = sk.loc["task"]
    assert task["n_runs"] == 8
    assert task["delta_log_score"] > 0 and task["p_value"] < 0.05, task.to_dict()
    assert task["verdict"] == "geometry helps"
    # the run's own lead beats its sibling's (the other seed's recovery is tied to the other seed's acquisition)
    assert task["sibling_n_runs"] == 8 and task["timing_delta_log_score"] > 0 and task["timing_p_value"] < 0.05
    # the null copy (RankMe replaced by noise pooled over all runs) shows no skill
    assert task["null_p_value"] >= 0.05, task.to_dict()
    ev = planted["evaluation"].set_index(["split", "feature_set"])
    assert ev.loc[("task", "geometry"), "log_score"] < ev.loc[("task", "behaviour"), "log_score"]


def test_noise_geometry_ties(tmp_path):
    res = evaluate(_runs(lead=None, seed=1), CFG)
    for _, row in res["skill"].iterrows():
        assert not (row["p_value"] < 0.05), row.to_dict()
        assert row["verdict"] != "geometry helps"


def _task_level_runs(seed: int = 0):
    """4 tasks x 3 seeds whose acquisition depends on the task (checkpoint 10 + 6 t, +-1) and whose RankMe is flat
    noise around a level with a spread that depends on the task (log sd 0.02, 0.1, 0.25, 0.5; level 10 (t + 1)):
    the curve carries the task, and so the timing, but nothing within a task (no lead)."""
    rng = np.random.default_rng(seed)
    n, runs = len(STEPS), []
    for t in range(4):
        for s in (1, 2, 3):
            a = 10 + 6 * t + int(rng.integers(-1, 2))
            acc = np.clip(0.02 + rng.normal(0, 0.01, n), 0, 1)
            acc[a:] = 0.95
            layers = {k: 10.0 * (t + 1) * np.exp(rng.normal(0, (0.02, 0.1, 0.25, 0.5)[t], n)) for k in (1, 2)}
            runs.append(RunCurves(
                key=(f"t{t}-L1-tiny-s{s}", f"t{t}-L1", "h"), steps=STEPS.copy(), accuracy=acc,
                n_items=np.full(n, 200.0), chance=0.01, threshold=0.5, rankme=layers, acquisition_index=a, window=3,
                task=f"t{t}", level=1, size="tiny", seed=s, difficulty="easy", size_order=1.0))
    return runs


def test_the_null_copy_carries_no_task_level_and_shows_no_skill():
    """Noise at each run's own mean and sd kept the run's RankMe spread, which here says the task and so the
    acquisition: that null showed skill held out by task (p = 0.0002 on these runs). Noise pooled over all runs
    shows none, while the real geometry (which does carry the task) beats behaviour; but another seed's geometry of
    the same task beats it as much (sibling skill 0.45 against 0.39 held out by task): the verdict is the
    setting's level, not "geometry helps"."""
    runs = _task_level_runs()
    nulls = null_copy(runs, seed=0)
    pooled = np.concatenate([v for r in runs for v in r.rankme.values()])
    for r, z in zip(runs, nulls):
        assert z.accuracy is r.accuracy and z.acquisition_index == r.acquisition_index
        for k in r.rankme:   # every run's noise has the pool's level and spread, not its own (10 (t + 1))
            assert abs(np.mean(z.rankme[k]) - pooled.mean()) < 0.4 * pooled.std(), (r.task, np.mean(z.rankme[k]))
            assert 0.6 < np.std(z.rankme[k]) / pooled.std() < 1.4
    sk = evaluate(runs, CFG)["skill"].set_index("split")
    for split in ("task", "seed"):
        row = sk.loc[split]
        assert row["n_runs"] == 12
        assert row["delta_log_score"] > 0 and row["p_value"] < 0.05, row.to_dict()
        assert row["null_p_value"] >= 0.05 and row["null_delta_log_score"] < row["delta_log_score"], row.to_dict()
        assert row["sibling_n_runs"] == 12 and row["sibling_delta_log_score"] > 0.5 * row["delta_log_score"]
        assert not row["timing_p_value"] < 0.05, row.to_dict()
        assert row["verdict"] == "setting level only"


def test_the_sibling_copy_swaps_geometry_among_seeds_of_one_setting_only():
    runs = _runs(n_tasks=2, seeds=(1, 2, 3))
    lone = RunCurves(**{**runs[0].__dict__, "key": ("t9-L1-tiny-s1", "t9-L1", "h"), "task": "t9"})
    copies, swapped = sibling_copy([*runs, lone], seed=0)
    assert swapped.tolist() == [True] * 6 + [False]
    assert copies[-1] is lone   # a setting with one seed keeps its own curves
    donors = []
    for r, c in zip(runs, copies):
        (d,) = [x for x in runs if x.rankme[1] is c.rankme[1]]   # the curves are another run's, whole
        assert d is not r and d.task == r.task and d.seed != r.seed
        assert c.accuracy is r.accuracy and c.acquisition_index == r.acquisition_index
        donors.append(d.name)
    assert sorted(donors) == sorted(r.name for r in runs)   # a cycle: every run gives once


def test_a_run_that_never_acquires_is_not_forecast_to_acquire_with_confidence():
    runs = _runs(lead=6, never={(0, 1), (1, 2), (2, 1)})
    held = next(i for i, r in enumerate(runs) if r.task == "t0" and r.seed == 1)
    train = [r for i, r in enumerate(runs) if i != held]
    model = HazardModel(max_horizon=32).fit(train, [run_features(r, "geometry") for r in train])
    fc = model.forecast_run(runs[held], run_features(runs[held], "geometry"))
    assert len(fc) == len(STEPS)          # forecast at every checkpoint: never confirmed
    assert fc["p_next"].max() < 0.3, fc["p_next"].max()
    late = fc.iloc[len(fc) // 2:]
    # no confident acquisition: the interval's upper end lies beyond the horizon, or the median does
    assert (late["high_step"].isna() | late["median_step"].isna()).all(), late


def test_splits_need_two_groups():
    runs = _runs(lead=6, seeds=(1,))
    assert split_groups(runs, "seed") is None
    assert split_groups(runs, "task") == [r.task for r in runs]


def test_across_sizes_uses_only_smaller_sizes():
    runs = _runs(lead=6, sizes=("tiny", "mini"), n_tasks=3, seeds=(1,))
    res = evaluate(runs, CFG)
    sz = res["sizes"]
    assert set(sz["size"]) == {"mini"} and set(sz["fitted_on"]) == {"tiny"}
    assert set(sz["feature_set"]) == {"behaviour", "geometry"}
    assert (sz["n_runs"] == 3).all()


# ------------------------------------------------------------------------------------ datasets and live

_COMMON = dict(commit="0" * 40, tokens=None, ckptgeo_version="0.1.0", n_samples=200, position="last",
               centered=False, dtype="float64", epsilon=1e-7, seed=0)


def _write_dataset(root, runs):
    """The runs as a ckptgeo dataset (behaviour and geometry parts written with pandas)."""
    beh, geo = [], []
    for r in runs:
        model, suite, _ = r.key
        for i, step in enumerate(r.steps):
            row = dict(model=model, revision=f"step{step}", step=int(step), suite=suite, **_COMMON)
            beh.append(row | dict(config_hash="c1", metric="accuracy", value=float(r.accuracy[i]), n_items=200,
                                  chance=r.chance, kind="generation"))
            for layer, vals in {0: np.ones(len(r.steps)), **r.rankme}.items():
                geo.append(row | dict(config_hash="c1", layer=layer, metric="rankme", index=None,
                                      value=float(vals[i]), reason=None, settings="{}", seconds=0.01))
    (root / "geometry").mkdir(parents=True)
    (root / "behavior").mkdir()
    pd.DataFrame(geo).to_parquet(root / "geometry" / "part.parquet")
    pd.DataFrame(beh).to_parquet(root / "behavior" / "part.parquet")
    return root


def test_analyze_writes_the_forecast_tables_figures_and_report(tmp_path):
    import ckptgeo

    ds = _write_dataset(tmp_path / "ds", _runs(lead=6, n_tasks=3, seeds=(1, 2)))
    res = ckptgeo.forecast(ds, n_noise_curves=0, n_permutations=19)
    for name in ("forecast", "forecast_evaluation", "forecast_skill", "forecast_concordance"):
        assert (ds / "forecast" / f"{name}.parquet").is_file(), name
    fc = pd.read_parquet(ds / "forecast" / "forecast.parquet")
    assert set(fc["feature_set"]) == {"behaviour", "geometry"} and set(fc["fitted_without"]) == {"task"}
    assert len(fc.groupby(["model", "suite"])) == 6
    assert {"median_step", "low_step", "high_step", "p_next"} <= set(fc.columns)
    ev = res.forecast_evaluation
    assert set(ev["split"]) == {"task", "seed"} and set(ev["feature_set"]) == {"behaviour", "geometry",
                                                                                "geometry_null", "geometry_sibling"}
    assert len(res.figures) == 6 and all(p.stat().st_size > 10_000 for p in res.figures)
    report = (ds / "report.md").read_text()
    assert "### forecast_skill" in report and "figures/forecast/" in report and "## forecast\n" not in report
    assert f"Per run and checkpoint ({len(fc)} rows): `forecast/forecast.parquet`" in report


def test_the_forecast_command_reads_a_study_folders_dataset(tmp_path, capsys):
    from ckptgeo.cli import main

    _write_dataset(tmp_path / "study" / "dataset", _runs(lead=6, n_tasks=3, seeds=(1, 2)))
    assert main(["forecast", str(tmp_path / "study"), "--no-plots"]) == 0
    assert (tmp_path / "study" / "dataset" / "forecast" / "forecast.parquet").is_file()
    assert not (tmp_path / "study" / "forecast").exists()


def test_the_live_forecaster_reads_a_dataset_and_forecasts_from_the_curves_so_far(tmp_path):
    from ckptgeo.forecasting.live import LiveForecaster, forecast_line

    runs = _runs(lead=6, n_tasks=3, seeds=(1, 2))
    live = LiveForecaster.from_dataset(_write_dataset(tmp_path / "ds", runs))
    assert live.n_runs == 6
    r = _runs(lead=6, n_tasks=1, seeds=(9,), seed=5)[0]
    a = r.acquisition_index
    early = live.forecast("t", r.steps[:4], r.accuracy[:4], chance=0.01, rankme={k: v[:4] for k, v in r.rankme.items()})
    near = live.forecast("t", r.steps[:a - 2], r.accuracy[:a - 2], chance=0.01,
                         rankme={k: v[:a - 2] for k, v in r.rankme.items()})
    assert near.p_next > early.p_next, (early, near)
    assert near.low_step <= r.steps[a] <= near.high_step, (near, r.steps[a])
    line = forecast_line(near)
    assert line.startswith("acquisition forecast: step ") and "P(next 5 checkpoints)" in line
    done = live.forecast("t", r.steps, r.accuracy, chance=0.01, rankme=r.rankme)
    assert done.acquired and done.median_step == r.steps[a]
    # the same curves on a plan 10 times longer, the plan given: the same forecast on its clock, 10 times the steps
    assert live.default_plan == int(r.steps[-1])
    cut = a - 2
    longer = live.forecast("t", r.steps[:cut] * 10, r.accuracy[:cut], chance=0.01,
                           rankme={k: v[:cut] for k, v in r.rankme.items()}, planned_steps=10 * live.default_plan)
    # (to 1e-3: the interval's widening is in log1p(step), not quite a ratio)
    assert (longer.median_step, longer.low_step, longer.high_step) == pytest.approx(
        (10 * near.median_step, 10 * near.low_step, 10 * near.high_step), rel=1e-3), (near, longer)
    assert longer.p_next == pytest.approx(near.p_next)


def test_forecast_from_a_folder_without_runs_is_a_one_line_error(tmp_path):
    from ckptgeo.errors import DatasetLayoutError
    from ckptgeo.forecasting.live import LiveForecaster

    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetLayoutError, match="behavior"):
        LiveForecaster.from_dataset(tmp_path / "empty")
    one = _write_dataset(tmp_path / "one", _runs(lead=6, n_tasks=1, seeds=(1,)))
    with pytest.raises(DatasetLayoutError, match="1 run"):
        LiveForecaster.from_dataset(one)


def test_ckptgeo_train_monitor_forecast_from_prints_a_line_per_checkpoint_and_records_it(tmp_path, caplog):
    from ckptgeo.cli import main
    from tests._models import single_thread  # noqa: F401

    ds = _write_dataset(tmp_path / "ds", _runs(lead=6, n_tasks=3, seeds=(1, 2)))
    run = tmp_path / "copy-L1"
    with caplog.at_level("INFO", logger="ckptgeo.monitor"):
        assert main(["train", "--task", "copy", "--steps", "20", "--batch-size", "16", "--heldout", "40",
                     "--warmup", "5", "--monitor", "10", "--forecast-from", str(ds), "--threads", "1",
                     "--out", str(run)]) == 0
    lines = [r.getMessage() for r in caplog.records if "acquisition forecast:" in r.getMessage()]
    live = pd.read_parquet(run / "monitor" / "live_forecast")
    steps = sorted(pd.read_parquet(run / "monitor" / "revisions")["step"])
    assert sorted(live["step"]) == steps == [0, 1, 2, 4, 8, 10, 20]
    assert len(lines) == len(steps), lines
    assert all("P(next 5 checkpoints)" in m or "acquired at step" in m for m in lines), lines
    assert set(live["feature_set"]) == {"geometry"} and (live["n_runs"] == 6).all()
    assert live["p_next"].between(0, 1).all()


def test_the_trainer_callback_reports_the_forecast_to_tensorboard(tmp_path, single_thread):
    """Monitor(forecast_from=...) inside a real transformers.Trainer with report_to=["tensorboard"]: the
    forecast of every monitored step reaches TensorBoard's event files through Trainer.log, equal to the
    monitor's own live_forecast table."""
    from ckptgeo.monitor import Monitor, task_suite
    from ckptgeo.training import build_tokenizer
    from tests._trainer import copy_trainer, tensorboard_scalars

    ds = _write_dataset(tmp_path / "ds", _runs(lead=6, n_tasks=3, seeds=(1, 2)))
    suite = task_suite("copy", 1, n_items=40)
    monitor = Monitor(build_tokenizer(), [suite], tmp_path / "live", schedule=10, forecast_from=ds)
    copy_trainer(tmp_path / "trainer", monitor, suite, n_steps=20, batch=16, report_to=["tensorboard"])
    assert monitor.planned_steps == 20   # the Trainer's max_steps: the forecast's clock
    live = pd.read_parquet(tmp_path / "live" / "live_forecast").set_index("step")
    assert sorted(live.index) == [0, 1, 2, 4, 8, 10, 20]
    tb = tensorboard_scalars(tmp_path / "trainer")
    assert tb["train/forecast/p_next"] == pytest.approx(live["p_next"].to_dict(), abs=1e-6)
    for name in ("median_step", "low_step", "high_step"):   # beyond the horizon (NaN): not logged
        finite = live[name].dropna()
        assert tb.get(f"train/forecast/{name}", {}) == pytest.approx(finite.to_dict(), rel=1e-6), name
    assert sorted(tb["train/rankme/L2"]) == sorted(live.index)


def test_the_two_claim_rows_read_the_forecast_tables_and_say_inconclusive_where_the_data_cannot_say(planted):
    from ckptgeo.forecasting.evaluate import sizes_table
    from ckptgeo.forecasting.tables import forecast_frame
    from ckptgeo.claimtable.table import claim_table

    runs = _runs(lead=6)
    table = forecast_frame(runs, planted["forecasts"]["task"], "task", CFG)
    tables = {"forecast_skill": planted["skill"], "forecast": table, "forecast_sizes": pd.DataFrame(),
              "forecast_concordance": planted["concordance"]}
    empty = pd.DataFrame(columns=["model", "metric", "layer", "status"])
    t = claim_table(empty, tables=tables, n_permutations=19).set_index("id")
    geo = t.loc["forecast_geometry"]
    assert geo["verdict"] == "reproduced", geo.to_dict()
    assert "held out by task: 8 runs" in geo["measured"] and "null copy" in geo["measured"]
    cc = planted["concordance"].set_index(["feature_set", "difficulty"])
    easy = cc.loc[("geometry", "easy")]
    assert f"easy concordance geometry {easy['concordance']:.0%} [{easy['concordance_low']:.0%}, " in geo["measured"]
    assert f"over {int(easy['n_pairs'])} pairs (paper 52%)" in geo["measured"] and "(paper 69%)" in geo["measured"]
    assert t.loc["forecast_across_sizes", "verdict"] == "inconclusive"
    assert t.loc["forecast_across_sizes", "measured"] == "one size only"
    # a null copy that shows skill too makes the test untrustworthy on these runs: inconclusive
    fooled = planted["skill"].assign(null_p_value=0.001)
    t = claim_table(empty, tables={**tables, "forecast_skill": fooled}, n_permutations=9)
    assert t.set_index("id").loc["forecast_geometry", "verdict"] == "inconclusive"
    # no skill shown is not evidence of no skill: "not reproduced" only where geometry is shown worse
    sk = planted["skill"].set_index("split")
    assert sk.loc["task", "p_value_worse"] > 0.5 > sk.loc["task", "p_value"]
    for p_worse, verdict in ((0.3, "inconclusive"), (0.01, "not reproduced")):
        none = planted["skill"].assign(p_value=0.4, p_value_worse=p_worse)
        t = claim_table(empty, tables={**tables, "forecast_skill": none}, n_permutations=9)
        assert t.set_index("id").loc["forecast_geometry", "verdict"] == verdict, (p_worse, verdict)
    # skill that a sibling's geometry (another seed of the setting) gives as well is the setting's level
    for change, said in (({"timing_p_value": 0.4}, "forecasts as well"), ({"sibling_n_runs": 0}, "5 are needed")):
        t = claim_table(empty, tables={**tables, "forecast_skill": planted["skill"].assign(**change)},
                        n_permutations=9).set_index("id").loc["forecast_geometry"]
        assert t["verdict"] == "inconclusive" and said in t["reason"], (change, t["reason"])
    # too few held-out runs for the test to reach p < 0.05
    few = planted["skill"].assign(n_runs=4)
    t = claim_table(empty, tables={**tables, "forecast_skill": few}, n_permutations=9)
    assert t.set_index("id").loc["forecast_geometry", "verdict"] == "inconclusive"
    # two sizes, the larger forecast from the smaller: the order is judged on forecasts made at half the earlier
    # acquisition, when a lead of 6 checkpoints has not shown yet in either run: no order to find (8 acquired runs)
    two = _runs(lead=6, sizes=("tiny", "mini"), n_tasks=4, seeds=(1, 2))
    sizes, _ = sizes_table(two, CFG)
    t = claim_table(empty, tables={**tables, "forecast_sizes": sizes}, n_permutations=9)
    row = t.set_index("id").loc["forecast_across_sizes"]
    assert "size mini from tiny" in row["measured"] and row["p_value"] >= 0.05, row.to_dict()
    assert row["verdict"] == "not reproduced", row.to_dict()
