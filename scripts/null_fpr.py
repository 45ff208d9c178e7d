"""The precursor rule's false-positive rate on noise, at the demo's hard schedule.

Draws iid Gaussian noise curves (``ckptgeo.stats.noise.noise_curves``, mean 40, standard deviation a
fraction ``sd`` of it) at the checkpoint schedule of the demo's hard setting (addition level 1: 1000 steps,
50 checkpoints, ``ckptgeo.training.trainer.checkpoint_steps``), places acquisition at a given checkpoint, and
prints how often the rule calls a precursor, with the Wilson interval: the rule before issue 19 (any dip a
collapse, any earlier recovery a precursor) beside the current one (``ckptgeo.events.detect.curve_events``).
Seeded: the same numbers on every machine.

    python scripts/null_fpr.py [--curves 1000] [--seed 1]
"""

from __future__ import annotations

import argparse

from ckptgeo.events import detect as ev
import ckptgeo.stats as st
from ckptgeo.training.trainer import checkpoint_steps


def _old_rule(acquisition_step: int):
    def fires(s, v) -> bool:
        a = ev.acquisition_at(s, acquisition_step)
        o = ev.recovery_onset(s, v, ev.collapse_point(s, v, a.step, min_drop=0.0))
        return o.step is not None and o.step < a.step
    return fires


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--curves", type=int, default=1000, help="noise curves per cell (default 1000)")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    grid = checkpoint_steps(1000, 50)
    print(f"schedule: {len(grid)} checkpoints {list(grid[:8])} ... {list(grid[-3:])}; {args.curves} curves per cell")
    print("acq_ckpt acq_step noise_sd  old rule [95% CI]        new rule [95% CI]")
    for k in (3, 6, 12, 27, 40):
        a = int(grid[k])
        acq = ev.acquisition_at(grid, a)
        new = lambda s, v: ev.curve_events(s, v, acq).precursor  # noqa: E731
        for sd in (0.02, 0.05, 0.1, 0.2):
            old_r = st.false_positive_rate(_old_rule(a), grid, n_curves=args.curves, seed=args.seed,
                                           relative_sd=sd, level=40.0)
            new_r = st.false_positive_rate(new, grid, n_curves=args.curves, seed=args.seed, relative_sd=sd,
                                           level=40.0)
            print(f"{k:8d} {a:8d} {sd:8.2f}  {old_r.rate:.3f} [{old_r.low:.3f}, {old_r.high:.3f}]   "
                  f"{new_r.rate:.3f} [{new_r.low:.3f}, {new_r.high:.3f}]")


if __name__ == "__main__":
    main()
