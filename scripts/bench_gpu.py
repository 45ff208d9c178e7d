#!/usr/bin/env python
"""Benchmark: a scan of pythia-2.8b-shaped revisions on a GPU, against the device's limits and the CPU's values.

Builds ``--revisions`` checkpoints of the shape (seeded random weights, float16 on disk as Pythia's branches are,
a small byte-level tokenizer: ``scripts/make_test_repo.py``'s) as ``step{N}`` folders, read by
:class:`ckptgeo.sources.local.LocalSource` (no HTTP: the GPU's numbers, not a network's), then:

1. the device's limits, measured in this run: the float32 matmul peak (``torch.mm`` 8192^2, TF32 off as in the
   scan), the bfloat16 one for reference, the host-to-device copy rate (pinned memory) and the read rate of the
   weight files from the page cache;
2. ``ckptgeo.engine.scan.scan`` of every revision on ``--device`` (RankMe and multiple choice on BIG-bench logical
   deduction, ``--n-items`` items, float32): seconds per revision and revisions per second after the first (the
   first holds the batch-size trial), its forward FLOP/s (``FlopCounterMode``, counted on an untimed extra sweep)
   as a share of the float32 peak, its load (read, cast, copy to the device) as GB/s of the files against the read
   and copy rates;
3. the agreement with the CPU: the first revision scanned again with ``--cpu-items`` items, once on the device and
   once on the CPU (same items): RankMe per layer (largest relative difference; target 1e-5) and the correct
   answers (target: identical).

Usage (on a GPU machine; ``--shape tiny --device cpu`` checks the script anywhere in seconds)::

    python scripts/bench_gpu.py --revisions 3 --n-items 100 --cpu-items 20
    python scripts/bench_gpu.py --shape tiny --device cpu --revisions 2 --n-items 20 --cpu-items 10
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import ckptgeo  # noqa: E402,F401  (first: it sets OMP_WAIT_POLICY before torch loads libgomp, as for a user)
from scripts.make_test_repo import SHAPES, _config, _json, _tensor_shapes, _tokenizer_files  # noqa: E402
from scripts.roofline import copy_rate, forward_flops, matmul_peak, read_rate, sync, uptime  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]
SUITE_NAME = "three_objects.json"
SUITE_PLACES = (REPO_ROOT / ".gpu" / SUITE_NAME,
                REPO_ROOT / ".." / "shared" / "data" / "bigbench_logical_deduction" / SUITE_NAME)


def build(root: Path, shape: str, steps: list[int], device: str) -> int:
    """``root/step{N}/`` for each step (config, tokenizer, seeded weights drawn on ``device`` with
    ``make_test_repo``'s scales: its numpy drawing takes a minute a 2.8b revision); returns the bytes of one
    revision's weights."""
    import torch
    from safetensors.torch import save_file

    config = _config(SHAPES[shape])
    dtype = getattr(torch, config["torch_dtype"])
    nbytes = 0
    for i, step in enumerate(steps):
        folder = root / f"step{step}"
        folder.mkdir(parents=True)
        for name, data in {"config.json": _json(config), **_tokenizer_files(512)}.items():
            (folder / name).write_bytes(data)
        gen = torch.Generator(device=device).manual_seed(1000 + i)
        tensors = {}
        for name, size in _tensor_shapes(config).items():
            mean, std = (1.0, 0.05) if "norm" in name and name.endswith("weight") else (
                (0.0, 0.02) if name.endswith("weight") else (0.0, 0.01))
            t = torch.randn(size, generator=gen, device=device) * std + mean
            tensors[name] = t.to(dtype).cpu().contiguous()
        save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
        nbytes = (folder / "model.safetensors").stat().st_size
        print(f"built step{step}: {nbytes / 1e9:.2f} GB", flush=True)
    return nbytes


def run_scan(root: Path, out: Path, device: str, n_items: int, suite: Path, revisions: str | None = None) -> dict:
    """One scan; its seconds per revision, forward seconds and FLOPs, RankMe per layer and correct answers."""
    import pandas as pd

    import ckptgeo.engine.forward as forward_module
    from ckptgeo.engine.scan import scan

    original = forward_module.run_suite
    flops_by_items: dict[int, int] = {}
    totals = {"forward": 0.0, "flops": 0}

    def timed(*a, **kw):
        n = len(a[1].items)
        if n not in flops_by_items:   # counted on an extra, untimed sweep
            flops_by_items[n] = forward_flops(lambda: original(*a, **kw))
        sync(device)
        t = time.perf_counter()
        result = original(*a, **kw)
        sync(device)
        totals["forward"] += time.perf_counter() - t
        totals["flops"] += flops_by_items[n]
        return result

    forward_module.run_suite = timed
    t0 = time.perf_counter()
    try:
        result = scan(str(root), revisions=revisions, suites=(str(suite),), metrics=("rankme", "behavior"),
                      n_samples=n_items, device=device, out=out, on_error="raise")
    finally:
        forward_module.run_suite = original
    wall = time.perf_counter() - t0
    geo = pd.read_parquet(out / "geometry")
    geo = geo[geo.metric == "rankme"]
    beh = pd.read_parquet(out / "behavior")
    beh = beh[beh.metric == "accuracy"]
    return {"wall": wall, "seconds": result.seconds, "measured": list(result.measured), **totals,
            "rankme": {r: g.sort_values("layer").value.tolist() for r, g in geo.groupby("revision")},
            "correct": {r.revision: (int(round(r.value * r.n_items)), int(r.n_items)) for r in beh.itertuples()}}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default="pythia-2.8b", choices=sorted(SHAPES))
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--revisions", type=int, default=3)
    parser.add_argument("--n-items", type=int, default=100, help="items of the timed scan (default %(default)s)")
    parser.add_argument("--cpu-items", type=int, default=20, help="items of the CPU comparison (default %(default)s; 0: none)")
    parser.add_argument("--work", default=None, help="work folder (default: a temporary one, removed)")
    args = parser.parse_args(argv)
    import torch

    suite = next((p for p in SUITE_PLACES if p.is_file()), None)
    if suite is None:
        print(f"no {SUITE_NAME}: put BIG-bench logical_deduction's file at {SUITE_PLACES[0]}", file=sys.stderr)
        return 2
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="ckptgeo-gpu-"))
    try:
        steps = [1000 * i for i in range(args.revisions)]
        t = time.perf_counter()
        nbytes = build(work / "run", args.shape, steps, args.device)
        print(f"built {len(steps)} revisions in {time.perf_counter() - t:.1f} s", flush=True)
        torch.backends.cuda.matmul.allow_tf32 = False   # the scan's float32 (it never turns TF32 on)
        cuda = args.device.startswith("cuda")
        name = torch.cuda.get_device_name() if cuda else f"CPU, {torch.get_num_threads()} threads"
        fp32 = matmul_peak(torch.get_num_threads(), device=args.device).wall
        bf16 = matmul_peak(0, device=args.device, dtype=torch.bfloat16).wall if cuda else float("nan")
        h2d = copy_rate(args.device)
        disk = max(read_rate([work / "run" / f"step{steps[0]}" / "model.safetensors"], cold=False) for _ in range(3))
        print(f"device: {name}; torch {torch.__version__}; {uptime()}")
        print(f"limits (this run): fp32 matmul {fp32 / 1e12:.1f} TFLOP/s (TF32 off); bf16 {bf16 / 1e12:.1f} TFLOP/s; "
              f"host-to-device copy (pinned) {h2d / 1e9:.1f} GB/s; file read (page cache) {disk / 1e9:.2f} GB/s",
              flush=True)

        a = run_scan(work / "run", work / "scan", args.device, args.n_items, suite)
        revs = a["measured"]
        per = [a["seconds"][r] for r in revs]
        whole = [sum(v for k, v in s.items() if k != "load_bytes") for s in per]
        print(f"scan on {args.device}: {len(revs)} revisions of {args.shape} ({nbytes / 1e9:.2f} GB each on disk), "
              f"{args.n_items} items, float32: {a['wall']:.1f} s")
        print("  revision   wait s   sha256 s   load s   measure s   write s   whole s")
        for r, s, w in zip(revs, per, whole):
            print(f"  {r:>8} {s['download']:8.2f} {s['verify']:10.2f} {s['load']:8.2f} {s['measure']:11.2f} "
                  f"{s['write']:9.2f} {w:9.2f}")
        later = whole[1:] or whole
        print(f"  revisions per second after the first: {len(later) / sum(later):.3f} "
              f"({sum(later) / len(later):.2f} s a revision; the first {whole[0]:.2f} s, its batch-size trial)")
        rate = a["flops"] / a["forward"] if a["forward"] else float("nan")
        load = sum(s["load"] for s in per)
        load_rate = nbytes * len(per) / load if load else float("nan")
        print(f"  forward: {a['flops'] / 1e12:.2f} TFLOP in {a['forward']:.2f} s = {rate / 1e12:.2f} TFLOP/s = "
              f"{rate / fp32:.1%} of the fp32 peak")
        print(f"  load (read, cast to float32, to the device): {load_rate / 1e9:.2f} GB/s of the files = "
              f"{load_rate / disk:.1%} of the file read rate"
              + (f", {load_rate / h2d:.1%} of the host-to-device copy rate" if h2d == h2d else ""))

        if args.cpu_items <= 0:
            return 0
        first = f"step{steps[0]}"
        g = run_scan(work / "run", work / "agree-device", args.device, args.cpu_items, suite, revisions=first)
        c = run_scan(work / "run", work / "agree-cpu", "cpu", args.cpu_items, suite, revisions=first)
        rg, rc = g["rankme"][first], c["rankme"][first]
        rel = max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(rg, rc))
        same = g["correct"][first] == c["correct"][first]
        print(f"agreement on {first}, {args.cpu_items} items ({args.device} {g['wall']:.1f} s, cpu {c['wall']:.1f} s): "
              f"RankMe over {len(rc)} layers, largest relative difference {rel:.1e} "
              f"({'within' if rel <= 1e-5 else 'ABOVE'} 1e-5); correct answers {args.device} "
              f"{g['correct'][first][0]}/{g['correct'][first][1]}, cpu {c['correct'][first][0]}/{c['correct'][first][1]} "
              f"({'identical' if same else 'DIFFERENT'})")
        print("summary: " + json.dumps({"device": name, "shape": args.shape, "revisions_per_second": len(later) / sum(later),
                                        "forward_share_of_fp32_peak": rate / fp32, "load_share_of_read": load_rate / disk,
                                        "rankme_max_rel_diff": rel, "accuracy_identical": same}))
        return 0 if rel <= 1e-5 and same else 1
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
