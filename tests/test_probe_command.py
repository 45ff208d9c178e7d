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
