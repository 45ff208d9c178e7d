"""Probe cost per revision on the demo runs: the old way (sklearn's ``cross_val_score`` over a
StandardScaler + L-BFGS pipeline, as ckptgeo did before) against :func:`ckptgeo.metrics.probe.probe`,
on the same states, in one process.

Trains copy-L1 (300 steps), addition-L1 (1000 steps) and, unless ``--no-modular``, modular-L1 (300 steps)
on the ``tiny`` model with few checkpoints (reused, with the states they give, with ``--keep DIR``), collects each checkpoint's probe
states and labels through a real scan, then times both probes on every (revision, suite, layer) and
prints per-revision seconds, their ratio and the largest differences in accuracy, control accuracy and
p-value over all rows.

    PYTHONPATH=. python scripts/bench_probe.py --keep /tmp/bench-probe
"""

from __future__ import annotations

import argparse
import math
import pickle
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

RUNS = (("copy", 1, 300), ("addition", 1, 1000), ("modular", 1, 300))


def old_probe(states, labels, config):
    """The probe as it was before the fast path: one ``cross_val_score`` per label set, L-BFGS at the
    library's default tolerance. Same folds, control and p-value."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold, cross_val_score
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from ckptgeo.metrics.probe import fold_test

    x = np.asarray(states, dtype=np.float64)
    y = np.asarray([str(v) for v in labels])
    _, codes = np.unique(y, return_inverse=True)
    counts = np.bincount(codes)
    n, chance = len(codes), counts.max() / len(codes)
    if len(counts) < 2 or counts.min() < 2:
        return math.nan, math.nan, math.nan
    k = min(config.k, int(counts.min()))
    control_y = np.random.default_rng(config.seed).permutation(codes)
    folds = list(StratifiedKFold(n_splits=k, shuffle=True, random_state=config.seed).split(x, codes))
    model = make_pipeline(StandardScaler(), LogisticRegression(C=config.C, max_iter=1000))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scores = cross_val_score(model, x, codes, cv=folds, scoring="accuracy")
        control = cross_val_score(model, x, control_y, cv=folds, scoring="accuracy")
    n_test = np.array([len(t) for _, t in folds])
    return float(scores.mean()), float(control.mean()), fold_test(scores, np.maximum(control, chance), n_test, n)


_CAPTURED: list = []  # what the capturing measure saw, emptied per revision


def collect(run: Path, work: Path, n_samples: int, seed: int):
    """{revision: [(suite, layer, states, labels)]} from a real scan of ``run`` (probe states only)."""
    from ckptgeo.engine.scan import scan
    from ckptgeo.metrics.probe import ProbeConfig, ProbeResult
    from ckptgeo.metrics.registry import METRICS, register_metric

    got = _CAPTURED

    def capture(states, labels, config=None):
        got.append((np.array(states.detach().double().numpy()), np.asarray(labels)))
        return ProbeResult(math.nan, math.nan, math.nan, math.nan, len(labels), 0, 0, "captured")

    if "bench_capture" not in METRICS.names():
        register_metric(name="bench_capture", needs="probe_states", cost="expensive", config=ProbeConfig,
                        table="probes")(capture)
    out: dict = {}
    for step_dir in sorted(run.glob("step*"), key=lambda p: int(p.name[4:])):
        got.clear()
        scan(str(run), revisions=step_dir.name, out=work / run.name / step_dir.name, metrics=["bench_capture"],
             n_samples=n_samples, seed=seed, threads=1)
        out[f"{run.name}@{step_dir.name}"] = [(i, s, lab) for i, (s, lab) in enumerate(got)]
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keep", help="folder for the trained runs (reused when present); default a temporary one")
    ap.add_argument("--n-checkpoints", type=int, default=12)
    ap.add_argument("--n-samples", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--every", type=int, default=1, help="time every N-th revision only")
    ap.add_argument("--attribute", action="store_true",
                    help="also time the old way under one BLAS thread (how much of the gain is threads)")
    ap.add_argument("--no-modular", action="store_true", help="skip the modular-L1 run")
    args = ap.parse_args(argv)

    import torch

    from ckptgeo.metrics.probe import ProbeConfig, probe
    from ckptgeo.training.trainer import TrainConfig, train

    torch.set_num_threads(1)
    root = Path(args.keep or tempfile.mkdtemp(prefix="ckptgeo-bench-probe-"))
    revisions: dict = {}
    for task, level, steps in RUNS:
        if task == "modular" and args.no_modular:
            continue
        run = root / "runs" / f"{task}-L{level}-tiny-s{args.seed}"
        t0 = time.perf_counter()
        train(TrainConfig(tasks=(task,), levels=(level,), out=str(run), size="tiny", n_steps=steps, seed=args.seed,
                          n_checkpoints=args.n_checkpoints, device="cpu", threads=1))
        cache = root / f"{run.name}-n{args.n_samples}-probe-states.pkl"
        if cache.exists():
            got = pickle.loads(cache.read_bytes())
        else:
            got = collect(run, Path(tempfile.mkdtemp(prefix="scan-", dir=root)), args.n_samples, args.seed)
            cache.write_bytes(pickle.dumps(got))
        revisions.update(got)
        print(f"# {run.name}: trained/collected in {time.perf_counter() - t0:.1f} s", flush=True)

    from threadpoolctl import threadpool_info, threadpool_limits

    revisions = dict(list(revisions.items())[::args.every])
    config = ProbeConfig(seed=args.seed)
    print("# BLAS/OpenMP pools:", ", ".join(f"{i['internal_api']}={i['num_threads']}" for i in threadpool_info()))
    print(f"{'revision':40s} {'rows':>4s} {'old s':>7s} {'new s':>7s} {'ratio':>6s} {'max|dacc|':>9s} "
          f"{'max|dctl|':>9s} {'max|dp|':>8s}" + (f" {'old@1thr s':>10s}" if args.attribute else ""))
    tot_old = tot_new = tot_old1 = 0.0
    worst = [0.0, 0.0, 0.0]
    nan_rows = 0
    for name, rows in revisions.items():
        t0 = time.perf_counter()
        old = [old_probe(s, lab, config) for _, s, lab in rows]
        t_old = time.perf_counter() - t0
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            new = [probe(s, lab, config) for _, s, lab in rows]
        t_new = time.perf_counter() - t0
        tot_old, tot_new = tot_old + t_old, tot_new + t_new
        extra = ""
        if args.attribute:
            t0 = time.perf_counter()
            with threadpool_limits(limits=1):
                [old_probe(s, lab, config) for _, s, lab in rows]
            t_old1 = time.perf_counter() - t0
            tot_old1 += t_old1
            extra = f" {t_old1:10.2f}"
        diffs = [0.0, 0.0, 0.0]
        for (a, c, p), r in zip(old, new):
            if math.isnan(r.accuracy) or math.isnan(a):
                nan_rows += 1
                assert math.isnan(r.accuracy) and math.isnan(a), (name, a, r)
                continue
            for j, (u, v) in enumerate(((a, r.accuracy), (c, r.control_accuracy), (p, r.p_value))):
                diffs[j] = max(diffs[j], abs(u - v))
        worst = [max(w, d) for w, d in zip(worst, diffs)]
        print(f"{name:40s} {len(rows):4d} {t_old:7.2f} {t_new:7.2f} {t_old / t_new:6.1f} {diffs[0]:9.4f} "
              f"{diffs[1]:9.4f} {diffs[2]:8.4f}{extra}", flush=True)
    n = len(revisions)
    print(f"# per revision: old {tot_old / n:.2f} s, new {tot_new / n:.2f} s, ratio {tot_old / tot_new:.1f}x; "
          f"max |accuracy diff| {worst[0]:.4g}, max |control diff| {worst[1]:.4g}, max |p diff| {worst[2]:.4g}; "
          f"{nan_rows} rows NaN in both" + (f"; old under 1 BLAS thread {tot_old1 / n:.2f} s" if args.attribute else ""))


if __name__ == "__main__":
    main()
