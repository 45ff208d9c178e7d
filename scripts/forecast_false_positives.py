"""False-positive rates and power of the forecast's tests on synthetic designs whose seeds are alike.

Prints, for designs with no signal (forecasts or geometry that know the setting but not the acquisition), how often
each test rejects at alpha 5%, counting runs as independent (the old tests) and counting settings (today's), each
with its Wilson interval; then, end to end (:func:`ckptgeo.forecasting.evaluate.evaluate` on
:func:`ckptgeo.forecasting.designs.runs_design`), the skill tests on setting-level RankMe and the timing test's
power against a planted run-level timing signal (RankMe recovering a few checkpoints before each run's own
acquisition).

    python scripts/forecast_false_positives.py                 # about 10 minutes on 2 busy cores
    python scripts/forecast_false_positives.py --designs 100 --end-to-end 4

Budgets are counts (designs, relabellings), never seconds: the numbers do not depend on the machine's load.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
from scipy.stats import wilcoxon

import ckptgeo.stats as stats
from ckptgeo.forecasting.designs import concordance_design, runs_design, skill_design
from ckptgeo.forecasting.evaluate import ForecastConfig, _settings_permuted, evaluate, skill_table


def _rate(k: int, n: int) -> str:
    r = stats.binomial_interval(k, n)
    return f"{k}/{n} = {r.rate:.1%} [{r.low:.1%}, {r.high:.1%}]"


def concordance_rates(designs: int, cfg: ForecastConfig) -> tuple[int, int]:
    runs = settings = 0
    for d in range(designs):
        fc, units, _ = concordance_design(np.random.default_rng(d))
        steps, meds, acq = [f[0] for f in fc], [f[1] for f in fc], np.array([f[2] for f in fc])
        runs += _settings_permuted(steps, meds, acq, None, cfg)[0].p_value < cfg.alpha
        settings += _settings_permuted(steps, meds, acq, units, cfg)[0].p_value < cfg.alpha
    return runs, settings


def skill_rates(designs: int, cfg: ForecastConfig) -> tuple[int, int]:
    runs = units = 0
    for d in range(designs):
        sc = skill_design(np.random.default_rng(d), splits=("task",))
        piv = sc.pivot_table(index="run", columns="feature_set", values="log_score")
        runs += wilcoxon(piv["behaviour"] - piv["geometry"], alternative="greater").pvalue < cfg.alpha
        units += skill_table(sc, cfg).iloc[0]["p_value"] < cfg.alpha
    return runs, units


def end_to_end(designs: int, cfg: ForecastConfig, lead: int | None) -> list[dict]:
    """Per design and split: the old Wilcoxon p over runs and today's p, for skill and timing."""
    out = []
    for d in range(designs):
        res = evaluate(runs_design(np.random.default_rng(100 + d), lead=lead), cfg)
        scores = res["scores"]
        for _, row in res["skill"].iterrows():
            g = scores[scores["split"] == row["split"]].pivot_table(index="run", columns="feature_set",
                                                                     values="log_score")
            diff = (g["behaviour"] - g["geometry"]).dropna()
            tim = (g["geometry_sibling"] - g["geometry"]).dropna() if "geometry_sibling" in g else diff.iloc[0:0]
            out.append({"split": row["split"], "p_runs": wilcoxon(diff, alternative="greater").pvalue,
                        "p": row["p_value"], "timing_p_runs": wilcoxon(tim, alternative="greater").pvalue
                        if len(tim) and (tim != 0).any() else np.nan,
                        "timing_p": row["timing_p_value"], "timing_mde": row["timing_mde"],
                        "verdict": row["verdict"]})
        print(f"  design {d + 1}/{designs} (lead {lead}): " + "; ".join(
            f"{r['split']} p {r['p']:.3g} (runs {r['p_runs']:.3g}), timing p {r['timing_p']:.3g} "
            f"(runs {r['timing_p_runs']:.3g}), MDE {r['timing_mde']:.3g}, {r['verdict']}"
            for r in out[-len(res['skill']):]), flush=True)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--designs", type=int, default=400, help="designs per statistic-level rate (default 400)")
    ap.add_argument("--n-permutations", type=int, default=199, help="relabellings per test (default 199)")
    ap.add_argument("--end-to-end", type=int, default=6, help="designs fitted end to end, each way (default 6)")
    args = ap.parse_args(argv)
    cfg = ForecastConfig(n_permutations=args.n_permutations)
    n = args.designs
    print(f"concordance, 6 settings x 3 seeds, forecasts by task unrelated to acquisition ({n} designs):")
    runs, settings = concordance_rates(n, cfg)
    print(f"  runs permuted (old): {_rate(runs, n)}\n  settings exchanged (today): {_rate(settings, n)}", flush=True)
    print(f"skill, 9 settings x 3 seeds, log-score difference by setting (sd 0.1), no skill ({n} designs):")
    runs, units = skill_rates(n, cfg)
    print(f"  Wilcoxon over runs (old): {_rate(runs, n)}\n  sign flip over held-out tasks (today): "
          f"{_rate(units, n)}", flush=True)
    if args.end_to_end:
        e2e_cfg = ForecastConfig(n_permutations=63)
        print(f"end to end, 6 settings x 3 seeds, RankMe by setting, unrelated to acquisition "
              f"({args.end_to_end} designs):")
        rows = end_to_end(args.end_to_end, e2e_cfg, None)
        k_old = sum(r["p_runs"] < 0.05 for r in rows)
        k_new = sum(r["p"] < 0.05 for r in rows)
        print(f"  skill p < 0.05: over runs (old) {_rate(k_old, len(rows))}; over units (today) "
              f"{_rate(k_new, len(rows))}")
        print(f"end to end, a planted run-level timing signal (RankMe recovers 4 checkpoints before the run's own "
              f"acquisition; {args.end_to_end} designs):")
        rows = end_to_end(args.end_to_end, e2e_cfg, 4)
        k = sum(r["timing_p"] < 0.05 for r in rows)
        print(f"  timing test p < 0.05 (power): {_rate(k, len(rows))}; over runs (old) "
              f"{_rate(sum(r['timing_p_runs'] < 0.05 for r in rows), len(rows))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
