"""Overhead of the live monitor: training wall time with and without it, on the demo settings.

Trains each demo setting (``ckptgeo.studies.demo.DEMO_SETTINGS``: copy level 1 for 300 steps,
addition level 1 for 1000 steps, the tiny model) with ``ckptgeo train``'s trainer twice, without and
with ``monitor=EVERY`` (default 25: step 0, the powers of two below 25, then every 25 steps), in
alternating order, and prints the ratio of wall times (best of ``--repeats``) and the monitor's own
time (the ``seconds`` of its revisions rows: forward passes, RankMe, writing the parts).

    python scripts/bench_monitor.py [--repeats 2] [--every 25] [--threads 1] [--settings easy,hard]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("CKPTGEO_NO_PROGRESS", "1")


def _run(setting, out: Path, every: int) -> tuple[float, float]:
    import pandas as pd

    from ckptgeo.training.trainer import TrainConfig, train

    cfg = TrainConfig(tasks=(setting.task,), levels=(setting.level,), out=str(out), n_steps=setting.n_steps,
                      n_checkpoints=setting.n_checkpoints, device="cpu", monitor=every)
    t0 = time.perf_counter()
    train(cfg)
    wall = time.perf_counter() - t0
    own = 0.0
    if every:
        own = float(pd.read_parquet(out / "monitor" / "revisions")["seconds"].sum())
    return wall, own


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--every", type=int, default=25)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--settings", default="easy,hard", help="demo settings by role (default: easy,hard)")
    args = p.parse_args()
    import torch

    from ckptgeo.monitor.schedule import Schedule
    from ckptgeo.studies.demo import DEMO_SETTINGS

    torch.set_num_threads(args.threads)
    total = {"off": 0.0, "on": 0.0}
    with tempfile.TemporaryDirectory() as tmp:
        for s in [s for s in DEMO_SETTINGS if s.role in args.settings.split(",")]:
            best = {"off": float("inf"), "on": float("inf")}
            own = float("inf")
            for r in range(args.repeats):
                for mode in (("off", "on") if r % 2 == 0 else ("on", "off")):
                    out = Path(tmp) / f"{s.task}-{mode}-{r}"
                    wall, mon = _run(s, out, args.every if mode == "on" else 0)
                    best[mode] = min(best[mode], wall)
                    if mode == "on":
                        own = min(own, mon)
            n = len(Schedule(args.every).up_to(s.n_steps))
            total["off"] += best["off"]
            total["on"] += best["on"]
            print(f"{s.task}-L{s.level} {s.n_steps} steps, {n} monitored: without {best['off']:.2f} s, with "
                  f"{best['on']:.2f} s, ratio {best['on'] / best['off']:.3f}; monitor's own time {own:.2f} s "
                  f"({own / best['off']:.1%} of training)")
    print(f"all demo settings: ratio {total['on'] / total['off']:.3f} (target <= 1.15)")


if __name__ == "__main__":
    main()
