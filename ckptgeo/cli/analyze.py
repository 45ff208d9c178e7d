"""``ckptgeo analyze``: events, summaries, figures and report.md of a scanned dataset."""

from __future__ import annotations

import argparse

__all__ = ["add_parser"]

_EPILOG = """\
examples:
  ckptgeo analyze results/pythia-160m                 # the --out of `ckptgeo scan EleutherAI/pythia-160m`
  ckptgeo analyze results/demo/dataset                # the dataset `ckptgeo demo` wrote
  ckptgeo analyze results/demo/dataset --acc-threshold 0.6 --window 5 --recovery 0.2
  ckptgeo analyze results/demo/dataset --no-plots --all-layers --out results/demo-analysis
  ckptgeo analyze results/pythia-2.8b --keep-grouped latest   # keep the latest of each group of identical weights
  ckptgeo analyze results/pythia-160m --x tokens               # figures and events against training tokens
  ckptgeo analyze results/demo/dataset --min-drop 0.5 --n-permutations 9999 --seed 1

outputs (inside DIR, or --out):
  events/events.parquet   one row per (model, suite, config_hash, metric, layer)
  summary/*.parquet       acquisitions, precursor rates (interval, permutation p, noise false-positive rate,
                          verdict), top-down (Kendall tau, permutation p), probe lead, across sizes, seeds,
                          difficulty slope beside its null; every rule in each table's metadata
  summary/runs.csv, .tex  one row per run (model, task, level, size, seed, events, status) for a paper
  figures/*.png           RankMe per layer with accuracy and events; layer x step heatmaps; probes; seeds
                          overlaid; gaps by task and size
  report.md               tables and figures together
"""


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``ckptgeo analyze DIR`` to an argparse ``subparsers`` object and return its parser."""
    p = subparsers.add_parser(
        "analyze", help="find acquisition, collapse, recovery and precursor gaps in a scanned dataset",
        description="Read DIR's geometry/behavior/probes tables, write the events table, summaries, figures "
                    "and report.md (definitions: `python -m pydoc ckptgeo.analysis.events`; after Billa, "
                    "arXiv:2602.15997).",
        epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dir", metavar="DIR", help="dataset folder written by `ckptgeo scan` (its --out)")
    p.add_argument("--acc-threshold", type=float, default=None,
                   help="accuracy threshold (default 0.5; halfway between chance and 1 where chance >= 0.5)")
    p.add_argument("--window", type=int, default=3, help="consecutive checkpoints above threshold (default 3)")
    p.add_argument("--recovery", type=float, default=0.1,
                   help="fraction of the RankMe drop regained / of a measure's departure moved (default 0.1)")
    p.add_argument("--probe-margin", type=float, default=0.1,
                   help="probe accuracy over the better of chance and its shuffled-label control that marks the "
                        "probe onset (default 0.1)")
    p.add_argument("--probe-alpha", type=float, default=0.05,
                   help="the probe onset also needs the probe's p-value below this (default 0.05)")
    p.add_argument("--min-drop", type=float, default=0.25,
                   help="a collapse needs RankMe this fraction of its first value below it (default 0.25)")
    p.add_argument("--resolution-checkpoints", type=int, default=1,
                   help="a gap of at most this many checkpoints is 'unresolved', not a precursor (default 1)")
    p.add_argument("--n-permutations", type=int, default=999,
                   help="relabellings per permutation test (default 999)")
    p.add_argument("--noise-curves", type=int, default=200,
                   help="noise curves per summary curve for the detector's false-positive rate (default 200; 0: skip)")
    p.add_argument("--seed", type=int, default=0, help="seed of the nulls (default 0)")
    p.add_argument("--out", default=None, help="write events/, summary/, figures/, report.md here (default DIR): a "
                                               "new or empty folder, DIR itself, or an earlier analysis of it; "
                                               "never another dataset")
    p.add_argument("--no-plots", action="store_true", help="skip figures (report.md is still written)")
    p.add_argument("--all-layers", action="store_true", help="print every layer, not only the summary layer")
    p.add_argument("--x", choices=("steps", "tokens"), default="steps",
                   help="axis of the figures and the printed events: training steps (default) or tokens seen; the "
                        "events table always has both (*_step, *_tokens)")
    p.add_argument("--keep-grouped", default=None, metavar="latest|NAME,...",
                   help="revisions whose weights another revision also serves are left out, the whole group; keep "
                        "the latest of each group, or the revisions named (default: keep none)")
    p.set_defaults(func=_run_analyze)
    return p


def _refuse_checkpoint_folder(folder: str) -> None:
    """A folder of checkpoints (``step{N}/``, ``checkpoint-{N}/``) instead of a dataset: say to scan it first.

    Raises
    ------
    DatasetLayoutError
        ``folder`` holds no ``ckptgeo.json`` and does hold checkpoint folders.
    """
    from pathlib import Path

    from ckptgeo.errors import CkptgeoError, DatasetLayoutError
    from ckptgeo.sources.local import LocalSource

    root = Path(folder)
    if not root.is_dir() or (root / "ckptgeo.json").exists():
        return
    try:
        found = LocalSource(root).revisions()
    except CkptgeoError:
        return
    if found:
        raise DatasetLayoutError(
            f"{root} is a folder of {len(found)} checkpoint folders, not a scanned dataset: scan it first with "
            f"`ckptgeo scan {root}`, then `ckptgeo analyze results/{root.resolve().name}`.", path=str(root))


def _run_analyze(args: argparse.Namespace) -> int:
    from ckptgeo.analysis.report import write_report
    from ckptgeo.analysis.summary import analyze, events_text, read_runs
    import pandas as pd

    _refuse_checkpoint_folder(args.dir)

    from ckptgeo.analysis.tables import left_out_text

    keep = args.keep_grouped
    keep = keep.split(",") if keep not in (None, "latest") else keep
    result = analyze(args.dir, acc_threshold=args.acc_threshold, window=args.window, recovery=args.recovery,
                     probe_margin=args.probe_margin, probe_alpha=args.probe_alpha, out=args.out, keep_grouped=keep,
                     x=args.x, min_drop=args.min_drop, resolution_checkpoints=args.resolution_checkpoints,
                     n_permutations=args.n_permutations, n_noise_curves=args.noise_curves, seed=args.seed)
    report = write_report(result.root, analysis=result, plots=not args.no_plots)
    events = result.events
    if args.x == "tokens":   # the same events, their checkpoints in tokens
        # spacings and the gap's grid interval scale by the curve's tokens per step (constant within a stage)
        per_step = ((pd.to_numeric(events["last_tokens"]) - pd.to_numeric(events["first_tokens"]))
                    / (pd.to_numeric(events["last_step"]) - pd.to_numeric(events["first_step"])).replace(0, float("nan")))
        events = events.assign(**{f"{c}_step": events[f"{c}_tokens"] for c in ("acquisition", "collapse", "onset",
                                                                                 "collapse_onset")},
                               **{c: (pd.to_numeric(events[c]) * per_step).round().astype("Int64")
                                  for c in ("resolution_steps", "gap_low_steps", "gap_high_steps") if c in events},
                               gap_steps=events["gap_tokens"])
        print("(acq, collapse, onset, half_onset, gap, gap_range and res below are in training tokens)")
    print(events_text(events, all_layers=args.all_layers, runs=read_runs(result.root), config=result.config))
    print()
    print(left_out_text(result.left_out))
    print(f"events table:  {result.out / 'events'}  ({len(result.events)} rows)")
    print(f"summaries:     {result.out / 'summary'}")
    if not args.no_plots:
        print(f"figures:       {result.out / 'figures'}")
    print(f"report:        {report}")
    return 0

