"""Options shared by the subcommands that walk checkpoints (``scan``, ``probe``, ``revisions``)."""

from __future__ import annotations

import argparse
import sys

__all__ = ["add_source_options", "add_scan_options", "run_scan_command", "undefined_probe_warnings"]


def add_source_options(p: argparse.ArgumentParser, *, source_required: bool = True) -> None:
    """SOURCE, ``--revisions`` and ``--step-pattern``, shared by every command that walks checkpoints."""
    if source_required:
        p.add_argument("source", help="Hub repo id (EleutherAI/pythia-160m), a family of repos "
                                      "('org/pythia-160m-seed{1..3}' or 'org/a,org/b'), or a folder of checkpoints")
    p.add_argument("--revisions", default=None,
                   help="revision selector: all, every-N, log, A:B[:N], main, genuine (no two serve the same "
                        "weights; see `ckptgeo revisions SOURCE --integrity`), names/steps, or STAGE:SEL such as "
                        "'stage2-ingredient1:*' (default: all for a folder, every-1000 for a Hub repo)")
    p.add_argument("--step-pattern", default=None,
                   help=r"regex mapping branch names to steps: group 'step' (or the first), optional 'stage' and "
                        r"'tokens' (billions); default: the built-in schemes step{N}, [stageK[-ingredientJ]-]"
                        r"step{N}-tokens{T}B, stageK-step-{N}, step-{N}, step-{N}-{T}BT, step_{N}, checkpoint-{N}, "
                        r"global_step{N}, iter{N}, ckpt_{K}, {N}")


def add_scan_options(p: argparse.ArgumentParser) -> None:
    """The measurement options shared by ``scan`` and ``probe``."""
    p.add_argument("--suite", action="append", dest="suites", metavar="NAME|PATH",
                   help="bundled suite name, file path, loader spec (hf:ORG/NAME), or an algorithmic task level "
                        "such as copy-L1 (its 200 held-out items, as `ckptgeo train` draws them); repeat for several "
                        "(default: the source's suites)")
    p.add_argument("--tokenizer", default=None, metavar="PATH|REPO",
                   help="tokenizer folder or Hub repo id, for checkpoint folders without one (a Trainer's "
                        "checkpoint-N folders); default: the source's own")
    p.add_argument("--out", default=None, help="dataset folder (default results/<source name>)")
    p.add_argument("--n-samples", type=int, default=200, help="items per suite (default 200)")
    p.add_argument("--position", choices=["last", "mean"], default="last",
                   help="token read for hidden states (default last)")
    p.add_argument("--metric-option", action="append", dest="metric_options", metavar="METRIC.OPTION=VALUE",
                   help="a metric's setting, e.g. hessian.k=10, llc.num_chains=2, grad_rank.sketch_dim=1024, "
                        "probe.C=0.5, cka.reference=step1000; repeat for several; the options are the fields of the "
                        "metric's config (HessianConfig, LLCConfig, ...), checked before anything is fetched and "
                        "recorded in each row; every metric also takes METRIC.revisions=SELECTOR, the revisions "
                        "(of the scan's selection) it runs at, e.g. hessian.revisions=every-5")
    p.add_argument("--centered", action="store_true",
                   help="centred RankMe (short for --metric-option rankme.centered=true; default uncentred, as "
                        "Garrido et al.)")
    p.add_argument("--epsilon", type=float, default=None,
                   help="RankMe's epsilon (short for --metric-option rankme.eps=E; default 1e-7)")
    p.add_argument("--device", default="cpu", help="torch device (default cpu)")
    p.add_argument("--dtype", default="float32", choices=["float32", "float64", "bfloat16", "float16", "auto"],
                   help="forward-pass dtype (states are upcast, RankMe's SVD runs in float64; default float32); "
                        "auto: half precision on a GPU unless a whole-model measure is selected")
    p.add_argument("--batch-size", type=int, default=None,
                   help="items per forward batch (default: from the GPU's free memory; 16 on a CPU)")
    p.add_argument("--seed", type=int, default=0, help="seed for item selection and metrics (default 0)")
    p.add_argument("--prefetch", type=int, default=1, help="revisions downloaded ahead (default 1)")
    p.add_argument("--max-disk", default=None, help="refuse to start if the peak download exceeds this (e.g. 40GB)")
    p.add_argument("--keep-cache", action="store_true", help="do not evict measured revisions from the Hub cache")
    p.add_argument("--overwrite", action="store_true", help="measure again revisions already done")
    p.add_argument("--save-states", action="store_true", help="keep the measured hidden states (safetensors)")
    p.add_argument("--on-error", choices=["skip", "raise"], default="skip",
                   help="skip: record a failed revision and continue (default); raise: stop")
    p.add_argument("--dry-run", action="store_true",
                   help="print the selection, bytes to fetch and peak disk; fetch nothing")
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads (default: 1 for models under 10M parameters, else the physical cores)")


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


def _scan_kwargs(args) -> dict:
    return dict(revisions=args.revisions, suites=tuple(args.suites or ()), n_samples=args.n_samples,
                metric_options=parse_metric_options(args.metric_options) or None, position=args.position,
                centered=True if args.centered else None, epsilon=args.epsilon, device=args.device,
                dtype=args.dtype, batch_size=args.batch_size, seed=args.seed, prefetch=args.prefetch,
                max_disk=args.max_disk, keep_cache=args.keep_cache, overwrite=args.overwrite,
                save_states=args.save_states, on_error=args.on_error, step_pattern=args.step_pattern,
                threads=args.threads, tokenizer=args.tokenizer)


def run_scan_command(args, *, metrics: tuple[str, ...] = ()) -> int:
    """Shared body of ``scan`` and ``probe``: dry run or scan, then a summary. A bad value is reported under
    the flag that set it (``--n-samples 1 is not valid: ...``)."""
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
    dest = {"suites": "suites", "max_disk": "max_disk"}.get(name or "", name)
    if not dest or dest == "source" or not hasattr(args, dest):
        return None
    return {"suites": "--suite", "metric_options": "--metric-option"}.get(dest, "--" + dest.replace("_", "-"))


def _shown(value) -> str:
    return " ".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)


def _run_scan(args, metrics: tuple[str, ...]) -> int:
    from ckptgeo.engine.scan import parse_size, plan_scan, scan, shard

    kwargs = {**_scan_kwargs(args), "metrics": tuple(metrics)}
    if args.dry_run:
        plan = plan_scan(args.source, out=args.out, **{**kwargs, "max_disk": parse_size(args.max_disk)})
        print(plan.summary())
        print("next: the same command without --dry-run")
        return 0
    res = scan(args.source, out=args.out, **kwargs)
    print(f"measured {len(res.measured)}, already done {len(res.skipped)}, failed {len(res.failed)}, "
          f"locked by another run {len(res.locked)}; tables in {res.out}")
    for name, err in res.failed.items():
        print(f"  failed {name}: {err}", file=sys.stderr)
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
        from ckptgeo.store.dataset import Dataset, part_name

        ds = Dataset(res.out, create=False)
        done = sum(ds.is_done(part_name(res.model, r, res.config_hash)) for r in res.selected)
        print(f"all {world} processes: {done} of {len(res.selected)} selected revisions done so far in {res.out} "
              f"(this is rank {rank})")
    if tables or world > 1:
        print(f"next: ckptgeo analyze {res.out}" + ("   (once every process has finished)" if world > 1 else ""))
    else:
        print("next: no revision was measured; fix the errors above and rerun the same command", file=sys.stderr)
    return 1 if res.failed else 0


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
