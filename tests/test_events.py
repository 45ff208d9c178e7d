"""Events on single curves with known answers (docs/definitions.md#events)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ckptgeo.events import detect as ev
from ckptgeo.errors import InvalidParameterError

STEPS = [0, 10, 20, 30, 40, 50, 60, 70, 80, 90]
#                       collapse here  |  recovers  | acquired
RANKME = [40.0, 30.0, 10.0, 2.0, 2.5, 3.0, 8.0, 20.0, 30.0, 35.0]
ACC = [0.0, 0.0, 0.0, 0.05, 0.1, 0.2, 0.3, 0.7, 0.9, 0.95]


def test_clear_collapse_recover_acquire():
    acq = ev.acquisition_step(STEPS, ACC)
    assert (acq.step, acq.index, acq.status, acq.threshold, acq.resolution_steps) == (70, 7, "acquired", 0.5, 10)
    col = ev.collapse_point(STEPS, RANKME, acq.step)
    assert (col.step, col.floor, col.first_value, col.drop, col.status) == (30, 2.0, 40.0, 38.0, "collapsed")
    rec = ev.recovery_onset(STEPS, RANKME, col)
    # level = 2 + 0.1 * 38 = 5.8: 2.5 and 3.0 do not reach it, 8.0 at step 60 does
    assert rec.level == pytest.approx(5.8)
    assert (rec.step, rec.status, rec.resolution_steps) == (60, "found", 10)
    gap = ev.precursor_gap(acq, rec)
    # one checkpoint before acquisition: within one spacing, so unresolved (issue 19), not a precursor
    assert (gap.precursor, gap.gap_steps, gap.resolution_steps, gap.status) == (False, 10, 10, "unresolved")
    assert (gap.gap_checkpoints, gap.gap_low_steps, gap.gap_high_steps) == (1, 0, 20)
    half = ev.collapse_onset(STEPS, RANKME)
    assert (half.step, half.level) == (20, 20.0)


def test_recovery_fraction_configurable():
    col = ev.collapse_point(STEPS, RANKME, 70)
    # 30 % of the drop: level 13.4, first reached at step 70 -> synchronous with acquisition
    rec = ev.recovery_onset(STEPS, RANKME, col, recovery=0.3)
    assert rec.step == 70
    acq = ev.acquisition_step(STEPS, ACC)
    gap = ev.precursor_gap(acq, rec)
    assert (gap.precursor, gap.gap_steps, gap.status) == (False, 0, "synchronous")


def test_lagging_recovery_after_acquisition():
    acc = [0, 0, 0, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9]
    acq = ev.acquisition_step(STEPS, acc)
    col = ev.collapse_point(STEPS, RANKME, acq.step)  # minimum among steps 0..20 -> step 20 (10.0)
    assert (col.step, col.floor) == (20, 10.0)
    rec = ev.recovery_onset(STEPS, RANKME, col)  # level 13: after step 20 first >= 13 is 20.0 at step 70
    assert rec.step == 70
    gap = ev.precursor_gap(acq, rec)
    assert (gap.precursor, gap.gap_steps, gap.status) == (False, -40, "lagging")


def test_acquisition_at_first_checkpoint():
    acc = [0.8] * 10
    acq = ev.acquisition_step(STEPS, acc)
    assert (acq.step, acq.index, acq.at_first_checkpoint, acq.resolution_steps) == (0, 0, True, None)
    col = ev.collapse_point(STEPS, RANKME, acq.step)
    assert col.status == "no_collapse" and col.step is None and math.isnan(col.floor)
    rec = ev.recovery_onset(STEPS, RANKME, col)
    assert rec.step is None and rec.status == "no_data"
    gap = ev.precursor_gap(acq, rec)
    assert (gap.precursor, gap.gap_steps, gap.status) == (False, None, "acquired_at_start")
    # even an onset found elsewhere cannot precede a censored acquisition
    gap = ev.precursor_gap(acq, ev.Onset(-5, 0, 1.0, "found"))
    assert gap.status == "acquired_at_start" and not gap.precursor


def test_never_acquired():
    acc = [0.0, 0.1, 0.2, 0.3, 0.4, 0.45, 0.4, 0.3, 0.2, 0.1]
    acq = ev.acquisition_step(STEPS, acc)
    assert (acq.step, acq.status) == (None, "never_acquired")
    assert "0.45" in acq.reason
    # collapse and recovery are still reported over the whole curve
    col = ev.collapse_point(STEPS, RANKME, acq.step)
    assert (col.step, col.floor) == (30, 2.0)
    assert ev.recovery_onset(STEPS, RANKME, col).step == 60
    gap = ev.precursor_gap(acq, ev.recovery_onset(STEPS, RANKME, col))
    assert (gap.precursor, gap.gap_steps, gap.status) == (False, None, "never_acquired")


def test_run_too_short_at_end_is_right_censored():
    """Above threshold at the last 2 checkpoints with window 3: the run ended before the window could confirm
    it, so the acquisition is right-censored (at or after step 80, or never), not "never acquired"."""
    acc = [0, 0, 0, 0, 0, 0, 0, 0, 0.9, 0.9]
    acq = ev.acquisition_step(STEPS, acc)
    assert (acq.step, acq.status, acq.censored_step) == (None, "censored", 80)
    assert "last 2 checkpoint(s) (from step 80)" in acq.reason
    gap = ev.precursor_gap(acq, ev.recovery_onset(STEPS, RANKME, ev.collapse_point(STEPS, RANKME, None)))
    assert (gap.status, gap.precursor, gap.gap_steps) == ("censored", False, None)
    assert ev.acquisition_step(STEPS, acc, window=2).step == 80
    # a blip that falls back is not censored
    assert ev.acquisition_step(STEPS, [0, 0, 0, 0, 0, 0, 0, 0.9, 0.9, 0.1]).status == "never_acquired"


def test_no_collapse():
    rising = [5.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 13.0]
    col = ev.collapse_point(STEPS, rising, 70)
    assert (col.step, col.status) == (None, "no_collapse")
    assert "never falls below its first value" in col.reason
    rec = ev.recovery_onset(STEPS, rising, col)
    gap = ev.precursor_gap(ev.acquisition_step(STEPS, ACC), rec)
    assert (gap.precursor, gap.gap_steps, gap.status, gap.resolution_steps) == (False, None, "no_onset", 10)
    assert ev.collapse_onset(STEPS, rising).step is None


def test_never_recovers():
    flat_low = [40.0, 2.0, 1.9, 1.8, 1.8, 1.8, 1.8, 1.8, 1.8, 1.8]
    col = ev.collapse_point(STEPS, flat_low, None)
    assert (col.step, col.floor) == (30, 1.8)  # first of the tied minima
    rec = ev.recovery_onset(STEPS, flat_low, col)
    assert (rec.step, rec.status) == (None, "not_found")


def test_min_drop_guards_against_tiny_dips():
    """The default collapse needs RankMe 25% below its first value (issue 19: min_drop=0 let a 1% dip count)."""
    nearly_flat = [10.0, 9.9, 10.0, 10.1, 10.0, 10.2, 10.0, 10.0, 10.0, 10.0]
    assert ev.DEFAULT_MIN_DROP == 0.25
    col = ev.collapse_point(STEPS, nearly_flat, 70)
    assert col.status == "no_collapse" and "min_drop=0.25" in col.reason
    assert ev.collapse_point(STEPS, nearly_flat, 70, min_drop=0.0).step == 10  # the old rule, on request


@pytest.mark.parametrize("floor, collapsed", [(7.6, False), (7.5, False), (7.4, True), (1.0, True)])
def test_collapse_threshold_is_a_fraction_of_the_first_value(floor, collapsed):
    """A drop must exceed 25% of the first value (10): a floor of 7.5 is exactly 25% and does not count."""
    curve = [10.0, 9.0, floor, 9.0, 10.0, 10.0]
    col = ev.collapse_point(range(6), curve, 5)
    assert (col.status == "collapsed") is collapsed
    assert (col.step == 2) is collapsed


def test_noisy_curves():
    rng = np.random.default_rng(0)
    steps = np.arange(0, 200, 5)
    # accuracy crosses 0.5 for good at step 120, with single-checkpoint blips above it earlier
    acc = np.where(steps >= 120, 0.9, 0.2) + rng.normal(0, 0.03, steps.size)
    acc[[8, 14, 15]] = 0.6  # steps 40, 70, 75: blips of 1 and 2 checkpoints
    acq = ev.acquisition_step(steps, acc)
    assert acq.step == 120
    # a noisy RankMe trough: 40 -> ~3 around steps 30..80, back up from step 90
    rank = np.where(steps < 30, 40.0, np.where(steps < 90, 3.0, 30.0)) + rng.normal(0, 0.2, steps.size)
    col = ev.collapse_point(steps, rank, acq.step)
    assert 30 <= col.step < 90 and col.floor < 3.0
    rec = ev.recovery_onset(steps, rank, col)
    assert rec.step == 90
    gap = ev.precursor_gap(acq, rec)
    assert (gap.status, gap.gap_steps, gap.resolution_steps) == ("precursor", 30, 5)


def test_missing_checkpoint_nan_and_hole():
    # step 60 missing (NaN accuracy) and step 70 absent from the RankMe curve
    acc = list(ACC)
    acc[6] = float("nan")
    acq = ev.acquisition_step(STEPS, acc)
    assert (acq.step, acq.resolution_steps) == (70, 20)  # previous measured checkpoint is step 50
    steps = [s for s in STEPS if s != 60]
    rank = [r for s, r in zip(STEPS, RANKME) if s != 60]
    col = ev.collapse_point(steps, rank, acq.step)
    rec = ev.recovery_onset(steps, rank, col)
    assert (rec.step, rec.resolution_steps) == (70, 20)  # 8.0 at 60 is gone; 20.0 at 70 is the first
    gap = ev.precursor_gap(acq, rec)
    assert (gap.status, gap.gap_steps, gap.resolution_steps) == ("synchronous", 0, 20)
    # NaN in RankMe is dropped the same way
    rank_nan = list(RANKME)
    rank_nan[3] = float("nan")
    col = ev.collapse_point(STEPS, rank_nan, 70)
    assert (col.step, col.floor) == (40, 2.5)


def test_ties_resolve_to_first_occurrence():
    rank = [10.0, 4.0, 2.0, 2.0, 2.0, 6.0, 9.0]
    col = ev.collapse_point(range(7), rank, 6)
    assert (col.step, col.index) == (2, 2)
    o = ev.onset_of_change(range(5), [1.0, 3.0, 3.0, -1.0, 3.0])
    # largest |departure| is 2.0 at step 1 (tied with steps 2, 3 and 4; first wins, direction up)
    assert (o.step, o.level) == (1, pytest.approx(1.2))


def test_unsorted_input_is_sorted():
    order = np.random.default_rng(1).permutation(len(STEPS))
    acq = ev.acquisition_step(np.asarray(STEPS)[order], np.asarray(ACC)[order])
    assert acq.step == 70


def test_onset_of_change_rising_and_falling():
    up = ev.onset_of_change(STEPS, [1, 1, 1, 2, 5, 11, 20, 20, 20, 20])
    # the largest departure is 19 (from step 60 on); 10 % is 1.9: step 40 (5 - 1 = 4) is first
    assert (up.step, up.level) == (40, pytest.approx(2.9))
    down = ev.onset_of_change(STEPS, [9, 9, 8.5, 7, 4, 1, 1, 1, 1, 1], fraction=0.5)
    assert (down.step, down.level) == (40, 5.0)
    flat = ev.onset_of_change(STEPS, [3.0] * 10)
    assert (flat.step, flat.status) == (None, "not_found")
    assert ev.onset_of_change([0], [1.0]).status == "no_data"


def test_onset_of_change_is_scaled_by_the_whole_run():
    """A sparse whole-model curve (the cpu study's LLC on modular-L1: 0.75, 1.12, then 21.4 after acquisition
    at 1500): the wobble before acquisition is 1% of the change, not an onset; the onset comes with the jump."""
    steps, llc = [0, 375, 1625, 2750, 4000], [0.75, 1.12, 21.39, 29.87, 34.93]
    onset = ev.onset_of_change(steps, llc)
    assert onset.step == 1625
    acq = ev.acquisition_step([0, 375, 750, 1125, 1500, 1875, 2250], [0, 0, 0, 0.1, 0.9, 0.95, 0.97])
    # the LLC onset lies in (375, 1625], acquisition in (1125, 1500]: the sparse grid cannot order them
    gap = ev.precursor_gap(acq, onset)
    assert acq.step == 1500 and (gap.status, gap.gap_steps, gap.resolution_steps) == ("unresolved", -125, 1250)
    assert (gap.gap_low_steps, gap.gap_high_steps) == (-500, 1125)


def test_chance_aware_threshold():
    acc = [0.5, 0.55, 0.6, 0.7, 0.8, 0.8, 0.8, 0.9, 0.9, 0.9]
    assert ev.acquisition_step(STEPS, acc, chance=0.5).step == 40  # threshold 0.75
    assert ev.acquisition_step(STEPS, acc, chance=0.5).threshold == 0.75
    assert ev.acquisition_step(STEPS, acc, chance=0.25).step == 10  # threshold stays 0.5
    assert ev.acquisition_step(STEPS, acc, threshold=0.5, chance=0.5).step == 10  # explicit wins


def test_probe_onset():
    o = ev.probe_onset(STEPS, [0.5, 0.5, 0.55, 0.6, 0.8, 0.9, 0.9, 0.9, 0.9, 0.9], [0.5] * 10, margin=0.1)
    assert (o.step, o.resolution_steps) == (30, 10) and "margin alone" in o.reason  # no p-values given
    o = ev.probe_onset(STEPS, [0.5] * 10, [0.5] * 10)
    assert o.status == "not_found"


def test_probe_onset_baseline_is_the_better_of_chance_and_control():
    acc, ctl = [0.3] * 10, [0.17] * 10
    assert ev.probe_onset(STEPS, acc, ctl, p_value=[0.01] * 10).step == 0  # control alone: 0.13 over it
    o = ev.probe_onset(STEPS, acc, ctl, chance=0.28, p_value=[0.01] * 10)
    assert o.status == "not_found" and "+0.02" in o.reason
    # chance per checkpoint; the margin met at 30 but significant only at 50
    o = ev.probe_onset(STEPS, [0.3, 0.3, 0.3, 0.5, 0.5, 0.6, 0.6, 0.6, 0.6, 0.6], ctl, chance=[0.28] * 10,
                       p_value=[0.9, 0.9, 0.9, 0.2, 0.06, 0.01, 0.01, 0.01, 0.01, 0.01])
    assert (o.step, o.status) == (50, "found")


def test_probe_onset_not_measured_is_no_data():
    nan = float("nan")
    o = ev.probe_onset(STEPS, [nan] * 10, [nan] * 10, chance=0.3, p_value=[nan] * 10)
    assert o.status == "no_data" and o.step is None
    o = ev.probe_onset(STEPS, [nan] * 5 + [0.9] * 5, [0.1] * 10, p_value=[0.001] * 10)
    assert (o.step, o.resolution_steps) == (50, None)  # the first measured checkpoint


def test_probe_onset_never_fires_on_random_states():
    """Probes of states that carry no information about the labels (20 seeds x 8 checkpoints, balanced and
    imbalanced labels, two to ten classes) never give an onset."""
    from ckptgeo.metrics.probe import ProbeConfig, probe

    fired = []
    for seed in range(20):
        rng = np.random.default_rng(seed)
        n_classes = (2, 3, 10)[seed % 3]
        weights = np.r_[4.0, np.ones(n_classes - 1)] if seed % 2 else np.ones(n_classes)
        y = rng.choice(n_classes, size=120, p=weights / weights.sum())
        res = [probe(rng.normal(size=(120, 16)), y, ProbeConfig(k=5, seed=seed)) for _ in range(8)]
        o = ev.probe_onset(list(range(8)), [r.accuracy for r in res], [r.control_accuracy for r in res],
                           chance=[r.chance for r in res], p_value=[r.p_value for r in res])
        assert o.status != "no_data", res[0]
        if o.step is not None:
            fired.append((seed, o.step))
    assert not fired


def test_empty_curve():
    acq = ev.acquisition_step([], [])
    assert (acq.step, acq.status) == (None, "no_data")
    assert ev.collapse_point([], []).status == "no_data"
    assert ev.collapse_onset([1, 2], [float("nan")] * 2).status == "no_data"
    assert ev.precursor_gap(acq, ev.Onset(None, None, math.nan, "no_data")).status == "no_data"


@pytest.mark.parametrize("kwargs, match", [
    ({"window": 0}, "window"), ({"window": 2.5}, "window"), ({"threshold": 1.5}, "acc_threshold"),
])
def test_invalid_parameters(kwargs, match):
    with pytest.raises(InvalidParameterError, match=match):
        ev.acquisition_step(STEPS, ACC, **kwargs)


def test_invalid_curves():
    with pytest.raises(InvalidParameterError, match="same length"):
        ev.acquisition_step([0, 1], [0.1])
    with pytest.raises(InvalidParameterError, match="step 10 appears more than once"):
        ev.acquisition_step([0, 10, 10], [0.1, 0.2, 0.3])
    with pytest.raises(InvalidParameterError, match="recovery"):
        ev.recovery_onset(STEPS, RANKME, ev.collapse_point(STEPS, RANKME, 70), recovery=0.0)


def test_float_noise_is_not_a_collapse_or_an_onset():
    from ckptgeo.events.detect import collapse_point, onset_of_change

    steps = [0, 10, 20, 30, 40]
    flat = [1.0002046207, 1.0002046207 - 4e-13, 1.0002046207 + 1e-13, 1.0002046207 - 2e-13, 1.0002046207]
    assert collapse_point(steps, flat, acquisition=40).status == "no_collapse"
    assert onset_of_change(steps, flat).status == "not_found"
