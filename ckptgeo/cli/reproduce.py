"""``ckptgeo reproduce``: train, scan and analyse a grid, and judge the paper's claims in reproduction.md."""

from __future__ import annotations

import argparse
import time

from ckptgeo.cli._options import log_training_progress_without_terminal

__all__ = ["add_parser"]

_EPILOG = """\
examples:
  ckptgeo reproduce --preset smoke --out results/smoke          # 9 runs, about 5 minutes on 2 cores
  torchrun --nproc_per_node 2 -m ckptgeo reproduce --preset cpu --threads 1   # 81 runs, about 2 hours on 2 cores
  ckptgeo reproduce --preset cpu --dry-run --threads 1          # the plan, and hours from steps/s measured here
  ckptgeo reproduce --preset paper --dry-run --device cuda      # the plan, and GPU-hours from measured steps/s
  torchrun --nproc_per_node 8 -m ckptgeo reproduce --preset paper --device cuda --out /data/reproduce
  ckptgeo reproduce --preset my-grid.json --out results/mine   # a grid of your own (Preset's fields as JSON)
  ckptgeo submit reproduce --preset cpu --out /shared/reproduce --workers 6   # a Slurm array, runs split

presets:
  smoke  copy, compare, parity at level 1 on tiny x seeds 1-3 (9 runs): the pipeline end to end in about
         5 minutes on 2 cores; too small to judge a claim (its verdicts are mostly inconclusive)
  cpu    tiny (2 layers), mini (4), small (6) x seeds 1-3 (81 runs): about 2 hours on 2 cores
         (`--dry-run` measures the steps and scans here and plans it)
  paper  8 tasks x 3 levels x 6 sizes x seeds 1-3 (432 runs), for GPUs
  Seed 0 was the pilot that fixed which settings are hard; it is left out of every preset.

A killed study resumes where it stopped: rerun the same command (finished runs and scans are not redone).
outputs: OUT/reproduction.md (the claim table), OUT/figures/grid.png, OUT/dataset/ (tables, report.md, figures).
"""


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``ckptgeo reproduce`` to an argparse ``subparsers`` object and return its parser."""
    p = subparsers.add_parser(
        "reproduce", help="train a grid, scan it, and judge the paper's claims (reproduction.md)",
        description="The whole study in one command: train tasks x levels x sizes x seeds with dense checkpoints, "
                    "scan every run (RankMe per layer, accuracy, probes, whole-model measures), analyse, and write "
                    "reproduction.md: one row per claim of arXiv:2602.15997 with its source, the measured value "
                    "and interval, the value by chance, a p-value and the verdict of that test.",
        epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="cpu", metavar="{smoke,cpu,paper,FILE.json}",
                   help="smoke: 9 runs, about 5 minutes on 2 cores; cpu: 81 runs on tiny/mini/small, about 2 hours on "
                        "2 cores; paper: 432 runs for GPUs (default cpu; details below); or a JSON file of Preset's "
                        "fields (name, tasks, levels, sizes, seeds, steps {task: {level: steps}}, ...) for a grid of "
                        "your own")
    p.add_argument("--out", default="results/reproduce", help="study folder (default results/reproduce)")
    p.add_argument("--device", default="cpu", help="torch device for training and scans (default cpu)")
    p.add_argument("--dry-run", action="store_true",
                   help="print the plan and the device-hours estimate from steps/s measured here; train nothing")
    p.add_argument("--no-plots", action="store_true", help="skip the figures")
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads per process for every training run and scan (default: 1 for models "
                        "under 10M parameters, else this process's share of the physical cores)")
    p.set_defaults(func=_cmd_reproduce)
    return p


def load_preset(value: str):
    """``--preset``: a preset's name (returned as is), or a JSON file of :class:`~ckptgeo.studies.reproduce.Preset`
    fields (lists become tuples, ``steps`` levels become ints).

    Raises
    ------
    InvalidParameterError
        Neither a preset's name nor a readable JSON object of Preset fields.
    """
    import dataclasses
    import json
    from pathlib import Path

    from ckptgeo.errors import InvalidParameterError
    from ckptgeo.studies.reproduce import PRESETS, Preset

    if value in PRESETS:
        return value
    if not value.endswith(".json"):
        raise InvalidParameterError(f"--preset {value!r}: not one of {', '.join(PRESETS)}, nor a .json file",
                                    name="preset", value=value)
    try:
        spec = json.loads(Path(value).read_text(encoding="utf-8"))
        fields = {f.name for f in dataclasses.fields(Preset)}
        if not isinstance(spec, dict) or set(spec) - fields:
            raise ValueError(f"unknown fields {sorted(set(spec) - fields) if isinstance(spec, dict) else spec!r}")
        spec = {k: tuple(tuple(x) if isinstance(x, list) else x for x in v) if isinstance(v, list) else v
                for k, v in spec.items()}
        spec["steps"] = {t: {int(lv): int(n) for lv, n in by.items()} for t, by in spec.get("steps", {}).items()}
        return Preset(**spec)
    except (OSError, ValueError, TypeError, AttributeError) as err:
        raise InvalidParameterError(f"--preset {value}: {err}", name="preset", value=value) from None


def _cmd_reproduce(args: argparse.Namespace) -> int:
    import logging

    from ckptgeo.studies.reproduce import estimate, estimate_text, plan_text, run_reproduce

    preset = load_preset(args.preset)
    if args.dry_run:
        print(plan_text(preset, args.out))
        if args.device.startswith("cuda"):
            import torch

            if not torch.cuda.is_available():
                print(f"GPU-hours need a GPU: CUDA is not available here (torch {torch.__version__}), so no steps "
                      f"per second were measured. Run this command on a machine with CUDA for the estimate, or "
                      f"--device cpu for CPU-hours.")
                return 0
        print("measuring steps per second for each size ...", flush=True)
        print(estimate_text(preset, estimate(preset, device=args.device, threads=args.threads)))
        return 0
    logging.getLogger("ckptgeo.studies").setLevel(logging.INFO)
    log_training_progress_without_terminal()
    t0 = time.perf_counter()
    res = run_reproduce(preset, args.out, device=args.device, plots=not args.no_plots, threads=args.threads)
    if not res.analysed:
        print(f"this process's share is done in {time.perf_counter() - t0:.0f} s; the last process analyses")
        return 0
    from ckptgeo.studies.report import claims_text

    print(claims_text(res.claims))
    print(f"\nstudy finished in {time.perf_counter() - t0:.0f} s")
    print(f"report:  {res.report}")
    print(f"open:    {res.out / 'report.html'}   (claims, runs, curves and figures in a browser)")
    print(f"tables:  {res.out / 'dataset'}")
    return 0
