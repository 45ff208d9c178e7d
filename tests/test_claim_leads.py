"""The claim table's statistics on curves with known answers: the hard-minus-easy contrast, absence by
equivalence, the whole-model rows on a shared grid, Holm, and the intervals' coverage."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from ckptgeo.claimtable.chance import Curve
from ckptgeo.claimtable.rows.leads import MARGIN, contrast_row, llc, precursor_easy, precursor_hard
from ckptgeo.claimtable.registry import ClaimContext
from ckptgeo.suites.tasks import is_hard
from ckptgeo.claimtable.inference import cluster_interval, contrast, holm

GRID = np.arange(0, 400, 10, dtype=float)          # 40 checkpoints, one schedule
EASY = ("copy", "reverse", "compare", "sort")
HARD = ("parity", "addition", "modular", "multiplication")


def _rankme(onset_idx: int, rng, noise=0.2) -> np.ndarray:
    """Falls from 20 to 4 by index 2, back to 14 from ``onset_idx`` on."""
    v = np.where(np.arange(len(GRID)) < 2, 20.0, 4.0)
    v[onset_idx:] = 14.0
    return v + rng.normal(0, noise, len(GRID))


def _accuracy(acq_idx: int) -> np.ndarray:
    return np.where(np.arange(len(GRID)) >= acq_idx, 0.95, 0.0)


def _context(lead_hard: int, lead_easy: int, *, seed: int = 0, seeds=(1, 2, 3), curve=None, whole=None,
             n_power: int = 10, sizes=("tiny",)) -> ClaimContext:
    """Eight tasks on one 40-checkpoint schedule; each run acquires at a task- and seed-dependent checkpoint (easy
    and hard tasks alike, so their leads can be compared at matched acquisition) and
    RankMe recovers ``lead`` checkpoints before (``curve(model, rng)`` replaces RankMe; ``whole(model, rng)`` adds
    a whole-model measure on a grid of 12 checkpoints shared by every run)."""
    rng = np.random.default_rng(seed)
    rows, curves, acc, wm = [], {}, {}, []
    for t, (task, size) in enumerate((t, z) for t in EASY + HARD for z in sizes):
        for s in seeds:
            model = f"{task}-L1-{size}-s{s}"
            acq_idx = 14 + (t % 4) + s       # hard and easy runs acquire at the same checkpoints
            lead = lead_hard if is_hard(task, 1) else lead_easy
            values = curve(model, rng) if curve else _rankme(acq_idx - lead, rng)
            acq_step = int(GRID[acq_idx])
            rows.append(dict(model=model, task=task, level=1, size=size, seed=s, counted=True,
                             hard=is_hard(task, 1), acquisition_step=acq_step))
            curves[model] = Curve(GRID, values, acq_step, "schedule-A", "recovery")
            acc[model] = (GRID, _accuracy(acq_idx), 0.01)
            if whole:
                sub = GRID[np.round(np.linspace(0, len(GRID) - 1, 12)).astype(int)]
                for st, v in zip(sub, whole(model, rng, sub)):
                    wm.append(dict(model=model, metric="llc", layer=-1, step=st, value=v))
    tables = {"curves": pd.DataFrame(wm) if wm else None}
    return ClaimContext(pd.DataFrame(rows), curves, acc, n_permutations=199, seed=seed, tables=tables,
                        n_power=n_power)


def test_a_contrast_that_is_only_later_acquisition_is_not_found():
    """RankMe's onset at a fixed checkpoint whatever the run (a geometry that knows nothing of behaviour), hard
    settings acquiring later: every hard lead is larger, yet the matched contrast has nothing to compare."""
    ctx = _context(0, 0, curve=lambda m, rng: _rankme(8, rng))
    ctx.runs["acquisition_step"] = [int(GRID[20 if h else 12]) for h in ctx.runs["hard"]]
    for m, h in zip(ctx.runs["model"], ctx.runs["hard"]):
        ctx.accuracy[m] = (GRID, _accuracy(20 if h else 12), 0.01)
    row = contrast_row(ctx)
    assert row.verdict == "inconclusive" and "same checkpoint" in row.reason, row


def test_a_planted_contrast_is_found_and_an_equal_lead_is_not():
    row = contrast_row(_context(lead_hard=4, lead_easy=0))
    assert row.verdict == "reproduced" and row.kind == "primary", row
    assert row.value == pytest.approx(4.0, abs=0.5) and row.low > 2 and row.p_value < 0.05
    same = contrast_row(_context(lead_hard=3, lead_easy=3, seed=1))
    assert same.verdict != "reproduced" and same.p_value >= 0.05, same
    assert same.low < 0 < same.high


def test_hard_precursor_holds_when_planted_and_easy_absence_is_reproduced_by_equivalence():
    ctx = _context(lead_hard=4, lead_easy=0, n_power=10, sizes=("tiny", "mini"))   # 8 easy settings
    hard = precursor_hard(ctx)
    assert hard.verdict == "reproduced", hard
    easy = precursor_easy(ctx)
    assert easy.verdict == "reproduced" and easy.high < MARGIN and easy.mde <= MARGIN, easy
    assert "margin" in easy.reason
    few = precursor_easy(_context(lead_hard=4, lead_easy=0, n_power=10))    # 4 easy settings: no 95% bound
    assert few.verdict == "inconclusive" and "4 settings" in few.reason, few


def test_absence_rows_are_inconclusive_on_blind_detectors():
    """A detector that finds nothing (flat curves), or curves of noise whose size no onset could clear: the
    absence rows cannot be reproduced, whatever the p-value says."""
    flat = _context(0, 0, curve=lambda m, rng: np.full(len(GRID), 7.0),
                    whole=lambda m, rng, sub: np.full(len(sub), 3.0))
    for row in (precursor_easy(flat), llc(flat)):
        assert row.verdict == "inconclusive", row
    noisy = _context(0, 0, seed=3, curve=lambda m, rng: 10 + rng.normal(0, 1.0, len(GRID)),
                     whole=lambda m, rng, sub: rng.normal(0, 1.0, len(sub)))
    for row in (precursor_easy(noisy), llc(noisy)):
        assert row.verdict == "inconclusive", row


@pytest.mark.parametrize("shape", ["iid", "saturating", "log"])
def test_the_whole_model_row_is_not_significant_on_noise_or_smooth_functions_of_the_step(shape):
    """On a grid shared within the schedule, a measure that knows nothing of acquisition gives p >= alpha (for
    a smooth function of the step every run has the same onset: the statistic is the same under every
    permutation, p = 1)."""
    make = {"iid": lambda m, rng, sub: rng.normal(5, 1, len(sub)),
            "saturating": lambda m, rng, sub: 1 - np.exp(-sub / 100),
            "log": lambda m, rng, sub: np.log1p(sub)}[shape]
    row = llc(_context(4, 0, seed=5, whole=make))
    assert row.p_value >= 0.05 and row.verdict != "not reproduced", row
    if shape != "iid":
        assert row.p_value == pytest.approx(1.0), row


def test_holm_on_ten_p_values():
    p = [0.001, 0.008, 0.039, 0.041, 0.042, 0.060, 0.074, 0.205, 0.212, 0.216]
    # by hand: sorted p times (10, 9, ..., 1), running maximum, capped at 1
    expected = [0.010, 0.072, 0.312, 0.312, 0.312, 0.312, 0.312, 0.615, 0.615, 0.615]
    assert holm(p).round(3).tolist() == expected
    assert np.isnan(holm([0.01, math.nan])[1]) and holm([0.01, math.nan])[0] == pytest.approx(0.01)


def _study(rng, shift):
    """The cpu preset's short schedule: 4 easy and 6 hard settings x 3 seeds, setting effects N(0, 2), seed
    noise N(0, 1.5), leads rounded to whole checkpoints."""
    rows = []
    for k in range(10):
        hard = k >= 4
        eff = rng.normal(0, 2) + (shift if hard else 0.0)
        for s in range(3):
            rows.append(dict(lead=float(np.round(eff + rng.normal(0, 1.5))), hard=hard, setting=f"t{k}",
                             stratum="short"))
    return pd.DataFrame(rows)


def test_intervals_cover_at_their_nominal_rate_on_studies_of_the_preset_shape():
    """Simulated studies of the preset's shape: the contrast's interval and a mean lead's interval over
    settings cover the truth in 95% +- 3 points (the hierarchical percentile bootstrap they replace covered
    74-86% at 3 tasks)."""
    rng = np.random.default_rng(0)
    n, hit_c, hit_m = 800, 0, 0
    for _ in range(n):
        f = _study(rng, 3.0)
        c = contrast(f, alpha=0.05, n_permutations=50)
        hit_c += c.low <= 3.0 <= c.high
        m = cluster_interval(f.loc[f["hard"], "lead"], f.loc[f["hard"], "setting"])
        hit_m += m.low <= 3.0 <= m.high
    assert abs(hit_c / n - 0.95) <= 0.03, hit_c / n
    assert abs(hit_m / n - 0.95) <= 0.03, hit_m / n


def test_an_interval_is_never_of_zero_width_and_is_flagged_below_five_settings():
    same = cluster_interval([2.0] * 18, [f"t{k // 3}" for k in range(18)], floor=1.0)
    assert (same.low, same.high) == (1.0, 3.0) and not same.flag
    few = cluster_interval([1.0, 2.0, 3.0], ["a", "b", "c"], floor=1.0)
    assert few.coverage == 0.75 and "3 settings" in few.flag and few.high > few.low


def test_claims_command_has_examples_and_refuses_a_folder_without_tables(tmp_path, capsys):
    from ckptgeo.cli import build_parser, main

    sub = build_parser()._subparsers._group_actions[0].choices["claims"]
    assert "--calibrate 8" in sub.epilog and "summary/claims.parquet" in sub.epilog
    (tmp_path / "empty").mkdir()
    assert main(["claims", str(tmp_path / "empty")]) != 0
    err = capsys.readouterr().err
    assert "holds no geometry table" in err and len(err.strip().splitlines()) <= 2


def test_not_reproduced_needs_power_and_an_upper_bound_below_the_margin():
    """Power on planted curves ignores the spread of leads between settings: a wide interval that reaches the
    margin keeps a failed test inconclusive, a narrow one below it gives "not reproduced"."""
    from ckptgeo.claimtable.rows.leads import _holds_verdict
    from ckptgeo.claimtable.inference import Interval

    wide = Interval(0.2, -1.6, 2.4, 0.95, 10, "t")
    narrow = Interval(0.2, -0.9, 1.1, 0.95, 10, "t")
    assert _holds_verdict(0.4, wide, 1.0, 30, "RankMe", alpha=0.05)[0] == "inconclusive"
    assert "does not exclude a 2-checkpoint lead" in _holds_verdict(0.4, wide, 1.0, 30, "RankMe", alpha=0.05)[1]
    assert _holds_verdict(0.4, narrow, 1.0, 30, "RankMe", alpha=0.05)[0] == "not reproduced"
    assert _holds_verdict(0.4, narrow, math.inf, 30, "RankMe", alpha=0.05)[0] == "inconclusive"
    assert MARGIN == 2.0


def test_calibration_holds_a_row_to_alpha_only_on_the_nulls_that_void_what_it_tests():
    """A random walk of RankMe keeps behaviour, so the across-sizes acquisition order reproducing there is true,
    not false; the contrast reproducing on iid noise is false; an unknown kind of null is refused."""
    from ckptgeo.claimtable.calibrate import calibration_table
    from ckptgeo.claimtable.registry import register_claim

    runs = pd.DataFrame(
        [{"null": "random_walk", "copy": c, "id": "across_sizes_acquisition_step", "verdict": "reproduced",
          "p_value": 0.001} for c in range(4)]
        + [{"null": "permuted", "copy": c, "id": "across_sizes_acquisition_step", "verdict": "inconclusive",
            "p_value": 0.6} for c in range(4)]
        + [{"null": "iid", "copy": c, "id": "contrast", "verdict": "reproduced" if c else "inconclusive",
            "p_value": 0.01 if c else 0.5} for c in range(4)])
    t = calibration_table(runs, 0.05).set_index(["id", "null"])
    walk = t.loc[("across_sizes_acquisition_step", "random_walk")]
    assert walk["false_reproduced"] == 4 and not walk["applies"] and walk["ok"]
    assert t.loc[("across_sizes_acquisition_step", "permuted"), "applies"]
    iid = t.loc[("contrast", "iid")]
    assert iid["false_reproduced"] == 3 and iid["applies"] and not iid["ok"]
    with pytest.raises(ValueError, match="unknown null kind"):
        register_claim(id="never_registered", nulls=("shuffled",))
