import math

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
