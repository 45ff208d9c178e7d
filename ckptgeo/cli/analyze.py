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
  ckptgeo analyze results/addition-L1 --difficulty addition-L1=hard   # a suite's difficulty class, by name

difficulty classes: --difficulty first; else the dataset's difficulty.json (`ckptgeo demo` records copy-L1
easy, addition-L1 hard by the studies' rule); else L<level> for a task-L<level> suite, a bundled suite's own,
or early/late acquisition within each model.

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
                    "and report.md (definitions: `python -m pydoc ckptgeo.events.detect`; after Billa, "
                    "arXiv:2602.15997).",
        epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dir", metavar="DIR", help="dataset folder written by `ckptgeo scan` (its --out)")
    from ckptgeo._settings import add_flags
    from ckptgeo.analysis.config import AnalysisConfig

    p.set_defaults(analysis_settings=add_flags(p, AnalysisConfig))   # the declared flags: rules, probe, nulls
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
    p.add_argument("--difficulty", default=None, metavar="SUITE=CLASS,...", type=_difficulty,
                   help="difficulty class of the suites named (e.g. copy-L1=easy,addition-L1=hard), over the "
                        "dataset's difficulty.json and the defaults (below)")
    p.set_defaults(func=_run_analyze)
    return p


def _difficulty(text: str) -> dict[str, str]:
    """``--difficulty``: ``"copy-L1=easy,addition-L1=hard"`` -> ``{"copy-L1": "easy", "addition-L1": "hard"}``.

    Raises
    ------
    argparse.ArgumentTypeError
        An entry without ``=``, or with an empty suite or class.
    """
    out = {}
    for entry in filter(None, (e.strip() for e in text.split(","))):
        suite, eq, cls = (x.strip() for x in entry.partition("="))
        if not (eq and suite and cls):
            raise argparse.ArgumentTypeError(f"{entry!r} is not SUITE=CLASS (e.g. --difficulty addition-L1=hard)")
        out[suite] = cls
    return out


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
    from ckptgeo.analysis.pipeline import analyze, events_text, read_runs
    import ckptgeo.forecasting.tables  # noqa: F401  (registers the forecast step and figure)
    import pandas as pd

    _refuse_checkpoint_folder(args.dir)

    from ckptgeo.analysis.inputs import left_out_text

    keep = args.keep_grouped
    keep = keep.split(",") if keep not in (None, "latest") else keep
    result = analyze(args.dir, out=args.out, keep_grouped=keep, x=args.x, difficulty=args.difficulty,
                     **{name: getattr(args, name) for name in args.analysis_settings})
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

