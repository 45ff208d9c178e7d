"""``ckptgeo demo``: train, scan and analyse a small suite on the CPU."""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

from ckptgeo.studies.demo import run_demo

__all__ = ["add_parser"]

#: loggers whose INFO lines are the scan's internals: shown by ``ckptgeo -v demo``, as by ``ckptgeo -v scan``
_INTERNALS = ("ckptgeo.engine", "ckptgeo.metrics", "ckptgeo.sources")

def _cmd_demo(args: argparse.Namespace) -> int:
    from ckptgeo.analysis.pipeline import events_text

    # the demo narrates its stages (training, scan progress, analysis); the scan's internals (a line per suite and
    # revision on padding and batch sizes) stay behind -v, as `ckptgeo scan` keeps them
    quiet = () if getattr(args, "verbose", 0) else _INTERNALS
    loggers = [logging.getLogger(n) for n in ("ckptgeo", *quiet)]
    before = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.INFO if lg.name == "ckptgeo" else logging.WARNING)
    try:
        t0 = time.perf_counter()
        result = run_demo(args.out, size=args.size, seed=args.seed, device=args.device, plots=not args.no_plots,
                          threads=args.threads)
    finally:
        for lg, level in zip(loggers, before):
            lg.setLevel(level)
    print(events_text(result.events))
    dataset = Path(args.out) / "dataset"
    print(f"\ndemo finished in {time.perf_counter() - t0:.0f} s")
    print(f"tables:   {dataset}/geometry, behavior, revisions, events  (pandas.read_parquet)")
    if not args.no_plots:
        print(f"figures:  {dataset}/figures")
    print(f"report:   {dataset}/report.md")
    print(f"open:     {dataset}/report.html   (runs, curves and figures in a browser)")
    return 0


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``ckptgeo demo`` to ``subparsers``."""
    p = subparsers.add_parser(
        "demo", help="train a small algorithmic suite on the CPU, scan it, analyse it",
        description="The whole job in minutes on a CPU: train the smallest model on an easy (copy) and a hard "
                    "(multi-digit addition) task with dense checkpoints, scan every checkpoint, find acquisition, "
                    "collapse, recovery and the precursor gap, and write figures and a report.",
        epilog="examples:\n  ckptgeo demo\n  ckptgeo demo --out /tmp/demo --no-plots\n",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="results/demo", help="output folder (default results/demo)")
    p.add_argument("--size", default="tiny", help="model size name (default tiny, ~0.4M parameters)")
    p.add_argument("--seed", type=int, default=0, help="seed (default 0)")
    p.add_argument("--device", default="cpu", help="torch device (default cpu)")
    p.add_argument("--no-plots", action="store_true", help="skip the figures")
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads (default: 1 for models under 10M parameters, else the physical cores)")
    p.set_defaults(func=_cmd_demo)
    return p

