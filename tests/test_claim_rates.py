"""The claim table's rates and their intervals (never of zero width), the power each row states before its
verdict, and the precursor rate it shares with ``analyze``."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from ckptgeo.claimtable.rows.floors import floor_modular
from ckptgeo.claimtable.registry import ClaimContext
from ckptgeo.claimtable.verdicts import rate_of


def _runs(n_settings: int, seeds: int = 3) -> pd.DataFrame:
    return pd.DataFrame([dict(model=f"t{k}-L1-tiny-s{s}", task=f"t{k}", level=1, size="tiny", seed=s)
                         for k in range(n_settings) for s in range(1, seeds + 1)])


def test_a_rate_of_100_or_0_percent_has_the_exact_interval_not_zero_width():
    """The cpu study's order row read 54/54 [100%, 100%] (a bootstrap of a constant); the exact interval of
    54/54 is [93.4%, 100%], of 0/18 [0%, 18.5%]."""
    rows = _runs(18)
    rate, lo, hi, how = rate_of(ClaimContext(rows), rows, pd.Series([True] * 54))
    assert rate == 1.0 and lo == pytest.approx(0.025 ** (1 / 54), abs=1e-4) and hi == 1.0, (lo, hi)
    assert lo == pytest.approx(0.9340, abs=1e-3) and "exact" in how
    rows = _runs(6)
    rate, lo, hi, _ = rate_of(ClaimContext(rows), rows, pd.Series([False] * 18))
    assert (rate, lo) == (0.0, 0.0) and hi == pytest.approx(1 - 0.025 ** (1 / 18), abs=1e-4)


def test_a_rate_over_settings_is_as_wide_as_their_spread_and_flagged_below_five():
    """2 of 18 runs over 6 settings (both hits in one setting): t on the 6 setting rates (0, 0, 0, 0, 0, 2/3)
    reaches below 0, clipped, and above the exact upper bound 34.7%; 3 settings: the exact range, flagged."""
    rows = _runs(6)
    hits = pd.Series([True, True] + [False] * 16)
    rate, lo, hi, how = rate_of(ClaimContext(rows), rows, hits)
    means = np.array([2 / 3, 0, 0, 0, 0, 0])
    from scipy.stats import t

    t_hi = means.mean() + t.ppf(0.975, 5) * means.std(ddof=1) / np.sqrt(6)
    assert rate == pytest.approx(2 / 18) and lo == 0.0 and hi == pytest.approx(t_hi) and hi > 0.347
    rows = _runs(3)
    rate, lo, hi, how = rate_of(ClaimContext(rows), rows, pd.Series([True] * 9))
    assert lo == pytest.approx(0.025 ** (1 / 9), abs=1e-4) and "3 settings" in how and "75%" in how


def _floors(values: dict) -> ClaimContext:
    rows = [dict(model=f"modular-L1-{size}-s{s}", task="modular", level=1, size=size, seed=s, collapse_floor=v)
            for size, vs in values.items() for s, v in enumerate(vs, 1)]
    return ClaimContext(pd.DataFrame(rows))


def test_the_modular_floor_needs_a_95_percent_interval_at_every_size():
    """Three identical seeds per size gave a zero-width bootstrap interval [1.80, 1.80] and "reproduced"; three
    seeds have no 95% interval (their range covers the median 75% of the time)."""
    few = floor_modular(_floors({"tiny": [1.8, 1.8, 1.8], "mini": [2.1, 2.1, 2.1]}))
    assert few.verdict == "inconclusive" and "tiny: 3 seed(s) give 75% coverage" in few.reason, few
    six = floor_modular(_floors({"tiny": [1.7, 1.8, 1.9, 1.8, 1.75, 1.85], "mini": [2.0, 2.1, 2.2, 2.1, 2.05, 2.15]}))
    assert six.verdict == "reproduced" and "tiny 1.80 [1.73, 1.87]" in six.measured  # 1.80 +- t(5) 0.0707 / sqrt 6, six


@pytest.mark.parametrize("kind", ["iid", "random_walk"])
def test_a_null_copy_moves_each_measurement_interval_with_its_value(kind):
    """The rule reads each checkpoint's half-width (an onset or collapse only where the change exceeds it): a
    copy keeps the real half-widths, centred on the new values (the copy used to keep the real bounds, which its
    new values left)."""
    from ckptgeo.claimtable.calibrate import null_copy

    steps = np.arange(0, 120, 10)
    value = np.linspace(20, 4, 12)
    half = np.linspace(0.1, 0.6, 12)
    curves = pd.DataFrame(dict(model="m", suite="s", metric="rankme", layer=2, step=steps, value=value,
                               value_low=value - half, value_high=value + half))
    out, _ = null_copy(curves, pd.DataFrame(), kind, np.random.default_rng(0))
    assert not np.allclose(out["value"], value)
    assert np.allclose((out["value_high"] - out["value_low"]) / 2, half)
    assert np.allclose((out["value_high"] + out["value_low"]) / 2, out["value"])


# ------------------------------------------------------------------------------------- power before verdicts

GRID = np.arange(0, 300, 10, dtype=float)     # 30 checkpoints, one schedule


def _order_context(n_runs: int, *, shape: str = "in order", n_power: int = 10):
    """``n_runs`` runs on one schedule acquiring at checkpoints 10, 12, 14, ...: RankMe falls by checkpoint 2 and
    recovers 3 checkpoints before acquisition ("in order"), falls and recovers after it ("late"), or stays flat."""
    from ckptgeo.claimtable.chance import Curve

    rows, curves, acc = [], {}, {}
    for k in range(n_runs):
        model, acq_idx = f"t{k}-L1-tiny-s1", 10 + 2 * (k % 8)
        v = np.where(np.arange(30) < 2, 20.0, 4.0)
        v[acq_idx - 3:] = 14.0
        col, rec = GRID[2], GRID[acq_idx - 3]
        if shape == "late":
            v = np.where(np.arange(30) < acq_idx + 1, 20.0, np.where(np.arange(30) < acq_idx + 4, 4.0, 14.0))
            col, rec = GRID[acq_idx + 1], GRID[acq_idx + 4]
        elif shape == "flat":
            v, col, rec = np.full(30, 9.0), np.nan, np.nan
        rows.append(dict(model=model, task=f"t{k}", level=1, size="tiny", seed=1, counted=True, hard=False,
                         acquisition_step=GRID[acq_idx], collapse_step=col, onset_step=rec))
        curves[model] = Curve(GRID, v, int(GRID[acq_idx]), "A", "recovery")
        acc[model] = (GRID, np.where(np.arange(30) >= acq_idx, 0.95, 0.0), 0.01)
    return ClaimContext(pd.DataFrame(rows), curves, acc, n_permutations=199, n_power=n_power)


def test_holds_verdict_says_not_reproduced_only_with_power_at_the_margin():
    from ckptgeo.claimtable.verdicts import holds_verdict

    assert holds_verdict(0.5, 10, "x", 0.001, alpha=0.05, mde=1.0)[0] == "not reproduced"
    verdict, why = holds_verdict(0.5, 10, "x", 0.001, alpha=0.05, mde=float("inf"))
    assert verdict == "inconclusive" and "power < 80%" in why
    assert holds_verdict(0.5, 10, "x", 0.001, alpha=0.05, mde=-0.8, margin=0.75, unit="in Kendall tau")[0] == "inconclusive"
    assert holds_verdict(0.5, 10, "x", 0.001, alpha=0.05, mde=-0.7, margin=0.75, unit="in Kendall tau")[0] == "not reproduced"
    assert holds_verdict(0.01, 10, "x", 0.001, alpha=0.05, mde=float("inf"))[0] == "reproduced"


def test_the_order_row_states_its_minimum_detectable_lead():
    """16 runs in order, 3 checkpoints ahead: reproduced, and a planted 1-checkpoint recovery lead is found
    (MDE 1). Collapse and recovery after acquisition: 0/16, not reproduced at MDE 1. Flat curves (a detector that
    never fires: nothing to plant) state no detectable lead and stay inconclusive (they read "not reproduced")."""
    from ckptgeo.claimtable.rows.order import order

    row = order(_order_context(16))
    assert row.verdict == "reproduced" and row.mde == 1.0 and "MDE 1 checkpoints" in row.measured, row
    late = order(_order_context(16, shape="late"))
    assert late.value == 0.0 and late.mde == 1.0 and late.verdict == "not reproduced", late
    flat = order(_order_context(16, shape="flat"))
    assert flat.value == 0.0 and flat.mde == float("inf") and flat.verdict == "inconclusive", flat
    assert "MDE > 8 checkpoints" in flat.measured and "power < 80%" in flat.reason


def _probe_lead(ctx: ClaimContext, leads: int) -> pd.DataFrame:
    """The first ``leads`` runs' probes read the target 2 checkpoints before acquisition, the rest 2 after."""
    rows = []
    for k, r in enumerate(ctx.runs.itertuples()):
        at = np.searchsorted(GRID, r.acquisition_step) + (-2 if k < leads else 2)
        rows.append(dict(model=r.model, layer=1, status="leads" if k < leads else "lags", probe_step=GRID[at]))
    return pd.DataFrame(rows)


def test_the_probe_row_is_inconclusive_without_power_and_not_reproduced_with_it():
    """The cpu study's probe row read "not reproduced (0.11, p = 0.87)" with no power stated. 16 runs on one
    schedule, 2 leading: a planted lead of 1 checkpoint is found (MDE 1): not reproduced. 4 runs: 24 relabellings,
    the smallest p 1/24, but a planted lead is found too rarely: inconclusive."""
    from ckptgeo.claimtable.rows.probes import probe_lead

    ctx = _order_context(16)
    row = probe_lead(dataclasses.replace(ctx, tables={"probe_lead": _probe_lead(ctx, 2), "probes": None}))
    assert row.value == pytest.approx(2 / 16) and row.p_value >= 0.05, row
    assert row.verdict == "not reproduced" and row.mde <= 2 and "MDE" in row.measured, row
    few = _order_context(4)
    row = probe_lead(dataclasses.replace(few, tables={"probe_lead": _probe_lead(few, 0), "probes": None}))
    assert row.p_value >= 0.05 and row.verdict == "inconclusive" and "power < 80%" in row.reason, row
