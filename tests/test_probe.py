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


def _reference(x, y, config):
    """What the probe computes, the plain way: ``cross_val_score`` of the scaler + L-BFGS pipeline on the
    probe's folds, for the labels and for the shuffled control."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold, cross_val_score
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    _, codes = np.unique(np.asarray([str(v) for v in y]), return_inverse=True)
    k = min(config.k, int(np.bincount(codes).min()))
    folds = list(StratifiedKFold(n_splits=k, shuffle=True, random_state=config.seed).split(x, codes))
    control = np.random.default_rng(config.seed).permutation(codes)
    model = make_pipeline(StandardScaler(), LogisticRegression(C=config.C, max_iter=config.max_iter))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return (cross_val_score(model, x, codes, cv=folds).mean(), cross_val_score(model, x, control, cv=folds).mean())


def _hard_cases():
    """States like an untrained model's: collapsed to a few directions, constant or tiny columns, wildly
    different scales, more dimensions than items, many classes of two or three members."""
    rng = np.random.default_rng(0)
    y10 = np.arange(200) % 10
    collapsed = rng.normal(size=(200, 1)) @ rng.normal(size=(1, 64)) + 1e-6 * rng.normal(size=(200, 64))
    scales = rng.normal(size=(200, 48)) * np.logspace(-6, 6, 48) + 0.3 * y10[:, None]
    constant = np.c_[np.ones((200, 8)), rng.normal(size=(200, 8)) + 0.5 * (y10 % 2)[:, None]]
    wide = rng.normal(size=(60, 256)) + 0.2 * (np.arange(60) % 3)[:, None]
    rare = rng.normal(size=(60, 32)) + 0.5 * np.repeat(np.arange(20), 3)[:, None]
    return [(collapsed, y10), (scales, y10), (constant, y10 % 4), (wide, np.arange(60) % 3),
            (rare, np.repeat(np.arange(20), 3)), (np.zeros((40, 16)), np.arange(40) % 2)]


@pytest.mark.parametrize("case", range(6))
def test_equals_the_cross_validated_pipeline(case):
    x, y = _hard_cases()[case]
    config = ProbeConfig(seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = probe(x, y, config)
    accuracy, control = _reference(x, y, config)
    assert abs(r.accuracy - accuracy) <= 1e-3 and abs(r.control_accuracy - control) <= 1e-3, (r, accuracy, control)


def test_control_fold_without_a_second_class_is_nan_as_in_the_pipeline():
    """A rare class whose shuffled members all fall in one test fold leaves that fold's training part a
    single class: its score is NaN, as a failed fit is in ``cross_val_score``."""
    from sklearn.model_selection import StratifiedKFold

    y = np.array([0] * 18 + [1] * 2)
    x = np.random.default_rng(0).normal(size=(20, 4))
    for seed in range(200):
        folds = list(StratifiedKFold(2, shuffle=True, random_state=seed).split(x, y))
        control = np.random.default_rng(seed).permutation(y)
        if any(np.unique(control[train]).size < 2 for train, _ in folds):
            break
    else:
        pytest.fail("no seed puts both shuffled members in one test fold")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = probe(x, y, ProbeConfig(seed=seed))
        assert np.isnan(_reference(x, y, ProbeConfig(seed=seed))[1])
    assert r.k == 2 and not math.isnan(r.accuracy) and math.isnan(r.control_accuracy)


def test_blas_threads_are_set_for_the_fits_and_restored():
    from threadpoolctl import threadpool_info

    before = [i["num_threads"] for i in threadpool_info()]
    x, y = _separable(n=60, d=6, n_classes=2)
    assert probe(x, y, ProbeConfig(blas_threads=1)).accuracy == probe(x, y, ProbeConfig(blas_threads=2)).accuracy
    assert [i["num_threads"] for i in threadpool_info()] == before
    with pytest.raises(InvalidParameterError, match="blas_threads"):
        probe(x, y, ProbeConfig(blas_threads=0))
