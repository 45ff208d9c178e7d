"""What a scan will do before it does it: the source opened, revisions selected, suites loaded, measures
configured, the settings hashed, and the revisions still to measure with their bytes (:func:`plan_scan`,
``ckptgeo scan --dry-run``)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ckptgeo._settings import flat_settings
from ckptgeo.engine.config import ScanConfig, hashed_settings, settings_from, validate_scan_config
from ckptgeo.engine.measure import Measure, configure_metrics, restrict_to_revisions
from ckptgeo.errors import CorruptCheckpointError, DamagedSourceError, InvalidParameterError, RevisionNotFoundError
from ckptgeo.sources.integrity import (IntegrityReport, check_source, check_weights, damaged_revisions,
                                       main_weight_files, weights_digest)
from ckptgeo.sources.protocol import WeightFile
from ckptgeo.sources.registry import open_source
from ckptgeo.sources.revisions import Revision, select_revisions
from ckptgeo.store.dataset import Dataset, run_settings
from ckptgeo.store.schemas import SCAN_SETTINGS

log = logging.getLogger(__name__)

__all__ = ["ScanPlan", "Resolved", "plan_scan", "peak_bytes", "resolve", "default_out", "shard", "rank_device",
           "scan_settings", "config_hash", "row_settings", "weights_digest", "dataset_model", "source_identity",
           "estimate_seconds", "parameter_shares", "other_settings", "damaged_message"]


@dataclass
class ScanPlan:
    """What a scan would do: the selected revisions, those already done, the bytes to fetch (a file several
    revisions share counted once) and the peak disk ((prefetch + 1) x the largest revision), in bytes (None
    where the source does not tell)."""

    source: str
    selected: list[Revision]
    todo: list[Revision]
    done: list[str]
    files: dict[str, list[WeightFile]]
    bytes_to_fetch: int | None
    peak_disk: int | None
    config_hash: str
    errors: dict[str, Exception] = field(default_factory=dict)
    integrity: IntegrityReport | None = None
    #: the ``model`` the rows carry and the parts are named by (a Hub repo's full id; a folder's name)
    model: str = ""
    #: revisions measured before at another commit (the branch moved): name -> (old commit, new commit)
    moved: dict[str, tuple[str, str]] = field(default_factory=dict)
    #: the measures, and each suite with the items it measures
    metrics: list[str] = field(default_factory=list)
    suites: list[tuple[str, int]] = field(default_factory=list)
    #: (rank, world size) of this process, and what every process together has to measure
    rank: tuple[int, int] = (0, 1)
    total_todo: int = 0
    #: a rough wall time for this process's share, in seconds (:func:`estimate_seconds`); None if unknown
    estimate: float | None = None
    #: the dataset's revisions of this model under other config hashes, one line each: which settings differ
    #: (:func:`other_settings`); a scan logs them as warnings, --dry-run prints them
    elsewhere: list[str] = field(default_factory=list)

    def cost_note(self) -> str:
        """``"8 suites x 200 items (1600 prompts per revision), measures rankme, behavior; rough estimate 3 h"``."""
        items = sum(k for _, k in self.suites)
        n = len(self.suites)
        sizes = sorted({k for _, k in self.suites})
        per = f"{sizes[0]} items" if len(sizes) == 1 else f"{items} items in all"
        took = "unknown" if self.estimate is None else _duration(self.estimate)
        return (f"{n} suite{'s' if n != 1 else ''} x {per} ({items} prompts per revision), measures "
                f"{', '.join(self.metrics) or '-'}; rough estimate {took}")

    def summary(self) -> str:
        def fmt(n):
            return "unknown" if n is None else f"{n / 1e6:,.1f} MB"

        rank, world = self.rank
        lines = [f"{self.source}: {len(self.selected)} selected, {len(self.done)} already done, "
                 f"{len(self.todo)} to measure (this process)",
                 *([f"  all {world} processes: {self.total_todo} to measure; this is rank {rank}"] if world > 1 else []),
                 f"  measures: {', '.join(self.metrics) or '-'}",
                 f"  suites: {', '.join(f'{n} ({k} items)' for n, k in self.suites) or '-'}",
                 *(f"  {n} moved to commit {new[:12]} since it was measured at {old[:12]}: measured again"
                   for n, (old, new) in self.moved.items()),
                 f"  {'revision':>12}  {'step':>7}  {'commit':<40}  {'weights':>10}"]
        for r in self.todo:
            size = sum(f.size or 0 for f in self.files.get(r.name, []))
            lines.append(f"  {r.name:>12}  {r.step:>7}  {r.commit or '-':<40}  {size / 1e6:7.1f} MB"
                         + (f"  {'damaged' if isinstance(self.errors[r.name], DamagedSourceError) else 'fails'}: "
                            f"{self.errors[r.name]}" if r.name in self.errors else ""))
        lines.append(f"bytes to fetch: {fmt(self.bytes_to_fetch)}; peak disk: {fmt(self.peak_disk)}; "
                     f"config hash {self.config_hash}")
        lines += [f"note: {note}" for note in self.elsewhere]
        if self.integrity is not None and self.integrity.groups:
            lines += [f"left out of the analysis by default: {g.describe()}" for g in self.integrity.groups]
        if self.todo:
            took = "unknown" if self.estimate is None else _duration(self.estimate)
            lines.append(f"estimated time: {took} (rough: {_ESTIMATE_BASIS})")
            per = None if self.estimate is None else self.estimate / len(self.todo)
            lines.append(f"cost: {self.cost_note()}" + ("" if per is None else f", about {_duration(per)} per revision")
                         + "; fewer with --suite NAME (one suite) or --n-samples N")
        return "\n".join(lines)


#: what :func:`estimate_seconds` assumes, as printed
_ESTIMATE_BASIS = ("downloads at 50 MB/s, forward passes at 20 GFLOP/s, 32 tokens per item, "
                   "whole-model measures at their full work, once per suite, at 60 GFLOP/s (backward = 2 forwards), "
                   "capped by any max_seconds")
#: the forward sweep's rate covers what a sweep does besides its matrix products (probes, RankMe, scoring); the passes
#: of whole-model measures are autograd alone, 60 GFLOP/s as measured on 2 shared CPU cores: the Hessian's default 40
#: products on a 5M-parameter GPT-NeoX took 62 CPU s (this rate: 72 s), the 160m Hessian scan of docs/scan.md 7-8
#: min a revision (this rate: 8 min), bench_lm_metrics' pythia-14m Hessian 85 s (this rate: 101 s)
_DOWNLOAD_BPS, _FLOPS, _PASS_FLOPS, _TOKENS_PER_ITEM = 50e6, 20e9, 60e9, 32


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def estimate_seconds(revision_bytes: list[int | None], suites: list[tuple[str, int]], measures,
                     *, downloads: bool, revisions: list[str] | None = None, model_items: int = 32,
                     shares: dict[str, float] | None = None) -> float | None:
    """A rough wall time for measuring revisions of these sizes, in seconds; None if a size is unknown.

    Per revision: its download (when the source downloads), one forward pass over each suite's items
    (2 FLOPs per parameter per token, the parameters counted as weight bytes / 4), and the work of each
    whole-model measure that declares it, once per suite, as :func:`~ckptgeo.engine.measure.measure_revision`
    runs it (on the suite's first ``model_items`` items; ``config.item_passes(items, share)``: the Hessian's
    gradient and products, the LLC's SGLD steps, in passes of one item forward and backward through the whole
    model, 6 FLOPs per parameter per token at autograd's own rate), at the revisions it runs at, each run capped
    by its ``max_seconds`` where one is set (a measure declaring no work: its ``max_seconds`` in full). The rates
    are fixed (:data:`_ESTIMATE_BASIS`), not measured at run time: the number says minutes or days, not seconds.

    Parameters
    ----------
    revision_bytes : list of int or None
        Weight bytes of each revision to measure.
    suites : list of (str, int)
        Each suite's name and item count.
    measures : dict of str to Measure
    downloads : bool
    revisions : list of str, optional
        The revisions' names, in the order of ``revision_bytes`` (a measure with a ``revisions`` option runs at
        those it selects); None: every measure at every revision.
    model_items : int, default=32
        The items whole-model measures differentiate (the scan's ``model_items``).
    shares : dict of str to float, optional
        Per measure, the fraction of the model's parameters it differentiates (its ``params``;
        :func:`parameter_shares`); a measure not named: 1.

    Examples
    --------
    >>> estimate_seconds([400_000_000], [("logic", 200)], {}, downloads=True)
    72.0
    """
    if any(b is None for b in revision_bytes):
        return None
    items = sum(k for _, k in suites)
    total = 0.0
    for i, b in enumerate(revision_bytes):
        per_pass = 6 * (b / 4) * _TOKENS_PER_ITEM / _PASS_FLOPS   # one forward and backward of one item
        total += (b / _DOWNLOAD_BPS if downloads else 0.0) + 2 * (b / 4) * _TOKENS_PER_ITEM * items / _FLOPS
        for name, m in measures.items():
            config = getattr(m, "config", None)
            if config is None or (revisions is not None and not m.runs_at(revisions[i])):
                continue
            cap = getattr(config, "max_seconds", None)   # a measure declaring no work: its time budget in full
            share = (shares or {}).get(name, 1.0)
            for _, k in suites:   # one run per suite (engine.measure.measure_revision), on its first model_items
                work = (config.item_passes(min(model_items, k), share) * per_pass if hasattr(config, "item_passes")
                        else None)
                total += (float(cap or 0.0) if work is None else work if cap is None else min(work, float(cap)))
    return round(total, 1)


def parameter_shares(source, revision: Revision, measures) -> dict[str, float]:
    """Per whole-model measure whose ``params`` names a subset, the fraction of the model's parameters it spans,
    on the model built from ``revision``'s ``config.json`` on the meta device (no weights, no memory); ``{}``
    when no measure names a subset, and no share for one whose model cannot be built (the estimate then counts
    all parameters: at most)."""
    wanted = {n: m.config.params for n, m in measures.items()
              if hasattr(getattr(m, "config", None), "item_passes")
              and str(getattr(m.config, "params", "all")).strip() != "all"}
    if not wanted:
        return {}
    try:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM

        from ckptgeo.metrics._autodiff import select_parameters

        config = AutoConfig.from_pretrained(source.config_folder(revision), trust_remote_code=False)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config, trust_remote_code=False)
        total = sum(p.numel() for p in model.parameters())
        return {n: sum(p.numel() for _, p in select_parameters(model, params, metric=n)) / total
                for n, params in wanted.items()}
    except (OSError, ValueError, LookupError, ImportError) as err:   # a config that cannot be fetched, read or
        # built (the scan itself reports it): the estimate stays rough
        log.debug("parameter shares for the estimate: %s", err)
        return {}


@dataclass
class Resolved:
    """A scan's inputs checked and loaded: the open source, the selected revisions, the suites, the
    configured measures by name, the recorded settings and their hash."""

    source: object
    selected: list[Revision]
    suites: list
    measures: dict[str, Measure]
    settings: dict
    config_hash: str


def shard(environ=None) -> tuple[int, int]:
    """(rank, world size) of this process from its launcher's environment; (0, 1) when there is none.

    The process rank within one launch is ``RANK``/``WORLD_SIZE`` (``torchrun``, ``accelerate launch``), else
    ``SLURM_PROCID``/``SLURM_NTASKS`` (``srun``). A Slurm job array multiplies it: array task ``i`` of
    ``SLURM_ARRAY_TASK_COUNT`` (``i`` counted from ``SLURM_ARRAY_TASK_MIN``) holds ranks ``i * n .. i * n + n - 1``
    of ``count * n``. (Inside ``sbatch --array`` every task sees ``SLURM_PROCID=0`` and no ``SLURM_NTASKS``.)
    Work split this way is a fixed share of the whole selection, the same in every process however late it
    starts, so the shares' union is the selection; the per-revision claims keep anything from being done twice.

    Examples
    --------
    >>> shard({"SLURM_ARRAY_TASK_ID": "5", "SLURM_ARRAY_TASK_MIN": "4", "SLURM_ARRAY_TASK_COUNT": "3"})
    (1, 3)
    >>> shard({"SLURM_ARRAY_TASK_ID": "2", "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_COUNT": "3",
    ...        "RANK": "1", "WORLD_SIZE": "2"})
    (5, 6)
    """
    env = os.environ if environ is None else environ
    if "RANK" in env or "WORLD_SIZE" in env:
        rank, world = int(env.get("RANK", env.get("LOCAL_RANK", 0))), int(env.get("WORLD_SIZE", 1))
    else:
        rank = int(env.get("SLURM_PROCID", env.get("LOCAL_RANK", 0)))
        world = int(env.get("SLURM_NTASKS", 1))
    world = max(world, 1)
    if "SLURM_ARRAY_TASK_ID" in env and "SLURM_ARRAY_TASK_COUNT" in env:
        count = int(env["SLURM_ARRAY_TASK_COUNT"])
        low = int(env.get("SLURM_ARRAY_TASK_MIN", 0))
        index, high = int(env["SLURM_ARRAY_TASK_ID"]) - low, int(env.get("SLURM_ARRAY_TASK_MAX", low + count - 1))
        if count > 1 and (not 0 <= index < count or high - low + 1 != count):
            raise InvalidParameterError(
                f"Slurm array task {env['SLURM_ARRAY_TASK_ID']} is not one of {count} consecutive tasks from "
                f"{env.get('SLURM_ARRAY_TASK_MIN', 0)}; submit arrays as --array=0-{count - 1} (a sparse array "
                f"cannot be split into shares)", name="SLURM_ARRAY_TASK_ID", value=env["SLURM_ARRAY_TASK_ID"])
        if count > 1:
            rank, world = index * world + rank, count * world
    return rank, world


def rank_device(device: str) -> str:
    """``"cuda"`` becomes ``cuda:$LOCAL_RANK`` when several processes share a machine.

    Raises
    ------
    InvalidParameterError
        A CUDA device is asked for and torch has none here (a CPU build, or no GPU).
    """
    if device.startswith("cuda"):
        import torch

        from ckptgeo.errors import InvalidParameterError

        if not torch.cuda.is_available():
            raise InvalidParameterError(f"Device {device!r} was asked for but CUDA is not available here (torch "
                                        f"{torch.__version__}); use --device cpu, or run on a GPU machine.",
                                        name="device", value=device)
    if device == "cuda" and shard()[1] > 1:
        return f"cuda:{os.environ.get('LOCAL_RANK', 0)}"
    return device


def forward_dtype(config: ScanConfig) -> ScanConfig:
    """``config`` with ``dtype="auto"`` settled: half precision on a GPU when every selected measure reads
    only forward states (RankMe, behaviour, probes: states are upcast to float32 and RankMe's SVD runs in
    float64), bfloat16 where the GPU supports it, else float16; float32 on a CPU, or when a whole-model
    measure (gradient ranks, Hessian, LLC) is selected, or a reduced ``precision`` (it computes with float32
    weights). Other dtypes are kept as given (torch is imported only
    for a CUDA device: a dry run's typo is answered without it)."""
    if config.dtype != "auto":
        return config
    dtype = "float32"
    if not config.device.startswith("cuda") or config.precision != "fp32":   # --precision: float32 weights
        return dataclasses.replace(config, dtype=dtype)
    import torch

    if torch.cuda.is_available():
        from ckptgeo.metrics.registry import get_metric, parse_metrics

        names = parse_metrics(list(config.metrics) if config.metrics else None)
        if all(get_metric(n).needs != "model" for n in names):
            dtype = "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
    return dataclasses.replace(config, dtype=dtype)


def default_out(source) -> Path:
    """Where a scan writes when ``out`` is not given: ``results/<source name>``."""
    return Path("results") / source.name


def scan_settings(config: ScanConfig, suites, measures: dict[str, Measure]) -> dict:
    """The settings that change values, as recorded in ``runs/<hash>.json``: a digest of each suite's
    items, every measure's config (:attr:`Measure.hashed`), and the scan-wide options declared ``hashed`` by value
    (:func:`~ckptgeo.engine.config.hashed_settings`)."""
    return {
        "suites": {s.name: hashlib.sha256(json.dumps([it.to_dict() for it in s.items], sort_keys=True)
                                          .encode()).hexdigest()[:16] for s in suites},
        "metrics": {n: m.hashed for n, m in measures.items()},
        **hashed_settings(config),   # the fields declared hashed by value (engine/config.py)
    }


def row_settings(config: ScanConfig, config_hash: str) -> dict:
    """The settings columns of every measurement row (:data:`ckptgeo.store.schemas.SETTINGS_COLUMNS`)."""
    from ckptgeo._version import __version__

    return {**{name: getattr(config, name) for name, _ in SCAN_SETTINGS}, "config_hash": config_hash,
            "ckptgeo_version": __version__}


def config_hash(settings: dict) -> str:
    """The 12-hex-digit hash of ``settings`` that names parts and keys resume."""
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:12]


def resolve(source, config: ScanConfig) -> Resolved:
    """Check ``config``, open ``source``, select its revisions, load the suites and configure the
    measures: everything that can be refused is refused here, before any download.

    Raises
    ------
    InvalidParameterError
        A bad setting or measure option, an unknown suite or measure, or no suite at all.
    RevisionNotFoundError, EmptySelectionError
        The selector names a missing revision or matches none.
    """
    from ckptgeo.suites.tasks import check_suite_spec, load_suite_or_task

    validate_scan_config(config)
    for spec in config.suites:   # a misspelled suite is answered before the source is opened
        check_suite_spec(spec)
    label = str(source) if isinstance(source, (str, Path)) else source.label
    if isinstance(source, (str, Path)):
        source = open_source(source, step_pattern=config.step_pattern, keep_cache=config.keep_cache,
                             options=config.source_options)
    elif config.source_options:   # an opened source has its options already: they would be dropped silently
        raise InvalidParameterError(f"source_options apply to a source ckptgeo opens; {source.label} is open "
                                    f"already: pass them to open_source(spec, options=...)",
                                    name="source_options", value=config.source_options)
    source.revisions()   # one listing: a misspelled repo or folder is answered before the measures load torch
    measures = configure_metrics(config)  # option errors come before the metadata of every revision
    selector = source.default_selector if config.revisions is None else config.revisions
    genuine = None
    if "genuine" in selector:   # metadata only: which revisions belong to no group of identical weights
        genuine = {r.name for r in check_source(source, label=label).genuine}
    selected = select_revisions(source.revisions(), selector, source=label,
                                note=source.missing_note, genuine=genuine)
    measures = restrict_to_revisions(measures, selected)
    offline = source.listing_note(selected, selector)
    if offline:
        log.warning("%s", offline)
    specs = list(config.suites) or source.default_suites()
    if not specs:
        raise InvalidParameterError("No suite given and the source has no default suites; pass --suite NAME|PATH",
                                    name="suites", value=())
    suites = [load_suite_or_task(s) for s in specs]
    settings = scan_settings(config, suites, measures)
    return Resolved(source, selected, suites, measures, settings, config_hash(settings))


def source_identity(source) -> str:
    """What a source is, beyond its short name: ``hub:<repo id>`` or ``folder:<absolute path>``."""
    if source.repo_id:
        return f"hub:{source.repo_id}"
    return f"folder:{Path(source.root).resolve()}" if source.root is not None else f"source:{source.name}"


def dataset_model(source, known: dict[str, str] | None = None) -> str:
    """The ``model`` a scan's rows carry and its parts are named by.

    A Hub repo (or family): its full repo id, so ``otherorg/pythia-160m`` never stands in for
    ``EleutherAI/pythia-160m``. A folder: its name, unless the dataset's ``sources.json`` (``known``) gives
    that name to another folder; then as many parent folders as tell them apart (``c/run`` beside ``run``).

    Examples
    --------
    >>> from types import SimpleNamespace as S
    >>> dataset_model(S(repo_id="EleutherAI/pythia-160m", root=None, name="pythia-160m"))
    'EleutherAI/pythia-160m'
    >>> dataset_model(S(repo_id=None, root=Path("/x/c/run"), name="run"), {"run": "folder:/x/a/run"})
    'c/run'
    """
    if source.repo_id:
        return source.repo_id
    if source.root is None:
        return source.name
    root = source.root
    identity, known = source_identity(source), known or {}
    parts = Path(root).resolve().parts
    for k in range(1, len(parts)):
        name = "/".join(parts[-k:])
        if known.get(name, identity) == identity:
            return name
    return str(Path(root).resolve())


def plan_scan(source, config: ScanConfig | None = None, *, out: str | Path | None = None, **options) -> ScanPlan:
    """What :func:`ckptgeo.engine.scan.scan` would fetch and measure, without fetching anything (``--dry-run``).

    Parameters
    ----------
    source : str, Path or CheckpointSource
        As for ``scan``.
    config : ScanConfig, optional
        Settings; ``options`` (any keyword option of ``scan``) override its fields.
    out : path, optional
        The dataset folder whose finished revisions are left out (default ``results/<source name>``).

    Returns
    -------
    ScanPlan

    Raises
    ------
    InvalidParameterError, RevisionNotFoundError, EmptySelectionError
        As for ``scan``, before anything is fetched (a CUDA device on a machine without one included).
    TypeError
        An option that ``scan`` does not have.
    """
    config = dataclasses.replace(config or ScanConfig(), **settings_from(options, owner="plan_scan"))
    rank_device(config.device)   # a plan for a GPU that is not here would not run here: refused as the scan refuses
    config = forward_dtype(config)
    return make_plan(resolve(source, config), config, out)


def damaged_message(revision: str, why: str) -> str:
    """The error of a revision whose weights the source serves damaged: what, and that a rerun cannot help."""
    return (f"{revision}: the source serves its weights damaged ({why}); permanent: a new download gives the same "
            f"bytes, so a rerun will not retry it. Leave it out (--revisions genuine) or tell the repository's owners.")


def peak_bytes(files: list[list[WeightFile]], prefetch: int, *, keep_all: bool = False) -> int:
    """The most bytes of weight files the Hub cache holds at once while a scan fetches revisions in order
    (``files``: each revision's, ``[]`` for one not fetched), ``prefetch`` ahead of the one measured.

    At the ``i``-th revision the cache holds the files of revisions ``i`` … ``i + prefetch`` and every file of
    an earlier revision that one still to come shares (the same sha256: kept, not fetched again; see
    :meth:`ckptgeo.sources.hub.HubSource.expect`), each blob once. With ``keep_all`` (``keep_cache``) nothing
    is evicted: every distinct file fetched. Bytes; sizes must be known.

    >>> a, b, c, s = (WeightFile(n, size, n) for n, size in (("a", 10), ("b", 12), ("c", 10), ("s", 4)))
    >>> peak_bytes([[a, s], [b], [c, s]], 0), peak_bytes([[a, s], [b], [c, s]], 1)   # s kept while b is measured
    (16, 26)
    >>> peak_bytes([[a, s], [b], [c, s]], 0, keep_all=True)
    36
    """
    def key(i: int, f: WeightFile):
        return f.sha256 or (i, f.name)

    if keep_all:
        return sum({key(i, f): f.size for i, fs in enumerate(files) for f in fs}.values())
    peak = 0
    for i in range(len(files)):
        later = {f.sha256 for fs in files[i:] for f in fs if f.sha256}
        held = {key(j, f): f.size for j in range(i) for f in files[j] if f.sha256 in later}
        held.update({key(j, f): f.size for j in range(i, min(len(files), i + prefetch + 1)) for f in files[j]})
        peak = max(peak, sum(held.values()))
    return peak


def _option_text(key: str, value) -> str | None:
    """``metrics.hessian.max_seconds`` = 90.0 -> ``--metric-option hessian.max_seconds=90.0``; None for a key that
    is not a measure's option."""
    parts = key.split(".")
    if len(parts) != 3 or parts[0] != "metrics":
        return None
    shown = "none" if value is None else str(value).lower() if isinstance(value, bool) else value
    return f"--metric-option {parts[1]}.{parts[2]}={shown}"


def other_settings(ds: Dataset, model: str, settings: dict, config_hash: str, *, limit: int = 3) -> list[str]:
    """Lines saying which runs of ``model`` the dataset holds with the same measures and suites under config
    hashes other than ``config_hash`` (revisions ok or duplicate), and which settings (``runs/<hash>.json``)
    differ: a scan whose settings differ in anything that changes values, a new default included (the Hessian's
    and the LLC's ``max_seconds``, 90 s before, none now), measures again under its own hash, beside the earlier
    rows; the line says so and how to add to the earlier run instead (its measure options as flags). At most
    ``limit`` hashes, those with the most revisions first; ``[]`` when there are none."""
    rev = ds.read("revisions", model=model)
    if rev.empty or "config_hash" not in rev.columns:
        return []
    rev = rev[(rev["model"] == model) & rev["status"].isin(["ok", "duplicate"]) & (rev["config_hash"] != config_hash)]
    here = flat_settings(json.loads(json.dumps(settings, sort_keys=True, default=str)))
    lines = []
    for other, n in rev.groupby("config_hash")["revision"].nunique().sort_values(ascending=False).head(limit).items():
        path = ds.root / "runs" / f"{other}.json"
        try:
            recorded = json.loads(path.read_text())
        except (OSError, ValueError):   # not recorded: nothing to compare
            continue
        if not isinstance(recorded, dict) or any(set(recorded.get(k) or {}) != set(settings.get(k) or {})
                                                 for k in ("metrics", "suites")):
            continue   # other measures or suites (a probe scan beside a RankMe scan): another run on purpose
        there = flat_settings(run_settings(recorded))
        differ = sorted(k for k in set(here) | set(there) if here.get(k, ...) != there.get(k, ...))
        shown = [f"{k} ({there.get(k, 'absent')!s} there, {here.get(k, 'absent')!s} here)" for k in differ[:4]]
        flags = [t for t in (_option_text(k, there[k]) for k in differ if k in there and k in here) if t]
        lines.append(f"{ds.root} holds {n} revision{'s' if n != 1 else ''} of {model} under config hash {other}, "
                     f"whose settings differ from these in {', '.join(shown)}{' ...' if len(differ) > 4 else ''}: "
                     f"the selected revisions are measured under {config_hash}, beside them"
                     + (f"; to add to that run instead, give its settings ({' '.join(flags)})" if flags else ""))
    return lines


def make_plan(resolved: Resolved, config: ScanConfig, out) -> ScanPlan:
    """The plan of a resolved scan: this process's share of the selection, less what ``out`` holds."""
    source, selected = resolved.source, resolved.selected
    out = Path(out) if out is not None else default_out(source)
    done: set[str] = set()
    moved: dict[str, tuple[str, str]] = {}
    exists = (out / "ckptgeo.json").exists()
    model = dataset_model(source, Dataset(out).sources() if exists else None)
    if exists and not config.overwrite:
        ds = Dataset(out)  # by part name, keyed on the model (repo id or folder) and the commit
        for r in selected:
            name = ds.part_of(model, r.name, resolved.config_hash)
            if ds.is_done(name, commit=r.commit, revision=r.name):
                done.add(r.name)
            elif r.commit and ds.is_done(name) and ds.recorded_commit(name) not in (None, r.commit):
                moved[r.name] = (ds.recorded_commit(name), r.commit)
    elsewhere = other_settings(ds, model, resolved.settings, resolved.config_hash) \
        if exists and not config.overwrite and len(done) < len(selected) else []
    rank, world = shard()
    mine = [r for i, r in enumerate(selected) if i % world == rank]
    todo = [r for r in mine if r.name not in done]
    total_todo = sum(r.name not in done for r in selected)
    # metadata of every selected revision (not only this process's share), so that duplicates found
    # before download are the same in every process and in a one-process run
    def metadata(r: Revision):
        try:
            return source.weight_files(r)
        except (CorruptCheckpointError, RevisionNotFoundError) as err:  # e.g. a branch without weights (pythia#107):
            return err                                               # that revision fails, not the whole scan

    with ThreadPoolExecutor(max_workers=8) as pool:
        got = dict(zip([r.name for r in selected], pool.map(metadata, selected)))
    main = main_weight_files(source)
    integrity = check_weights(selected, got, main=main, source=source.label)
    # a weight file the source serves damaged (its header asks for more bytes than the listing has): recorded as
    # damaged without a download; so is one a scan found damaged at this commit before (engine.scan)
    integrity.damaged = damaged_revisions(selected, got, main=main, declared=source.declared_size)
    for name, why in integrity.damaged.items():
        got[name] = DamagedSourceError(damaged_message(name, why), revision=name)
    if exists and not config.overwrite:
        ds = Dataset(out)
        for r in (r for r in selected if r.name not in integrity.damaged):
            recorded = ds.recorded_damage(ds.part_of(model, r.name, resolved.config_hash), r.commit)
            if recorded is not None:
                integrity.damaged[r.name] = "found damaged at this commit by an earlier scan"
                got[r.name] = DamagedSourceError(recorded, revision=r.name)
    errors = {n: v for n, v in got.items() if isinstance(v, Exception)}
    files = {n: [] if n in errors else v for n, v in got.items()}
    sizes = [sum(f.size for f in fs) if all(f.size is not None for f in fs) else None
             for fs in (files[r.name] for r in todo)]
    known = all(s is not None for s in sizes)
    # a file several revisions share (same sha256) is downloaded once (HubSource.expect)
    distinct = {(f.sha256 or (r.name, f.name)): f.size for r in todo for f in files[r.name]}
    fetch = sum(distinct.values()) if known else None
    first: dict[str, str] = {}
    for r in selected:   # a revision whose every file an earlier one has is recorded, not fetched (engine.scan)
        first.setdefault(weights_digest(files[r.name]) or r.name, r.name)
    fetched = [[] if r.name in errors or first.get(weights_digest(files[r.name]) or r.name) != r.name
               else files[r.name] for r in todo]
    peak = peak_bytes(fetched, config.prefetch, keep_all=config.keep_cache) if known else None
    if not source.downloads:
        fetch, peak = 0, 0
    n = config.n_samples
    suite_items = [(st.name, len(st.items) if n is None else min(n, len(st.items))) for st in resolved.suites]
    return ScanPlan(source=source.label, selected=selected, todo=todo,
                    done=sorted(done), files=files, bytes_to_fetch=fetch, peak_disk=peak,
                    config_hash=resolved.config_hash, errors=errors, integrity=integrity, model=model, moved=moved,
                    metrics=list(resolved.measures), suites=suite_items, rank=(rank, world), total_todo=total_todo,
                    estimate=estimate_seconds(sizes, suite_items, resolved.measures, downloads=source.downloads,
                                              revisions=[r.name for r in todo], model_items=config.model_items,
                                              shares=parameter_shares(source, selected[0], resolved.measures)
                                              if todo else {}),
                    elsewhere=elsewhere)
