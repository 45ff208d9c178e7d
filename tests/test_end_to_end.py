"""Real training, scanned and analysed: the whole job on a small scale (slow)."""

import pandas as pd
import pytest

from ckptgeo.studies.demo import DEMO_SETTINGS, DemoSetting, demo_difficulty, run_demo


@pytest.mark.slow
def test_trained_model_is_scanned_and_its_acquisition_found(tmp_path):
    import torch

    torch.set_num_threads(1)
    result = run_demo(tmp_path, settings=(DemoSetting("easy", "copy", 1, 200, 20),), n_samples=100, plots=True)
    behavior = pd.read_parquet(tmp_path / "dataset" / "behavior")
    acc = behavior[behavior.metric == "accuracy"].sort_values("step")
    # behaviour from the scan itself (teacher-forced exact match): chance, then the task is learned
    assert acc.value.iloc[0] == 0.0 and acc.value.iloc[-1] > 0.9, acc.value.tolist()
    ev = result.events.set_index("layer")
    geometry = pd.read_parquet(tmp_path / "dataset" / "geometry")
    last = geometry[geometry.layer == 2].sort_values("step").value
    assert ev.loc[2, "acquisition_status"] == "acquired" and 0 < ev.loc[2, "acquisition_step"] < 200
    assert ev.loc[2, "collapse_floor"] == pytest.approx(last.min()) and last.min() < 0.8 * last.iloc[0]
    assert ev.loc[2, "status"] in ("precursor", "synchronous", "lagging"), ev.loc[2, "status"]
    # difficulty by the studies' rule (copy level 1 is easy), not the level alone ("L1")
    assert set(result.events.difficulty) == {"easy"}, set(result.events.difficulty)
    assert (tmp_path / "dataset" / "report.md").exists()
    assert len(list((tmp_path / "dataset" / "figures").glob("*.png"))) >= 2


def test_the_demo_labels_its_runs_hard_and_easy_by_the_studies_rule(tmp_path):
    """copy-L1 and addition-L1 are both level 1: by level alone analyze calls both "L1". The demo labels them
    with the studies' is_hard (addition is in PILOT_HARD), and its roles agree with that rule."""
    from ckptgeo.suites.tasks import is_hard

    assert demo_difficulty() == {"copy-L1": "easy", "addition-L1": "hard"}
    assert [s.role for s in DEMO_SETTINGS] == ["hard" if is_hard(s.task, s.level) else "easy" for s in DEMO_SETTINGS]
    assert demo_difficulty([DemoSetting("x", "copy", 2, 10)]) == {"copy-L2": "hard"}
