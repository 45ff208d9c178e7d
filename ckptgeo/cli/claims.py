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

    return {"calibrate": [Interval(int, 0, None)], "n_permutations": [Interval(int, 1, None)],
            "power": [Interval(int, 1, None)]}


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
    p.add_argument("--n-permutations", type=int, default=999, help="relabellings per test (default 999)")
    p.add_argument("--power", type=int, default=40, help="planted replicates per lead in the power analysis "
                                                          "(default 40)")
    p.add_argument("--seed", type=int, default=0, help="seed of the nulls and copies (default 0)")
    p.set_defaults(func=_run_claims)
    return p


def _run_claims(args: argparse.Namespace) -> int:
    import sys
    from pathlib import Path

    from ckptgeo._params import validate_params
    from ckptgeo.errors import DatasetLayoutError
    from ckptgeo.studies.calibrate import calibrate, calibration_table, dataset_claims
    from ckptgeo.studies.report import write_claims

    validate_params(args, owner="claims", constraints=_admits())   # before the minutes of analysis
    root = Path(args.dataset)
    study = root if (root / "dataset").is_dir() else None
    dataset = root / "dataset" if study else root
    if not (dataset / "geometry").exists():
        raise DatasetLayoutError(f"{dataset} holds no geometry table: give a study folder or a scanned dataset "
                                 f"(`ckptgeo scan ... --out DIR`).", path=str(dataset))
    # the analysis and the claim table take minutes on a study of 60 runs: say what is under way
    print(f"claims: analysing {dataset} and judging each claim ({args.n_permutations} relabellings a test, "
          f"{args.power} planted replicates a lead for power) ...", file=sys.stderr, flush=True)
    table, analysis = dataset_claims(dataset, n_permutations=args.n_permutations, n_power=args.power,
                                     seed=args.seed)
    print(f"claims: {len(table)} rows judged" + (f"; calibrating on {args.calibrate} null copies of each kind"
                                                  if args.calibrate > 0 else ""), file=sys.stderr, flush=True)
    calib = None
    if args.calibrate > 0:
        def progress(i, total, text):
            print(f"calibration {i}/{total}: {text}", file=sys.stderr, flush=True)

        runs = calibrate(analysis, args.calibrate, n_permutations=min(args.n_permutations, 199),
                         n_power=min(args.power, 10), seed=args.seed, progress=progress)
        calib = calibration_table(runs)
    paths = write_claims(dataset, table, analysis, calib, study=study)
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
