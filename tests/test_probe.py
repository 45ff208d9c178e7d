"""Linear probes on synthetic states with known answers."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

from ckptgeo.errors import InvalidParameterError, NonFiniteActivationsError, ProbeConvergenceWarning
from ckptgeo.metrics.probe import ProbeConfig, ProbeResult, probe
from ckptgeo.metrics.registry import get_metric


def _separable(n=120, d=16, n_classes=3, seed=0):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % n_classes
    centers = rng.normal(size=(n_classes, d)) * 6.0
    return centers[y] + rng.normal(size=(n, d)), y


def test_registered():
    spec = get_metric("probe")
    assert spec.needs == "probe_states" and spec.table == "probes" and spec.config is ProbeConfig
    assert spec.cost == "expensive"  # opt-in: 2 x k logistic fits per layer per revision


def test_separable_states_reach_one():
    x, y = _separable()
    r = probe(x, [f"class{c}" for c in y])
    assert isinstance(r, ProbeResult)
    assert r.accuracy >= 0.99, r
    assert r.chance == pytest.approx(1 / 3) and r.n == 120 and r.k == 5 and r.reason is None
    assert r.control_accuracy < 0.6, r  # shuffled labels are not readable
    assert all(isinstance(v, float) for v in (r.accuracy, r.accuracy_std, r.chance, r.control_accuracy))


def test_shuffled_labels_are_at_chance():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(200, 8))
    y = rng.permutation(np.repeat([0, 1], 100))
    r = probe(x, y)
    assert abs(r.accuracy - 0.5) < 0.12, r
    assert abs(r.control_accuracy - 0.5) < 0.12, r


def test_torch_input_and_determinism():
    x, y = _separable(n=60, d=6, n_classes=2, seed=3)
    a = probe(torch.tensor(x, dtype=torch.float32), torch.tensor(y), ProbeConfig(seed=7))
    b = probe(x, y, ProbeConfig(seed=7))
    assert a.seed == 7 and a.accuracy == pytest.approx(b.accuracy) and a.control_accuracy == b.control_accuracy


def test_one_class_gives_reason():
    x, _ = _separable(n=20)
    r = probe(x, ["valid"] * 20)
    assert math.isnan(r.accuracy) and math.isnan(r.control_accuracy) and r.k == 0
    assert r.chance == 1.0 and "one class" in r.reason


def test_singleton_class_gives_reason():
    x, _ = _separable(n=20)
    r = probe(x, ["a"] * 10 + ["b"] * 9 + ["c"])
    assert math.isnan(r.accuracy) and "single member" in r.reason and "c" in r.reason


def test_k_adapts_to_rarest_class():
    x, _ = _separable(n=30, n_classes=2)
    r = probe(x, [0] * 27 + [1] * 3)
    assert r.k == 3 and r.reason is None and r.chance == pytest.approx(0.9)


def test_nan_rejected():
    x, y = _separable(n=20, n_classes=2)
    x[3, 2] = np.nan
    with pytest.raises(NonFiniteActivationsError):
        probe(x, y)


def test_bad_shapes_and_k():
    x, y = _separable(n=20, n_classes=2)
    with pytest.raises(InvalidParameterError, match="labels"):
        probe(x, y[:-1])
    with pytest.raises(InvalidParameterError, match="2-D"):
        probe(x[0], y[:1])
    with pytest.raises(InvalidParameterError, match="'k'"):
        probe(x, y, ProbeConfig(k=1))


def test_convergence_warning():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(60, 40))
    y = np.arange(60) % 2
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = probe(x, y, ProbeConfig(max_iter=1, C=1e4))
    assert any(issubclass(w.category, ProbeConvergenceWarning) for w in caught)
    assert not any(w.category.__name__ == "ConvergenceWarning" for w in caught)
    assert 0.0 <= r.accuracy <= 1.0
