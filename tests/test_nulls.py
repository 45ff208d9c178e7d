"""Telling a precursor from chance (issue 19): the statistics of ckptgeo.stats and the event rules on
synthetic curves with known answers and on pure noise."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy.stats import binomtest, kstest

from ckptgeo.events import detect as ev
import ckptgeo.stats as st
from ckptgeo.errors import InvalidParameterError

#: the demo's hard schedule (addition-L1: 1000 steps, 50 checkpoints; trainer.checkpoint_steps)
DEMO = np.array([0, 1, 2, 4, 8, 16, 23, 46, 69, 92, 115, 138, 161, 184, 207, 230, 253, 276, 299, 322, 345, 368,
                 391, 414, 437, 460, 483, 506, 529, 552, 575, 598, 621, 644, 667, 690, 713, 736, 759, 782, 805,
                 828, 851, 874, 897, 920, 943, 966, 989, 1000])


# ------------------------------------------------------------------------------------------ rates

def test_binomial_interval_known_values():
    r = st.binomial_interval(7, 10)
    assert (r.k, r.n, r.rate, r.method) == (7, 10, 0.7, "wilson")
    assert (r.low, r.high) == pytest.approx((0.3968, 0.8922), abs=1e-4)
    e = st.binomial_interval(10, 10, method="exact")   # Clopper-Pearson: 0.05 ** (1/10) = 0.7411
    assert (e.low, e.high) == pytest.approx((0.6915, 1.0), abs=1e-4)
    assert st.binomial_interval(0, 0).n == 0 and math.isnan(st.binomial_interval(0, 0).low)
    with pytest.raises(InvalidParameterError, match="0 <= k <= n"):
        st.binomial_interval(3, 2)
    with pytest.raises(InvalidParameterError, match="confidence"):
        st.binomial_interval(1, 2, confidence=1.0)


# ------------------------------------------------------------------------------------------ permutation tests

def test_permutation_test_exact_enumeration_and_strata():
    x = np.array([1.0, 2.0, 3.0, 4.0])
    r = st.permutation_test(lambda o: float(np.dot(x, x[o])), 4)
    # 4! = 24 orders, the identity is the unique maximum of the dot product: p = 1/24
    assert (r.exact, r.n_permutations, r.p_value) == (True, 24, pytest.approx(1 / 24))
    # within strata {0,1} and {2,3}: 2 x 2 = 4 orders, identity still the largest
    r = st.permutation_test(lambda o: float(np.dot(x, x[o])), 4, strata=["a", "a", "b", "b"])
    assert (r.exact, r.n_permutations, r.p_value) == (True, 4, 0.25)
    with pytest.raises(InvalidParameterError, match="one label per item"):
        st.permutation_test(lambda o: 0.0, 4, strata=["a"])


def test_permutation_test_is_deterministic_and_counts_not_seconds():
    rng = np.random.default_rng(3)
    y = rng.normal(size=12)
    f = lambda o: float(np.corrcoef(np.arange(12), y[o])[0, 1])  # noqa: E731
    a = st.permutation_test(f, 12, n_permutations=300, seed=5)
    b = st.permutation_test(f, 12, n_permutations=300, seed=5)
    assert a.p_value == b.p_value and np.array_equal(a.null, b.null) and a.n_permutations == 300
    assert not a.exact and a.p_value >= 1 / 301


def _null_rate_p(seed: int, n_runs: int = 12, n_ckpt: int = 20, n_permutations: int = 199) -> tuple[float, float]:
    """One study under the null: onset and acquisition times independent. The precursor rule (gap over one
    checkpoint) gives a rate; the permutation p of that rate and of a continuous statistic of the pairing."""
    rng = np.random.default_rng(seed)
    onset = rng.uniform(1, n_ckpt, n_runs)
    acq = rng.uniform(1, n_ckpt, n_runs)
    gap = acq[None, :] - onset[:, None]          # gap[i, j]: run i's onset against run j's acquisition
    idx = np.arange(n_runs)
    rate = st.permutation_test(lambda o: float(np.mean(gap[idx, o] > 1)), n_runs,
                               n_permutations=n_permutations, seed=seed)
    smooth = st.permutation_test(lambda o: float(np.mean(np.tanh(gap[idx, o] / 3))), n_runs,
                                 n_permutations=n_permutations, seed=seed)
    return rate.p_value, smooth.p_value


def test_permutation_p_is_uniform_under_the_null():
    """Over 400 independent null studies the p-value of a continuous statistic is uniform (KS), and the precursor
    rate's p (a discrete statistic) rejects at 5% no more often than 5% (within a binomial band)."""
    ps = np.array([_null_rate_p(seed) for seed in range(400)])
    rate_p, cont_p = ps[:, 0], ps[:, 1]
    assert kstest(cont_p, "uniform").pvalue > 0.01
    assert abs(np.mean(cont_p <= 0.05) - 0.05) < 3 * math.sqrt(0.05 * 0.95 / 400)
    # discrete: valid (at most alpha, up to sampling) and not degenerate
    k = int(np.sum(rate_p <= 0.05))
    assert binomtest(k, 400, 0.05, alternative="greater").pvalue > 0.01
    assert 0.3 < np.median(rate_p) < 0.8


def test_circular_shift_test():
    r = st.circular_shift_test(lambda s: float(np.sum(s == 0)), [5, 5])
    assert (r.exact, r.n_permutations, r.p_value) == (True, 25, pytest.approx(1 / 25))
    r = st.circular_shift_test(lambda s: float(np.sum(s == 0)), [50] * 5, n_permutations=500, seed=2)
    assert not r.exact and r.p_value < 0.01


# ------------------------------------------------------------------------------------------ noise

def test_noise_curves_and_robust_sd():
    c = st.noise_curves(DEMO, n_curves=500, seed=0, level=40.0, relative_sd=0.1)
    assert c.shape == (500, DEMO.size)
    assert c.mean() == pytest.approx(40.0, rel=0.01) and c.std() == pytest.approx(4.0, rel=0.05)
    assert st.robust_noise_sd(c[0]) == pytest.approx(4.0, rel=0.35)
    w = st.noise_curves(DEMO, n_curves=2000, seed=0, kind="random_walk", relative_sd=0.1)
    assert w[:, 0].std() == 0.0 and w[:, -1].std() == pytest.approx(0.1, rel=0.1)
    with pytest.raises(InvalidParameterError, match="kind"):
        st.noise_curves(DEMO, kind="pink")


def _old_rule(acquisition_step):
    """The rule before issue 19: any dip is a collapse (min_drop 0), any onset before acquisition a precursor."""
    def fires(s, v):
        a = ev.acquisition_at(s, acquisition_step)
        o = ev.recovery_onset(s, v, ev.collapse_point(s, v, a.step, min_drop=0.0))
        return o.step is not None and o.step < a.step
    return fires


def _new_rule(acquisition_step):
    return lambda s, v: ev.curve_events(s, v, ev.acquisition_at(s, acquisition_step)).precursor


def test_old_rule_fires_on_noise_as_the_issue_found():
    """The issue's numbers at the demo's schedule: iid noise, acquisition at the 3rd / 12th checkpoint."""
    assert st.false_positive_rate(_old_rule(int(DEMO[3])), DEMO, n_curves=600, seed=1).rate == \
        pytest.approx(0.31, abs=0.05)
    assert st.false_positive_rate(_old_rule(int(DEMO[12])), DEMO, n_curves=600, seed=1).rate == \
        pytest.approx(0.83, abs=0.05)
    # the new rule at realistic RankMe jitter (5% of its value): never
    r = st.false_positive_rate(_new_rule(int(DEMO[27])), DEMO, n_curves=600, seed=1, relative_sd=0.05)
    assert r.k == 0 and r.high < 0.01


def test_noise_curves_give_precursor_rates_at_the_stated_false_positive_rate():
    """Runs of pure noise (20% jitter, where the new rule still fires often): the rate the rule finds on them is
    the false-positive rate stated for that schedule, within its binomial band; the null does not call it real."""
    A = int(DEMO[20])
    stated = st.false_positive_rate(_new_rule(A), DEMO, n_curves=1000, seed=11, relative_sd=0.2, level=40.0)
    assert 0.3 < stated.rate < 0.9
    runs = st.noise_curves(DEMO, n_curves=300, seed=99, relative_sd=0.2, level=40.0)   # other draws
    k = sum(ev.curve_events(DEMO, v, ev.acquisition_at(DEMO, A)).precursor for v in runs)
    assert binomtest(int(k), 300, stated.rate).pvalue > 0.01


# ------------------------------------------------------------------------------------------ planted leads

def _planted(grid, acq_index: int, lead: int, n_after: int = 4):
    """RankMe 40 -> 4 from the 2nd checkpoint, back to 30 at ``acq_index - lead``; accuracy 0.9 from acq_index."""
    n = len(grid)
    rec = acq_index - lead
    rank = [40.0] + [4.0] * (rec - 1) + [30.0] * (n - rec)
    acc = [0.0] * acq_index + [0.9] * (n - acq_index)
    return rank, acc


@pytest.mark.parametrize("lead, status", [(5, "precursor"), (3, "precursor"), (2, "precursor"), (1, "unresolved"),
                                          (0, "synchronous"), (-1, "unresolved"), (-3, "lagging")])
def test_a_planted_lead_of_k_checkpoints_is_found_with_gap_k(lead, status):
    grid = DEMO[:30]
    a_i = 20
    rank, acc = _planted(grid, a_i, lead)
    acq = ev.acquisition_step(grid, acc)
    if lead < 0:   # a lagging recovery: collapse before acquisition, recovery after it
        rank = [40.0] + [4.0] * (a_i - lead - 1) + [30.0] * (len(grid) - a_i + lead)
    ce = ev.curve_events(grid, rank, acq)
    g = ce.gap
    assert acq.step == grid[a_i] and ce.onset.step == grid[a_i - lead]
    assert (g.status, g.gap_checkpoints, g.gap_steps) == (status, lead, int(grid[a_i] - grid[a_i - lead]))
    assert g.precursor is (status == "precursor")
    assert g.gap_low_steps <= g.gap_steps <= g.gap_high_steps


def test_gap_interval_and_resolution_on_an_uneven_grid():
    """Onset at 16 (previous checkpoint 8), acquisition at 46 (previous 23): gap 30 in (23-16, 46-8) = (7, 38);
    the resolution is the larger spacing before either event, 23."""
    acq = ev.acquisition_at(DEMO, 46)
    g = ev.precursor_gap(acq, ev.Onset(16, 5, 1.0, "found", None, 8, 7))
    assert (g.gap_steps, g.gap_checkpoints, g.gap_low_steps, g.gap_high_steps, g.resolution_steps) == \
        (30, 2, 7, 38, 23)
    assert g.status == "precursor"
    # the same two checkpoints apart, with a 25-step spacing before acquisition: 30 > 25 still resolves
    g = ev.precursor_gap(ev.acquisition_at(DEMO, 46), ev.Onset(23, 6, 1.0, "found", None, 7, 23))
    assert (g.gap_steps, g.gap_checkpoints, g.status) == (23, 1, "unresolved")


def test_accuracy_onset_is_measured_from_chance():
    steps = list(range(0, 100, 10))
    acc = [0.5, 0.5, 0.52, 0.58, 0.6, 0.7, 0.9, 1.0, 1.0, 1.0]
    # from chance 0.5: 10% of the way to 1.0 is 0.55, first at step 30; from 0 it would be any checkpoint
    o = ev.accuracy_onset(steps, acc, chance=0.5)
    assert (o.step, o.level) == (30, pytest.approx(0.55))
    assert ev.accuracy_onset(steps, [0.5] * 10, chance=0.5).status == "not_found"
    assert ev.accuracy_onset(steps, [0.1] * 5 + [0.9] * 5).step == 50   # no chance: from the first value


# ------------------------------------------------------------------------------------------ bootstrap, Kendall

def test_hierarchical_bootstrap_resamples_tasks_then_seeds():
    rng = np.random.default_rng(0)
    rows = []
    for t in range(6):
        task_effect = rng.normal(0, 1.0)
        for s in range(3):
            rows += [{"task": t, "seed": s, "x": task_effect + rng.normal(0, 0.1)}]
    d = pd.DataFrame(rows).assign(row=range(len(rows)))
    r = st.hierarchical_bootstrap(d, lambda f: f["x"].mean(), n_resamples=400, seed=1)
    assert r.n_groups == (6, 18) and r.levels == ("task", "seed")
    assert r.low < r.estimate < r.high
    # resampling rows as if independent ignores that the 3 seeds of a task share its effect: about sqrt(3)
    # times narrower (the task effect, sd 1, dominates the seed noise, sd 0.1)
    naive = st.hierarchical_bootstrap(d, lambda f: f["x"].mean(), levels=("row",), n_resamples=400, seed=1)
    assert (r.high - r.low) > 1.4 * (naive.high - naive.low)
    again = st.hierarchical_bootstrap(d, lambda f: f["x"].mean(), n_resamples=400, seed=1)
    assert (again.low, again.high) == (r.low, r.high)
    with pytest.raises(InvalidParameterError, match="no column 'size'"):
        st.hierarchical_bootstrap(d, len, levels=("size",))


def test_kendall_tau_with_ties_and_permutation_p():
    r = st.kendall_tau([1, 2, 3, 4, 5], [50, 40, 30, 20, 10], alternative="less")
    assert (r.tau, r.exact, r.n_permutations, r.n_tied_y) == (-1.0, True, 120, 0)
    assert r.p_value == pytest.approx(1 / 120)
    two = st.kendall_tau([1, 2], [20, 10])      # two layers: never evidence
    assert two.tau == -1.0 and two.p_value == 1.0
    tied = st.kendall_tau([1, 2, 3, 4], [30, 30, 10, 10])
    assert tied.n_tied_y == 2 and tied.tau == pytest.approx(-4 / math.sqrt(6 * 4))
    from scipy.stats import kendalltau
    assert tied.tau == pytest.approx(kendalltau([1, 2, 3, 4], [30, 30, 10, 10]).statistic)
    flat = st.kendall_tau([1, 2, 3], [5, 5, 5])
    assert math.isnan(flat.tau) and flat.n_tied_y == 3


# ------------------------------------------------------------------------------------------ analyze on noise

def _noise_dataset(root, n_runs: int, *, seed: int, lead: int | None = None, sd: float = 0.2):
    """n_runs of one task, each its own model (seed), on a 25-checkpoint grid; acquisition at varied checkpoints.
    RankMe is pure noise (``lead`` None) or collapses and recovers ``lead`` checkpoints before acquisition."""
    rng = np.random.default_rng(seed)
    grid = list(range(0, 250, 10))
    geo, beh = [], []
    common = dict(commit="0" * 40, tokens=None, ckptgeo_version="0", n_samples=200, position="last",
                  centered=False, dtype="float64", epsilon=1e-7, config_hash="c1")
    for r in range(n_runs):
        a_i = int(rng.integers(6, 19))
        acc = [0.02] * a_i + [0.95] * (len(grid) - a_i)
        if lead is None:
            rank = 40.0 * (1 + sd * rng.standard_normal(len(grid)))
        else:
            c_i = int(rng.integers(1, a_i - lead))
            rank = np.r_[[40.0] * c_i, [4.0] * (a_i - lead - c_i), [30.0] * (len(grid) - a_i + lead)]
            rank = rank * (1 + 0.01 * rng.standard_normal(len(grid)))
        model = f"toy-2x16-s{r}"
        for i, s in enumerate(grid):
            row = dict(model=model, revision=f"step{s}", step=s, suite="add-L2", seed=0, **common)
            beh.append(row | dict(metric="accuracy", value=acc[i], n_items=200, chance=0.01, kind="generation"))
            geo.append(row | dict(layer=2, metric="rankme", index=None, value=float(rank[i]), reason=None,
                                  settings="{}", seconds=0.0))
    (root / "geometry").mkdir(parents=True)
    (root / "behavior").mkdir()
    pd.DataFrame(geo).to_parquet(root / "geometry" / "p.parquet")
    pd.DataFrame(beh).to_parquet(root / "behavior" / "p.parquet")
    return root


def test_analyze_on_noise_states_its_false_positive_rate_and_finds_no_precursor(tmp_path):
    from ckptgeo.analysis import analyze
    from ckptgeo.analysis.pipeline import read_rules

    res = analyze(_noise_dataset(tmp_path / "noise", 24, seed=4), n_noise_curves=100, n_permutations=299)
    r = res.precursor_rates.iloc[0]
    assert r["n_counted"] == 24
    # the rate found on iid noise runs agrees with the rate stated for iid noise at their own variance
    assert 0.2 < r["iid_rate"] < 0.9 and r["iid_rate_high"] - r["iid_rate_low"] < 0.1
    assert binomtest(int(r["n_precursor"]), 24, r["iid_rate"]).pvalue > 0.01
    assert r["rate_low"] <= r["iid_rate"] <= r["rate_high"]
    assert r["p_value"] > 0.05 and r["verdict"] == "not_above_null"
    e = res.events
    assert e["iid_fpr"].notna().all() and (e["own_relative_sd"].between(0.1, 0.3)).all()
    assert e["jitter_fpr"].notna().all() and e["walk_fpr"].notna().all()
    rules = read_rules(tmp_path / "noise" / "summary" / "precursor_rates.parquet")
    assert (rules["min_drop"], rules["resolution_checkpoints"], rules["n_permutations"]) == (0.25, 1, 299)
    assert json.dumps(read_rules(tmp_path / "noise" / "events" / "events.parquet")) == json.dumps(rules)


def test_analyze_finds_a_planted_lead_above_its_null(tmp_path):
    from ckptgeo.analysis import analyze

    res = analyze(_noise_dataset(tmp_path / "lead", 12, seed=5, lead=3), n_noise_curves=50, n_permutations=299)
    r = res.precursor_rates.iloc[0]
    assert (r["n_counted"], r["n_precursor"]) == (12, 12)
    assert set(res.events["gap_checkpoints"]) == {3} and set(res.events["gap_steps"]) == {30}
    assert r["null_rate"] < 0.8 and r["p_value"] < 0.01 and r["verdict"] == "above_null"
    assert r["jitter_rate"] < 0.05   # at these curves' own (1%) jitter the detector does not fire on noise
    s = res.difficulty_slope.iloc[0]
    # a constant lead: no slope on acquisition time; the null's slope (later acquisition leaves room for longer
    # "gaps") is positive
    assert s["slope_checkpoints_per_1k_steps"] == pytest.approx(0.0, abs=1e-9) and s["null_slope"] > 0
