"""``ckptgeo scan``: measure every selected revision and write Parquet tables."""

from __future__ import annotations

import argparse

from ckptgeo.cli._options import add_scan_options, add_source_options, run_scan_command

__all__ = ["add_parser"]

_EPILOG = """examples:
  ckptgeo scan EleutherAI/pythia-160m --revisions every-10000 --suite logic --suite syntax
  ckptgeo scan EleutherAI/pythia-2.8b --revisions 1000:20000:1000 --prefetch 2 --max-disk 40GB
  ckptgeo scan EleutherAI/pythia-410m --revisions log --dry-run
  ckptgeo scan runs/addition-L1 --metrics rankme,behavior,hessian --n-samples 100
  ckptgeo scan runs/addition-L1 --metrics hessian,llc --metric-option hessian.k=10 --metric-option llc.num_chains=2
  ckptgeo scan EleutherAI/pythia-160m --suite path/to/task.json --position mean --centered
  ckptgeo scan runs/addition-L1 --metrics rankme,cka,weight_distance    # checkpoint vs checkpoint -> compare/
  ckptgeo scan runs/addition-L1 --metrics rankme,cka --metric-option cka.reference=step500
  ckptgeo scan runs/addition-L1 --metrics rankme,hessian --metric-option hessian.revisions=every-5
  accelerate launch --num_processes 4 -m ckptgeo scan EleutherAI/pythia-2.8b --out results/p28
  torchrun --nproc_per_node 2 -m ckptgeo scan runs/addition-L1      # several CPU processes

selectors: all | every-N | log | A:B | A:B:N | step1000,step2000 | 1000,2000 | main | final | STAGE:SEL
sources: a Hub repo, a folder, or a family of repos: 'org/pythia-160m-seed{1..3}' or 'org/a,org/b'
progress: a start line with the cost, then one line per revision with an ETA, also in a batch log
(`ckptgeo scan ... > log 2>&1`); --dry-run prints the cost first; -v for more"""


def _cmd_scan(args) -> int:
    return run_scan_command(args)


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``ckptgeo scan`` to an argparse ``subparsers`` object and return its parser."""
    p = subparsers.add_parser("scan", help="measure every selected revision; write Parquet tables",
                       description="Measure per-layer RankMe, accuracy (and opt-in metrics) at each revision.",
                       epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_source_options(p)
    add_scan_options(p, metrics=True)
    p.set_defaults(func=_cmd_scan)
    return p
