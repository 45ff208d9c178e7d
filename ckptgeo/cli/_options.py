"""Options shared by the subcommands that walk checkpoints (``scan``, ``probe``, ``revisions``); each scan
setting's flag is made from its declaration in :mod:`ckptgeo.engine.config`."""

from __future__ import annotations

import argparse
import sys

__all__ = ["add_source_options", "add_scan_options", "add_setting_flags", "run_scan_command", "parse_source_options",
           "scan_kwargs",
           "undefined_probe_warnings"]


def add_source_options(p: argparse.ArgumentParser, *, source_required: bool = True) -> None:
    """SOURCE, ``--revisions`` and ``--step-pattern``, shared by every command that walks checkpoints."""
    if source_required:
        p.add_argument("source", help="Hub repo id (EleutherAI/pythia-160m), a family of repos "
                                      "('org/pythia-160m-seed{1..3}' or 'org/a,org/b'), or a folder of checkpoints")
    add_setting_flags(p, "source")


def add_scan_options(p: argparse.ArgumentParser, *, metrics: bool = False) -> None:
    """The measurement options shared by ``scan`` and ``probe`` (``--metrics`` too when ``metrics``)."""
    p.add_argument("--out", default=None, help="dataset folder (default results/<source name>)")
    add_setting_flags(p, "scan")
    if metrics:
        from ckptgeo.metrics.registry import metric_names

        add_setting_flags(p, "command", names=", ".join(metric_names()))
    p.add_argument("--dry-run", action="store_true",
                   help="print the selection, bytes to fetch and peak disk; fetch nothing")


def add_setting_flags(p: argparse.ArgumentParser, group: str, **fill: str) -> None:
    """One flag per scan setting declared for ``group`` (:class:`~ckptgeo.engine.config.ScanSetting`): its
    declared flag, default, help (``{name}`` filled from ``fill``), choices, metavar and action
    (:func:`ckptgeo._settings.add_flags`)."""
    from ckptgeo._settings import add_flags
    from ckptgeo.engine.config import ScanConfig

    add_flags(p, ScanConfig, only=lambda s: s.group == group, **fill)


def log_training_progress_without_terminal() -> None:
    """With no terminal (or ``CKPTGEO_NO_PROGRESS``) there is no progress bar: send the trainer's progress
    lines to the log instead (INFO, or lower when ``-vv`` asked for more)."""
    import logging

    from ckptgeo.constants import NO_PROGRESS

    if NO_PROGRESS or not sys.stderr.isatty():
        logging.getLogger("ckptgeo.training.trainer").setLevel(min(logging.INFO, logging.getLogger().level))


def parse_metric_options(values: list[str] | None) -> dict[str, dict]:
    """``["hessian.k=10", "llc.num_chains=2"]`` -> ``{"hessian": {"k": 10}, "llc": {"num_chains": 2}}``, each
    value read as the type of that field of the metric's config (``none`` for None, ``true``/``false``).

    Raises
    ------
    InvalidParameterError
        An entry not of the form METRIC.OPTION=VALUE, or an unknown metric.
    """
    from ckptgeo._params import parse_value
    from ckptgeo.errors import InvalidParameterError
    from ckptgeo.metrics.registry import get_metric

    out: dict[str, dict] = {}
    for text in values or ():
        key, sep, raw = text.partition("=")
        metric, dot, option = key.strip().partition(".")
        if not (sep and dot and metric and option):
            raise InvalidParameterError(f"--metric-option {text!r} must read METRIC.OPTION=VALUE, e.g. hessian.k=10",
                                        name="metric_options", value=text)
        spec = get_metric(metric)
        out.setdefault(metric, {})[option] = parse_value(spec.config, option, raw) if spec.config else raw
    return out


def _metric_list(values: list[str] | None) -> tuple[str, ...]:
    return tuple(m for v in values or () for m in v.split(",") if m)


#: how a repeatable flag's values become the setting (default: a tuple of them)
def parse_source_options(values: list[str] | None) -> dict[str, str] | None:
    """``["cache_dir=/x", ...]`` (repeated ``--source-option``) -> ``{"cache_dir": "/x"}``; each value is
    parsed to the option's type when the source is opened (:func:`~ckptgeo.sources.registry.source_options`).

    Raises
    ------
    InvalidParameterError
        An entry that does not read OPTION=VALUE.
    """
    from ckptgeo.errors import InvalidParameterError

    out = {}
    for text in values or []:
        key, sep, raw = text.partition("=")
        if not (sep and key.strip()):
            raise InvalidParameterError(f"--source-option {text!r} must read OPTION=VALUE, e.g. cache_dir=/scratch/hf",
                                        name="source_options", value=text)
        out[key.strip()] = raw
    return out or None


_FROM_FLAG = {"metric_options": lambda v: parse_metric_options(v) or None, "metrics": _metric_list,
              "source_options": parse_source_options}


def scan_kwargs(args) -> dict:
    """``scan()``'s keywords from the parsed flags: every declared setting whose flag this command has."""
    from ckptgeo.engine.config import declared

    kwargs = {}
    for f, s in declared():
        if s.flag is None or not hasattr(args, f.name):
            continue
        value = getattr(args, f.name)
        if s.action == "store_true":
            value = True if value else f.default          # --centered: True, else RankMe's own (None)
        elif s.action == "append":
            value = _FROM_FLAG.get(f.name, lambda v: tuple(v or ()))(value)
        kwargs[f.name] = value
    return kwargs


def run_scan_command(args, *, metrics: tuple[str, ...] | None = None) -> int:
    """Shared body of ``scan`` and ``probe``: dry run or scan, then a summary. ``metrics``: fixed by the
    command (``probe``), else ``--metrics``. A bad value is reported under the flag that set it
    (``--n-samples 1 is not valid: ...``)."""
    from ckptgeo.errors import InvalidParameterError

    try:
        return _run_scan(args, metrics)
    except InvalidParameterError as err:
        flag = _flag_of(args, err.name)
        if flag is None or str(err).startswith(flag):
            raise
        raise InvalidParameterError(f"{flag} {_shown(err.value)} is not valid: {err}", name=err.name,
                                    value=err.value) from err


def _flag_of(args, name: str | None) -> str | None:
    """The command-line flag that sets ScanConfig field ``name``, if this command has one."""
    from ckptgeo.engine.config import declared

    flags = {f.name: s.flag for f, s in declared() if s.flag}
    return flags.get(name or "") if hasattr(args, name or "") else None


def _shown(value) -> str:
    return " ".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)


def _run_scan(args, metrics: tuple[str, ...]) -> int:
    from ckptgeo.engine.plan import plan_scan, shard

    kwargs = {**scan_kwargs(args), **({} if metrics is None else {"metrics": tuple(metrics)})}
    if args.dry_run:
        plan = plan_scan(args.source, out=args.out, **kwargs)
        print(plan.summary())
        print("next: the same command without --dry-run")
        return 0
    from ckptgeo.engine.scan import scan

    res = _with_progress_lines(lambda: scan(args.source, out=args.out, **kwargs))
    dups = f"duplicates recorded (not fetched) {len(res.duplicated)}, " if res.duplicated else ""
    damaged = f"damaged on the source {len(res.damaged)}, " if res.damaged else ""
    print(f"measured {len(res.measured)}, {dups}already done {len(res.skipped)}, failed {len(res.failed)}, "
          f"{damaged}locked by another run {len(res.locked)}; tables in {res.out}")
    for name, err in res.failed.items():
        print(f"  failed {name}: {err}", file=sys.stderr)
    for name, err in res.damaged.items():   # permanent: a rerun does not retry them, and the exit code is not 1
        print(f"  damaged {name}: {err}", file=sys.stderr)
    if res.duplicates is not None and not res.duplicates.empty:
        for r, o in zip(res.duplicates.revision, res.duplicates.duplicate_of):
            print(f"  duplicate weights: {r} = {o}", file=sys.stderr)
    for g in res.groups:
        print(f"  left out of the analysis by default: {g.describe()} (keep one with "
              f"`ckptgeo analyze --keep-grouped latest`)", file=sys.stderr)
    if args.save_states and not res.measured and res.skipped:
        print("  no states saved: every revision was already measured; add --overwrite to measure and save them",
              file=sys.stderr)
    for line in undefined_probe_warnings(res.out, res.config_hash, res.measured):
        print(f"  warning: {line}", file=sys.stderr)
    tables = [t for t in ("geometry", "behavior", "probes", "compare") if (res.out / t).is_dir()]
    if tables:
        print("load with: " + ", ".join(f"pandas.read_parquet('{res.out}/{t}')" for t in tables))
    rank, world = shard()
    if world > 1:
        from ckptgeo.store.dataset import Dataset

        ds = Dataset(res.out, create=False)
        done = sum(ds.is_done(ds.part_of(res.model, r, res.config_hash)) for r in res.selected)
        print(f"all {world} processes: {done} of {len(res.selected)} selected revisions done so far in {res.out} "
              f"(this is rank {rank})")
    if tables or world > 1:
        print(f"next: ckptgeo analyze {res.out}" + ("   (once every process has finished)" if world > 1 else ""))
    elif res.damaged and not res.failed:
        print("next: no revision was measured and a rerun cannot fix those above (the source serves them damaged); "
              "pick others, e.g. --revisions genuine", file=sys.stderr)
    else:
        print("next: no revision was measured; fix the errors above and rerun the same command", file=sys.stderr)
    return 1 if res.failed else 0


def _with_progress_lines(work):
    """``work()`` with a log line per revision at the default verbosity, with or without a terminal (a batch
    job's log shows progress; on a terminal the lines go above the bar)."""
    import logging

    from tqdm.contrib.logging import logging_redirect_tqdm

    from ckptgeo.engine.progress import LOGGER

    LOGGER.setLevel(min(logging.INFO, logging.getLogger().level or logging.INFO))
    with logging_redirect_tqdm():
        return work()


def undefined_probe_warnings(out, config_hash: str, revisions) -> list[str]:
    """One line per suite whose probes are undefined (NaN) at every layer of some measured revision.

    A probe that cannot be fitted (one class, a class of a single member) is recorded with NaN and a
    reason, not as an error; a scan whose probes are all undefined would otherwise report "failed 0".
    """
    from ckptgeo.store.dataset import read_table

    probes = read_table(out, "probes")
    if probes.empty or not revisions:
        return []
    p = probes[(probes["config_hash"] == config_hash) & probes["revision"].isin(list(revisions))]
    lines = []
    for suite, g in p.groupby("suite", sort=True):
        dead = g.groupby("revision")["accuracy"].apply(lambda a: bool(a.isna().all()))
        dead = sorted(dead[dead].index)
        if dead:
            reason = g["reason"].dropna()
            lines.append(f"probes of suite {suite!r} are undefined at every layer in {len(dead)} of "
                         f"{g['revision'].nunique()} revision(s) (e.g. {dead[0]}): "
                         f"{reason.iloc[0] if len(reason) else 'no reason recorded'}; `ckptgeo analyze` "
                         f"reports them as not measured")
    return lines
