"""The ``ckptgeo`` command line: thin wrappers over the Python API (no logic lives here)."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from . import __version__
from .constants import DEBUG

__all__ = ["main", "add_source_options", "add_scan_options"]

EXAMPLES = {
    "main": """examples:
  ckptgeo revisions EleutherAI/pythia-160m --revisions log
  ckptgeo scan EleutherAI/pythia-2.8b --revisions every-1000 --suite logic
  ckptgeo scan runs/addition-L1 --out results/addition   # a folder of step{N} checkpoints
  ckptgeo probe --suite logic
  ckptgeo analyze results/addition
  ckptgeo demo

environment: HF_ENDPOINT / HF_HOME / HF_TOKEN as for huggingface_hub; CKPTGEO_DEBUG=1 prints tracebacks;
CKPTGEO_NO_PROGRESS=1 hides progress bars.""",
    "scan": """examples:
  ckptgeo scan EleutherAI/pythia-160m --revisions every-10000 --suite logic --suite syntax
  ckptgeo scan EleutherAI/pythia-2.8b --revisions 1000:20000:1000 --prefetch 2 --max-disk 40GB
  ckptgeo scan EleutherAI/pythia-410m --revisions log --dry-run
  ckptgeo scan runs/addition-L1 --metrics rankme,behavior,hessian --n-samples 100
  ckptgeo scan EleutherAI/pythia-160m --suite path/to/task.json --position mean --centered
  accelerate launch --num_processes 4 -m ckptgeo scan EleutherAI/pythia-2.8b --out results/p28
  torchrun --nproc_per_node 2 -m ckptgeo scan runs/addition-L1      # several CPU processes

selectors: all | every-N | log | A:B | A:B:N | step1000,step2000 | 1000,2000 | main | final""",
    "revisions": """examples:
  ckptgeo revisions EleutherAI/pythia-160m
  ckptgeo revisions EleutherAI/pythia-160m --revisions every-10000
  ckptgeo revisions runs/addition-L1""",
}


def add_source_options(p: argparse.ArgumentParser, *, source_required: bool = True) -> None:
    """SOURCE, ``--revisions`` and ``--step-pattern``, shared by every command that walks checkpoints."""
    if source_required:
        p.add_argument("source", help="Hub repo id (EleutherAI/pythia-160m) or a folder of step{N} checkpoints")
    p.add_argument("--revisions", default=None,
                   help="revision selector (default: all for a folder, every-1000 for a Hub repo)")
    p.add_argument("--step-pattern", default=None, help=r"regex mapping branch names to steps (default ^step(\d+)$)")


def add_scan_options(p: argparse.ArgumentParser) -> None:
    """The measurement options shared by ``scan`` and ``probe``."""
    p.add_argument("--suite", action="append", dest="suites", metavar="NAME|PATH",
                   help="suite name, file path or loader spec; repeat for several (default: the source's suites)")
    p.add_argument("--out", default=None, help="dataset folder (default results/<source name>)")
    p.add_argument("--n-samples", type=int, default=200, help="items per suite (default 200)")
    p.add_argument("--position", choices=["last", "mean"], default="last",
                   help="token read for hidden states (default last)")
    p.add_argument("--centered", action="store_true", help="centred RankMe (default uncentred, as Garrido et al.)")
    p.add_argument("--device", default="cpu", help="torch device (default cpu)")
    p.add_argument("--dtype", default="float32", choices=["float32", "float64", "bfloat16", "float16"],
                   help="forward-pass dtype (metrics never run in half precision; default float32)")
    p.add_argument("--batch-size", type=int, default=16, help="items per forward batch (default 16)")
    p.add_argument("--seed", type=int, default=0, help="seed for item selection and metrics (default 0)")
    p.add_argument("--prefetch", type=int, default=1, help="revisions downloaded ahead (default 1)")
    p.add_argument("--max-disk", default=None, help="refuse to start if the peak download exceeds this (e.g. 40GB)")
    p.add_argument("--keep-cache", action="store_true", help="do not evict measured revisions from the Hub cache")
    p.add_argument("--overwrite", action="store_true", help="measure again revisions already done")
    p.add_argument("--save-states", action="store_true", help="keep the measured hidden states (safetensors)")
    p.add_argument("--on-error", choices=["skip", "raise"], default="skip",
                   help="skip: record a failed revision and continue (default); raise: stop")
    p.add_argument("--dry-run", action="store_true",
                   help="print the selection, bytes to fetch and peak disk; fetch nothing")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")


def _scan_kwargs(args) -> dict:
    from .scan import parse_size

    return dict(revisions=args.revisions, suites=tuple(args.suites or ()), n_samples=args.n_samples,
                position=args.position, centered=args.centered, device=args.device, dtype=args.dtype,
                batch_size=args.batch_size, seed=args.seed, prefetch=args.prefetch,
                max_disk=parse_size(args.max_disk), keep_cache=args.keep_cache, overwrite=args.overwrite,
                save_states=args.save_states, on_error=args.on_error, step_pattern=args.step_pattern)


def run_scan_command(args, *, metrics: tuple[str, ...] = ()) -> int:
    """Shared body of ``scan`` and ``probe``: dry run or scan, then a summary."""
    from .scan import ScanConfig, plan_scan, scan

    config = ScanConfig(**_scan_kwargs(args), metrics=metrics)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    if args.dry_run:
        print(plan_scan(args.source, config, out=args.out).summary())
        return 0
    res = scan(args.source, out=args.out, config=config)
    print(f"measured {len(res.measured)}, already done {len(res.skipped)}, failed {len(res.failed)}, "
          f"locked by another run {len(res.locked)}; tables in {res.out}")
    for name, err in res.failed.items():
        print(f"  failed {name}: {err}", file=sys.stderr)
    if res.duplicates is not None and not res.duplicates.empty:
        for r, o in zip(res.duplicates.revision, res.duplicates.duplicate_of):
            print(f"  duplicate weights: {r} = {o}", file=sys.stderr)
    if args.save_states and not res.measured and res.skipped:
        print("  no states saved: every revision was already measured; add --overwrite to measure and save them",
              file=sys.stderr)
    tables = [t for t in ("geometry", "behavior", "probes", "revisions") if (res.out / t).is_dir()]
    print("load with: " + ", ".join(f"pandas.read_parquet('{res.out}/{t}')" for t in tables[:2]))
    return 1 if res.failed else 0


def _cmd_scan(args) -> int:
    metrics = tuple(m for v in args.metrics or () for m in v.split(",") if m)
    return run_scan_command(args, metrics=metrics)


def _cmd_revisions(args) -> int:
    from .revisions import select_revisions
    from .sources.base import open_source

    source = open_source(args.source, step_pattern=args.step_pattern, keep_cache=True)
    revs = source.revisions()
    if args.revisions:
        revs = select_revisions(revs, args.revisions, source=args.source)
    sizes = {}
    if args.sizes:
        sizes = {r.name: sum(f.size or 0 for f in source.weight_files(r)) for r in revs}
    print(f"{'revision':>12}  {'step':>7}  {'commit':<40}  size")
    for r in revs:
        size = sizes.get(r.name, r.size)
        print(f"{r.name:>12}  {r.step:>7}  {r.commit or '-':<40}  {'' if size is None else f'{size / 1e6:.1f} MB'}")
    print(f"{len(revs)} revision{'s' if len(revs) != 1 else ''}")
    return 0


# subcommands provided by other modules: (module, function adding the parser)
_PLUGINS = [("ckptgeo.probing", "add_probe_parser"), ("ckptgeo.train_grid", "add_train_parser"),
            ("ckptgeo.analysis", "add_analyze_parser"), ("ckptgeo.demo", "add_demo_parser")]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ckptgeo", description="Walk training checkpoints and measure representation geometry, behaviour "
        "and probes at each one.", epilog=EXAMPLES["main"], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"ckptgeo {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-vv for debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("scan", help="measure every selected revision; write Parquet tables",
                       description="Measure per-layer RankMe, accuracy (and opt-in metrics) at each revision.",
                       epilog=EXAMPLES["scan"], formatter_class=argparse.RawDescriptionHelpFormatter)
    add_source_options(p)
    add_scan_options(p)
    p.add_argument("--metrics", action="append", metavar="M1,M2",
                   help="metrics (default: rankme,behavior); opt-in: probe, grad_rank, grad_cov_rank, hessian, "
                        "llc; 'all' for every one")
    p.set_defaults(func=_cmd_scan)

    p = sub.add_parser("revisions", help="list a source's revisions", epilog=EXAMPLES["revisions"],
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="List revision, step, commit and size of a Hub repo or checkpoint folder.")
    add_source_options(p)
    p.add_argument("--sizes", action="store_true", help="also ask the Hub for each revision's weight bytes")
    p.set_defaults(func=_cmd_revisions)

    for module, fn in _PLUGINS:
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as err:
            if err.name != module:
                raise
            continue
        if hasattr(mod, fn):
            getattr(mod, fn)(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``ckptgeo`` console script; returns the exit code."""
    from .errors import CkptgeoError

    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args) or 0)
    except CkptgeoError as err:
        if DEBUG:
            raise
        print(f"ckptgeo: error: {err}", file=sys.stderr)
        print("(set CKPTGEO_DEBUG=1 for the traceback)", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("ckptgeo: interrupted; finished revisions are saved, rerun to resume", file=sys.stderr)
        return 130
