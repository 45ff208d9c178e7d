"""`ckptgeo probe` after (or before) `ckptgeo scan` on the same folder: one copy of the behaviour rows, and the
tables it wrote printed."""

from __future__ import annotations

import pandas as pd

from ckptgeo.cli import main
from tests._checkpoints import make_checkpoints


def test_probe_after_scan_prints_its_tables_and_adds_no_second_behavior_copy(tmp_path, capsys):
    ck = make_checkpoints(tmp_path / "ck", steps=(0, 10))
    out = tmp_path / "ds"
    common = ["--suite", "logic", "--n-samples", "40", "--out", str(out)]
    assert main(["scan", str(ck), *common]) == 0
    before = pd.read_parquet(out / "behavior")
    capsys.readouterr()
    assert main(["probe", str(ck), *common]) == 0
    printed = capsys.readouterr().out
    assert f"pandas.read_parquet('{out}/probes')" in printed and "measured 2, already done 0" in printed
    after = pd.read_parquet(out / "behavior")
    assert len(after) == len(before) == 6 and not after.duplicated(["revision", "suite", "metric"]).any()
    assert sorted(after.config_hash.unique()) == sorted(before.config_hash.unique())   # the scan's rows only
    probes = pd.read_parquet(out / "probes")
    assert len(probes) == 2 * 3 and probes.config_hash.nunique() == 1
    assert probes.config_hash.iloc[0] != before.config_hash.iloc[0]


def test_other_behaviour_settings_still_get_their_own_rows(tmp_path):
    ck = make_checkpoints(tmp_path / "ck", steps=(0,))
    out = tmp_path / "ds"
    assert main(["probe", str(ck), "--suite", "logic", "--n-samples", "40", "--out", str(out)]) == 0
    assert main(["scan", str(ck), "--suite", "logic", "--n-samples", "40", "--out", str(out)]) == 0
    assert len(pd.read_parquet(out / "behavior")) == 3         # probe first, then scan: still one copy (+ loss)
    assert main(["scan", str(ck), "--suite", "logic", "--n-samples", "30", "--out", str(out)]) == 0
    b = pd.read_parquet(out / "behavior")
    assert sorted(b.n_items) == [30] * 3 + [40] * 3             # 30 items is another measurement


def test_probe_of_one_suite_after_a_scan_of_several_adds_no_second_behavior_run(tmp_path, capsys):
    """Issue 45 item 4: the README's order (a scan of every suite, then `probe --suite logic`) wrote logic's
    behaviour again under the probe's config hash (the suites setting differed), so analyze showed two logic runs.
    Now a suite already measured with the same behaviour settings is not written again, whatever else either run
    measured; and the reverse order keeps the scan's other suites."""
    from ckptgeo.analysis.pipeline import analyze

    ck = make_checkpoints(tmp_path / "ck", steps=(0, 10))
    out = tmp_path / "ds"
    assert main(["scan", str(ck), "--suite", "logic", "--suite", "syntax", "--n-samples", "40", "--out", str(out)]) == 0
    before = pd.read_parquet(out / "behavior")
    assert main(["probe", str(ck), "--suite", "logic", "--n-samples", "40", "--out", str(out)]) == 0
    after = pd.read_parquet(out / "behavior")
    assert len(after) == len(before) and after.config_hash.nunique() == 1
    assert analyze(out, write=False).accuracy.groupby(["model", "suite", "config_hash"]).ngroups == 2   # one logic run
    other = tmp_path / "other"   # probe first, then the scan of both: syntax is written, logic is not twice
    assert main(["probe", str(ck), "--suite", "logic", "--n-samples", "40", "--out", str(other)]) == 0
    assert main(["scan", str(ck), "--suite", "logic", "--suite", "syntax", "--n-samples", "40", "--out", str(other)]) == 0
    b = pd.read_parquet(other / "behavior")
    assert b.groupby("suite").config_hash.nunique().to_dict() == {"logic": 1, "syntax": 1}
    assert set(b.suite) == {"logic", "syntax"}
