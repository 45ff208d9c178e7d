"""The one noise implementation (ckptgeo.stats.noise): jitter, own-variance iid and random-walk rates
with known answers."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from ckptgeo.stats import noise as nulls
import ckptgeo.stats as st
from ckptgeo.errors import InvalidParameterError

STEPS = np.array([0, 10, 20, 40, 80, 160, 320, 640])
#: a falling curve: own sd 9.9 (the trend), jitter (robust sd of its changes) 0.31
CURVE = np.array([40.0, 36.5, 32.0, 28.4, 24.0, 20.3, 16.0, 12.2])


def test_levels_of_a_curve_by_hand():
    lv = nulls.noise_levels(CURVE)
    assert lv.mean == pytest.approx(CURVE.mean()) and lv.median == pytest.approx(np.median(CURVE))
    assert lv.own_sd == pytest.approx(np.std(CURVE, ddof=1)) and lv.first == 40.0
    d = np.diff(CURVE)
    assert lv.jitter_sd == pytest.approx(1.4826 * np.median(np.abs(d - np.median(d))) / math.sqrt(2))
    assert lv.jitter_sd < lv.own_sd / 2


def test_rates_match_a_hand_computation_and_their_known_probabilities():
    # detector: the last value exceeds the first by one own sd. P = P(Z > sd / sqrt(2) sd_noise) for iid noise,
    # P(Z > 1) for the walk (its value at the last checkpoint is first + sd * N(0, 1)).
    lv = nulls.noise_levels(CURVE)

    def fires(s, v):
        return bool(v[-1] - v[0] > lv.own_sd)

    n, seed = 4000, 7
    r = nulls.noise_rates(fires, STEPS, CURVE, n_curves=n, seed=seed)
    # by hand: the same standard normals, the same transforms
    e = np.random.default_rng(seed).standard_normal((n, STEPS.size))
    jitter = lv.median + lv.jitter_sd * e
    iid = lv.mean + lv.own_sd * e
    w = e.copy()
    w[:, 0] = 0.0
    w = lv.first + lv.own_sd * np.cumsum(w * np.sqrt(np.diff(STEPS, prepend=0) / STEPS[-1]), axis=1)
    for got, copies in ((r.jitter, jitter), (r.iid, iid), (r.random_walk, w)):
        assert got.k == int(sum(fires(STEPS, c) for c in copies)) and got.n == n
    expected = {"jitter": norm.sf(lv.own_sd / (math.sqrt(2) * lv.jitter_sd)), "iid": norm.sf(1 / math.sqrt(2)),
                "random_walk": norm.sf(1.0)}
    for kind, p in expected.items():
        got = r.rate(kind)
        assert abs(got.rate - p) < 3.5 * math.sqrt(p * (1 - p) / n) + 1e-3, (kind, got.rate, p)
        assert got.low <= got.rate <= got.high
    assert r.jitter.rate < 0.01 < r.random_walk.rate < r.iid.rate   # 0.0%, 15.9%, 24.0%


def test_pooling_adds_counts_and_short_curves_give_none():
    a = nulls.noise_rates(lambda s, v: bool(v[1] > v[0]), STEPS, CURVE, n_curves=100, seed=1)
    b = nulls.noise_rates(lambda s, v: bool(v[1] > v[0]), STEPS, CURVE, n_curves=100, seed=2)
    p = nulls.pool([a, b, None])
    assert (p.iid.k, p.iid.n) == (a.iid.k + b.iid.k, 200)
    assert p.iid.rate == pytest.approx(st.binomial_interval(a.iid.k + b.iid.k, 200).rate)
    short = nulls.noise_rates(lambda s, v: True, [0, 1], [1.0, 2.0], n_curves=10)
    assert (short.jitter, short.iid, short.random_walk) == (None, None, None)
    with pytest.raises(InvalidParameterError, match="kind"):
        nulls.noise_rates(lambda s, v: True, STEPS, CURVE, kinds=("gaussian",))
