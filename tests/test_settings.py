"""Each scan setting is declared once (``ckptgeo.engine.config``): the CLI flags, ``scan()``'s keywords and
docstring, the constraints, ``MonitorConfig`` and the config hash derive from it, and drift is caught here."""

import pytest

from ckptgeo.engine.config import ScanConfig
from ckptgeo.engine.measure import configure_metrics
from ckptgeo.engine.plan import config_hash, row_settings, scan_settings
from ckptgeo.suites.tasks import load_suite_or_task


def _hash(**options) -> str:
    config = ScanConfig(**{"suites": ("copy-L1",), **options})
    suites = [load_suite_or_task(s) for s in config.suites]
    return config_hash(scan_settings(config, suites, configure_metrics(config)))


#: the config hashes that name the parts of datasets written before the settings were declared in one table
#: (computed on main at e82fed0): a refactor that changes one would orphan every existing dataset's parts
PINNED = [({}, "63388db6066c"), ({"n_samples": 50}, "fbb5b7bc80b7"), ({"centered": True}, "4c4135cb76b5"),
          ({"epsilon": 1e-6}, "c5c2431652b6"), ({"tokenizer": "runs/x"}, "07d95d1cae41"),
          ({"model_items": 8}, "4292887348b4"), ({"dtype": "float64"}, "44439492b2d1"),
          ({"position": "mean"}, "504097d92535"), ({"seed": 3}, "b3faa7f8cf69"),
          ({"metrics": ("rankme", "hessian"), "metric_options": {"hessian": {"k": 3}}}, "2acb9b31015b"),
          ({"suites": ("logic",)}, "58ae0730a51b")]


@pytest.mark.parametrize("options,expected", PINNED)
def test_config_hashes_of_existing_datasets_do_not_change(options, expected):
    assert _hash(**options) == expected
    # settings that do not change values leave it alone
    assert _hash(**options, device="meta", batch_size=3, prefetch=0, keep_cache=True, threads=2,
                 share_prefix=False, on_error="raise", max_disk=10) == expected


def test_rows_carry_the_same_settings_columns():
    row = row_settings(ScanConfig(n_samples=50, dtype="float64"), "abc")
    assert [k for k in row if k != "ckptgeo_version"] == ["n_samples", "position", "dtype", "seed", "config_hash"]
    assert (row["n_samples"], row["position"], row["dtype"], row["seed"]) == (50, "last", "float64", 0)
