"""One permutation null for a rate judged against acquisition (issue 32, item 4): ``analyze``'s precursor_rates
and the claim table's null give the same null and p-value on the same runs, and a permuted acquisition never
leaves its checkpoint schedule."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from ckptgeo.events import acquisition_null as an

#: two checkpoint schedules of 25 checkpoints: B runs twice as long, so most of its acquisitions fall after
#: the last checkpoint of A
SCHEDULES = {"A": list(range(0, 250, 10)), "B": list(range(0, 500, 20))}
_COMMON = dict(commit="0" * 40, tokens=None, ckptgeo_version="0", n_samples=200, position="last",
               centered=False, dtype="float64", epsilon=1e-7, seed=0)


def _two_schedules(root, seed: int = 0):
    """Per schedule, 4 easy (copy-L1) and 4 hard (parity-L2) runs; acquisition at checkpoint 6..18; RankMe
    collapses and recovers at a checkpoint drawn apart from acquisition (a geometry that knows nothing of it)."""
    rng = np.random.default_rng(seed)
    geo, beh = [], []
    k = 0
    for name, grid in SCHEDULES.items():
        for task, level in (("copy", 1), ("parity", 2)):
            for _ in range(4):
                model, suite = f"{task}-L{level}-tiny-s{k}", f"{task}-L{level}"
                k += 1
                a_i, c_i, r_i = int(rng.integers(6, 19)), int(rng.integers(1, 4)), int(rng.integers(5, 20))
                acc = [0.02] * a_i + [0.95] * (len(grid) - a_i)
                rank = np.r_[[40.0] * c_i, [4.0] * (r_i - c_i), [30.0] * (len(grid) - r_i)]
                rank = rank * (1 + 0.01 * rng.standard_normal(len(grid)))
                for i, s in enumerate(grid):
                    row = dict(model=model, revision=f"step{s}", step=s, suite=suite, **_COMMON)
                    beh.append(row | dict(config_hash="b", metric="accuracy", value=acc[i], n_items=200, chance=0.01,
                                          kind="generation"))
                    geo.append(row | dict(config_hash="g", layer=2, metric="rankme", index=None, value=float(rank[i]),
                                          reason=None, settings="{}", seconds=0.0))
    for table, rows in (("geometry", geo), ("behavior", beh)):
        (root / table).mkdir(parents=True)
        pd.DataFrame(rows).to_parquet(root / table / "part.parquet")
    return root


def test_analyze_and_the_claim_table_give_one_null_for_one_rate(tmp_path):
    """Before: analyze permuted the hard runs' acquisition steps among themselves across both schedules (a B
    step looked up on an A grid), the claim table among all acquired runs within a schedule."""
    from ckptgeo.analysis import analyze
    from ckptgeo.claimtable.chance import permutation_null
    from ckptgeo.claimtable.table import claim_context

    res = analyze(_two_schedules(tmp_path / "d"), write=False, n_noise_curves=20, n_permutations=199)
    rates = res.precursor_rates.set_index("difficulty")
    ctx = claim_context(res.events, res.curves, res.accuracy, config=res.config)
    assert {c.stratum for c in ctx.curves.values()} == {an.schedule(g) for g in SCHEDULES.values()}
    for difficulty in ("L1", "L2"):
        row = rates.loc[difficulty]
        e = res.events
        judged = e.loc[(e["difficulty"] == difficulty) & (e["metric"] == "rankme"), "model"].unique()
        assert len(judged) == 8 and row["n_counted"] == 8
        claim = permutation_null(ctx.curves, list(judged), config=res.config, n_permutations=199,
                                 seed=res.config.seed)
        assert claim.statistic == pytest.approx(row["precursor_rate"])
        assert claim.null_mean == pytest.approx(row["null_rate"], abs=1e-12)
        assert claim.p_value == pytest.approx(row["p_value"], abs=1e-12)
        assert (claim.null_low, claim.null_high) == (pytest.approx(row["null_low"]), pytest.approx(row["null_high"]))
        assert 0 < row["null_rate"] < 1 and 0 < row["p_value"] <= 1


def test_a_permuted_acquisition_never_leaves_its_schedule():
    """Every outcome the null asks for is a judged run at an acquisition step of its own schedule, and the
    pool's order does not change the null."""
    steps = [30, 60, 90, 200, 260, 340, 50, 70]
    strata = ["A", "A", "A", "B", "B", "B", "A", "B"]
    asked = []

    def outcome(i, step):
        asked.append((i, step))
        return float(step >= 60)

    res = an.rate_null(outcome, steps, strata, [0, 1, 3, 4, 5], keys=list("abcdefgh"), n_permutations=999)
    mine = {s: {a for a, t in zip(steps, strata) if t == s} for s in "AB"}
    assert asked and all(step in mine[strata[i]] for i, step in asked)
    assert {i for i, _ in asked} == {0, 1, 3, 4, 5}
    # exact: 4! x 4! = 576 within-schedule relabellings; the observed rate (0+1+1+1+1)/5
    assert res.exact and res.statistic == pytest.approx(0.8)
    # A's runs draw from {30, 60, 90, 50} (half of them >= 60), B's always >= 60: null mean (2 * 0.5 + 3) / 5
    assert res.null_mean == pytest.approx(0.8)
    order = [7, 6, 5, 4, 3, 2, 1, 0]
    again = an.rate_null(lambda i, s: float(s >= 60), [steps[k] for k in order], [strata[k] for k in order],
                         [order.index(k) for k in (0, 1, 3, 4, 5)], keys=[list("abcdefgh")[k] for k in order],
                         n_permutations=999)
    assert (again.p_value, again.null_mean) == (res.p_value, res.null_mean)
    assert an.rate_null(outcome, steps, strata, [0], min_judged=an.MIN_JUDGED) is None
    assert math.isnan(an.rate_null(lambda i, s: math.nan, steps, strata, [0, 1]).statistic)


def test_the_smallest_detectable_kendall_tau_has_its_known_size():
    """Issue 32, item 7, for the rank rows: three settings can never reject (exact p >= 1/6), so no tau is
    detectable; at 20 distinct settings the normal approximation puts the one-sided 5% test's 80%-power tau
    at (1.645 + 0.842) * sqrt(2 (2n + 5) / (9 n (n - 1))) = 0.40 (a little less: the statistic's spread shrinks
    under the alternative); more settings detect less."""
    from ckptgeo.claimtable.power import kendall_mde

    assert kendall_mde([1, 2, 3], alpha=0.05)[0] == math.inf
    n = 20
    approx = (1.645 + 0.842) * math.sqrt(2 * (2 * n + 5) / (9 * n * (n - 1)))
    mde, table = kendall_mde(np.arange(n), alpha=0.05, seed=1)
    assert approx == pytest.approx(0.403, abs=1e-3)
    assert approx - 0.1 <= mde <= approx + 0.03, (mde, table)
    assert list(table.values())[-1] >= 0.8 > max(list(table.values())[:-1])
    assert kendall_mde(np.arange(40), alpha=0.05, seed=1)[0] < mde
    assert kendall_mde(np.arange(20), alpha=0.05, seed=1) == (mde, table)     # seeded: the same answer
