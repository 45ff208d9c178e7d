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
                    "variance, random walks, accuracy permuted within schedules, whole settings' accuracy exchanged "
                    "within schedules) and reports how often each row reads 'reproduced' there. "
                    "Python: ckptgeo.claims(DATASET).",
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

    from ckptgeo._params import validate_params
    from ckptgeo.studies.claims_api import claims, dataset_folder
    from ckptgeo.studies.report import claims_next, claims_text

    validate_params(args, owner="claims", constraints=_admits())   # before the minutes of analysis
    dataset, _ = dataset_folder(args.dataset)
    # the analysis and the claim table take minutes on a study of 60 runs: say what is under way
    print(f"claims: analysing {dataset} and judging each claim"
          + (f"; then {args.calibrate} null copies of each kind" if args.calibrate > 0 else "") + " ...",
          file=sys.stderr, flush=True)

    def progress(i, total, text):
        print(f"calibration {i}/{total}: {text}", file=sys.stderr, flush=True)

    given = {name: getattr(args, name) for name in args.claim_settings}
    table = claims(args.dataset, calibrate=args.calibrate, progress=progress, **given)
    calib, paths = table.attrs["calibration"], table.attrs["paths"]
    print(claims_text(table))
    if calib is not None:
        bad = calib[~calib["ok"]]
        print(f"calibration: {len(calib)} row x null cells, {len(bad)} above alpha"
              + ("" if bad.empty else ": " + ", ".join(f"{r.id} on {r.null}" for r in bad.itertuples())))
    for p in paths:
        print(f"wrote {p}")
    from pathlib import Path

    page = next((p for p in map(Path, paths) if p.name == "report.html"), None)
    print(claims_next(table, args.dataset, page) if calib is None or page is None else f"next: open {page}")
    return 0
