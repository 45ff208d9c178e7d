"""Two runs on one output folder at once: no corrupt or doubled rows, no revision measured twice, and a
clear message for the run that finds a revision taken."""

from __future__ import annotations

import logging

import pandas as pd
import pytest

from ckptgeo.cli import main
from ckptgeo.store.dataset import Dataset, part_name
from tests._checkpoints import SUITE, make_checkpoints
from tests._faults import quiet_scan, scans_at_once
from tests.test_faults_kill import KEYS, _canon, check_dataset

KW = dict(suites=(SUITE,), n_samples=8)
REVS = ["step0", "step1", "step2", "step4"]


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    return make_checkpoints(tmp_path_factory.mktemp("ck") / "tiny", steps=(0, 1, 2, 4))


def test_revision_locked_by_another_run_is_skipped_with_a_message(ckpts, tmp_path, caplog, capsys):
    out = tmp_path / "ds"
    first = quiet_scan(ckpts, out, revisions="step0")
    held = Dataset(out).lock(part_name("tiny", "step1", first.config_hash)[: -len(".parquet")])
    try:
        with caplog.at_level(logging.WARNING, logger="ckptgeo.engine.scan"):
            res = quiet_scan(ckpts, out)
        assert res.locked == ["step1"] and res.measured == ["step2", "step4"] and res.skipped == ["step0"]
        assert "step1 is being measured by another process; skipping it here" in caplog.text
        code = main(["scan", str(ckpts), "--out", str(out), "--suite", SUITE, "--n-samples", "8"])
        assert code == 0
        assert "measured 0, already done 3, failed 0, locked by another run 1" in capsys.readouterr().out
    finally:
        held.close()
    res = quiet_scan(ckpts, out)  # lock gone (also when its holder is killed: flock dies with the process)
    assert res.measured == ["step1"]
    rv = pd.read_parquet(out / "revisions")
    assert sorted(rv.revision) == REVS and set(rv.status) == {"ok"}


def test_revision_finished_by_another_run_meanwhile_is_not_measured_again(ckpts, tmp_path, monkeypatch):
    """Run B plans (nothing done), then run A measures step0 before B reaches it: B must not redo it."""
    out = tmp_path / "ds"
    orig = Dataset.lock
    state = {"nested": False}

    def lock(self, name):
        if not state["nested"] and "step0" in name:
            state["nested"] = True
            other = quiet_scan(ckpts, out, revisions="step0")  # "run A", complete, before B takes the lock
            assert other.measured == ["step0"]
        return orig(self, name)

    monkeypatch.setattr(Dataset, "lock", lock)
    res = quiet_scan(ckpts, out, revisions="step0,step1")
    assert res.measured == ["step1"] and "step0" in res.skipped
    assert len(pd.read_parquet(out / "geometry")) == 2 * 3


@pytest.mark.slow
def test_two_runs_at_once_measure_each_revision_once(ckpts, tmp_path):
    ref_out = tmp_path / "ref"
    quiet_scan(ckpts, ref_out)
    reference = {t: _canon(pd.read_parquet(ref_out / t), t) for t in KEYS}
    out = tmp_path / "ds"  # does not exist yet: both create it
    results = scans_at_once(2, ckpts, out, tmp_path, **KW)
    measured = [r for res in results for r in res["measured"]]
    assert sorted(measured) == REVS, results  # each revision measured by exactly one run
    for res in results:
        assert res["failed"] == {}
        assert sorted(res["measured"] + res["skipped"] + res["locked"]) == REVS
    check_dataset(out, reference)


def test_a_dataset_another_process_creates_meanwhile_is_joined_not_refused(tmp_path, monkeypatch):
    """Two scans start into one new --out: the other process writes ckptgeo.json between this one's look for it
    and its listing of the folder. The folder is then a dataset, not a foreign one (the slow two-runs test failed
    once this way: 'is not empty and is not a ckptgeo dataset')."""
    import pathlib

    root = tmp_path / "ds"
    root.mkdir()
    real, other = pathlib.Path.iterdir, []

    def iterdir(self):
        if self == root and not other:
            other.append("started")
            Dataset(root)   # the other process, at this moment: it finds the folder empty and writes the marker
        return real(self)

    monkeypatch.setattr(pathlib.Path, "iterdir", iterdir)
    Dataset(root)
    assert other and [p.name for p in real(root)] == ["ckptgeo.json"]
    (root / "notes.txt").write_text("mine")
    (root / "ckptgeo.json").unlink()
    with pytest.raises(Exception, match="is not empty and is not a ckptgeo dataset"):
        Dataset(root)   # a foreign folder is still refused
