import math

import numpy as np

import pytest
import torch

from ckptgeo.errors import InvalidParameterError, NonFiniteActivationsError
from ckptgeo.metrics.rankme import RankMeConfig, effective_rank, rankme


@pytest.mark.parametrize("n", [1, 5, 64])
def test_identity_has_rank_n(n):
    value = rankme(torch.eye(n))
    p = 1 / n + 1e-7  # eps lifts each normalised singular value, so the value sits a hair above n
    assert value == pytest.approx(math.exp(-n * p * math.log(p)), rel=1e-12), value
    assert n * (1 - 1e-6) <= value < n * (1 + 1e-4)


def test_rank_one_matrix_is_one():
    z = torch.randn(50, 1) @ torch.randn(1, 20)
    assert rankme(z) == pytest.approx(1.0, abs=1e-4)


def test_known_spectrum():
    # singular values (3, 1): p = (0.75, 0.25) -> exp(H) = 0.75^-0.75 * 0.25^-0.25
    z = torch.diag(torch.tensor([3.0, 1.0]))
    expected = math.exp(-(0.75 * math.log(0.75) + 0.25 * math.log(0.25)))
    assert rankme(z) == pytest.approx(expected, rel=1e-5)


def test_zero_matrix_is_nan():
    assert math.isnan(rankme(torch.zeros(10, 4)))


def test_one_sample_is_one():
    assert rankme(torch.randn(1, 16)) == pytest.approx(1.0, abs=1e-5)


def test_scale_invariant_and_float64_for_half_input():
    z = torch.randn(40, 8)
    assert rankme(z.half()) == pytest.approx(rankme(z.half().double() * 1000), rel=1e-9)


def test_centered_removes_the_shared_direction():
    # one input-independent direction plus small item-specific noise: uncentred ~1, centred high
    torch.manual_seed(0)
    z = 100 * torch.ones(200, 1) @ torch.randn(1, 16) + 0.1 * torch.randn(200, 16)
    assert rankme(z) < 1.1
    assert rankme(z, RankMeConfig(centered=True)) > 12


def test_nan_rejected():
    z = torch.randn(5, 5)
    z[2, 3] = float("nan")
    with pytest.raises(NonFiniteActivationsError):
        rankme(z)


def test_not_2d_rejected():
    with pytest.raises(InvalidParameterError, match="2-D"):
        effective_rank(torch.ones(3))


# ------------------------------------------------------------------ measurement error over the items

def _items(n: int, seed: int, d: int = 64) -> torch.Tensor:
    """n items with a decaying spectrum (variance 1/k along axis k)."""
    scale = torch.tensor([1.0 / (k + 1) for k in range(d)]).sqrt()
    return torch.randn(n, d, generator=torch.Generator().manual_seed(seed)) * scale


@pytest.mark.parametrize("centered", [False, True])
def test_interval_covers_the_full_sample_value_and_shrinks_with_more_items(centered):
    from ckptgeo.metrics.rankme import rankme_interval

    cfg = RankMeConfig(centered=centered)
    widths = []
    for n in (32, 128, 512):
        est = rankme_interval(_items(n, 0), cfg, seed=0)
        assert est.value == pytest.approx(rankme(_items(n, 0), cfg), rel=1e-12)
        assert est.low < est.value < est.high, est
        widths.append(est.high - est.low)
    assert widths[0] > widths[1] > widths[2], widths
    assert widths[2] < 0.5 * widths[0], widths


def test_interval_matches_the_spread_over_fresh_draws_of_items():
    # the honest check: the resampled sd against the sd of RankMe over 30 independent draws of n items. It errs
    # on the wide side (measured, d = 64: 0.40 vs 0.33 at n = 32; 0.23 vs 0.21 at 400), never the narrow one.
    from ckptgeo.metrics.rankme import rankme_interval

    for n, most in ((32, 1.6), (400, 1.3)):
        fresh = np.std([rankme(_items(n, s)) for s in range(30)], ddof=1)
        boot = np.mean([rankme_interval(_items(n, s), seed=s).sd for s in range(5)])
        assert fresh * 0.8 < boot < fresh * most, (n, boot, fresh)


def test_no_resamples_no_interval_and_resampling_is_seeded():
    from ckptgeo.metrics.rankme import rankme_interval

    z = _items(50, 1)
    none = rankme_interval(z, RankMeConfig(n_resamples=0))
    assert math.isnan(none.low) and math.isnan(none.high) and none.value == rankme(z)
    assert rankme_interval(z, seed=3) == rankme_interval(z, seed=3) != rankme_interval(z, seed=4)
    with pytest.raises(InvalidParameterError, match="n_resamples"):
        rankme_interval(z, RankMeConfig(n_resamples=-1))


def test_scan_writes_the_interval_beside_each_rankme_value(tmp_path):
    from ckptgeo.engine.scan import scan
    from ckptgeo.store.dataset import read_table
    from tests._checkpoints import SUITE, make_checkpoints

    root = make_checkpoints(tmp_path / "ck", steps=(0, 1))
    scan(root, out=tmp_path / "ds", suites=(SUITE,), n_samples=24)
    geo = read_table(tmp_path / "ds", "geometry")
    r = geo[geo["metric"] == "rankme"]
    assert len(r) and ((r["value_low"] < r["value"]) & (r["value"] < r["value_high"])).all(), r
    assert r["converged"].isna().all()
    beh = read_table(tmp_path / "ds", "behavior")
    loss = beh[beh["metric"] == "loss"]
    assert len(loss) == 2 and (loss["value"] > 0).all() and loss["chance"].isna().all(), loss   # nats per token


def test_interval_settings_enter_the_config_hash_only_when_changed():
    from ckptgeo.engine.config import ScanConfig
    from ckptgeo.engine.measure import configure_metrics
    from ckptgeo.engine.plan import config_hash, scan_settings

    def h(**options):
        config = ScanConfig(suites=("copy-L1",), metrics=("rankme",), **options)
        return config_hash(scan_settings(config, [], configure_metrics(config)))

    plain = h()
    assert h(metric_options={"rankme": {"n_resamples": 50}}) == plain     # the default: datasets keep their hash
    assert h(metric_options={"rankme": {"n_resamples": 0}}) != plain
    assert h(metric_options={"rankme": {"confidence": 0.9}}) != plain
