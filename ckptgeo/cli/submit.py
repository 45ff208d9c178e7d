"""``ckptgeo submit``: run ``scan``, ``probe`` or ``reproduce`` as a Slurm job array (through submitit).

Each array task runs the plain command; the tasks split the work by ``SLURM_ARRAY_TASK_ID`` /
``SLURM_ARRAY_TASK_COUNT`` (:func:`ckptgeo.engine.plan.shard`) and the per-revision claims keep a revision
from being measured twice. What was submitted is recorded in ``OUT/slurm/submit.json`` (the command, the
selection, the job ids), which ``ckptgeo status OUT`` and ``ckptgeo submit --resubmit OUT`` read::

    OUT/slurm/submit.json         the submission record (written by ckptgeo)
    OUT/slurm/logs/               submitit's folder (mode 0700: it holds the job's pickle, which the workers
                                  unpickle): <job>_<task>_log.out / .err per array task
    OUT/slurm/ckptgeo-<cmd>.sbatch  the script --dry-run prints (written only with --dry-run --write)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import sys
import time
from pathlib import Path

__all__ = ["add_parser", "sbatch_script", "parse_time", "RECORD"]

from ckptgeo.cli.status import COMMANDS as _COMMANDS
from ckptgeo.cli.status import RECORD, read_record

_EPILOG = """\
examples:
  ckptgeo submit scan EleutherAI/pythia-1b --revisions every-1000 --out /scratch/p1b --device cuda \\
      --workers 8 --partition gpu --gpus-per-task 1 --time 4:00:00 --mem 64G --stage
  ckptgeo submit probe --suite logic --out /scratch/probe-logic --workers 4 --dry-run > probe.sbatch
  ckptgeo submit reproduce --preset cpu --out /scratch/reproduce --workers 6 --time 2:00:00
  ckptgeo status /scratch/p1b                 # done / failed / in progress / not started, per revision
  ckptgeo submit --resubmit /scratch/p1b      # only what is not done, same Slurm options unless given

The command's own options (SOURCE, --out, --revisions, --metrics ...) follow it; --out is required for scan and
probe (every worker writes there). Without submitit (pip install 'ckptgeo[slurm]'), --dry-run prints an sbatch
script to submit by hand. The output folder must be on a file system every node sees (NFS, Lustre, GPFS):
ckptgeo's claims need only an atomic link and rename there, not flock.
"""


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``ckptgeo submit`` to an argparse ``subparsers`` object and return its parser."""
    p = subparsers.add_parser(
        "submit", help="run scan, probe or reproduce as a Slurm job array (submitit)",
        description="Submit COMMAND as a Slurm job array of --workers tasks sharing one output folder, print the "
                    "job id and where its logs are, and return.",
        epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--resubmit", metavar="OUT", default=None,
                   help="submit again what is not done in OUT (read from OUT/slurm/submit.json)")
    add_slurm_options(p)
    p.add_argument("command", nargs="?", choices=_COMMANDS, help="the ckptgeo command each worker runs")
    p.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    p.set_defaults(func=_cmd_submit)
    return p


def add_slurm_options(p: argparse.ArgumentParser) -> None:
    """The Slurm options (also accepted after COMMAND, see :func:`_split`)."""
    g = p.add_argument_group("Slurm")
    g.add_argument("--workers", type=int, default=None, help="array tasks (default 1; --resubmit: as before)")
    g.add_argument("--partition", default=None)
    g.add_argument("--account", default=None)
    g.add_argument("--time", default=None, help="wall time per task: minutes, H:MM:SS or D-HH:MM:SS")
    g.add_argument("--gpus-per-task", type=int, default=None)
    g.add_argument("--cpus-per-task", type=int, default=None)
    g.add_argument("--mem", default=None, help="memory per task, e.g. 16G")
    g.add_argument("--array-parallelism", type=int, default=None, help="at most this many tasks at once")
    g.add_argument("--job-name", default=None, help="default ckptgeo-COMMAND")
    g.add_argument("--stage", action="store_true",
                   help="fetch the selection here first (ckptgeo fetch), then run the workers with HF_HUB_OFFLINE=1 "
                        "(for compute nodes without network; the Hub cache, HF_HOME, must be shared)")
    g.add_argument("--dry-run", action="store_true", help="print the sbatch script; submit nothing")


_SLURM_KEYS = ("workers", "partition", "account", "time", "gpus_per_task", "cpus_per_task", "mem",
               "array_parallelism", "job_name")


def _split(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """The Slurm options out of COMMAND's arguments (they may come after COMMAND), and the rest."""
    p = argparse.ArgumentParser(prog="ckptgeo submit", add_help=False, allow_abbrev=False)
    add_slurm_options(p)
    return p.parse_known_args(argv)


def parse_time(text: str) -> int:
    """Minutes of a Slurm time: ``90``, ``1:30:00``, ``2-00:00:00``, ``30:00`` (MM:SS).

    Raises
    ------
    InvalidParameterError
        Not one of those forms.

    Examples
    --------
    >>> parse_time("90"), parse_time("1:30:00"), parse_time("1-00:00:00"), parse_time("45:00")
    (90, 90, 1440, 45)
    """
    from ckptgeo.errors import InvalidParameterError

    m = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", text.strip())
    if not m:
        raise InvalidParameterError(f"--time {text!r} is not a Slurm time (minutes, H:MM:SS or D-HH:MM:SS)",
                                    name="time", value=text)
    days, a, b, c = (int(x) if x else None for x in m.groups())
    if c is not None:
        minutes = a * 60 + b + (c > 0)
    elif b is not None:
        minutes = a * 60 + b if days is not None else a + (b > 0)
    else:
        minutes = a * 60 if days is not None else a
    return (days or 0) * 1440 + minutes


def _worker_argv(command: str, args: list[str]) -> list[str]:
    """The command an array task runs (``-v``: each measured revision gets a log line)."""
    return [sys.executable, "-m", "ckptgeo", "-v", command, *args]


def _env_lines(stage: bool) -> list[str]:
    lines = ["export CKPTGEO_NO_PROGRESS=1"]
    if stage:
        lines.append("export HF_HUB_OFFLINE=1")
    return lines


def private_log_folder(logs: Path) -> Path:
    """Create ``logs`` (submitit's folder) private to the user, mode 0700, or make an existing one so: it holds
    the job's pickle, which every worker unpickles, so nobody else may write there.

    Raises
    ------
    InvalidParameterError
        ``logs`` is a symbolic link or belongs to another user.
    """
    from ckptgeo.errors import InvalidParameterError

    logs.parent.mkdir(parents=True, exist_ok=True)
    logs.mkdir(mode=0o700, exist_ok=True)
    if logs.is_symlink() or logs.stat().st_uid != os.getuid():
        raise InvalidParameterError(f"{logs} holds the job's pickle, which the workers unpickle: it must be a folder "
                                    f"of your own, not a link or another user's; move it away and resubmit",
                                    name="out", value=str(logs))
    os.chmod(logs, 0o700)
    return logs


def sbatch_script(command: str, args: list[str], slurm: dict, *, stage: bool, logs: Path, cwd: Path) -> str:
    """The sbatch script of an array of ``slurm["workers"]`` tasks each running ``ckptgeo COMMAND ARGS``
    (what ``--dry-run`` prints; ``sbatch`` it by hand where submitit is not installed)."""
    w = slurm.get("workers") or 1
    array = f"0-{w - 1}" + (f"%{slurm['array_parallelism']}" if slurm.get("array_parallelism") else "")
    lines = ["#!/bin/bash", f"#SBATCH --job-name={slurm.get('job_name') or 'ckptgeo-' + command}",
             f"#SBATCH --array={array}", f"#SBATCH --output={logs}/%A_%a.out", f"#SBATCH --error={logs}/%A_%a.err",
             f"#SBATCH --chdir={cwd}", "#SBATCH --ntasks=1"]
    for key, flag in (("partition", "partition"), ("account", "account"), ("time", "time"),
                      ("gpus_per_task", "gpus-per-task"), ("cpus_per_task", "cpus-per-task"), ("mem", "mem")):
        if slurm.get(key) is not None:
            lines.append(f"#SBATCH --{flag}={slurm[key]}")
    lines += ["# each task takes share SLURM_ARRAY_TASK_ID of SLURM_ARRAY_TASK_COUNT; per-revision claims in",
              "# OUT/.locks keep any revision from being measured twice", *_env_lines(stage),
              "exec " + shlex.join(_worker_argv(command, args))]
    return "\n".join(lines) + "\n"


def _submitit_submit(command: str, args: list[str], slurm: dict, *, stage: bool, logs: Path) -> tuple[str, int]:
    """Submit the array through submitit; returns (array job id, tasks)."""
    try:
        import submitit
        from submitit.helpers import CommandFunction
    except ImportError:
        from ckptgeo.errors import InvalidParameterError

        raise InvalidParameterError("ckptgeo submit needs submitit: pip install 'ckptgeo[slurm]' (or use --dry-run "
                                    "and sbatch the script it prints)", name="submitit", value=None) from None
    ex = submitit.SlurmExecutor(folder=logs)
    params = {"job_name": slurm.get("job_name") or f"ckptgeo-{command}", "setup": _env_lines(stage),
              "ntasks_per_node": 1, "nodes": 1}
    for key in ("partition", "account", "gpus_per_task", "cpus_per_task", "mem", "array_parallelism"):
        if slurm.get(key) is not None:
            params[key] = slurm[key]
    if slurm.get("time") is not None:
        params["time"] = parse_time(str(slurm["time"]))
    ex.update_parameters(**params)
    fn = CommandFunction(_worker_argv(command, args), verbose=True)
    w = slurm.get("workers") or 1
    with ex.batch():
        jobs = [ex.submit(fn) for _ in range(w)]
    return jobs[0].job_id.split("_")[0], w


def _command_args(command: str, args: list[str]) -> argparse.Namespace:
    """COMMAND's own parser on ARGS (so a bad option is refused here, not in every task)."""
    from ckptgeo.cli import build_parser

    try:
        return build_parser().parse_args([command, *args])
    except SystemExit as err:
        if err.code:
            from ckptgeo.errors import InvalidParameterError

            raise InvalidParameterError(f"the arguments of `ckptgeo {command}` above are not valid",
                                        name="args", value=args) from None
        raise


def _selection(command: str, cargs: argparse.Namespace, out: Path) -> dict:
    """What a scan or probe will measure: the model its parts are named by, config hash and selected revision
    names."""
    from ckptgeo.cli._options import scan_kwargs
    from ckptgeo.engine.config import ScanConfig, settings_from
    from ckptgeo.engine.plan import resolve

    kwargs = scan_kwargs(cargs)
    if command == "probe":
        from ckptgeo.engine.probe import PROBE_METRICS
        kwargs["metrics"] = tuple(PROBE_METRICS)
    res = resolve(str(cargs.source), ScanConfig(**settings_from(kwargs)))
    from ckptgeo.engine.plan import dataset_model
    from ckptgeo.store.dataset import Dataset

    known = Dataset(out, create=False).sources() if (out / "ckptgeo.json").exists() else None
    return {"source": str(cargs.source), "model": dataset_model(res.source, known), "config_hash": res.config_hash,
            "revisions": [r.name for r in res.selected]}


def _with_revisions(args: list[str], names: list[str]) -> list[str]:
    """``args`` with its ``--revisions`` replaced by the comma list ``names``."""
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a == "--revisions":
            skip = True
            continue
        if a.startswith("--revisions="):
            continue
        out.append(a)
    return [*out, "--revisions", ",".join(names)]


def _cmd_submit(args: argparse.Namespace) -> int:
    from ckptgeo.errors import InvalidParameterError

    more, rest = _split(args.args or [])
    for key in (*_SLURM_KEYS, "stage", "dry_run"):
        if getattr(more, key) not in (None, False):
            setattr(args, key, getattr(more, key))
    cli_slurm = {k: getattr(args, k) for k in _SLURM_KEYS if getattr(args, k) is not None}
    if args.workers is not None and args.workers < 1:
        raise InvalidParameterError(f"--workers {args.workers} is not valid: at least 1", name="workers",
                                    value=args.workers)
    if args.time is not None:
        parse_time(args.time)
    if args.resubmit:
        return _resubmit(Path(args.resubmit), cli_slurm, args)
    if not args.command:
        raise InvalidParameterError("name the command to submit (scan, probe or reproduce), or --resubmit OUT",
                                    name="command", value=None)
    return _submit(args.command, rest, cli_slurm, stage=args.stage, dry_run=args.dry_run)


def _out_of(command: str, cargs: argparse.Namespace) -> Path:
    from ckptgeo.errors import InvalidParameterError

    if cargs.out is None:
        raise InvalidParameterError(f"ckptgeo submit {command} needs --out: the folder every worker writes to, on "
                                    f"a file system all nodes share", name="out", value=None)
    out = Path(cargs.out).absolute()
    for what, path in (("--out", out), ("the current folder", Path.cwd())):
        if any(c.isspace() or c in "\"'" for c in str(path)):
            # the path lands in #SBATCH lines (--output, --chdir), which are split at blanks, not parsed as a shell
            raise InvalidParameterError(f"ckptgeo submit cannot use {what} {str(path)!r}: Slurm's #SBATCH lines "
                                        f"cannot hold a path with blanks or quotes; use a path without them",
                                        name="out", value=str(path))
    return out


def _submit(command: str, args: list[str], slurm: dict, *, stage: bool, dry_run: bool,
            record: dict | None = None) -> int:
    from ckptgeo.errors import InvalidParameterError

    cargs = _command_args(command, args)
    out = _out_of(command, cargs)
    if command == "reproduce":
        if stage:
            raise InvalidParameterError("--stage fetches Hub checkpoints; reproduce trains its own, so there is "
                                        "nothing to stage", name="stage", value=True)
        from ckptgeo.cli.reproduce import load_preset
        from ckptgeo.studies.reproduce import plan_study

        runs = plan_study(load_preset(cargs.preset), out)   # refuses a bad preset before anything is submitted
        preset = str(Path(cargs.preset).absolute()) if cargs.preset.endswith(".json") else cargs.preset
        selection = {"preset": preset, "device": cargs.device, "runs": [r.name for r in runs]}
    else:
        if getattr(cargs, "dry_run", False):
            raise InvalidParameterError(f"--dry-run goes before {command} here: `ckptgeo submit --dry-run {command} "
                                        f"...` prints the sbatch script", name="dry_run", value=True)
        # a resubmission knows its selection from the record and contacts no Hub
        selection = _selection(command, cargs, out) if record is None else {}
    logs = out / "slurm" / "logs"
    script = sbatch_script(command, args, slurm, stage=stage, logs=logs, cwd=Path.cwd())
    if dry_run:
        sys.stdout.write(script)
        print(f"# (not submitted) save this and run: sbatch FILE; then: ckptgeo status {out}", file=sys.stderr)
        return 0
    if command != "reproduce":
        from ckptgeo.store.dataset import Dataset

        Dataset(out)   # refuses a foreign folder before anything is submitted
        if stage and record is not None:
            print("the selection was staged by the first submission; the workers run with HF_HUB_OFFLINE=1")
        elif stage:
            from ckptgeo.cli.fetch import fetch_revisions

            got = fetch_revisions(selection["source"], ",".join(selection["revisions"]))
            print(f"staged {len(got)} revisions of {selection['source']} into the Hub cache; workers run with "
                  f"HF_HUB_OFFLINE=1", flush=True)
    private_log_folder(logs)
    job, tasks = _submitit_submit(command, args, slurm, stage=stage, logs=logs)
    from ckptgeo._io import atomic_write_text

    rec = record or {"command": command, "args": args, "cwd": str(Path.cwd()), "out": str(out), **selection,
                     "slurm": slurm, "stage": stage, "jobs": []}
    rec["jobs"].append({"job_id": job, "tasks": tasks, "args": args, "slurm": slurm, "stage": stage,
                        "submitted": time.strftime("%Y-%m-%dT%H:%M:%S")})
    atomic_write_text(out / RECORD, json.dumps(rec, indent=2))
    print(f"submitted job {job}: {tasks} array tasks of `ckptgeo {command}` into {out}")
    print(f"logs: {logs}/{job}_<task>_0_log.out (and .err)")
    print(f"next: squeue -j {job}; ckptgeo status {out}; ckptgeo submit --resubmit {out} for what is left")
    return 0


def _resubmit(out: Path, cli_slurm: dict, args: argparse.Namespace) -> int:
    from ckptgeo.cli.status import collect

    rec = read_record(out)
    os.chdir(rec.get("cwd") or ".")
    rows = collect(out, rec)
    left = [r["name"] for r in rows if r["status"] != "done"]
    running = [r["name"] for r in rows if r["status"] == "in progress"]
    if not left:
        print(f"nothing left in {out}: all {len(rows)} done; nothing submitted")
        return 0
    todo = [n for n in left if n not in running]
    if not todo:
        print(f"nothing to submit: the {len(running)} revisions left are in progress ({', '.join(running)})")
        return 0
    slurm = {**rec.get("slurm", {}), **cli_slurm}
    args_ = rec["args"]
    if rec["command"] != "reproduce":
        args_ = _with_revisions(args_, todo)
    slurm["workers"] = min(slurm.get("workers") or 1, len(todo))
    print(f"{len(todo)} of {len(rows)} not done in {out}: {', '.join(todo)}"
          + (f" ({len(running)} in progress left alone)" if running else ""))
    return _submit(rec["command"], args_, slurm, stage=args.stage or rec.get("stage", False), dry_run=args.dry_run,
                   record=rec)
