"""One contract for every registered metric that takes hidden states or the model.

A new metric is held to it with no new test: deterministic under a seed, finite float out, NaN input
rejected with our error, a frozen config with documented defaults, numpydoc sections present.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import math

import pytest
import torch

from ckptgeo.errors import NonFiniteActivationsError
from ckptgeo.metrics.registry import MetricValue, all_metrics
from tests._models import single_thread, tiny_context  # noqa: F401

pytestmark = [pytest.mark.usefixtures("single_thread"), pytest.mark.filterwarnings("ignore::UserWarning")]

SPECS = {name: spec for name, spec in sorted(all_metrics().items())
         if spec.needs in ("model", "hidden_states") and not spec.cross}
#: cross-checkpoint measures: ``fn`` makes an artifact, ``compare`` two artifacts' values
CROSS = {name: spec for name, spec in sorted(all_metrics().items()) if spec.cross}
SECTIONS = ("Parameters", "Returns", "Raises", "References")
#: metrics whose default settings take over ~10 s on the tiny model (llc: 4 chains x 200 SGLD steps);
#: their contract runs with ``-m slow`` (test_llc.py checks determinism on a short chain by default).
SLOW_AT_DEFAULTS = {"llc"}
TIMED = [pytest.param(n, marks=pytest.mark.slow) if n in SLOW_AT_DEFAULTS else n for n in sorted(SPECS)]


def test_the_expected_metrics_are_registered():
    assert {"rankme", "grad_rank", "grad_cov_rank", "hessian", "llc"} <= set(SPECS), sorted(SPECS)


def _hidden_states(seed: int) -> torch.Tensor:
    return torch.randn(20, 8, generator=torch.Generator().manual_seed(seed))


def _run(spec, seed: int = 0):
    config = spec.default_config()
    if spec.needs == "hidden_states":
        return [spec.fn(_hidden_states(seed), config)]
    return spec.fn(tiny_context(seed=seed), config)


def _values(out) -> list[float]:
    return [v.value if isinstance(v, MetricValue) else v for v in out]


@pytest.mark.parametrize("name", TIMED)
def test_finite_float_out_and_deterministic_under_a_seed(name):
    spec = SPECS[name]
    first = _run(spec)
    if spec.needs == "model":
        assert isinstance(first, list) and first and all(isinstance(v, MetricValue) for v in first), first
        for v in first:
            json.dumps(v.extra, allow_nan=False)  # stored as JSON in the row
    values = _values(first)
    assert all(isinstance(v, float) and math.isfinite(v) for v in values), f"{name}: {values}"
    assert _values(_run(spec)) == values, f"{name} is not deterministic under a fixed seed"


@pytest.mark.parametrize("name", sorted(SPECS))
def test_nan_input_is_rejected_with_our_error(name):
    spec = SPECS[name]
    if spec.needs == "hidden_states":
        h = _hidden_states(0)
        h[3, 2] = float("nan")
        with pytest.raises(NonFiniteActivationsError):
            spec.fn(h, spec.default_config())
        return
    ctx = tiny_context()
    with torch.no_grad():
        ctx.model.gpt_neox.layers[0].mlp.dense_4h_to_h.weight[0, 0] = float("nan")
    with pytest.raises(NonFiniteActivationsError):
        spec.fn(ctx, spec.default_config())


def _artifact(spec, seed: int):
    if spec.needs == "hidden_states":
        return {f"s/0/{k}": v for k, v in spec.fn(_hidden_states(seed), spec.default_config()).items()}
    return spec.fn(tiny_context(seed=seed).model, spec.default_config())


def test_the_cross_checkpoint_measures_are_registered():
    assert {"cka", "weight_distance"} <= set(CROSS), sorted(CROSS)


@pytest.mark.parametrize("name", sorted(CROSS))
def test_cross_checkpoint_contract(name):
    """The artifact is deterministic, arrays by name; compare gives finite values in the declared range,
    and a revision compared with itself gives the same value as its mirror pair (symmetry of the partner
    swap is not required; the self value is): CKA 1, distance 0."""
    import numpy as np

    from ckptgeo.metrics.registry import CompareValue

    spec = CROSS[name]
    a, a_again, b = _artifact(spec, 0), _artifact(spec, 0), _artifact(spec, 1)
    assert a and set(a) == set(a_again) and all(np.array_equal(a[k], a_again[k]) for k in a)
    assert all(isinstance(v, np.ndarray) for v in a.values())
    lo, hi = spec.range
    for other in (a, b):
        out = spec.compare(a, other, spec.default_config())
        assert out and all(isinstance(v, CompareValue) for v in out)
        values = [v.value for v in out]
        assert all(math.isfinite(v) and lo <= v <= hi for v in values), (name, values)
        for v in out:
            json.dumps(v.extra, allow_nan=False)
    self_values = [v.value for v in spec.compare(a, a, spec.default_config())]
    assert np.allclose(self_values, self_values[0]) and self_values[0] in (pytest.approx(0.0), pytest.approx(1.0))


@pytest.mark.parametrize("name", sorted(CROSS))
def test_cross_checkpoint_nan_input_is_rejected_with_our_error(name):
    spec = CROSS[name]
    if spec.needs == "hidden_states":
        h = _hidden_states(0)
        h[3, 2] = float("nan")
        with pytest.raises(NonFiniteActivationsError):
            spec.fn(h, spec.default_config())
        return
    model = tiny_context().model
    with torch.no_grad():
        model.gpt_neox.layers[0].mlp.dense_4h_to_h.weight[0, 0] = float("nan")
    with pytest.raises(NonFiniteActivationsError, match="layers.0"):
        spec.fn(model, spec.default_config())


@pytest.mark.parametrize("name", sorted(SPECS) + sorted(CROSS))
def test_config_is_a_frozen_dataclass_with_json_defaults(name):
    spec = {**SPECS, **CROSS}[name]
    assert spec.config is not None and dataclasses.is_dataclass(spec.config), f"{name} has no config dataclass"
    assert spec.config.__dataclass_params__.frozen, f"{name}'s config is not frozen"
    json.dumps(dataclasses.asdict(spec.default_config()), allow_nan=False)
    assert spec.cost in ("cheap", "expensive") and spec.unit


@pytest.mark.parametrize("name", sorted(SPECS) + sorted(CROSS))
def test_docstring_has_numpydoc_sections(name):
    doc = inspect.getdoc({**SPECS, **CROSS}[name].fn) or ""
    for section in SECTIONS:
        assert f"{section}\n{'-' * len(section)}" in doc, f"{name}'s docstring lacks a {section} section"


@pytest.mark.parametrize("name", TIMED)
def test_values_lie_in_the_declared_range(name):
    spec = SPECS[name]
    lo, hi = spec.range
    values = _values(_run(spec))
    assert all(lo <= v <= hi for v in values), f"{name}: {values} outside its declared range [{lo}, {hi}]"


@pytest.mark.parametrize("name", sorted(all_metrics()))
def test_declared_table_and_columns_exist_and_options_are_constrained(name):
    from ckptgeo.store.dataset import SCHEMAS

    spec = all_metrics()[name]
    assert spec.table in SCHEMAS, f"{name} writes to {spec.table!r}, which is not a table"
    fields = {f.name for f in dataclasses.fields(spec.config)}
    for field, column in spec.columns:
        assert field in fields and column in SCHEMAS[spec.table].names, (name, field, column)
    lo, hi = spec.range
    assert lo < hi, (name, spec.range)
    # every option is declared with its constraints (ckptgeo._settings.setting), so --metric-option can check it
    from ckptgeo._settings import declared

    constrained = {f.name for f, s in declared(spec.config) if s.admits}
    assert constrained == fields, f"{name}: options without constraints {sorted(fields - constrained)}"
    spec.configure({})  # the defaults pass their own constraints
