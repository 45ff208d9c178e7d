#!/usr/bin/env python
"""Benchmark: the end of a scan in a dataset many runs share (``ckptgeo reproduce`` writes 81 into one).

After its last revision a scan resolves ``duplicate_of`` and shared weight files under a dataset-wide lock.
It now reads only the parts its own model wrote (``revisions/<model>--*.parquet``); before, it read every
part of every model, so each of a study's scans cost more than the last and the processes queued on the
lock (26 s of CPU per scan at the 2,860 parts of the cpu study's 65th run). This script builds a dataset of
``--models`` x ``--revisions`` ``revisions`` parts and times, in the same run, the scoped resolution
(``Dataset.resolve_duplicates(model)`` plus the read of that model's rows, as ``scan`` does) against the
baseline of the whole table (the same calls without ``model``). Prints CPU seconds (medians) and the ratio;
the scoped cost should not grow with ``--models``.

    python scripts/bench_finish.py                        # 81 models x 35 revisions: about a minute
    python scripts/bench_finish.py --models 20 --repeats 5
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import tempfile
import time


def build(root: str, n_models: int, n_revisions: int):
    """A dataset of ``n_models`` runs with ``n_revisions`` revisions each; every 10th revision repeats the
    weights of the one before it (a duplicate to resolve)."""
    from ckptgeo.store.dataset import Dataset, part_name

    ds = Dataset(root)
    for m in range(n_models):
        model = f"task-L1-tiny-s{m}"
        for r in range(n_revisions):
            sha = hashlib.sha256(f"{m}-{r - (r % 10 == 9)}".encode()).hexdigest()
            ds.write_part("revisions", part_name(model, f"step{r}", "0123456789ab"),
                          [{"model": model, "revision": f"step{r}", "step": r, "status": "ok",
                            "config_hash": "0123456789ab", "weights_sha256": sha, "files": ["model.safetensors"],
                            "sha256": [sha]}])
    return ds


def cpu_seconds(fn, repeats: int) -> float:
    """Median CPU seconds of ``fn()`` over ``repeats`` calls."""
    out = []
    for _ in range(repeats):
        t = time.process_time()
        fn()
        out.append(time.process_time() - t)
    return statistics.median(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", type=int, default=81)
    ap.add_argument("--revisions", type=int, default=35)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    from ckptgeo.store.dataset import shared_shards

    with tempfile.TemporaryDirectory() as tmp:
        ds = build(tmp, a.models, a.revisions)
        model = "task-L1-tiny-s0"

        def finish(scope):
            dups = ds.resolve_duplicates(scope)
            shared_shards(ds.read("revisions", model=scope))
            return dups

        assert len(finish(model)) == len(finish(None)) // a.models == a.revisions // 10
        whole, own = cpu_seconds(lambda: finish(None), a.repeats), cpu_seconds(lambda: finish(model), a.repeats)
    print(f"{a.models} models x {a.revisions} revisions = {a.models * a.revisions} parts")
    print(f"  whole table (baseline): {whole:.3f} CPU s per scan's end")
    print(f"  own model's parts:      {own:.3f} CPU s per scan's end")
    print(f"  ratio own / whole:      {own / whole:.4f}")


if __name__ == "__main__":
    main()
