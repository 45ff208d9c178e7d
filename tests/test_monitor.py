"""The training-time monitor: live events, the plain-loop hook, and a real transformers.Trainer run
whose monitored rows equal a scan of the checkpoints saved at the same steps."""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest
import torch

from ckptgeo.events import detect as ev
from ckptgeo.monitor import LiveTracker, Monitor, MonitorConfig, Schedule, task_suite
from ckptgeo.training import build_config, build_tokenizer
from tests._models import single_thread  # noqa: F401  (fixture)
from tests._trainer import copy_trainer, tensorboard_scalars

TASK, LEVEL = "copy", 1


# ------------------------------------------------------------------------------------------ live events

def _feed(tracker, steps, acc, rank, suite="t"):
    found = []
    for s, a, r in zip(steps, acc, rank):
        found += [(s, e) for e in tracker.update(suite, s, accuracy=a, rankme={2: r}, chance=0.0)]
    return found


def test_live_events_agree_with_offline_definitions_and_report_their_delay():
    steps = [0, 10, 20, 30, 40, 50, 60, 70, 80, 90]
    rank = [40.0, 20.0, 5.0, 4.0, 4.5, 8.0, 12.0, 15.0, 16.0, 16.0]
    acc = [0.0, 0.0, 0.0, 0.0, 0.1, 0.2, 0.7, 0.8, 0.9, 0.9]
    found = _feed(LiveTracker(window=3), steps, acc, rank)
    kinds = [(e.kind, e.step, e.reported_at, e.final) for _, e in found]
    # the minimum (step 30) holds after 3 more checkpoints (40, 50, 60): reported at 60, provisional
    # recovery: floor 4 + 0.1 * 36 = 7.6, first reached at 50; reported with the collapse
    # acquisition: 0.7, 0.8, 0.9 above 0.5 from step 60, confirmed at step 80
    assert kinds == [("collapse", 30, 60, False), ("recovery", 50, 60, False), ("acquisition", 60, 80, True)], kinds
    acq = ev.acquisition_step(steps, acc)
    col = ev.collapse_point(steps, rank, acq.step)
    rec = ev.recovery_onset(steps, rank, col)
    gap = ev.precursor_gap(acq, rec)
    a = found[-1][1]
    assert (a.step, found[0][1].step, found[1][1].step, a.gap_steps) == (acq.step, col.step, rec.step, gap.gap_steps)
    assert a.delay_steps == 20 and found[0][1].delay_steps == 30
    assert "confirmed at step 80 (20 steps later)" in a.message and "gap 10 steps" in a.message, a.message
    # one checkpoint before acquisition: the monitor says so, as analyze does (issue 19)
    assert (a.gap_status, a.gap_checkpoints) == ("unresolved", 1) == (gap.status, gap.gap_checkpoints)
    assert "unresolved" in a.message and "in (0, 20) from the checkpoint grid" in a.message, a.message
    assert "between step 50 and 60" in a.message, a.message


def test_live_collapse_needs_the_stated_drop():
    """A 10% dip is not a collapse (default min_drop 0.25): nothing reported, and the acquisition says why."""
    steps = list(range(0, 100, 10))
    rank = [40.0, 38.0, 36.0, 37.0, 38.0, 39.0, 40.0, 40.0, 40.0, 40.0]
    acc = [0.0] * 6 + [0.9] * 4
    found = [e for _, e in _feed(LiveTracker(), steps, acc, rank)]
    assert [e.kind for e in found] == ["acquisition"]
    assert found[0].gap_status == "no_onset" and "0.25 of its first value" in found[0].message
    old = [e.kind for _, e in _feed(LiveTracker(min_drop=0.0), steps, acc, rank)]
    assert old == ["collapse", "recovery", "acquisition"]


def test_a_deeper_minimum_revises_the_collapse_and_acquisition_makes_it_final():
    steps = list(range(0, 130, 10))
    rank = [40.0, 10.0, 11.0, 12.0, 13.0, 3.0, 3.5, 3.6, 3.7, 9.0, 9.0, 9.0, 9.0]
    acc = [0.0] * 9 + [0.9, 0.9, 0.9, 0.9]
    tracker = LiveTracker(window=3)
    found = [e for _, e in _feed(tracker, steps, acc, rank)]
    collapses = [(e.step, e.revised, e.final) for e in found if e.kind == "collapse"]
    assert collapses == [(10, False, False), (50, True, False)], collapses
    # recovery of the first minimum (level 13) is reached at 40; of the second (3 + 3.7 = 6.7) at 90
    recoveries = [(e.step, e.revised) for e in found if e.kind == "recovery"]
    assert recoveries == [(40, False), (90, True)], recoveries
    acq = [e for e in found if e.kind == "acquisition"]
    assert [(e.step, e.reported_at, e.gap_steps) for e in acq] == [(90, 110, 0)]
    assert tracker.status() == "L2 RankMe 9 (acquired at 90) · acc 0.90"


def test_flat_curve_and_no_acquisition_report_nothing():
    tracker = LiveTracker()
    assert _feed(tracker, range(0, 100, 10), [0.0] * 10, [5.0] * 10) == []
    assert tracker.status() == "L2 RankMe 5 · acc 0.00"


# ------------------------------------------------------------------------------------------ plain loop

def _tiny_model(seed=0):
    from transformers import GPTNeoXForCausalLM

    torch.manual_seed(seed)
    return GPTNeoXForCausalLM(build_config("tiny", vocab_size=len(build_tokenizer())))


def test_step_measures_on_schedule_restores_mode_and_random_state(tmp_path, single_thread):
    tok = build_tokenizer()
    model = _tiny_model().train()
    monitor = Monitor(tok, [f"{TASK}-L{LEVEL}"], tmp_path / "live", schedule=Schedule(steps=(0, 3)),
                      config=MonitorConfig(n_samples=40))
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    assert monitor.step(model, 1) is None  # not scheduled
    r = monitor.step(model, 0)
    assert model.training and torch.equal(torch.rand(3), expected)
    assert set(r.rankme[f"{TASK}-L{LEVEL}"]) == {0, 1, 2} and r.accuracy == {f"{TASK}-L{LEVEL}": 0.0}
    assert set(r.log_values()) == {"rankme/L0", "rankme/L1", "rankme/L2", "accuracy"}
    assert all(p.grad is None for p in model.parameters())
    import pandas as pd

    geo = pd.read_parquet(tmp_path / "live" / "geometry")
    assert sorted(set(geo.revision)) == ["step0"] and set(geo.model) == {"live"} and len(geo) == 3
    assert geo.value.tolist() == pytest.approx([r.rankme[f"{TASK}-L{LEVEL}"][k] for k in (0, 1, 2)], rel=1e-12)
    # a second monitor on the same folder (a resumed run) skips step 0 and continues the curves
    again = Monitor(tok, [f"{TASK}-L{LEVEL}"], tmp_path / "live", schedule=Schedule(steps=(0, 3)),
                    config=MonitorConfig(n_samples=40))
    assert again.step(model, 0) is None and again.step(model, 3).step == 3
    assert again.tracker.tracks[f"{TASK}-L{LEVEL}"].steps == [0, 3]
    # a process that is not the main one measures and writes nothing
    other = Monitor(tok, [f"{TASK}-L{LEVEL}"], tmp_path / "other", main_process=False)
    assert other.step(model, 0) is None and not (tmp_path / "other").exists()


def test_the_monitor_measures_under_the_scans_thread_rule_and_restores_the_users(tmp_path, monkeypatch):
    """Issue 45 item 1: a user's own loop (or Trainer) ran the monitor at torch's default thread count (the README's
    Trainer example: 603.6 s against 30.6 s with one thread). A model under 10M parameters is now measured on one
    thread, as scan and train do, MonitorConfig(threads=N) overrides it, and the loop's own count is restored."""
    import ckptgeo.engine.measure as measure

    seen = []
    real = measure.measure_revision

    def spy(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return real(*args, **kwargs)

    monkeypatch.setattr(measure, "measure_revision", spy)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(3)   # the user's setting (torch's default is one per core)
        model = _tiny_model()
        monitor = Monitor(build_tokenizer(), [f"{TASK}-L{LEVEL}"], tmp_path / "a", schedule=Schedule(steps=(0,)),
                          config=MonitorConfig(n_samples=8))
        assert monitor.step(model, 0) is not None
        assert seen == [1] and torch.get_num_threads() == 3
        two = Monitor(build_tokenizer(), [f"{TASK}-L{LEVEL}"], tmp_path / "b", schedule=Schedule(steps=(0,)),
                      config=MonitorConfig(n_samples=8, threads=2))
        assert two.step(model, 0) is not None
        assert seen == [1, 2] and torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)


def test_task_suite_is_the_trainers_heldout_set():
    from ckptgeo.suites.tasks import heldout_items

    s = task_suite("modular", 1, n_items=20, seed=3)
    assert s.name == "modular-L1" and s.items == heldout_items("modular", 1, 20, seed=3)
    assert s.header["chance"] == pytest.approx(1 / 97)


# ------------------------------------------------------------------------------- transformers.Trainer

def _trainer_run(tmp_path, n_steps=120, batch=128, every=10):
    """copy-L1 on the tiny GPT-NeoX with transformers.Trainer and the callback, reporting to TensorBoard; a test
    callback makes the Trainer save checkpoint-N at every monitored step (initial weights as checkpoint-0)."""
    events = []
    suite = task_suite(TASK, LEVEL)
    monitor = Monitor(build_tokenizer(), [suite], tmp_path / "live", schedule=every, on_event=events.append)
    out = tmp_path / "trainer"
    trainer = copy_trainer(out, monitor, suite, n_steps=n_steps, batch=batch, report_to=["tensorboard"],
                           save_on_schedule=True)
    return monitor, trainer, events, suite, out


# the first update runs at learning rate 0 (linear warm-up from 0), so checkpoint-1 equals checkpoint-0
@pytest.mark.filterwarnings("ignore::ckptgeo.errors.DuplicateWeightsWarning")
def test_trainer_callback_rows_equal_a_scan_of_the_saved_checkpoints(tmp_path, single_thread, caplog):
    import pandas as pd

    from ckptgeo.analysis.pipeline import analyze
    from ckptgeo.engine.scan import scan
    from ckptgeo.suites.items import write_jsonl

    with caplog.at_level(logging.INFO, logger="ckptgeo.monitor"):
        monitor, trainer, events, suite, out = _trainer_run(tmp_path)
    scheduled = list(monitor.schedule.up_to(120))
    assert scheduled == [0, 1, 2, 4, 8] + list(range(10, 121, 10))

    # the Trainer's own log history holds the values at every scheduled step
    logged = {h["step"]: h for h in trainer.state.log_history if "rankme/L2" in h}
    assert sorted(logged) == scheduled
    live = pd.read_parquet(tmp_path / "live" / "geometry")
    for step, h in logged.items():
        row = live[(live.step == step) & (live.layer == 2)]
        assert h["rankme/L2"] == pytest.approx(float(row.value.iloc[0]), rel=1e-12)
    assert all("accuracy" in h for h in logged.values())
    # ... and the Trainer's own loss log at steps 50 and 100 (also monitored steps) is still there
    assert [h["step"] for h in trainer.state.log_history if "loss" in h] == [50, 100]

    # a scan of checkpoint-N (the Trainer's own folders) measures the same values
    path = tmp_path / "copy-L1.jsonl"
    write_jsonl(path, suite.items, header=suite.header)
    res = scan(out, out=tmp_path / "scanned", suites=(str(path),), step_pattern=r"^checkpoint-(\d+)$",
               batch_size=64)
    assert sorted(int(r.removeprefix("checkpoint-")) for r in res.measured) == scheduled
    scanned = pd.read_parquet(tmp_path / "scanned" / "geometry")
    assert set(scanned.config_hash) == set(live.config_hash) == {monitor.config_hash}
    both = live.merge(scanned, on=["step", "suite", "layer", "metric"], suffixes=("_live", "_scan"))
    assert len(both) == len(live) == len(scheduled) * 3
    rel = np.abs(both.value_live - both.value_scan) / np.abs(both.value_scan)
    assert rel.max() <= 1e-6, both.loc[rel.idxmax(), ["step", "layer", "value_live", "value_scan"]]
    acc = pd.read_parquet(tmp_path / "live" / "behavior").merge(
        pd.read_parquet(tmp_path / "scanned" / "behavior"), on=["step", "suite", "metric"])
    assert (acc.value_x == acc.value_y).all()

    # analyze works on the monitor's dataset unchanged and agrees with the scan's
    a_live, a_scan = analyze(tmp_path / "live"), analyze(tmp_path / "scanned")
    acq_live = a_live.acquisitions.acquisition_step.iloc[0]
    assert acq_live == a_scan.acquisitions.acquisition_step.iloc[0] and not pd.isna(acq_live)
    ev_live = a_live.events[a_live.events.layer == 2].iloc[0]
    ev_scan = a_scan.events[a_scan.events.layer == 2].iloc[0]
    for col in ("collapse_step", "onset_step", "gap_steps", "status"):
        assert ev_live[col] == ev_scan[col], col

    # the live events fired, agree with analyze, and were logged
    kinds = {e.kind: e for e in events}
    assert set(kinds) == {"collapse", "recovery", "acquisition"}, [e.message for e in events]
    assert kinds["acquisition"].step == acq_live and kinds["acquisition"].final
    assert kinds["acquisition"].reported_at == scheduled[scheduled.index(acq_live) + 2]
    assert kinds["acquisition"].gap_steps == ev_live["gap_steps"]
    assert kinds["collapse"].step == ev_live["collapse_step"] and kinds["recovery"].step == ev_live["onset_step"]
    assert [r.getMessage() for r in caplog.records if r.name == "ckptgeo.monitor"] == [e.message for e in events]
    assert f"(acquired at {acq_live})" in monitor.status(), monitor.status()
    assert 0 < monitor.seconds < math.inf

    # TensorBoard (report_to=["tensorboard"]) got the same numbers through Trainer.log, as the Trainer's own
    # "train/" scalars: every layer's RankMe and the accuracy at every monitored step, each event at the step
    # it became known with the step where it lies as its value, and the precursor gap
    tb = tensorboard_scalars(out)
    for k in (0, 1, 2):
        table = live[live.layer == k].set_index("step").value
        assert sorted(tb[f"train/rankme/L{k}"]) == scheduled
        assert tb[f"train/rankme/L{k}"] == pytest.approx(table.to_dict(), rel=1e-6)
    beh = pd.read_parquet(tmp_path / "live" / "behavior").query("metric == 'accuracy'").set_index("step").value
    assert tb["train/accuracy"] == pytest.approx(beh.to_dict(), abs=1e-7)
    for e in events:
        tag = f"train/event/{e.kind}_step" + (f"/L{e.layer}" if e.layer is not None else "")
        assert tb[tag][e.reported_at] == e.step, (tag, tb[tag])
    assert tb["train/event/collapse_floor/L2"][kinds["collapse"].reported_at] == pytest.approx(
        kinds["collapse"].value, rel=1e-6)
    assert tb["train/event/gap_steps"] == {kinds["acquisition"].reported_at: ev_live["gap_steps"]}
    assert sorted(tb["train/loss"]) == [50, 100]   # the Trainer's own scalars are still there


# ------------------------------------------------------------------------------------ ckptgeo train

def test_ckptgeo_train_monitor_writes_what_a_scan_of_its_checkpoints_measures(tmp_path, single_thread):
    import json

    import pandas as pd

    from ckptgeo.cli import main
    from ckptgeo.engine.scan import scan

    run = tmp_path / "copy-L1"
    assert main(["train", "--task", "copy", "--steps", "40", "--batch-size", "32", "--heldout", "50",
                 "--warmup", "10", "--monitor", "10", "--out", str(run)]) == 0
    assert json.loads((run / "manifest.json").read_text())["config"]["monitor"] == 10
    live = pd.read_parquet(run / "monitor" / "geometry")
    assert sorted(set(live.step)) == [0, 1, 2, 4, 8, 10, 20, 30, 40] and set(live.model) == {"copy-L1"}
    scan(run, out=tmp_path / "scanned", revisions="0,1,2,4,8,10,20,30,40")
    scanned = pd.read_parquet(tmp_path / "scanned" / "geometry")
    assert set(scanned.config_hash) == set(live.config_hash)  # a default scan of the run: same settings
    both = live.merge(scanned, on=["model", "revision", "suite", "layer", "metric"])
    assert len(both) == len(live) == 27
    rel = np.abs(both.value_x - both.value_y) / np.abs(both.value_y)
    assert rel.max() <= 1e-6, rel.max()

    # runs.csv / runs.tex of the monitor's folder name the model's size: its name ("copy-L1") gives none, so the
    # parameter count the monitor recorded (models.json), equal to the trainer's own count
    from ckptgeo.events.runs import params_text
    from ckptgeo.analysis.pipeline import analyze

    n_params = json.loads((run / "manifest.json").read_text())["model"]["n_parameters"]
    assert json.loads((run / "monitor" / "models.json").read_text()) == {"copy-L1": {"n_parameters": n_params}}
    analyze(run / "monitor")
    runs = pd.read_csv(run / "monitor" / "summary" / "runs.csv")
    size = params_text(n_params)
    assert runs["size"].tolist() == [size] and size.endswith("K") and size[0].isdigit(), (runs["size"].tolist(), size)
    tex = (run / "monitor" / "summary" / "runs.tex").read_text()
    assert f"copy-L1 & copy & 1 & {size} &" in tex, tex


def test_whole_model_metrics_on_the_live_model_leave_its_weights_alone(tmp_path, single_thread):
    model = _tiny_model().train()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    monitor = Monitor(build_tokenizer(), [f"{TASK}-L{LEVEL}"], tmp_path / "live", schedule=(0,),
                      config=MonitorConfig(metrics=("rankme", "behavior", "hessian"), n_samples=8, model_items=4))
    monitor.step(model, 0)
    import pandas as pd

    geo = pd.read_parquet(tmp_path / "live" / "geometry")
    assert (geo[geo.metric == "hessian"].layer == -1).all() and (geo.metric == "hessian").sum() >= 1
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())
    assert all(p.grad is None for p in model.parameters()) and model.training


def test_models_json_is_read_as_untrusted(tmp_path):
    """models.json (the monitor's parameter counts): a count that is not a positive integer is left out."""
    import json

    from ckptgeo.store.dataset import Dataset

    ds = Dataset(tmp_path / "ds")
    ds.record_model("live", 393216)
    ds.record_model("live", 393216)   # kept, not rewritten
    assert ds.model_parameters() == {"live": 393216}
    (tmp_path / "ds" / "models.json").write_text(json.dumps(
        {"a": {"n_parameters": "1e9"}, "b": {"n_parameters": -3}, "c": 7, "d": {"n_parameters": True},
         "e": {"n_parameters": 1000}}))
    assert ds.model_parameters() == {"e": 1000}
    (tmp_path / "ds" / "models.json").write_text("[1, 2")
    assert ds.model_parameters() == {}
