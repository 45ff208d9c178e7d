"""A scan SIGKILLed at many points, then rerun, holds exactly what one clean scan holds.

Each kill point is reached deterministically (see :data:`tests._faults.KILL_POINTS`): the child scan
dies while downloading (fetch), reading weights, swapping them in, in a forward pass, in a metric,
before / halfway through / after writing a Parquet part, while writing the dataset marker or the run
record, while resolving duplicates, and at three clock-chosen moments. After each kill the scan is
rerun in this process and the dataset must equal a clean scan's, row for row (``seconds`` aside):
one row per key, every part readable, no temp file visible to a reader.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from ckptgeo.engine.scan import scan
from ckptgeo.store.schemas import TIMING_COLUMNS
from tests._checkpoints import SUITE, make_checkpoints
from tests._faults import killed_scan

KW = dict(suites=(SUITE,), n_samples=8)
KEYS = {"geometry": ["revision", "layer", "metric"], "behavior": ["revision", "metric"], "revisions": ["revision"]}

# 3 revisions + step4, a byte copy of step1: 4 x (geometry, behavior, revisions) parts = 12 writes,
# then write 13 rewrites step4's revisions part with duplicate_of (duplicate resolution).
FAST = ["small:1", "torn:3", "forward:5"]
SWEEP = ["tokenizer:1", "fetch:1", "fetch:2", "fetch:4", "load:1", "load:3", "swap:1", "swap:2",
         "forward:1", "forward:3", "metric:1", "metric:5", "write:1", "write:2", "write:3", "write:4", "write:13",
         "torn:1", "torn:2", "torn:13", "replace:1", "replace:2", "replace:3", "replace:5", "replace:14",
         "small:2", "resolve:1", "timer:20", "timer:35", "timer:50"]


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    return make_checkpoints(tmp_path_factory.mktemp("ck") / "tiny", steps=(0, 1, 2), duplicate={"step4": "step1"})


@pytest.fixture(scope="module")
def reference(ckpts, tmp_path_factory):
    out = tmp_path_factory.mktemp("ref") / "ds"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scan(ckpts, out=out, **KW)
    return {t: _canon(pd.read_parquet(out / t), t) for t in KEYS}


def _canon(df: pd.DataFrame, table: str) -> pd.DataFrame:
    return df.drop(columns=list(TIMING_COLUMNS), errors="ignore").sort_values(KEYS[table]).reset_index(drop=True)


def check_dataset(out: Path, reference: dict) -> None:
    """Exactly the reference rows; every visible file a readable part; only dot-temp files hidden."""
    for table, ref in reference.items():
        d = out / table
        for p in d.iterdir():
            if p.name.startswith("."):
                assert ".tmp-" in p.name, p  # a writer's temp file: readers skip dot files
                continue
            assert p.suffix == ".parquet", p
            pq.read_table(p)  # raises on a torn part
        got = _canon(pd.read_parquet(d), table)
        assert not got.duplicated(KEYS[table]).any(), f"doubled rows in {table}"
        pd.testing.assert_frame_equal(got, ref, check_like=True)
    import pyarrow.dataset as ds

    assert ds.dataset(out / "geometry", format="parquet").count_rows() == len(reference["geometry"])


def kill_then_rerun(point: str, ckpts: Path, out: Path, reference: dict) -> None:
    name, n = point.split(":")
    code = killed_scan(name, int(n), ckpts, out, **KW)
    if name == "timer":
        assert code in (-9, 0)  # a clock kill may come after the scan ended
    else:
        assert code == -9, f"kill point {point} was never reached (exit code {code})"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = scan(ckpts, out=out, **KW)
    assert res.failed == {} and res.locked == []
    assert sorted(res.measured + res.skipped) == ["step0", "step1", "step2", "step4"]
    check_dataset(out, reference)


@pytest.mark.parametrize("point", FAST)
def test_killed_then_rerun(point, ckpts, reference, tmp_path):
    kill_then_rerun(point, ckpts, tmp_path / "ds", reference)


@pytest.mark.slow
@pytest.mark.parametrize("point", SWEEP)
def test_killed_then_rerun_sweep(point, ckpts, reference, tmp_path):
    kill_then_rerun(point, ckpts, tmp_path / "ds", reference)


@pytest.mark.slow
def test_killed_twice_in_a_row(ckpts, reference, tmp_path):
    """Two consecutive kills at different points before the clean rerun."""
    out = tmp_path / "ds"
    assert killed_scan("write", 5, ckpts, out, **KW) == -9
    assert killed_scan("torn", 2, ckpts, out, **KW) == -9
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scan(ckpts, out=out, **KW)
    check_dataset(out, reference)
