"""``ckptgeo claims``: the claim table of any study or scan folder, and its calibration on null copies."""

from __future__ import annotations

import argparse

__all__ = ["add_parser"]

_EPILOG = """\
examples:
  ckptgeo claims results/smoke                       # a study folder (`ckptgeo reproduce --out`)
  ckptgeo claims results/pythia-160m                 # a scan's dataset folder
  ckptgeo claims results/smoke --calibrate 8         # and every row on 8 null copies of each kind
  ckptgeo claims results/cpu --calibrate 24 --n-permutations 999 --power 40

outputs (inside the dataset folder):
  summary/claims.parquet             one row per claim: value, interval, null, p, Holm-adjusted p, margin,
                                     minimum detectable lead, verdict
  summary/leads.parquet              each acquired run's lead (checkpoints, steps) with both onsets' resolution
  summary/claims_calibration.parquet with --calibrate: false-"reproduced" rate per row and null
  claims.md                          the tables together (and reproduction.md's calibration section in a study)
"""


def _admits() -> dict:
    from ckptgeo._params import Interval

    return {"calibrate": [Interval(int, 0, None)]}   # the claim settings are checked where they are declared


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``ckptgeo claims DATASET`` to an argparse ``subparsers`` object and return its parser."""
    p = subparsers.add_parser(
        "claims", help="judge the paper's claims on a study or scan folder, optionally calibrated on null copies",
        description="Analyse DATASET's tables and judge each claim of arXiv:2602.15997 with its test (the "
                    "hard-minus-easy contrast of leads is the primary row; the others are Holm-adjusted). "
                    "--calibrate K reruns every row on K null copies of each kind (iid noise at each curve's own "
                    "variance, random walks, accuracy permuted within schedules) and reports how often each "
                    "row reads 'reproduced' there.",
        epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dataset", metavar="DATASET", help="a study folder (holding dataset/) or a scanned dataset")
    p.add_argument("--calibrate", type=int, default=0, metavar="K", help="null copies of each kind (default 0: none)")
    from ckptgeo._settings import add_flags
    from ckptgeo.claimtable.registry import ClaimSettings

    names = add_flags(p, ClaimSettings)   # declared once, with their defaults; a study's recorded ones come first
    for action in p._actions:
        if action.dest in names:   # None marks "not given": the recorded value, else the declared default, applies
            action.help, action.default = action.help.replace("%(default)s", str(action.default)), None
    p.set_defaults(func=_run_claims, claim_settings=names)
    p.epilog += ("\nsettings: --n-permutations, --power and --seed default to what the study's (or an earlier "
                 "`ckptgeo claims`') summary/claims_rules.json records, so the table repeats the study's numbers; "
                 "else to the defaults above.\n")
    return p


def _run_claims(args: argparse.Namespace) -> int:
    import sys
    from pathlib import Path

    from ckptgeo._params import validate_params
    from ckptgeo.errors import DatasetLayoutError
    from ckptgeo.claimtable.calibrate import calibrate, calibration_table, dataset_claims
    from ckptgeo.studies.report import write_claims

    validate_params(args, owner="claims", constraints=_admits())   # before the minutes of analysis
    root = Path(args.dataset)
    study = root if (root / "dataset").is_dir() else None
    dataset = root / "dataset" if study else root
    if not (dataset / "geometry").exists():
        raise DatasetLayoutError(f"{dataset} holds no geometry table: give a study folder or a scanned dataset "
                                 f"(`ckptgeo scan ... --out DIR`).", path=str(dataset))
    # the analysis and the claim table take minutes on a study of 60 runs: say what is under way
    settings, config = _settings(dataset, args)
    print(f"claims: analysing {dataset} and judging each claim ({settings.n_permutations} relabellings a test, "
          f"{settings.n_power} planted replicates a lead for power) ...", file=sys.stderr, flush=True)
    table, analysis = dataset_claims(dataset, settings=settings, config=config)
    print(f"claims: {len(table)} rows judged" + (f"; calibrating on {args.calibrate} null copies of each kind"
                                                  if args.calibrate > 0 else ""), file=sys.stderr, flush=True)
    calib = None
    if args.calibrate > 0:
        def progress(i, total, text):
            print(f"calibration {i}/{total}: {text}", file=sys.stderr, flush=True)

        runs = calibrate(analysis, args.calibrate, n_permutations=min(settings.n_permutations, 199),
                         n_power=min(settings.n_power, 10), seed=settings.seed, progress=progress)
        calib = calibration_table(runs, analysis.config.alpha)
    paths = write_claims(dataset, table, analysis, calib, study=study, settings=settings)
    view = table[["id", "verdict", "p_value", "p_holm"]].to_string(index=False)
    print(view)
    if calib is not None:
        bad = calib[~calib["ok"]]
        print(f"calibration: {len(calib)} row x null cells, {len(bad)} above alpha"
              + ("" if bad.empty else ": " + ", ".join(f"{r.id} on {r.null}" for r in bad.itertuples())))
    for p in paths:
        print(f"wrote {p}")
    print(f"next: ckptgeo claims {args.dataset} --calibrate 24" if calib is None else
          f"next: read {paths[-1]}")
    return 0


def _settings(dataset, args: argparse.Namespace):
    """The claim table's settings (flags given, else the dataset's recorded ones, else the declared defaults) and
    the analysis settings the claims were judged with (recorded in ``summary/claims_rules.json``; default
    ``AnalysisConfig()``)."""
    import dataclasses

    from ckptgeo.analysis.config import AnalysisConfig, config_from
    from ckptgeo.claimtable.table import claim_settings
    from ckptgeo.studies.report import recorded_claims

    record = recorded_claims(dataset)
    given = {name: getattr(args, name) for name in args.claim_settings if getattr(args, name) is not None}
    settings = claim_settings(**{**record.get("claim_settings", {}), **given})
    known = {f.name for f in dataclasses.fields(AnalysisConfig)}
    analysis = {k: v for k, v in (record.get("rules", {}).get("analysis") or {}).items() if k in known}
    return settings, (config_from(analysis) if analysis else None)
