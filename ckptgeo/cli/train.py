"""``ckptgeo train``: one run, a mixture, or a grid of runs on the algorithmic tasks."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from ckptgeo._settings import declared
from ckptgeo.errors import InvalidParameterError
from ckptgeo.training.grid import train_grid
from ckptgeo.suites.tasks import TASKS
from ckptgeo.training.config import TrainConfig, cli_settings
from ckptgeo.training.trainer import train

__all__ = ["add_parser"]

_EPILOG = """\
examples:
  # the smallest model on modular addition (level 1), 2000 steps, ~100 checkpoints
  ckptgeo train --task modular --level 1 --size tiny --steps 2000 --out runs/modular-L1-tiny

  # a mixture of two tasks in one model, denser checkpoints, on a GPU
  ckptgeo train --tasks copy,sort --level 2 --size mini --steps 3000 --checkpoints 150 \\
      --device cuda --out runs/copy-sort-L2-mini

  # a grid: all eight tasks x three levels x two sizes, one folder per run, resumable
  ckptgeo train --grid --tasks all --levels 1,2,3 --sizes tiny,mini --steps 3000 --out runs/grid

  # the same grid split over 8 GPUs (process r trains runs r::8)
  accelerate launch --num_processes 8 -m ckptgeo train --grid --tasks all --sizes tiny,mini,small \\
      --steps 3000 --out runs/grid

  # watch it live: per-layer RankMe, accuracy and events every 25 steps, written to OUT/monitor
  ckptgeo train --task copy --level 1 --steps 300 --monitor 25 --out runs/copy-L1-live
  ckptgeo analyze runs/copy-L1-live/monitor

  # a small model on an otherwise idle CPU: use both cores (the default for it is one thread)
  ckptgeo train --task copy --level 1 --steps 300 --threads 2 --out runs/copy-L1-tiny

  # then measure it
  ckptgeo scan runs/modular-L1-tiny

tasks: copy reverse compare parity addition modular sort multiplication (levels 1, 2, 3).
sizes: tiny (2x128) mini (4x256) small (6x384) medium (8x512) large (12x768) xl (12x1024).
A rerun with the same settings resumes or skips finished runs; other settings in the same --out
folder are refused.
"""


def _csv(text: str | None, cast=str) -> list:
    return [cast(x.strip()) for x in text.split(",") if x.strip()] if text else []


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the ``train`` subcommand to an argparse ``subparsers`` object (handler in ``func``)."""
    p = subparsers.add_parser(
        "train", help="train small GPT-NeoX models on algorithmic tasks, writing step{N} checkpoints",
        description="Train a GPT-NeoX decoder on an algorithmic task (or a mixture, or a grid of runs) and "
                    "write a dense checkpoint suite that `ckptgeo scan DIR` reads with no other flag.",
        epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", choices=TASKS, help="the task of a single run")
    p.add_argument("--tasks", help="comma-separated tasks: a mixture in one model, or the grid's tasks "
                                   "with --grid ('all' = all eight)")
    p.add_argument("--level", type=int, default=1, choices=(1, 2, 3), help="difficulty level (default 1)")
    p.add_argument("--levels", help="comma-separated levels: one per --tasks entry, or the grid's levels "
                                    "(default with --grid: 1,2,3)")
    p.add_argument("--out", required=True, help="run folder (grid: the folder of run folders)")
    p.add_argument("--sizes", help="comma-separated sizes of the grid (default: --size)")
    p.add_argument("--seeds", help="comma-separated seeds of the grid (default: --seed)")
    p.add_argument("--grid", action="store_true", help="train tasks x levels x sizes x seeds, one run each")
    for _, flag, kwargs in cli_settings():  # TrainConfig's own settings: default and help declared there
        p.add_argument(flag, **kwargs)
    p.set_defaults(func=_cmd_train)
    return p


#: TrainConfig fields -> the flags that set them, so command-line errors name what the user typed.
_FLAGS = {f.name: s.flag for f, s in declared(TrainConfig) if s.flag}


def _cmd_train(args: argparse.Namespace) -> int:
    try:
        return _train_from_args(args)
    except InvalidParameterError as err:
        if err.name not in _FLAGS:
            raise
        raise InvalidParameterError(f"{_FLAGS[err.name]} {err.value!r} is not valid: {err}", name=err.name,
                                    value=err.value) from err


def _train_from_args(args: argparse.Namespace) -> int:
    tasks = list(TASKS) if args.tasks == "all" else _csv(args.tasks)
    if args.task and tasks:
        raise InvalidParameterError("Give --task or --tasks, not both.", name="tasks", value=args.tasks)
    tasks = tasks or ([args.task] if args.task else [])
    if not tasks:
        raise InvalidParameterError("Name a task: --task TASK, --tasks a,b, or --grid --tasks all.", name="tasks")
    levels = _csv(args.levels, int)
    template = config_from_args(args, tasks)
    import logging

    from ckptgeo.cli._options import log_training_progress_without_terminal

    if args.monitor:
        logging.getLogger("ckptgeo.monitor").setLevel(logging.INFO)  # the live event lines
    log_training_progress_without_terminal()
    if args.grid:
        report = train_grid(tasks, levels or [1, 2, 3], _csv(args.sizes) or [args.size], out=args.out,
                            seeds=_csv(args.seeds, int) or [args.seed], template=template)
        print(f"rank {report.rank}/{report.world_size}: {len(report.trained)} trained, "
              f"{len(report.skipped)} already complete, in {args.out}")
        runs = [*report.trained, *report.skipped]
        if runs:
            print(f"next: ckptgeo scan RUN for each run folder (e.g. ckptgeo scan {runs[0]}), then ckptgeo analyze "
                  f"results/RUN")
        return 0
    if levels:
        if len(levels) == 1:
            levels = levels * len(tasks)
        template = dataclasses.replace(template, levels=tuple(levels))
    out = train(template)
    print(summary_line(out))
    if (Path(out) / "monitor" / "ckptgeo.json").is_file():   # the live model's measures are a dataset already
        print(f"next: ckptgeo analyze {Path(out) / 'monitor'}   (the monitor's dataset; ckptgeo scan {out} measures "
              f"the saved checkpoints instead)")
    else:
        print(f"next: ckptgeo scan {out}   (then ckptgeo analyze results/{Path(out).resolve().name})")
    return 0


def config_from_args(args: argparse.Namespace, tasks: list[str]) -> TrainConfig:
    """The :class:`TrainConfig` of the parsed flags: ``tasks`` at ``--level``, every flag of
    :func:`~ckptgeo.training.config.cli_settings` into its field (``--warmup`` capped at ``--steps``)."""
    settings = {name: getattr(args, name) for name, _, _ in cli_settings()}
    settings["warmup_steps"] = min(settings["warmup_steps"], settings["n_steps"])
    return TrainConfig(tasks=tuple(tasks), levels=(args.level,) * len(tasks), out=args.out, **settings)


def summary_line(out) -> str:
    """One line closing a run: where it is, its steps, and per suite the final held-out accuracy and whether
    and when it was acquired (:func:`ckptgeo.events.detect.acquisition_step`, default threshold and window).

    Examples
    --------
    ``runs/copy: 400 steps, 12 checkpoints, 35 s; final held-out accuracy copy-L1 0.97 (acquired at step 150 on the
    checkpoints' grid, threshold 0.5), sort-L1 0.20 (not acquired: ...)``
    """
    import json
    from pathlib import Path

    from ckptgeo.events.detect import acquisition_step
    from ckptgeo.training.runfolder import MANIFEST_NAME, training_history

    manifest = json.loads((Path(out) / MANIFEST_NAME).read_text(encoding="utf-8"))
    hist = training_history(out)
    parts = []
    for suite, g in hist.groupby("suite", sort=False):
        g = g.sort_values("step")
        acq = acquisition_step(g["step"].to_numpy(), g["accuracy"].to_numpy(), chance=manifest["chance"].get(suite))
        when = (f"acquired at step {acq.step} on the checkpoints' grid" if acq.step is not None
                else f"not acquired: {acq.reason or acq.status}") + f", threshold {acq.threshold:g}"
        parts.append(f"{suite} {g['accuracy'].iloc[-1]:.2f} ({when})")
    seconds = manifest.get("seconds")
    took = f", {seconds:.0f} s" if seconds is not None else ""
    grid = " (the monitor's live lines use its own grid of measuring steps)" if (Path(out) / "monitor").is_dir() else ""
    return (f"{out}: {manifest['steps']} steps, {hist['step'].nunique()} checkpoints{took}; final held-out accuracy "
            + ", ".join(parts) + grid)

