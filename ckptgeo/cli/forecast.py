"""``ckptgeo forecast``: forecast acquisition per run and checkpoint, and test whether the geometry helps."""

from __future__ import annotations

import argparse
import dataclasses

__all__ = ["add_parser"]

_EPILOG = """\
examples:
  ckptgeo forecast results/reproduce/dataset                 # a study: held out by task, seed and size
  ckptgeo forecast results/smoke/dataset --horizon 3 --out results/smoke-forecast
  ckptgeo forecast results/pythia-family --no-plots          # a family of runs scanned into one dataset
  ckptgeo train --task copy --level 1 --steps 300 --monitor 25 --forecast-from results/reproduce/dataset \\
      --out runs/copy-L1-live                               # the same forecast, live, one line per checkpoint

what it does: for every run of DATASET (one accuracy curve with its loss, RankMe per layer and CKA), a discrete-time
hazard model (scikit-learn logistic regression) forecasts at each checkpoint when the run will acquire, from two
feature sets side by side: behaviour (accuracy so far with its interval, its slope, the step as a share of the run's
planned steps, the task loss and its slope) and behaviour + geometry (RankMe of three layers against its first value
and floor, its slope, checkpoints since collapse and since recovery onset; CKA and weight distance against the
previous and first checkpoint where the scan measured them). Runs that never acquire are censored. Every score is on
held-out runs (leave one task, seed or size out); geometry's skill over behaviour is tested over held-out tasks, else
settings (a sign-flip test: the seeds of a setting are one unit) and on a null copy whose geometry is noise pooled
over all runs; "geometry helps" also needs the run's own geometry to beat a sibling's (another seed of the same
setting), else the gain is "not shown beyond the setting's level" (with the timing test's power). Each
held-out fold's 80% intervals are widened by an inner leave-one-group-out on its training runs only (coverage and
the model's own beside it).

outputs (inside DATASET, or --out):
  forecast/forecast.parquet               per run, checkpoint, feature set: median acquisition step, 80% interval,
                                          P(acquired within the next h checkpoints)
  forecast/forecast_evaluation.parquet    per split and feature set: log score, Brier, errors, coverage (widened
                                          and the model's own)
  forecast/forecast_skill.parquet         geometry over behaviour, p-value, the null copy's, the run's own geometry
                                          over a sibling's (timing_p_value), verdict
  forecast/forecast_concordance.parquet   order concordance among hard and among easy runs, interval, p (paper:
                                          52% easy, 69% hard)
  forecast/forecast_sizes.parquet         each size forecast from the smaller sizes only
  figures/forecast/<model>__<suite>.png   the forecast's fan over the accuracy curve, acquisition marked
  report.md                               with a section per forecast table (and the rest of the analysis)
"""


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``ckptgeo forecast DATASET`` to an argparse ``subparsers`` object and return its parser."""
    p = subparsers.add_parser(
        "forecast", help="forecast each run's acquisition from what is known at each checkpoint; does geometry help?",
        description="Forecast acquisition on a dataset of runs, behaviour and behaviour + geometry side by side, "
                    "evaluated on held-out runs only.",
        epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dir", metavar="DATASET", help="a ckptgeo dataset of two runs or more, or a study folder "
                                                  "(`ckptgeo reproduce --out`: its dataset/ is read)")
    from ckptgeo._settings import add_flags
    from ckptgeo.analysis.config import AnalysisConfig
    from ckptgeo.forecasting.config import ForecastConfig

    # every setting declared once: the analysis's (rules, nulls, seed, alpha) and the forecast's own
    names = add_flags(p, ForecastConfig)
    own = [n for n in names if n not in {f.name for f in dataclasses.fields(AnalysisConfig)}]
    for action in p._actions:
        if action.dest in own:   # None marks "not given": the forecast step then runs once, at its defaults
            action.help, action.default = action.help.replace("%(default)s", str(action.default)), None
    p.add_argument("--out", default=None, help="write forecast/, figures/, report.md here (default DATASET), as "
                                               "`ckptgeo analyze --out`")
    p.add_argument("--no-plots", action="store_true", help="skip the figures")
    p.set_defaults(func=_cmd_forecast, forecast_settings=own,
                   analysis_settings=[n for n in names if n not in own])
    return p


def _cmd_forecast(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ckptgeo.forecasting import forecast, forecast_text

    if (Path(args.dir) / "dataset").is_dir() and not (Path(args.dir) / "geometry").exists():
        args.dir = str(Path(args.dir) / "dataset")
    res = forecast(args.dir, out=args.out, plots=not args.no_plots,
                   **{n: getattr(args, n) for n in args.forecast_settings},
                   **{n: getattr(args, n) for n in args.analysis_settings})
    print(forecast_text(res))
    print(f"\ntables: {res.out / 'forecast'}; figures: {len(res.figures)} in {res.out / 'figures' / 'forecast'}; "
          f"report: {res.out / 'report.md'}")
    if res.n_runs and not res.n_acquired:   # --forecast-from would refuse this dataset: nothing to learn from
        print(f"next: add runs that acquire to {args.dir} (ckptgeo train / scan), then ckptgeo forecast {args.dir}")
        return 0
    print(f"next: ckptgeo train ... --monitor N --forecast-from {args.dir}   (the forecast live, during training)")
    return 0
