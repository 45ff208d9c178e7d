"""The streaming scan engine: revisions in, Parquet parts out.

For each selected revision (this process's share under a multi-process launcher): fetch it (the
next ``prefetch`` revisions download in the background), swap its weights into the one model, run
each suite once, compute the selected metrics, write one part per table atomically, then evict it
from the cache. A rerun with the same settings skips finished revisions; other settings add rows.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import shutil
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ckptgeo import __version__
from ckptgeo._io import atomic_path
from ckptgeo._threads import thread_record, torch_threads
from ckptgeo.constants import DEFAULT_N_SAMPLES, NO_PROGRESS, RANKME_EPS
from ckptgeo.errors import (CkptgeoError, CorruptCheckpointError, DiskSpaceError, DuplicateWeightsWarning,
                     InvalidParameterError, OutputLockedError, RevisionNotFoundError)
from ckptgeo.sources.revisions import Revision, select_revisions
from ckptgeo.sources.protocol import CheckpointSource, WeightFile
from ckptgeo.sources.registry import open_source
from ckptgeo.store.dataset import Dataset, part_name
from ckptgeo.store.schemas import SCAN_SETTINGS

__all__ = ["ScanConfig", "ScanPlan", "ScanResult", "scan", "plan_scan", "parse_size", "shard", "default_out",
           "row_settings"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ScanConfig:
    """Settings of a scan. Those that change values (not ``device``, ``batch_size``, ``prefetch``, disk
    options) enter the config hash that keys resume, and are written in every row.

    ``revisions``: a selector (None: ``all`` for a local folder, ``every-1000`` for a Hub repo).
    ``suites``: names, paths or ``prefix:`` specs (empty: the source's defaults).
    ``metrics``: metric names (empty: the cheap ones). ``n_samples``: items per suite (default 200).
    ``position``: ``"last"`` or ``"mean"``. ``model_items``: items in the fixed batch of whole-model metrics.
    ``on_error``: ``"skip"`` records a failed revision and goes on; ``"raise"`` stops.
    ``threads``: torch CPU threads (None: :func:`ckptgeo._threads.default_threads` of the model's size);
    recorded, with torch's deterministic settings, in ``runs/<config_hash>.json`` under ``runtime``.
    """

    revisions: str | None = None
    suites: tuple[str, ...] = ()
    metrics: tuple[str, ...] = ()
    n_samples: int = DEFAULT_N_SAMPLES
    position: str = "last"
    centered: bool = False
    dtype: str = "float32"
    epsilon: float = RANKME_EPS
    seed: int = 0
    batch_size: int = 16
    device: str = "cpu"
    prefetch: int = 1
    max_disk: int | None = None
    keep_cache: bool = False
    overwrite: bool = False
    save_states: bool = False
    on_error: str = "skip"
    step_pattern: str | None = None
    model_items: int = 32
    threads: int | None = None


_CONSTRAINTS = {
    "n_samples": (int, 2, None), "batch_size": (int, 1, None), "prefetch": (int, 0, 64), "seed": (int, 0, None),
    "model_items": (int, 1, None), "epsilon": (float, 0.0, 1.0), "threads": (int, 1, None),
    "position": ("choice", ("last", "mean")), "on_error": ("choice", ("skip", "raise")),
    "dtype": ("choice", ("float32", "float64", "bfloat16", "float16")),
}


def _validate(cfg: ScanConfig) -> None:
    for name, rule in _CONSTRAINTS.items():
        value = getattr(cfg, name)
        if name == "threads" and value is None:
            continue
        if rule[0] == "choice":
            if value not in rule[1]:
                raise InvalidParameterError(f"The {name!r} parameter of scan must be one of {list(rule[1])}. "
                                            f"Got {value!r}.", name=name, value=value)
            continue
        typ, lo, hi = rule
        ok = isinstance(value, (int, float) if typ is float else int) and not isinstance(value, bool)
        ok = ok and value >= lo and (hi is None or value <= hi)
        if not ok:
            rng = f"[{lo}, {'inf' if hi is None else hi}]"
            raise InvalidParameterError(f"The {name!r} parameter of scan must be {typ.__name__} in {rng}. "
                                        f"Got {value!r}.", name=name, value=value)
    if cfg.step_pattern is not None:
        import re

        try:
            groups = re.compile(cfg.step_pattern).groups
        except re.error as err:
            raise InvalidParameterError(f"--step-pattern {cfg.step_pattern!r} is not a valid regular expression: "
                                        f"{err}", name="step_pattern", value=cfg.step_pattern) from err
        if groups < 1:
            raise InvalidParameterError(f"--step-pattern {cfg.step_pattern!r} needs a group capturing the step, "
                                        r"e.g. '^ckpt-(\d+)$'", name="step_pattern", value=cfg.step_pattern)
    if cfg.max_disk is not None and cfg.max_disk <= 0:
        raise InvalidParameterError(f"max_disk must be positive; got {cfg.max_disk}", name="max_disk",
                                    value=cfg.max_disk)


def parse_size(text: str | int | None) -> int | None:
    """``"20GB"``, ``"500M"``, ``"1.5TiB"``, ``1000`` -> bytes.

    >>> parse_size("2GB"), parse_size("1KiB")
    (2000000000, 1024)
    """
    if text is None or isinstance(text, int):
        return text
    import re

    m = re.fullmatch(r"\s*([\d.]+)\s*([KMGT]?)(i?)B?\s*", str(text), flags=re.I)
    if not m:
        raise InvalidParameterError(f"Cannot parse size {text!r}; use e.g. 500MB, 20GB, 1.5TiB",
                                    name="max_disk", value=text)
    base = 1024 if m.group(3) else 1000
    return int(float(m.group(1)) * base ** " KMGT".index(m.group(2).upper() or " "))


def shard() -> tuple[int, int]:
    """(rank, world size) from the launcher's environment (``RANK``/``WORLD_SIZE``, as set by
    ``accelerate launch`` and ``torchrun``; Slurm's ``SLURM_PROCID``/``SLURM_NTASKS``); (0, 1) when absent."""
    rank = int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", os.environ.get("LOCAL_RANK", 0))))
    world = int(os.environ.get("WORLD_SIZE", os.environ.get("SLURM_NTASKS", 1)))
    return rank, max(world, 1)


def _rank_device(device: str) -> str:
    """``"cuda"`` becomes ``cuda:$LOCAL_RANK`` when several processes share a machine."""
    if device == "cuda" and shard()[1] > 1:
        return f"cuda:{os.environ.get('LOCAL_RANK', 0)}"
    return device


@dataclass
class ScanPlan:
    """What a scan would do: the selected revisions, those already done, the bytes to fetch and the peak
    disk ((prefetch + 1) x the largest revision), in bytes (None where the source does not tell)."""

    source: str
    selected: list[Revision]
    todo: list[Revision]
    done: list[str]
    files: dict[str, list[WeightFile]]
    bytes_to_fetch: int | None
    peak_disk: int | None
    config_hash: str
    errors: dict[str, Exception] = field(default_factory=dict)

    def summary(self) -> str:
        def fmt(n):
            return "unknown" if n is None else f"{n / 1e6:,.1f} MB"

        lines = [f"{self.source}: {len(self.selected)} selected, {len(self.done)} already done, "
                 f"{len(self.todo)} to measure (this process)",
                 f"  {'revision':>12}  {'step':>7}  {'commit':<40}  {'weights':>10}"]
        for r in self.todo:
            size = sum(f.size or 0 for f in self.files.get(r.name, []))
            lines.append(f"  {r.name:>12}  {r.step:>7}  {r.commit or '-':<40}  {size / 1e6:7.1f} MB"
                         + (f"  fails: {self.errors[r.name]}" if r.name in self.errors else ""))
        lines.append(f"bytes to fetch: {fmt(self.bytes_to_fetch)}; peak disk: {fmt(self.peak_disk)}; "
                     f"config hash {self.config_hash}")
        return "\n".join(lines)


@dataclass
class ScanResult:
    """Outcome of :func:`scan`: the dataset folder, revision names measured / skipped (done before) /
    failed (with errors) / locked by another process, duplicate pairs, and the config hash."""

    out: Path
    measured: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    locked: list[str] = field(default_factory=list)
    duplicates: pd.DataFrame | None = None
    config_hash: str = ""


def _settings(cfg: ScanConfig, suites, metric_specs) -> dict:
    return {
        "suites": {s.name: hashlib.sha256(json.dumps([it.to_dict() for it in s.items], sort_keys=True)
                                          .encode()).hexdigest()[:16] for s in suites},
        "metrics": {n: dataclasses.asdict(s.default_config()) if s.config else {} for n, s in metric_specs.items()},
        **{name: getattr(cfg, name) for name, _ in SCAN_SETTINGS}, "model_items": cfg.model_items,
    }


def row_settings(cfg: ScanConfig, config_hash: str) -> dict:
    """The settings columns of every measurement row (:data:`ckptgeo.store.schemas.SETTINGS_COLUMNS`)."""
    return {**{name: getattr(cfg, name) for name, _ in SCAN_SETTINGS}, "config_hash": config_hash,
            "ckptgeo_version": __version__}


def _hash(settings: dict) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:12]


def _resolve(source, config: ScanConfig):
    from ckptgeo.suites.items import load_suite
    from ckptgeo.metrics.registry import get_metric, parse_metrics

    _validate(config)
    label = str(source) if isinstance(source, (str, Path)) else getattr(source, "repo_id", source.name)
    if isinstance(source, (str, Path)):
        source = open_source(source, step_pattern=config.step_pattern, keep_cache=config.keep_cache)
    selector = config.revisions or source.default_selector
    selected = select_revisions(source.revisions(), selector, source=label, note=getattr(source, "missing_note", None))
    specs = list(config.suites) or source.default_suites()
    if not specs:
        raise InvalidParameterError("No suite given and the source has no default suites; pass --suite NAME|PATH",
                                    name="suites", value=())
    suites = [load_suite(s) for s in specs]
    names = parse_metrics(list(config.metrics) if config.metrics else None)
    metric_specs = {n: get_metric(n) for n in names}
    settings = _settings(config, suites, metric_specs)
    return source, selected, suites, metric_specs, settings, _hash(settings)


def _weights_digest(files: list[WeightFile]) -> str | None:
    if not files or any(f.sha256 is None for f in files):
        return None
    return hashlib.sha256("".join(f"{f.name}:{f.sha256};" for f in sorted(files, key=lambda f: f.name))
                          .encode()).hexdigest()


def plan_scan(source, config: ScanConfig | None = None, *, out: str | Path | None = None, **kwargs) -> ScanPlan:
    """What :func:`scan` would fetch and measure, without fetching anything (``--dry-run``)."""
    config = dataclasses.replace(config or ScanConfig(), **kwargs)
    source, selected, suites, specs, settings, chash = _resolve(source, config)
    return _plan(source, selected, chash, config, out)


def _plan(source, selected, chash, config, out) -> ScanPlan:
    out = Path(out) if out is not None else default_out(source)
    done: set[str] = set()
    if (out / "ckptgeo.json").exists() and not config.overwrite:
        ds = Dataset(out)  # by part name: a family's rows carry each member's model name
        done = {r.name for r in selected if ds.is_done(part_name(source.name, r.name, chash))}
    rank, world = shard()
    mine = [r for i, r in enumerate(selected) if i % world == rank]
    todo = [r for r in mine if r.name not in done]
    # metadata of every selected revision (not only this process's share), so that duplicates found
    # before download are the same in every process and in a one-process run
    def metadata(r: Revision):
        try:
            return source.weight_files(r)
        except (CorruptCheckpointError, RevisionNotFoundError) as err:  # e.g. a branch without weights (pythia#107):
            return err                                               # that revision fails, not the whole scan

    with ThreadPoolExecutor(max_workers=8) as pool:
        got = dict(zip([r.name for r in selected], pool.map(metadata, selected)))
    errors = {n: v for n, v in got.items() if isinstance(v, Exception)}
    files = {n: [] if n in errors else v for n, v in got.items()}
    sizes = [sum(f.size for f in fs) if all(f.size is not None for f in fs) else None
             for fs in (files[r.name] for r in todo)]
    known = all(s is not None for s in sizes)
    fetch = sum(sizes) if known else None
    peak = (min(config.prefetch, max(len(todo) - 1, 0)) + 1) * max(sizes, default=0) if known else None
    if not source.downloads:
        fetch, peak = 0, 0
    return ScanPlan(source=getattr(source, "repo_id", source.name), selected=selected, todo=todo,
                    done=sorted(done), files=files, bytes_to_fetch=fetch, peak_disk=peak, config_hash=chash,
                    errors=errors)


def default_out(source) -> Path:
    """Where a scan writes when ``out`` is not given: ``results/<source name>``."""
    return Path("results") / source.name


def _progress(total: int, desc: str):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="rev", disable=NO_PROGRESS or None, dynamic_ncols=True)


def scan(source: str | Path | CheckpointSource, *, out: str | Path | None = None,
         config: ScanConfig | None = None, **kwargs) -> ScanResult:
    """Measure every selected revision of ``source`` and write the tables under ``out``.

    Parameters
    ----------
    source : str, Path or CheckpointSource
        A Hub repo id (``"EleutherAI/pythia-160m"``) or a folder of ``step{N}`` checkpoints.
    out : path, optional
        Dataset folder (default ``results/<source name>``).
    config : ScanConfig, optional
        Settings; keyword arguments override its fields (``revisions="every-1000"``, ``suites=("logic",)``).

    Returns
    -------
    ScanResult

    Raises
    ------
    RevisionNotFoundError, EmptySelectionError
        The selector names a missing revision or matches none.
    DiskSpaceError
        ``max_disk`` (or the free disk) is below the peak the scan needs; raised before any download.
    DatasetLayoutError
        ``out`` is not a ckptgeo dataset, or was written with another schema.
    CkptgeoError
        With ``on_error="raise"``, the first revision that fails.
    """
    from transformers import AutoTokenizer

    from ckptgeo.engine.forward import prepare_suite
    from ckptgeo.engine.model import ModelHolder

    kwargs = {k: (tuple(v) if k in ("suites", "metrics") and v is not None else v) for k, v in kwargs.items()}
    config = dataclasses.replace(config or ScanConfig(), **{k: v for k, v in kwargs.items() if v is not None})
    config = dataclasses.replace(config, device=_rank_device(config.device))
    source, selected, suites, specs, settings, chash = _resolve(source, config)
    out = Path(out) if out is not None else default_out(source)
    Dataset(out, create=False)  # a foreign or incompatible --out is refused before anything else
    plan = _plan(source, selected, chash, config, out)
    if config.max_disk is not None and plan.peak_disk is not None and plan.peak_disk > config.max_disk:
        raise DiskSpaceError(
            f"--max-disk {config.max_disk / 1e6:,.1f} MB is below the scan's peak of {plan.peak_disk / 1e6:,.1f} MB "
            f"({config.prefetch} prefetched + 1 current revision); raise it or lower --prefetch",
            needed=plan.peak_disk, available=config.max_disk)
    if plan.peak_disk:
        cache_root = Path(os.environ.get("HF_HUB_CACHE") or os.environ.get("HF_HOME") or Path.home())
        cache_root = next((p for p in [cache_root, *cache_root.parents] if p.exists()), Path("/"))
        free = shutil.disk_usage(cache_root).free
        if free < plan.peak_disk:
            raise DiskSpaceError(f"{plan.peak_disk / 1e6:,.1f} MB needed for downloads, {free / 1e6:,.1f} MB free "
                                 f"on {cache_root}", needed=plan.peak_disk, available=free)
    dataset = Dataset(out)
    result = ScanResult(out=out, skipped=plan.done, config_hash=chash)

    tokenizer = AutoTokenizer.from_pretrained(source.tokenizer_path())
    holder = ModelHolder(device=config.device, dtype=config.dtype)
    common_settings = row_settings(config, chash)

    # revisions whose metadata already proves them duplicates of an earlier selected one are not fetched
    meta_first: dict[str, str] = {}
    for r in selected:
        fs = plan.files.get(r.name) or []
        d = _weights_digest(fs)
        if d is not None:
            meta_first.setdefault(d, r.name)

    def needs_fetch(r: Revision) -> bool:
        if r.name in plan.errors:
            return False
        d = _weights_digest(plan.files.get(r.name, []))
        return d is None or meta_first.get(d) == r.name

    def prepare_all():
        """Tokenize every suite once; prompts are bounded by the built model's context length."""
        max_len = getattr(holder.config, "max_position_embeddings", None)
        return [prepare_suite(s, tokenizer, n_samples=config.n_samples, seed=config.seed, max_length=max_len)
                for s in suites]

    todo = plan.todo
    reference = selected[0]
    prepared = None
    if todo:
        # the architecture to match is the first selected revision's, also when resumed or sharded; its
        # config (config.json only) also bounds prompt lengths, so suites are tokenized, and checked, up front
        try:
            holder.build(source.config_folder(reference), revision=reference.name)
        except CkptgeoError as err:
            log.warning("cannot read the architecture of %s (%s); later revisions are checked against %s",
                        reference.name, err, todo[0].name)
        else:
            prepared = prepare_all()

    threads = contextlib.ExitStack()
    n_params = sum(p.numel() for p in holder.model.parameters()) if holder.model is not None else None
    threads.enter_context(torch_threads(n_params, config.threads))
    runtime = thread_record("threads" if config.threads else "default rule")
    dataset.write_run(chash, {**settings, "source": plan.source, "ckptgeo_version": __version__,
                              "runtime": runtime})
    same_behavior = _same_behavior_runs(dataset, chash)
    pool = ThreadPoolExecutor(max_workers=max(config.prefetch, 1))
    futures: dict[int, object] = {}

    def submit(i: int) -> None:
        if i < len(todo) and i not in futures and needs_fetch(todo[i]):
            futures[i] = pool.submit(source.fetch, todo[i])

    bar = _progress(len(todo), f"scan {source.name}")
    try:
        for i, rev in enumerate(todo):
            bar.set_postfix_str(rev.name)
            for j in range(i + 1, i + 1 + config.prefetch):
                submit(j)
            t0 = time.perf_counter()
            name = part_name(source.name, rev.name, chash)
            tokens = rev.tokens if rev.tokens is not None else (
                rev.step * source.tokens_per_step if source.tokens_per_step else None)
            base = {"model": rev.model or source.name, "revision": rev.name, "step": rev.step, "stage": rev.stage,
                    "commit": rev.commit, "tokens": tokens, "run_seed": rev.seed}
            try:
                lock = dataset.lock(name[: -len(".parquet")])
            except OutputLockedError:
                log.warning("%s is being measured by another process; skipping it here", rev.name)
                result.locked.append(rev.name)
                _drop_prefetch(futures.pop(i, None), source, rev)
                bar.update(1)
                continue
            if not config.overwrite and dataset.is_done(name):
                # another run finished it after this one planned: not measured twice
                log.info("%s was finished by another process meanwhile; skipping it", rev.name)
                lock.close()
                result.skipped.append(rev.name)
                _drop_prefetch(futures.pop(i, None), source, rev)
                bar.update(1)
                continue
            try:
                if rev.name in plan.errors:
                    raise plan.errors[rev.name]
                files = plan.files.get(rev.name, [])
                if not needs_fetch(rev):
                    orig = meta_first[_weights_digest(files)]
                    warnings.warn(f"{rev.name} holds the same weights as {orig}; not fetched, not measured",
                                  DuplicateWeightsWarning, stacklevel=2)
                    dataset.write_part("revisions", name, [_revision_row(base, "duplicate", chash, t0, files=files,
                                                                         duplicate_of=orig)])
                    result.measured.append(rev.name)
                    continue
                submit(i)
                path = futures.pop(i).result()
                files = _verify_files(path, files, rev)
                model = holder.load(path, revision=rev.name)
                if prepared is None:
                    prepared = prepare_all()
                rows = _measure(model, prepared, specs, config, base, common_settings, dataset, name, rev)
                for table, trows in rows.items():
                    if table == "behavior" and any(dataset.has_part("behavior", part_name(source.name, rev.name, h))
                                                   for h in same_behavior):
                        continue   # already there from a run with other metrics: not a second copy
                    if trows:
                        dataset.write_part(table, name, trows)
                dataset.write_part("revisions", name, [_revision_row(base, "ok", chash, t0, files=files)])
                result.measured.append(rev.name)
            except (CkptgeoError, OSError, RuntimeError, ValueError) as err:
                if isinstance(err, DiskSpaceError) or config.on_error == "raise":
                    _record_failure(dataset, name, base, err, chash, t0)
                    raise
                log.warning("%s failed: %s", rev.name, err)
                result.failed[rev.name] = f"{type(err).__name__}: {err}"
                _record_failure(dataset, name, base, err, chash, t0)
            finally:
                lock.close()
                source.release(rev)
                bar.update(1)
    finally:
        bar.close()
        pool.shutdown(wait=True, cancel_futures=True)
        threads.close()
    result.duplicates = _finish(dataset)
    return result


def _verify_files(path: Path, files: list[WeightFile], rev: Revision) -> list[WeightFile]:
    """Size and sha256 of each fetched weight file, checked against what the source announced.

    Raises
    ------
    CorruptCheckpointError
        A file's bytes or sha256 differ from the source's metadata (a truncated or altered download).
    """
    from ckptgeo.engine.model import damaged_file_advice, sha256_file

    out = []
    for f in files:
        local = path / f.name
        if not local.exists():
            raise CorruptCheckpointError(f"{rev.name}: weight file {f.name} is missing", revision=rev.name,
                                         path=str(local))
        size, digest = local.stat().st_size, sha256_file(local)
        if (f.size is not None and f.size != size) or (f.sha256 is not None and f.sha256 != digest):
            raise CorruptCheckpointError(
                f"{rev.name}: {f.name} does not match the source's metadata ({size} bytes, sha256 {digest[:12]}…; "
                f"expected {f.size} bytes, sha256 {(f.sha256 or '?')[:12]}…); {damaged_file_advice(local)}",
                revision=rev.name, path=str(local))
        out.append(WeightFile(f.name, size, digest))
    return out


def _drop_prefetch(future, source, rev: Revision) -> None:
    """A revision this process will not measure after all: cancel its download, or evict what it fetched."""
    if future is None or future.cancel():
        return
    try:
        future.result()
    except Exception as err:  # the download failed: nothing of it to keep
        log.debug("prefetch of %s failed: %s", rev.name, err)
    source.release(rev)


def _revision_row(base: dict, status: str, chash: str, t0: float, *, files: list[WeightFile] = (),
                  error: str | None = None, duplicate_of: str | None = None) -> dict:
    """The ``revisions`` row of one revision: status, error, its weight files' names, sha256 and bytes."""
    return {**base, "status": status, "error": error, "files": [f.name for f in files],
            "sha256": [f.sha256 for f in files], "bytes": [f.size for f in files],
            "weights_sha256": _weights_digest(files), "duplicate_of": duplicate_of,
            "seconds": time.perf_counter() - t0, "config_hash": chash, "ckptgeo_version": __version__}


def _record_failure(dataset: Dataset, name: str, base: dict, err: Exception, chash: str, t0: float) -> None:
    try:
        dataset.write_part("revisions", name, [_revision_row(base, "failed", chash, t0,
                                                             error=f"{type(err).__name__}: {err}")])
    except OSError:
        log.exception("could not record the failure of %s", base["revision"])


#: the settings that change behaviour rows (the rest only change geometry or probes)
_BEHAVIOR_SETTINGS = ("suites", "n_samples", "dtype", "seed", "source")


def _same_behavior_runs(dataset: Dataset, chash: str) -> list[str]:
    """Other runs in ``dataset`` that measured behaviour with the settings of run ``chash``: a scan then a
    ``ckptgeo probe`` of the same suites differ only in their metrics, and their accuracy rows are the same."""
    runs = dataset.root / "runs"
    mine = json.loads((runs / f"{chash}.json").read_text())
    out = []
    for path in sorted(runs.glob("*.json")):
        if path.stem == chash:
            continue
        try:
            other = json.loads(path.read_text())
        except ValueError:
            continue
        if "behavior" in other.get("metrics", {}) and all(other.get(k) == mine.get(k) for k in _BEHAVIOR_SETTINGS):
            out.append(path.stem)
    return out


def _finish(dataset: Dataset) -> pd.DataFrame:
    """Resolve ``duplicate_of`` over the whole table (serialised by a lock, so the last process to finish
    sees every part) and warn about duplicates."""
    with dataset.lock_all():
        dups = dataset.resolve_duplicates()
    if not dups.empty:
        pairs = ", ".join(f"{r} = {o}" for r, o in zip(dups.revision, dups.duplicate_of))
        warnings.warn(f"revisions with identical weights: {pairs}", DuplicateWeightsWarning, stacklevel=3)
    from ckptgeo.store.dataset import shared_shards

    shared = shared_shards(dataset.read("revisions"))
    if shared:
        which = "; ".join(f"{r} has {', '.join(fs)} of {o}" for _, r, o, fs in shared)
        warnings.warn(f"revisions sharing weight files with another revision: {which}", DuplicateWeightsWarning,
                      stacklevel=3)
    return dups


def _measure(model, prepared, specs, config, base, common, dataset, name, rev):
    """Every selected metric of one revision over the prepared suites: rows per table."""
    import torch

    from ckptgeo.engine.forward import model_batch, run_suite
    from ckptgeo.metrics.registry import ModelContext

    rows: dict[str, list[dict]] = {"geometry": [], "behavior": [], "probes": []}
    for ps in prepared:
        t0 = time.perf_counter()
        outp = run_suite(model, ps, batch_size=config.batch_size, position=config.position, device=config.device,
                         revision=rev.name, with_probes=any(s.needs == "probe_states" for s in specs.values()))
        forward_s = time.perf_counter() - t0
        row0 = {**base, "suite": ps.suite.name, **common}
        if config.save_states:
            from safetensors.torch import save_file

            d = dataset.root / "states" / name[: -len(".parquet")]
            with atomic_path(d / f"{ps.suite.name}.safetensors") as tmp:
                save_file({"states": outp.states.contiguous(), "probe_states": outp.probe_states.contiguous()},
                          str(tmp))
        for mname, spec in specs.items():
            cfg = spec.default_config()
            if mname == "rankme":
                cfg = dataclasses.replace(cfg, centered=config.centered, eps=config.epsilon)
            elif cfg is not None and "seed" in {f.name for f in dataclasses.fields(cfg)}:
                cfg = dataclasses.replace(cfg, seed=config.seed)  # e.g. the probe's folds: the scan's --seed
            settings = json.dumps(dataclasses.asdict(cfg) if cfg is not None else {}, sort_keys=True, default=str)
            if spec.needs == "hidden_states":
                for layer in range(outp.states.shape[0]):
                    t1 = time.perf_counter()
                    value = spec.fn(outp.states[layer], cfg)
                    reason = "all-zero hidden states" if np.isnan(value) else None
                    rows["geometry"].append({**row0, "layer": layer, "metric": mname, "index": None, "value": value,
                                             "reason": reason, "settings": settings,
                                             "seconds": time.perf_counter() - t1})
            elif spec.needs == "outputs":
                rows["behavior"].append({**row0, "metric": "accuracy", "value": spec.fn(outp.correct, cfg),
                                         "n_items": len(outp.correct), "chance": outp.chance, "kind": outp.kind,
                                         "seconds": forward_s})
                if outp.correct_norm is not None:
                    rows["behavior"].append({**row0, "metric": "accuracy_norm",
                                             "value": spec.fn(outp.correct_norm, cfg), "n_items": len(outp.correct),
                                             "chance": outp.chance, "kind": outp.kind, "seconds": forward_s})
            elif spec.needs == "probe_states":
                for layer in range(outp.probe_states.shape[0]):
                    res = spec.fn(outp.probe_states[layer], outp.probe_labels, cfg)
                    d = res if isinstance(res, dict) else dataclasses.asdict(res)
                    rows["probes"].append({**row0, "layer": layer, "settings": settings,
                                           **{k: d.get(k) for k in ("accuracy", "accuracy_std", "chance",
                                                                    "control_accuracy", "n", "k", "reason",
                                                                    "p_value")}})
            elif spec.needs == "model":
                ctx = ModelContext(model=model, batch=model_batch(ps, config.model_items, config.device),
                                   device=torch.device(config.device), seed=config.seed, revision=rev.name,
                                   suite=ps.suite.name)
                t1 = time.perf_counter()
                values = spec.fn(ctx, cfg)
                secs = time.perf_counter() - t1
                for v in values:
                    extra = json.dumps({**json.loads(settings), **v.extra}, sort_keys=True, default=str)
                    rows["geometry"].append({**row0, "layer": -1, "metric": mname, "index": v.index,
                                             "value": float(v.value), "reason": v.reason, "settings": extra,
                                             "seconds": secs})
    return rows
