"""False-positive rates and power of the claim table's tests on synthetic designs whose truth is known (issue 44).

Every design has its effects at the setting level (:mod:`ckptgeo.claimtable.designs`: seeds of a setting alike) and,
for the false-positive rates, no difficulty effect; hard settings acquire later than easy ones. For each test it
prints the share of designs in which it rejects at alpha 5%, with the Wilson 95% interval:

* the primary contrast as it was (each run its own unit, matched on the checkpoint of acquisition:
  ``inference.contrast`` with each run its own setting, stratified by schedule and checkpoint of acquisition)
  and as it is now (settings as units, acquisition accounted for: ``units.adjusted_contrast``; "reproduced" needs p < alpha and the interval above 0);
* tracking (the precursor rows' p): runs permuted within schedules (as it was) and whole settings (now);
  "hard acquiring 0 checkpoints later": hard and easy settings acquire alike (the matched contrast can compare);
* the power of the primary row on the cpu design with a planted hard lead of 3-5 checkpoints.

Usage::

    python scripts/claims_calibration.py              # 400 designs per cell (about an hour on 2 saturated cores)
    python scripts/claims_calibration.py --designs 100 --permutations 199
"""

from __future__ import annotations

import argparse

import numpy as np

import ckptgeo.stats as stats
from ckptgeo.claimtable.rows.leads import tracking_test
from ckptgeo.claimtable.designs import CPU_DESIGN, SMALL_DESIGN, lead_matrix_of, synthetic_leads
from ckptgeo.claimtable.inference import contrast
from ckptgeo.claimtable.units import adjusted_contrast

ALPHA = 0.05


def _old_contrast(runs, n_permutations, seed) -> bool:
    frame = runs.assign(stratum=[f"{s}|{a}" for s, a in zip(runs["schedule"], runs["acquisition"])],
                        setting=runs["model"])
    c = contrast(frame, alpha=ALPHA, n_permutations=n_permutations, seed=seed)
    return bool(c.p_value < ALPHA)


def _new_contrast(runs, n_permutations, seed) -> bool:
    c = adjusted_contrast(runs, alpha=ALPHA, n_permutations=n_permutations, seed=seed)
    return bool(c.p_value < ALPHA and c.low > 0)


def _tracking(runs, n_permutations, seed, units: bool) -> bool:
    lm = lead_matrix_of(runs)
    r = tracking_test(lm, runs["model"].tolist(), n_permutations=n_permutations, seed=seed,
                      units=(runs["setting"] if units else runs["model"]).tolist())
    return r is not None and r.p_value < ALPHA


def rate(test, design, n: int, n_permutations: int, **kw) -> str:
    hits = 0
    for i in range(n):
        runs = synthetic_leads(design, np.random.default_rng([7, i]), **kw)
        hits += test(runs, n_permutations, i)
    r = stats.binomial_interval(hits, n)
    return f"{r.rate:6.1%} [{r.low:.1%}, {r.high:.1%}] ({hits}/{n})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--designs", type=int, default=400, help="synthetic designs per cell (default 400)")
    ap.add_argument("--permutations", type=int, default=199, help="relabellings per test (default 199)")
    ap.add_argument("--power-designs", type=int, default=200, help="designs for the planted-lead power")
    a = ap.parse_args()
    n, b = a.designs, a.permutations
    print(f"false-positive rate at alpha {ALPHA:.0%} over {n} designs a cell, {b} relabellings a test "
          "(no difficulty effect; geometric onsets set by setting, unrelated to acquisition; seeds' spread 0.5 "
          "checkpoint)")
    for name, design in (("3 easy + 6 hard settings x 3 seeds, one schedule", SMALL_DESIGN),
                         ("cpu design: 24 settings x 3 seeds, 3 schedules", CPU_DESIGN)):
        print(f"\n{name}")
        for delay in (0.0, 8.0):
            for sd in (0.0, 1.0, 2.0):
                kw = dict(setting_sd=sd, hard_delay=delay)
                where = f"setting sd {sd:g}, hard {delay:g} checkpoints later"
                print(f"  {where}: contrast, runs as units, matched on acquisition (as coded before) "
                      f"{rate(_old_contrast, design, n, b, **kw)}")
                print(f"  {where}: contrast, settings as units, acquisition adjusted "
                      f"{rate(_new_contrast, design, n, b, **kw)}")
        for sd in (1.0, 2.0):
            kw = dict(setting_sd=sd, run_sd=0.5)
            print(f"  setting sd {sd:g}, hard 8 checkpoints later: tracking, runs permuted (as before) "
                  f"{rate(lambda r, p, s: _tracking(r, p, s, False), design, n, b, **kw)}")
            print(f"  setting sd {sd:g}, hard 8 checkpoints later: tracking, settings permuted "
                  f"{rate(lambda r, p, s: _tracking(r, p, s, True), design, n, b, **kw)}")
    m = a.power_designs
    print(f"\npower of the primary row (p < {ALPHA} and interval above 0), cpu design, hard lead planted "
          f"3-5 checkpoints, {m} designs:")
    for sd in (1.0, 2.0):
        for delay in (4.0, 8.0):
            kw = dict(setting_sd=sd, hard_lead=(3, 5), hard_delay=delay)
            print(f"  setting sd {sd:g}, hard settings {delay:g} checkpoints later: "
                  f"{rate(_new_contrast, CPU_DESIGN, m, b, **kw)}")
    print(f"  the same, 3 easy + 6 hard settings (sd 1, 8 later): "
          f"{rate(_new_contrast, SMALL_DESIGN, m, b, setting_sd=1.0, hard_lead=(3, 5))}")


if __name__ == "__main__":
    main()
