#!/usr/bin/env python
"""Benchmark: what RankMe's interval (resampling the items at each checkpoint) costs a scan.

Builds a local folder of ``step{N}`` checkpoints of a GPT-NeoX with seeded random weights (``--shape``:
``pythia-70m``'s layers and width with a 512-token vocabulary, or ``small``), then scans it twice with the
default measures (RankMe and behaviour) on the same suites and items: A with ``rankme.n_resamples=0`` (no
interval, the scan before the interval existed), B with the default (50 resamples per layer and
checkpoint; the interval is the first-order Bayesian bootstrap of :mod:`ckptgeo.metrics.rankme`). The two runs
alternate ``--repeats`` times (A, B, A, B, ...) so that a change in the machine's
load hits both; printed: each run's wall seconds, the median B / A ratio, and the per-layer cost of
:func:`ckptgeo.metrics.rankme.rankme` and :func:`~ckptgeo.metrics.rankme.rankme_interval` on one layer's
states (``--n-items`` x width, one torch thread) measured in the same process, with the machine's load average.

Measured here (2 shared cores, load 8-10): ``--shape small --revisions 3 --n-items 200 --repeats 3``: B/A
0.956, 1.082, 1.082 (median 1.08); one layer of 200 x 128: RankMe 5.9 ms, with its interval 15.3 ms; 200 x 512:
29.5 ms and 54.6 ms. The small shape is the worst case (RankMe is most of its scan); at pythia-70m's width the
forward pass dominates.

Usage::

    python scripts/bench_rankme_interval.py                        # pythia-70m width, 3 revisions, 200 items
    python scripts/bench_rankme_interval.py --shape small --revisions 2 --n-items 64 --repeats 1   # ~1 min
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

#: the bundled suites both runs measure
SUITES = ("logical_deduction", "syntax", "arithmetic")
SHAPES = {
    "pythia-70m": dict(hidden_size=512, num_hidden_layers=6, num_attention_heads=8, intermediate_size=2048),
    "small": dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=512),
}


def _checkpoints(root: Path, shape: str, n_revisions: int) -> None:
    import torch
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests._checkpoints import train_tokenizer

    train_tokenizer().save_pretrained(root)
    cfg = GPTNeoXConfig(vocab_size=512, max_position_embeddings=512, rotary_pct=0.25, bos_token_id=0, eos_token_id=0,
                        tie_word_embeddings=False, **SHAPES[shape])
    for i in range(n_revisions):
        torch.manual_seed(i + 1)
        GPTNeoXForCausalLM(cfg).save_pretrained(root / f"step{100 * i}")


def _scan_seconds(root: Path, out: Path, n_items: int, n_resamples: int, threads: int | None) -> float:
    from ckptgeo.engine.scan import scan

    t0 = time.perf_counter()
    scan(root, out=out, suites=SUITES, n_samples=n_items, threads=threads,
         metric_options={"rankme": {"n_resamples": n_resamples}})
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="pythia-70m")
    ap.add_argument("--revisions", type=int, default=3)
    ap.add_argument("--n-items", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    os.environ.setdefault("CKPTGEO_NO_PROGRESS", "1")

    import torch

    from ckptgeo.metrics.rankme import DEFAULT_N_RESAMPLES, RankMeConfig, rankme, rankme_interval

    with tempfile.TemporaryDirectory(prefix="ckptgeo-bench-interval-") as tmp:
        root = Path(tmp) / "run"
        _checkpoints(root, args.shape, args.revisions)
        plain, with_interval = [], []
        for r in range(args.repeats):
            plain.append(_scan_seconds(root, Path(tmp) / f"a{r}", args.n_items, 0, args.threads))
            with_interval.append(_scan_seconds(root, Path(tmp) / f"b{r}", args.n_items, DEFAULT_N_RESAMPLES,
                                               args.threads))
            print(f"repeat {r}: A (no interval) {plain[-1]:.1f} s, B ({DEFAULT_N_RESAMPLES} resamples) "
                  f"{with_interval[-1]:.1f} s, B/A {with_interval[-1] / plain[-1]:.3f}", flush=True)
    ratios = [b / a for a, b in zip(plain, with_interval)]
    print(f"scan of {args.revisions} revisions, {args.shape}, {args.n_items} items: median B/A = "
          f"{statistics.median(ratios):.3f} (each: {', '.join(f'{x:.3f}' for x in ratios)})")

    torch.set_num_threads(1)  # on a shared machine two threads make both timings 10-50 times slower and noisy
    z = torch.randn(args.n_items, SHAPES[args.shape]["hidden_size"], generator=torch.Generator().manual_seed(0))
    for name, fn in (("rankme", lambda: rankme(z)), ("rankme_interval", lambda: rankme_interval(z, RankMeConfig()))):
        fn()
        t0 = time.perf_counter()
        for _ in range(5):
            fn()
        print(f"{name} on one layer ({tuple(z.shape)}): {(time.perf_counter() - t0) / 5 * 1000:.1f} ms")
    print(f"load average: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
