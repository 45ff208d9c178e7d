"""The top-down row's nulls on runs with known answers: a planted top-down collapse reproduces; noise whose relative
size grows with depth (onsets ordered by noise alone) does not, though the within-run permutation alone rejects it;
iid null copies of a planted dataset read "reproduced" about as often as alpha."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
from scipy.stats import kendalltau

from ckptgeo.claimtable.calibrate import null_copy
from ckptgeo.claimtable.rows.top_down import _tau_rows, _top_down
from ckptgeo.claimtable.registry import ClaimContext
from ckptgeo.analysis.config import AnalysisConfig

ALPHA = AnalysisConfig().alpha   # the level every claim row tests at

STEPS = np.arange(0, 400, 10)
BLOCKS = 5   # layers 1..5; layer 6 is the post-final-norm layer


def _curves(values: dict) -> pd.DataFrame:
    """{(model, layer): values over STEPS} -> a curves table (rankme, one variant)."""
    return pd.DataFrame([dict(model=m, suite="s", config_hash="g", metric="rankme", layer=layer, step=int(s),
                              value=float(v), centered=False)
                         for (m, layer), vals in values.items() for s, v in zip(STEPS, vals)])


def _events(curves: pd.DataFrame) -> pd.DataFrame:
    """The events table's collapse onsets of ``curves``, by its own rule (AnalysisConfig.collapse_onset)."""
    cfg = AnalysisConfig()
    rows = []
    for (m, layer), g in curves.groupby(["model", "layer"]):
        g = g.sort_values("step")
        step = cfg.collapse_onset(g["step"].to_numpy(), g["value"].to_numpy()).step
        rows.append(dict(model=m, suite="s", config_hash="g", metric="rankme", layer=layer, centered=False,
                         collapse_onset_step=np.nan if step is None else float(step)))
    return pd.DataFrame(rows)


def _row(curves: pd.DataFrame, *, n_permutations: int = 199, seed: int = 0):
    events = _events(curves)
    ctx = ClaimContext(pd.DataFrame({"model": sorted(curves["model"].unique())}), config=AnalysisConfig(),
                       n_permutations=n_permutations, seed=seed, tables={"events": events, "curves": curves})
    return _top_down(ctx, events)


def _null_p(row, name: str) -> float:
    """The p of one null as the row's ``measured`` states it."""
    return float(re.search(re.escape(name) + r"[^:]*: mean tau [-+.\d]+, p ([\d.e-]+)", row.measured).group(1))


def _planted(n_runs: int, seed: int) -> pd.DataFrame:
    """Top-down collapse: block k falls from 20 to 4 at step 300 - 50 k (+- 10), deeper first; noise sd 0.5."""
    rng = np.random.default_rng(seed)
    values = {}
    for r in range(n_runs):
        for k in range(1, BLOCKS + 1):
            at = 300 - 50 * k + 10 * int(rng.integers(-1, 2))
            values[(f"run{r}", k)] = np.where(STEPS < at, 20.0, 4.0) + rng.normal(0, 0.5, STEPS.size)
        values[(f"run{r}", BLOCKS + 1)] = values[(f"run{r}", BLOCKS)] + rng.normal(0, 0.5, STEPS.size)
    return _curves(values)


def _confound(n_runs: int, seed: int) -> pd.DataFrame:
    """No collapse at all: iid Gaussian noise around 20 whose relative sd grows with depth (0.17 at block 1 to 0.65
    at block 5), so the collapse-onset rule fires earlier the deeper the block."""
    rng = np.random.default_rng(seed)
    values = {(f"run{r}", k): 20.0 * (1 + (0.05 + 0.12 * min(k, BLOCKS)) * rng.standard_normal(STEPS.size))
              for r in range(n_runs) for k in range(1, BLOCKS + 2)}
    return _curves(values)


def test_tau_rows_is_kendall_tau_b_on_the_finite_entries():
    rng = np.random.default_rng(1)
    x = np.arange(1.0, 7.0)
    ys = rng.integers(0, 4, size=(200, 6)).astype(float)       # many ties
    ys[rng.random(ys.shape) < 0.3] = np.nan
    got = _tau_rows(x, ys)
    for y, t in zip(ys, got):
        ok = np.isfinite(y)
        want = kendalltau(x[ok], y[ok]).statistic if ok.sum() >= 3 else np.nan
        assert (np.isnan(t) and np.isnan(want)) or t == pytest.approx(want), (y, t, want)
    assert np.isnan(got).any() and np.isfinite(got).sum() > 100


def test_planted_top_down_collapse_is_reproduced():
    row = _row(_planted(12, seed=0))
    assert row.verdict == "reproduced", row
    assert row.value == pytest.approx(-1.0)
    # the noise nulls give deeper blocks earlier onsets too (their own spread grows with depth here), yet far less
    iid = float(re.search(r"iid noise[^:]*: mean tau ([-+.\d]+)", row.measured).group(1))
    assert -0.8 < iid < 0.0, row.measured
    assert row.p_value == pytest.approx(1 / 200)
    assert "largest p against" in row.reason and "random walk" in row.test


def test_noise_growing_with_depth_is_not_reproduced_though_permutation_rejects():
    """Five such datasets of 24 runs: the permutation-only p (the old test) rejects on each, the row on none."""
    for seed in range(5):
        curves = _confound(24, seed=seed)
        row = _row(curves, n_permutations=99)
        assert row.value < -0.15, row.measured        # the onsets are ordered by depth: noise alone did that
        old = _null_p(row, "onsets permuted within runs")
        assert old <= ALPHA, (seed, row.measured)     # the permutation-only test read "reproduced"
        assert row.p_value > ALPHA and row.verdict != "reproduced", (seed, row)
        assert row.p_value == max(old, _null_p(row, "iid noise"), _null_p(row, "random walk"))
        assert row.null < -0.15                       # the reported null (the largest p's) sits near the observed
    assert _row(curves, n_permutations=99).p_value == row.p_value   # deterministic under the seed


def test_iid_null_copies_read_reproduced_about_as_often_as_alpha():
    """iid copies (calibrate's null_copy) of a planted top-down dataset: the depth ordering of the noise spread is
    kept, the ordering in time is not. The permutation alone rejects often; the row does not."""
    base = _planted(10, seed=1)
    rng = np.random.default_rng(7)
    new, old, iid = [], [], []
    for c in range(24):
        copy, _ = null_copy(base, pd.DataFrame(columns=["model", "step"]), "iid", rng)
        row = _row(copy, n_permutations=99, seed=c)
        if np.isnan(row.p_value):
            continue
        new.append(row.p_value)
        old.append(_null_p(row, "onsets permuted within runs"))
        iid.append(_null_p(row, "iid noise"))
    new, old, iid = map(np.asarray, (new, old, iid))
    assert len(new) >= 20
    assert np.mean(old <= ALPHA) >= 0.25, old       # the defect: noise reads top-down against permutation
    assert np.mean(new <= ALPHA) <= 0.1, new        # the row: false reproduction near alpha
    assert 0.3 < np.mean(iid) < 0.7, iid            # the iid null's own p: roughly uniform


def test_without_the_curves_there_is_no_noise_null_and_no_verdict():
    curves = _planted(4, seed=2)
    events = _events(curves)
    row = _top_down(ClaimContext(pd.DataFrame({"model": sorted(curves["model"].unique())})), events)
    assert row.value == pytest.approx(-1.0) and np.isnan(row.p_value)
    assert row.verdict == "inconclusive" and "no noise null without the curves table" in row.reason
