"""``ckptgeo.claims(DIR)``: the Python twin of ``ckptgeo claims`` (issue 44, item 6)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import ckptgeo

_COMMON = dict(commit="0" * 40, tokens=None, ckptgeo_version="0.1.0", n_samples=200, position="last",
               dtype="float64", seed=0, config_hash="c1", centered=False)


def _dataset(root):
    """Two tasks (copy: easy, parity: hard) x 3 seeds on one 16-checkpoint schedule, written as a scan writes
    them: accuracy rising at a task- and seed-dependent checkpoint, RankMe falling then recovering before it."""
    rng = np.random.default_rng(0)
    beh, geo = [], []
    for t, task in enumerate(("copy", "parity")):
        for seed in (1, 2, 3):
            model = f"{task}-L1-tiny-s{seed}"
            acq = 6 + 2 * t + seed
            for i, step in enumerate(range(0, 320, 20)):
                row = dict(model=model, revision=f"step{step}", step=step, suite=f"{task}-L1", **_COMMON)
                acc = 0.95 if i >= acq else 0.5 + 0.02 * rng.random()
                beh.append(row | dict(metric="accuracy", value=acc, n_items=200, chance=0.5, kind="generation"))
                for layer in (1, 2):
                    value = 20.0 if i < 2 else (4.0 if i < acq - 2 else 14.0)
                    geo.append(row | dict(layer=layer, metric="rankme", index=None,
                                          value=value + rng.normal(0, 0.1), converged=True, reason=None,
                                          settings="{}", seconds=0.01))
    (root / "geometry").mkdir(parents=True)
    (root / "behavior").mkdir()
    pd.DataFrame(geo).to_parquet(root / "geometry" / "part.parquet")
    pd.DataFrame(beh).to_parquet(root / "behavior" / "part.parquet")
    return root


def test_claims_is_the_commands_table_in_python(tmp_path):
    from ckptgeo.cli import main

    ds = _dataset(tmp_path / "ds")
    table = ckptgeo.claims(ds, n_permutations=99, n_power=2)
    from ckptgeo.claimtable.registry import claim_ids

    assert list(table["id"]) == list(claim_ids())
    assert set(table["verdict"]) <= {"reproduced", "not reproduced", "inconclusive", "descriptive"}
    assert table.attrs["calibration"] is None and (ds / "summary" / "claims.parquet").is_file()
    written = pd.read_parquet(ds / "summary" / "claims.parquet")
    assert main(["claims", str(ds), "--n-permutations", "99", "--power", "2"]) == 0
    again = pd.read_parquet(ds / "summary" / "claims.parquet")
    pd.testing.assert_frame_equal(written, again)
    pd.testing.assert_frame_equal(table.reset_index(drop=True), again, check_dtype=False)


def test_claims_refuses_a_folder_without_tables(tmp_path):
    from ckptgeo.errors import DatasetLayoutError

    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetLayoutError, match="holds no geometry table"):
        ckptgeo.claims(tmp_path / "empty")
