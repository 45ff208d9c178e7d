#!/usr/bin/env python
"""Benchmark: ``grad_rank`` + ``grad_cov_rank`` share one pass of per-sample gradients.

Times the command a user runs, ``ckptgeo scan RUN --metrics grad_rank,grad_cov_rank``, against the
baseline ``ckptgeo scan RUN --metrics grad_rank`` measured in the same run, on a small trained
checkpoint folder (``ckptgeo train --task copy --steps 60 --checkpoints 3`` unless ``--run`` is given).
The two commands alternate ``--repeats`` times, each into a fresh dataset folder; medians are compared.
With the pass shared, the second measure adds only an SVD of the (n_items x sketch_dim) gradient matrix,
so the ratio should stay near 1 (target <= 1.3); computing the gradients twice would give about 2 on
the measuring part.

A third command, the same two measures with ``--metric-option grad_cov_rank.chunk_size=16`` (other
settings, so no sharing: two passes, as before this change), is the reference of what sharing saves.
Also printed: the ratio of the measures' own seconds (the ``seconds`` column of their geometry rows),
which leaves out process start, model loading and writing.

    python scripts/bench_grad_shared.py                  # trains the run folder first (~1 min on a CPU)
    python scripts/bench_grad_shared.py --run runs/copy --repeats 5 --threads 1
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _ckptgeo(*args: str, threads: int | None) -> float:
    path = f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"
    env = {**os.environ, "CKPTGEO_NO_PROGRESS": "1", "PYTHONPATH": path}
    cmd = [sys.executable, "-m", "ckptgeo", *args] + (["--threads", str(threads)] if threads else [])
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, cwd=ROOT, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def _measure_seconds(out: Path) -> float:
    import pandas as pd

    g = pd.read_parquet(out / "geometry")
    # one row per revision and suite per measure; each row's seconds is that measure's call
    return float(g["seconds"].sum())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", help="a folder of step{N} checkpoints (default: train one with the copy task)")
    p.add_argument("--repeats", type=int, default=3, help="timed runs of each command (default 3)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads per command")
    p.add_argument("--n-samples", type=int, default=200, help="items per suite (default 200)")
    args = p.parse_args()

    work = Path(tempfile.mkdtemp(prefix="ckptgeo-bench-grad-"))
    run = Path(args.run) if args.run else work / "run"
    if not args.run:
        t = _ckptgeo("train", "--task", "copy", "--steps", "60", "--checkpoints", "3", "--out", str(run),
                     "--device", "cpu", threads=args.threads)
        print(f"trained {run} in {t:.1f} s")
    common = ["--n-samples", str(args.n_samples)]
    # reference: the same two measures kept from sharing (other chunk settings: a second pass, as before)
    unshared = ["--metric-option", "grad_cov_rank.chunk_size=16"]
    both, one, two, both_m, one_m, two_m = [], [], [], [], [], []
    for i in range(args.repeats):
        for label, extra, wall, own in (("both", ["--metrics", "grad_rank,grad_cov_rank"], both, both_m),
                                        ("one", ["--metrics", "grad_rank"], one, one_m),
                                        ("unshared", ["--metrics", "grad_rank,grad_cov_rank", *unshared], two, two_m)):
            out = work / f"{label}-{i}"
            wall.append(_ckptgeo("scan", str(run), *extra, "--out", str(out), *common, threads=args.threads))
            own.append(_measure_seconds(out))
    revs = sorted(p.name for p in run.iterdir() if p.is_dir() and p.name.startswith("step"))
    print(f"run folder: {run} ({len(revs)} revisions: {', '.join(revs)}); n_samples={args.n_samples}; "
          f"repeats={args.repeats}; threads={args.threads or 'default'}")
    print(f"  --metrics grad_rank               wall median {statistics.median(one):7.2f} s  "
          f"(runs {', '.join(f'{t:.2f}' for t in one)}); measure seconds {statistics.median(one_m):.2f}")
    print(f"  --metrics grad_rank,grad_cov_rank wall median {statistics.median(both):7.2f} s  "
          f"(runs {', '.join(f'{t:.2f}' for t in both)}); measure seconds {statistics.median(both_m):.2f}")
    print(f"  reference, two passes (grad_cov_rank.chunk_size=16)  wall median {statistics.median(two):7.2f} s; "
          f"measure seconds {statistics.median(two_m):.2f}")
    ratio = statistics.median(both) / statistics.median(one)
    print(f"ratio (grad_rank+grad_cov_rank / grad_rank), wall: {ratio:.3f}  (target <= 1.3)")
    print(f"ratio, measure seconds only: {statistics.median(both_m) / statistics.median(one_m):.3f} "
          f"(two passes: {statistics.median(two_m) / statistics.median(one_m):.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
