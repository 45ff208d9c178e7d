#!/usr/bin/env python
"""Benchmark: a scan of pythia-2.8b-shaped revisions on a GPU, against the device's limits and the CPU's values.

Builds ``--revisions`` checkpoints of the shape (seeded random weights, float16 on disk as Pythia's branches are,
a small byte-level tokenizer: ``scripts/make_test_repo.py``'s) as ``step{N}`` folders, then, in one run:

1. the device's limits, measured in this run: the float32 matmul peak (``torch.mm`` 8192^2, TF32 off as in the
   scan), the bfloat16 one, the host-to-device copy rate (pinned memory) and the read rate of the weight files from
   the page cache;
2. ``ckptgeo.engine.scan.scan`` of every revision from the **local folder** on ``--device`` (RankMe and multiple
   choice on BIG-bench logical deduction, ``--n-items`` items, float32, ``--prefetch`` K revisions fetched and
   hashed ahead): each revision's stages (wait, download, sha256, load, forward, other measures, write), the pace
   against the slowest stage and the pipeline's floor, each byte-bound stage against the file read and copy
   rates (``scripts/roofline.py: pace_lines``), the forward's FLOP/s (``FlopCounterMode``, counted on an untimed
   extra sweep) as a share of the fp32 and bf16 peaks;
3. the same over a **loopback Hub** (``--hub``, default on where ``olah`` imports): the folders become the
   ``step{N}`` branches of a git repository (weights as LFS objects, hard-linked) served by
   ``scripts/olah_local.py``, scanned through :class:`~ckptgeo.sources.hub.HubSource` (download, the listing's
   LFS sha256 checked against the file's);
4. ``--precision`` tf32 and bf16 (``scan(..., precision=...)``) on the first ``--precision-revisions``
   revisions: forward seconds against fp32's, RankMe's relative difference per layer and the correct answers;
5. the agreement with the CPU: the first revision scanned again with ``--cpu-items`` items, once on the device and
   once on the CPU (same items): RankMe per layer (largest relative difference; target 1e-5) and the correct
   answers (target: identical);
6. ``--estimate``: ``ckptgeo reproduce --preset paper --dry-run --device cuda`` (the study's GPU-hours from
   steps/s measured there), its last lines.

Usage (on a GPU machine; ``--shape tiny --device cpu`` checks the script anywhere in a minute)::

    python scripts/bench_gpu.py --revisions 5 --prefetch 3 --n-items 100 --cpu-items 20 --estimate
    python scripts/bench_gpu.py --shape tiny --device cpu --revisions 3 --n-items 20 --cpu-items 10

Disk: the folders (5.55 GB a revision at pythia-2.8b) plus the Hub cache's peak (``--hub-prefetch`` + 1
revisions; the LFS objects are hard links to the folders' files). The device machine lacks ``olah`` and its
server's packages: carry them as wheels (docs/speed.md, "GPU table: how to run it"), or ``--no-hub``.
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
from scripts.roofline import (PRECISION_TOLERANCE, copy_rate, forward_flops, matmul_peak, pace_lines,  # noqa: E402
                              read_rate, sync, uptime)

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


def mirror(root: Path, steps: list[int], repo: Path) -> None:
    """A bare git repository at ``repo`` whose ``step{N}`` branches hold ``root/step{N}``'s files, the weights as
    LFS objects hard-linked to the folders' files (no copy), for ``scripts/olah_local.py`` to serve."""
    import subprocess

    from ckptgeo.engine.model import sha256_file
    from scripts.make_test_repo import _GITATTRIBUTES, _Git

    repo.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(repo)], check=True, capture_output=True)
    git = _Git(repo)
    commits = {}
    for i, step in enumerate(steps):
        folder, tree = root / f"step{step}", {".gitattributes": git.blob(_GITATTRIBUTES.encode())}
        for f in sorted(folder.iterdir()):
            if f.suffix != ".safetensors":
                tree[f.name] = git.blob(f.read_bytes())
                continue
            oid = sha256_file(f)
            obj = repo / "lfs" / "objects" / oid[:2] / oid[2:4] / oid
            obj.parent.mkdir(parents=True, exist_ok=True)
            if not obj.exists():
                os.link(f, obj)
            pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize {f.stat().st_size}\n"
            tree[f.name] = git.blob(pointer.encode())
        commits[f"step{step}"] = git.commit(git.tree(tree), f"Checkpoint step{step}", None, 1_672_531_200 + 60 * i)
    commits["main"] = commits[f"step{steps[-1]}"]
    git("update-ref", "--stdin", data="".join(f"update refs/heads/{b} {c}\n" for b, c in commits.items()).encode())
    git("symbolic-ref", "HEAD", "refs/heads/main")


def run_scan(source, out: Path, device: str, n_items: int, suite: Path, revisions: str | None = None, *,
             prefetch: int = 1, precision: str = "fp32") -> dict:
    """One scan; its stages per revision (``ScanResult.seconds``), forward seconds and FLOPs, RankMe per layer
    and correct answers."""
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
        result = scan(source, revisions=revisions, suites=(str(suite),), metrics=("rankme", "behavior"),
                      n_samples=n_items, device=device, out=out, on_error="raise", prefetch=prefetch,
                      precision=precision)
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


def report(label: str, a: dict, *, nbytes: int, prefetch: int, limits: dict, fp32: float, bf16: float) -> dict:
    """Print one scan's stages per revision, its pace and its forward against the peaks; return its summary."""
    revs = a["measured"]
    print(f"{label}: {len(revs)} revisions ({nbytes / 1e9:.2f} GB each), {a['wall']:.1f} s, K={prefetch}")
    print("  revision   wait s  download s  sha256 s   load s  forward s  measure s  write s")
    for r in revs:
        s = a["seconds"][r]
        print(f"  {r:>8} {s['wait']:8.2f} {s['download']:11.2f} {s['verify']:9.2f} {s['load']:8.2f} "
              f"{s['forward']:10.2f} {s['measure']:10.2f} {s['write']:8.2f}")
    print("\n".join(pace_lines(a["seconds"], prefetch=prefetch, nbytes=nbytes, limits=limits)))
    rate = a["flops"] / a["forward"] if a["forward"] else float("nan")
    print(f"  forward: {a['flops'] / 1e12:.2f} TFLOP in {a['forward']:.2f} s = {rate / 1e12:.2f} TFLOP/s = "
          f"{rate / fp32:.1%} of the fp32 peak, {rate / bf16:.1%} of the bf16 peak", flush=True)
    later = [a["seconds"][r] for r in revs[1:]] or [a["seconds"][r] for r in revs]
    per = sum(s["wait"] + s["load"] + s["measure"] + s["write"] for s in later) / len(later)
    return {"seconds_per_revision": per, "forward_share_of_fp32_peak": rate / fp32}


def agreement(label: str, ref: dict, other: dict, first: str) -> tuple[float, bool]:
    """RankMe's relative difference per layer and the correct answers of ``other`` against ``ref`` at ``first``."""
    ra, rb = ref["rankme"][first], other["rankme"][first]
    rel = [abs(x - y) / max(abs(y), 1e-12) for x, y in zip(rb, ra)]
    same = ref["correct"][first] == other["correct"][first]
    print(f"{label} on {first}: RankMe relative difference per layer " + " ".join(f"{x:.1e}" for x in rel)
          + f" (largest {max(rel):.1e}: {'within' if max(rel) <= PRECISION_TOLERANCE else 'ABOVE'} "
          f"{PRECISION_TOLERANCE:g}); correct answers {other['correct'][first][0]} against "
          f"{ref['correct'][first][0]} of {ref['correct'][first][1]} ({'identical' if same else 'DIFFERENT'})",
          flush=True)
    return max(rel), same


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default="pythia-2.8b", choices=sorted(SHAPES))
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--revisions", type=int, default=5)
    parser.add_argument("--prefetch", type=int, default=3, help="K of the local scan (default %(default)s)")
    parser.add_argument("--hub-prefetch", type=int, default=2, help="K of the Hub scan (default %(default)s)")
    parser.add_argument("--n-items", type=int, default=100, help="items of the timed scans (default %(default)s)")
    parser.add_argument("--precision-revisions", type=int, default=2,
                        help="revisions scanned again under tf32 and bf16 (default %(default)s; 0: none)")
    parser.add_argument("--cpu-items", type=int, default=20, help="items of the CPU comparison (default %(default)s; 0: none)")
    parser.add_argument("--hub", action=argparse.BooleanOptionalAction, default=None,
                        help="also scan through a loopback Hub (default: when olah imports)")
    parser.add_argument("--estimate", action="store_true",
                        help="run `ckptgeo reproduce --preset paper --dry-run --device DEVICE` at the end")
    parser.add_argument("--work", default=None, help="work folder (default: a temporary one, removed)")
    args = parser.parse_args(argv)
    from importlib.util import find_spec

    if args.hub is None:
        args.hub = find_spec("olah") is not None
    elif args.hub and find_spec("olah") is None:
        print("--hub needs olah and its server's packages (docs/speed.md); none here", file=sys.stderr)
        return 2
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="ckptgeo-gpu-"))
    port = None
    if args.hub:   # the Hub client reads its environment once, at import: set before anything imports it
        from scripts.olah_local import free_port

        port = free_port()
        for var in ("HF_HUB_OFFLINE", "HF_TOKEN", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_XET_CACHE"):
            os.environ.pop(var, None)
        os.environ.update({"HF_ENDPOINT": f"http://127.0.0.1:{port}", "HF_HOME": str(work / "hf"),
                           "HF_HUB_DISABLE_TELEMETRY": "1", "CKPTGEO_CACHE": str(work / "ckptgeo_cache")})
    import torch

    suite = next((p for p in SUITE_PLACES if p.is_file()), None)
    if suite is None:
        print(f"no {SUITE_NAME}: put BIG-bench logical_deduction's file at {SUITE_PLACES[0]}", file=sys.stderr)
        return 2
    summary: dict = {"shape": args.shape}
    try:
        steps = [1000 * i for i in range(args.revisions)]
        t = time.perf_counter()
        nbytes = build(work / "run", args.shape, steps, args.device)
        print(f"built {len(steps)} revisions in {time.perf_counter() - t:.1f} s", flush=True)
        torch.backends.cuda.matmul.allow_tf32 = False   # the scan's float32 (TF32 only with --precision tf32)
        cuda = args.device.startswith("cuda")
        name = torch.cuda.get_device_name() if cuda else f"CPU, {torch.get_num_threads()} threads"
        fp32 = matmul_peak(torch.get_num_threads(), device=args.device).wall
        bf16 = matmul_peak(torch.get_num_threads(), device=args.device, dtype=torch.bfloat16).wall
        h2d = copy_rate(args.device) if cuda else float("nan")
        disk = max(read_rate([work / "run" / f"step{steps[0]}" / "model.safetensors"], cold=False) for _ in range(3))
        limits = {"file read": disk, **({"host-to-device copy": h2d} if cuda else {})}
        print(f"device: {name}; torch {torch.__version__}; {uptime()}")
        print(f"limits (this run): fp32 matmul {fp32 / 1e12:.2f} TFLOP/s (TF32 off); bf16 {bf16 / 1e12:.2f} TFLOP/s; "
              f"host-to-device copy (pinned) {h2d / 1e9:.1f} GB/s; file read (page cache) {disk / 1e9:.2f} GB/s; "
              f"file-read floor {nbytes / disk:.2f} s a revision", flush=True)
        summary.update(device=name, fp32_tflops=fp32 / 1e12, bf16_tflops=bf16 / 1e12, read_gbs=disk / 1e9,
                       copy_gbs=h2d / 1e9, read_floor_s=nbytes / disk)

        a = run_scan(str(work / "run"), work / "scan", args.device, args.n_items, suite, prefetch=args.prefetch)
        summary["local"] = report(f"local folder, {args.device}, fp32", a, nbytes=nbytes, prefetch=args.prefetch,
                                  limits=limits, fp32=fp32, bf16=bf16)
        if args.hub:
            from ckptgeo.sources.hub import HubSource
            from scripts.olah_local import launch, stop, wait_ready

            repo_id = "benchorg/pythia-gpu"
            mirror(work / "run", steps, work / "mirrors" / "models" / "benchorg" / "pythia-gpu")
            proc = launch(work / "mirrors", port, work / "olah", work / "olah.log")
            try:
                wait_ready(f"http://127.0.0.1:{port}/api/models/{repo_id}/refs", proc, work / "olah.log", timeout=120)
                h = run_scan(HubSource(repo_id), work / "scan-hub", args.device, args.n_items, suite,
                             revisions="all", prefetch=args.hub_prefetch)
            finally:
                stop(proc)
            summary["hub"] = report(f"loopback Hub, {args.device}, fp32", h, nbytes=nbytes,
                                    prefetch=args.hub_prefetch, limits=limits, fp32=fp32, bf16=bf16)
        first = f"step{steps[0]}"
        if args.precision_revisions > 0:
            some = ",".join(f"step{s}" for s in steps[: args.precision_revisions])
            for p in (["tf32"] if cuda else []) + ["bf16"]:
                r = run_scan(str(work / "run"), work / f"scan-{p}", args.device, args.n_items, suite, revisions=some,
                             prefetch=args.prefetch, precision=p)
                rel, same = agreement(f"--precision {p} against fp32 ({args.n_items} items)", a, r, first)
                ratio = r["forward"] / (a["forward"] * len(r["measured"]) / len(a["measured"]))
                print(f"  --precision {p}: forward {ratio:.3f}x fp32's seconds a revision", flush=True)
                summary[p] = {"rankme_max_rel_diff": rel, "accuracy_identical": same, "forward_ratio": ratio}
        if args.cpu_items > 0:
            g = run_scan(str(work / "run"), work / "agree-device", args.device, args.cpu_items, suite, revisions=first)
            c = run_scan(str(work / "run"), work / "agree-cpu", "cpu", args.cpu_items, suite, revisions=first)
            rel, same = agreement(f"{args.device} against the CPU ({args.cpu_items} items)", c, g, first)
            summary["cpu"] = {"rankme_max_rel_diff": rel, "accuracy_identical": same}
        if args.estimate:
            import subprocess

            done = subprocess.run([sys.executable, "-m", "ckptgeo", "reproduce", "--preset", "paper", "--dry-run",
                                   "--device", args.device], capture_output=True, text=True, timeout=300,
                                  cwd=str(REPO_ROOT))
            print("reproduce --preset paper --dry-run:\n" + "\n".join((done.stdout + done.stderr).splitlines()[-25:]))
        print("summary: " + json.dumps(summary), flush=True)
        cpu_ok = summary.get("cpu", {"rankme_max_rel_diff": 0, "accuracy_identical": True})
        return 0 if cpu_ok["rankme_max_rel_diff"] <= 1e-5 and cpu_ok["accuracy_identical"] else 1
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
