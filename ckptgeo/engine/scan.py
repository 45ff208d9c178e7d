"""The streaming scan: revisions in, Parquet parts out.

Each revision of this process's share goes through the same story, one function per step::

    claim    take the revision's lock; skip it if another process holds it or finished it meanwhile
    fetch    its weight files (the next ``prefetch`` revisions download in the background); a revision
             whose metadata proves it a duplicate of an earlier one is recorded, not fetched
    verify   each file's bytes and sha256 against what the source announced, in the thread that fetched it
             (:mod:`ckptgeo.engine.prefetch`): revision i+1 is hashed while revision i is measured
    load     swap its weights into the one model
    measure  every selected measure over every suite (:mod:`ckptgeo.engine.measure`)
    write    the cross-checkpoint measures' artifacts, then one part per table, atomically, the
             ``revisions`` part last (it marks the revision done)
    release  the lock, and the revision's files from the cache

At the end, under the dataset's lock, the artifacts of every revision (this process's, other processes', earlier
runs') are compared into the ``compare`` table (:func:`ckptgeo.metrics.cross.combine`). A rerun with the same
settings skips finished revisions; other settings add rows beside them. Settings and their checks live in
:mod:`ckptgeo.engine.config`, planning in :mod:`ckptgeo.engine.plan`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import shutil
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd

from ckptgeo._version import __version__
from ckptgeo.constants import DEFAULT_N_SAMPLES, NO_PROGRESS
from ckptgeo.engine.config import (ScanConfig, behavior_settings, merge_options, parse_size, settings_from,
                                   with_settings_doc)
from ckptgeo.engine.batching import recorded_batch_sizes
from ckptgeo.engine.measure import measure_revision
from ckptgeo.engine.prefetch import Prefetcher
from ckptgeo.engine.progress import RevisionProgress, hub_bars_hidden, lines_on_stderr
from ckptgeo.engine.plan import (Resolved, ScanPlan, default_out, forward_dtype, make_plan, plan_scan, rank_device,
                                 resolve, row_settings, shard, source_identity, weights_digest)
from ckptgeo.errors import (CkptgeoError, CorruptCheckpointError, DamagedSourceError, DiskSpaceError,
                            DuplicateWeightsWarning, OutputLockedError, UnsafeFileError)
from ckptgeo.sources.groups import grouped_revisions
from ckptgeo.sources.protocol import CheckpointSource, WeightFile
from ckptgeo.sources.revisions import Revision
from ckptgeo.store.dataset import Dataset

__all__ = ["ScanConfig", "ScanPlan", "ScanResult", "STAGES", "scan", "plan_scan", "parse_size", "shard", "default_out",
           "revision_row", "row_settings"]

log = logging.getLogger(__name__)


@dataclass
class ScanResult:
    """Outcome of :func:`scan`: the dataset folder, revision names measured / recorded as duplicates without a
    download / skipped (done before) / failed (with errors) / locked by another process, duplicate pairs, the config hash, the groups of
    selected revisions serving the same weights (:class:`~ckptgeo.sources.integrity.WeightGroup`, left out of
    the analysis by default), and where each measured revision's time went."""

    out: Path
    measured: list[str] = field(default_factory=list)
    #: revisions recorded as duplicates of an earlier one from their metadata: neither fetched nor measured
    duplicated: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    #: revisions whose weights the source serves damaged (:class:`~ckptgeo.errors.DamagedSourceError`): permanent,
    #: recorded ``damaged``, not retried by a rerun; revision -> the error
    damaged: dict[str, str] = field(default_factory=dict)
    locked: list[str] = field(default_factory=list)
    duplicates: pd.DataFrame | None = None
    config_hash: str = ""
    groups: list = field(default_factory=list)
    #: the ``model`` of the rows (and parts), and every revision selected (all processes' shares together)
    model: str = ""
    selected: list[str] = field(default_factory=list)
    #: per measured revision: the seconds of each of :data:`STAGES` and ``load_bytes`` (weight bytes read by the load)
    seconds: dict[str, dict[str, float]] = field(default_factory=dict)


#: A measured revision's stages, timed apart (:attr:`ScanResult.seconds`; the ``revisions`` table's
#: ``seconds_<stage>``): ``wait`` the main thread waited for its fetch and check (0 when the prefetch thread
#: finished them in time), ``download`` the fetch call and ``verify`` the size and sha256 check of its weight files
#: (both in a prefetch thread, wherever the previous revision was measured meanwhile), ``load`` the weights into the
#: model, ``forward`` the forward sweeps (part of ``measure``: every measure over every suite), ``write`` its parts.
#: A scan's pace is its slowest stage: ``wait + load + measure + write`` on the main thread, against
#: ``download + verify`` over ``prefetch`` threads.
STAGES = ("wait", "download", "verify", "load", "forward", "measure", "write")


@lines_on_stderr()   # a line per revision in a script's log, unless logging is configured (or quiet)
@hub_bars_hidden()   # and not huggingface_hub's bar per file in a notebook or a log, as on the command line
def scan(source: str | Path | CheckpointSource, *, out: str | Path | None = None, revisions: str | None = None,
         suites: Sequence[str] = (), metrics: Sequence[str] = (),
         metric_options: Mapping[str, Mapping[str, Any]] | None = None, n_samples: int = DEFAULT_N_SAMPLES,
         position: str = "last", centered: bool | None = None, dtype: str = "float32", precision: str = "fp32",
         epsilon: float | None = None,
         seed: int = 0, batch_size: int | None = None, device: str = "cpu", prefetch: int = 1,
         max_disk: int | str | None = None, keep_cache: bool = False, overwrite: bool = False,
         save_states: bool = False, on_error: str = "skip", step_pattern: str | None = None, model_items: int = 32,
         threads: int | None = None, share_prefix: bool = True, tokenizer: str | Path | None = None,
         source_options: Mapping[str, Any] | None = None, config: ScanConfig | None = None) -> ScanResult:
    """Measure every selected revision of ``source`` and write the tables under ``out``.

    Parameters
    ----------
    source : str, Path or CheckpointSource
        A Hub repo id (``"EleutherAI/pythia-160m"``), a folder of ``step{N}`` checkpoints, or an opened
        :class:`~ckptgeo.sources.protocol.CheckpointSource`.
    out : str or Path, optional
        The dataset folder (default ``results/<source name>``).
    {settings}
    config : ScanConfig, optional
        Settings as one object (the command line builds one); keyword options that differ from their
        defaults override its fields.

    Returns
    -------
    ScanResult
        The dataset folder and the revisions measured, skipped, failed and locked by another process.

    Raises
    ------
    InvalidParameterError
        A setting or measure option out of range or unknown, an unknown suite or measure; raised before
        any download.
    RevisionNotFoundError, EmptySelectionError
        The selector names a missing revision or matches none.
    DiskSpaceError
        ``max_disk`` (or the free disk) is below the peak the scan needs; raised before any download.
    DatasetLayoutError
        ``out`` is not a ckptgeo dataset, or was written with another schema.
    CkptgeoError
        With ``on_error="raise"``, the first revision that fails.

    Examples
    --------
    >>> scan("runs/copy", metrics=["rankme", "hessian"], metric_options={"hessian": {"k": 3}})  # doctest: +SKIP
    ScanResult(out=PosixPath('results/copy'), measured=['step0', 'step1', ...], ...)
    """
    # every keyword but source, out and config is a setting declared on ScanConfig (engine/config.py)
    options = settings_from({k: v for k, v in locals().items() if k not in ("source", "out", "config")})
    config = merge_options(config, options)
    run = _Run.start(source, config, out)
    try:
        for i, rev in enumerate(run.plan.todo):
            run.revision(i, rev)
    finally:
        run.close()
    return run.finish()


scan.__doc__ = with_settings_doc(scan.__doc__)   # the settings' entries, from their declaration (ScanConfig)


# ------------------------------------------------------------------------------------------ the run

@dataclass
class _Clock:
    """Seconds per stage of one revision: ``with clock("seconds_load"): ...``."""

    seconds: dict[str, Any] = field(default_factory=dict)

    @contextlib.contextmanager
    def __call__(self, key: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[key] = time.perf_counter() - t0


class _Duplicates:
    """Revisions whose weight metadata (sha256 of every file) equals an earlier selected revision's: those
    are recorded as duplicates without being fetched."""

    def __init__(self, selected: list[Revision], files: dict[str, list[WeightFile]]):
        self.files = files
        self.first: dict[str, str] = {}
        for r in selected:
            d = weights_digest(files.get(r.name) or [])
            if d is not None:
                self.first.setdefault(d, r.name)

    def original_of(self, rev: Revision) -> str | None:
        """The earlier revision ``rev`` duplicates, or None when it must be fetched."""
        d = weights_digest(self.files.get(rev.name, []))
        orig = self.first.get(d) if d is not None else None
        return None if orig in (None, rev.name) else orig


def _fetchable(plan: ScanPlan, duplicates: _Duplicates):
    """Whether a revision is to be fetched: not a duplicate, and its metadata did not already fail."""
    return lambda rev: rev.name not in plan.errors and duplicates.original_of(rev) is None


@dataclass
class _Run:
    """One scan in progress: the resolved inputs, the plan, the dataset, the model and the downloads."""

    config: ScanConfig
    resolved: Resolved
    plan: ScanPlan
    dataset: Dataset
    result: ScanResult
    holder: Any
    tokenizer: Any
    duplicates: _Duplicates
    prefetcher: Prefetcher
    bar: Any
    threads: contextlib.ExitStack
    prepared: list | None = None
    same_behavior: dict = field(default_factory=dict)
    batch_sizes: dict = field(default_factory=dict)  # suite name -> BatchChoice, chosen at the first revision

    @classmethod
    def start(cls, source, config: ScanConfig, out) -> "_Run":
        """Resolve and plan, refuse what cannot work (foreign ``out``, too little disk), record the settings,
        read the tokenizer and the architecture, tokenize the suites."""
        from ckptgeo.engine.model import ModelHolder

        config = forward_dtype(dataclasses.replace(config, device=rank_device(config.device)))
        resolved = resolve(source, config)
        source = resolved.source
        out = Path(out) if out is not None else default_out(source)
        Dataset(out, create=False)  # a foreign or incompatible --out is refused before anything else
        plan = make_plan(resolved, config, out)
        _check_disk(plan, config)
        dataset = Dataset(out)
        dataset.record_source(plan.model, source_identity(source))
        for note in plan.elsewhere + [f"{r} moved to commit {new[:12]} since it was measured at {old[:12]}; measuring "
                                      f"it again" for r, (old, new) in plan.moved.items()]:
            log.warning("%s", note)
        duplicates = _Duplicates(plan.selected, plan.files)
        n_dup = sum(duplicates.original_of(r) is not None for r in plan.todo)   # recorded, not fetched
        run = cls(config=config, resolved=resolved, plan=plan, dataset=dataset,
                  result=ScanResult(out=out, skipped=plan.done, config_hash=resolved.config_hash,
                                    groups=list(plan.integrity.groups) if plan.integrity is not None else [],
                                    model=plan.model, selected=[r.name for r in plan.selected]),
                  holder=ModelHolder(device=config.device, dtype=config.dtype),
                  tokenizer=_load_tokenizer(source, config.tokenizer), duplicates=duplicates,
                  prefetcher=Prefetcher(source, plan.todo, config.prefetch, _fetchable(plan, duplicates),
                                         files_of=lambda rev: plan.files.get(rev.name, [])),
                  bar=RevisionProgress(len(plan.todo), f"scan {source.name}", disable=NO_PROGRESS or None,
                                       start_note=plan.cost_note(), free=n_dup), threads=contextlib.ExitStack())
        source.expect([r for r in plan.todo if _fetchable(plan, duplicates)(r)])   # shared blobs: downloaded once
        run._read_architecture()
        run._set_threads()
        return run

    def _set_threads(self) -> None:
        """Torch threads for the model's size (or ``threads``), recorded with the settings."""
        from ckptgeo._threads import thread_record, torch_threads

        model = self.holder.model
        n_params = sum(p.numel() for p in model.parameters()) if model is not None else None
        self.threads.enter_context(torch_threads(n_params, self.config.threads))
        runtime = thread_record("threads" if self.config.threads else "default rule")
        self.dataset.write_run(self.resolved.config_hash, {**self.resolved.settings, "source": self.plan.source,
                                                           "ckptgeo_version": __version__, "runtime": runtime},
                               planned=(self.plan.model, [r.name for r in self.plan.selected]))
        self.same_behavior = _same_behavior_runs(self.dataset, self.resolved.config_hash)
        self.batch_sizes = recorded_batch_sizes(self.dataset.runtime(self.resolved.config_hash), self.config.device)

    source = property(lambda self: self.resolved.source)

    def _read_architecture(self) -> None:
        """Build the model from the first selected revision's config.json (also when resumed or sharded:
        that is the architecture to match); its context length bounds prompts, so suites are tokenized, and
        checked, before any download, as are the measures' settings (``MetricSpec.preflight``: memory)."""
        if not self.plan.todo:
            return
        reference = self.plan.selected[0]
        try:
            self.holder.build(self.source.config_folder(reference), revision=reference.name)
        except CkptgeoError as err:
            log.warning("cannot read the architecture of %s (%s); later revisions are checked against %s",
                        reference.name, err, self.plan.todo[0].name)
        else:
            for m in (m for m in self.resolved.measures.values() if m.spec.preflight is not None):
                m.spec.preflight(self.holder.model, m.config, self.config.device)
            self._prepare_suites()

    def _prepare_suites(self) -> None:
        from ckptgeo.engine.forward import prepare_suite

        max_len = getattr(self.holder.config, "max_position_embeddings", None)
        self.prepared = [prepare_suite(s, self.tokenizer, n_samples=self.config.n_samples, seed=self.config.seed,
                                       max_length=max_len) for s in self.resolved.suites]

    # -- one revision: claim -> fetch -> verify -> load -> measure -> write -> release --------------
    def revision(self, i: int, rev: Revision) -> None:
        """Take revision ``rev`` (the ``i``-th of this process's share) through the whole story."""
        self.bar.set_postfix_str(rev.name)
        self.prefetcher.ahead(i)
        t0 = time.perf_counter()
        name = self.dataset.part_of(self.plan.model, rev.name, self.resolved.config_hash)
        base = self._base(rev)
        lock = self.claim(rev, name)
        if lock is None:
            self.prefetcher.drop(i)
            self.bar.update(1, note="skipped: another process has it, or finished it", free=True)
            return
        clock, stopped = _Clock(), False
        try:
            if rev.name in self.plan.errors:
                raise self.plan.errors[rev.name]
            files = self.plan.files.get(rev.name, [])
            original = self.duplicates.original_of(rev)
            if original is not None:
                self.write_duplicate(rev, name, base, files, original, t0)
                return
            with clock("seconds_wait"):   # the fetch and the check, where the prefetch thread has not finished them
                fetched = self.prefetcher.get(i)
            files = fetched.files
            clock.seconds.update(seconds_download=fetched.download, seconds_verify=fetched.verify)
            with clock("seconds_load"):
                model = self._load(fetched.path, rev)
            per_measure: dict[str, float] = {}
            artifacts: dict = {}
            forward: list[float] = []
            t_measure = time.perf_counter()
            rows = self.measure(model, rev, name, base, seconds=per_measure, artifacts=artifacts, forward=forward)
            t_measure = time.perf_counter() - t_measure
            clock.seconds.update(measure_names=list(per_measure), measure_seconds=list(per_measure.values()),
                                 seconds_forward=sum(forward), seconds_measure=t_measure)
            self.write(name, rows, base, files, t0, clock, artifacts)
            self.result.measured.append(rev.name)
            log.info("measured %s in %.1f s", rev.name, time.perf_counter() - t0)
            self.result.seconds[rev.name] = {**{k: clock.seconds[f"seconds_{k}"] for k in STAGES},
                                             "load_bytes": float(self.holder.last_load.bytes)}
        except (CkptgeoError, OSError, RuntimeError, ValueError) as err:
            self.fail(rev, name, base, err, t0)
        except BaseException:   # Ctrl-C, SIGTERM: nothing of this revision saved, so no line may say it finished
            stopped = True
            raise
        finally:
            lock.close()
            self.source.release(rev)
            if not stopped:
                self.bar.finish(failed=rev.name in self.result.failed or rev.name in self.result.damaged,
                                duplicate_of=self.duplicates.original_of(rev))

    def _load(self, path: Path, rev: Revision):
        """The revision's weights into the model. A file that is damaged although its bytes equal the sha256 the
        source lists is damaged as the source serves it: a :class:`DamagedSourceError` (permanent), not advice to
        download it again."""
        try:
            return self.holder.load(path, revision=rev.name)
        except UnsafeFileError:
            raise
        except CorruptCheckpointError as err:
            listed = self.plan.files.get(rev.name, [])
            if not (self.source.downloads and listed and all(f.sha256 for f in listed)):
                raise
            from ckptgeo.engine.model import damaged_file_advice
            from ckptgeo.engine.plan import damaged_message

            what = str(err).removeprefix(f"{rev.name}: ").removesuffix(f"; {damaged_file_advice(err.path or '')}")
            raise DamagedSourceError(damaged_message(rev.name, f"{what}, although its bytes match the sha256 the "
                                                              f"source lists"), revision=rev.name,
                                     path=err.path) from err

    def claim(self, rev: Revision, name: str):
        """The revision's lock, or None when another process holds it or has finished it meanwhile."""
        try:
            lock = self.dataset.lock(name[: -len(".parquet")])
        except OutputLockedError:
            log.warning("%s is being measured by another process; skipping it here", rev.name)
            self.result.locked.append(rev.name)
            return None
        if not self.config.overwrite and self.dataset.is_done(name, commit=rev.commit, revision=rev.name):
            # another run finished it after this one planned: not measured twice
            log.info("%s was finished by another process meanwhile; skipping it", rev.name)
            lock.close()
            self.result.skipped.append(rev.name)
            return None
        return lock

    def measure(self, model, rev: Revision, name: str, base: dict, seconds: dict[str, float] | None = None,
                artifacts: dict | None = None, forward: list[float] | None = None) -> dict[str, list[dict]]:
        """Every measure over every suite at this revision: rows per table (``seconds``: filled per measure;
        cross-checkpoint artifacts into ``artifacts``; ``forward``: each forward sweep's seconds)."""
        if self.prepared is None:
            self._prepare_suites()
        states = self.dataset.root / "states" / name[: -len(".parquet")] if self.config.save_states else None
        row0, known = {**base, **row_settings(self.config, self.resolved.config_hash)}, len(self.batch_sizes)
        rows = measure_revision(model, self.prepared, self.resolved.measures, self.config, row0, revision=rev.name,
                                states_dir=states, seconds=seconds, artifacts=artifacts, batch_sizes=self.batch_sizes,
                                forward=forward)
        chosen = [c.record() for c in self.batch_sizes.values()]
        if len(chosen) > known:  # a batch size chosen at this revision: into runs/<hash>.json
            self.dataset.record_runtime(self.resolved.config_hash, batch_sizes=chosen)
        return rows

    def write(self, name: str, rows: dict[str, list[dict]], base: dict, files: list[WeightFile], t0: float,
              clock: "_Clock | None" = None, artifacts: dict | None = None) -> None:
        """The artifacts, one part per table, then the ``revisions`` part that marks the revision done."""
        clock = clock or _Clock()
        tw = time.perf_counter()
        common = {**base, **row_settings(self.config, self.resolved.config_hash)}
        for metric, arrays in (artifacts or {}).items():
            self.dataset.write_artifact(metric, name[: -len(".parquet")], arrays,
                                        {**common, "settings": self.resolved.measures[metric].settings})
        for table, trows in rows.items():
            if table == "behavior":   # a suite's rows already there from a run with other metrics: not a second copy
                have = {n for h, names in self.same_behavior.items() for n in names
                        if self.dataset.has_part("behavior", self.dataset.part_of(self.plan.model, base["revision"], h))}
                trows = [r for r in trows if r.get("suite") not in have]
            if trows:
                self.dataset.write_part(table, name, trows)
        clock.seconds["seconds_write"] = time.perf_counter() - tw   # the small revisions part is not counted
        self.dataset.write_part("revisions", name, [revision_row(base, "ok", self.resolved.config_hash, t0,
                                                                 files=files, extra={**clock.seconds,
                                                                                     **self._group(base)})])

    def write_duplicate(self, rev: Revision, name: str, base: dict, files: list[WeightFile], original: str,
                        t0: float) -> None:
        warnings.warn(f"{rev.name} holds the same weights as {original}; not fetched, not measured",
                      DuplicateWeightsWarning, stacklevel=4)
        self.dataset.write_part("revisions", name, [revision_row(base, "duplicate", self.resolved.config_hash, t0,
                                                                 files=files, duplicate_of=original,
                                                                 extra=self._group(base))])
        self.result.duplicated.append(rev.name)

    def fail(self, rev: Revision, name: str, base: dict, err: Exception, t0: float) -> None:
        """Record the failure; go on, unless the disk is full or ``on_error="raise"``."""
        _record_failure(self.dataset, name, base, err, self.resolved.config_hash, t0)
        if isinstance(err, DiskSpaceError) or self.config.on_error == "raise":
            raise err
        log.warning("%s %s: %s", rev.name, "is damaged on the source" if isinstance(err, DamagedSourceError)
                    else "failed", err)
        (self.result.damaged if isinstance(err, DamagedSourceError) else self.result.failed)[rev.name] = \
            f"{type(err).__name__}: {err}"

    # -- the end --------------------------------------------------------------------------------------
    def close(self) -> None:
        self.bar.close()
        self.prefetcher.close()
        self.threads.close()

    def finish(self) -> ScanResult:
        self.result.duplicates = _finish(self.dataset, self.plan.model,
                                         any(m.spec.cross for m in self.resolved.measures.values()))
        return self.result

    def _group(self, base: dict) -> dict:
        """``weight_group`` and ``group_note`` of a revision (null when it is in no group)."""
        group = self.plan.integrity.group_of.get(base["revision"]) if self.plan.integrity is not None else None
        return {"weight_group": group.name, "group_note": group.describe()} if group is not None else {}

    def _base(self, rev: Revision) -> dict:
        """The columns that say which revision a row belongs to."""
        tps = self.source.tokens_per_step
        tokens = rev.tokens if rev.tokens is not None else (rev.step * tps if tps else None)
        return {"model": rev.model or self.plan.model, "revision": rev.name, "step": rev.step, "stage": rev.stage,
                "commit": rev.commit, "tokens": tokens, "run_seed": rev.seed}


def _check_disk(plan: ScanPlan, config: ScanConfig) -> None:
    """Refuse a scan whose peak in the Hub cache (``plan.peak_disk``) exceeds ``max_disk`` or the cache's free disk."""
    if config.max_disk is not None and plan.peak_disk is not None and plan.peak_disk > config.max_disk:
        held = "--keep-cache: all fetched" if config.keep_cache else f"{config.prefetch + 1} revisions + kept files"
        raise DiskSpaceError(f"--max-disk {config.max_disk / 1e6:,.1f} MB is below the scan's peak of "
                             f"{plan.peak_disk / 1e6:,.1f} MB ({held}); raise it or lower --prefetch",
                             needed=plan.peak_disk, available=config.max_disk)
    if plan.peak_disk:
        cache_root = Path(os.environ.get("HF_HUB_CACHE") or os.environ.get("HF_HOME") or Path.home())
        cache_root = next((p for p in [cache_root, *cache_root.parents] if p.exists()), Path("/"))
        free = shutil.disk_usage(cache_root).free
        if free < plan.peak_disk:
            raise DiskSpaceError(f"{plan.peak_disk / 1e6:,.1f} MB needed for downloads, {free / 1e6:,.1f} MB free "
                                 f"on {cache_root}", needed=plan.peak_disk, available=free)


def _load_tokenizer(source, override: str | None = None):
    """The source's tokenizer, or ``override`` (a folder or Hub repo id: ``--tokenizer``); a damaged file in
    its folder (transformers reads the folder's ``config.json`` too) is a :class:`CorruptCheckpointError`
    naming it, before anything is measured."""
    from transformers import AutoTokenizer

    path = override if override is not None else source.tokenizer_path()
    try:
        return AutoTokenizer.from_pretrained(path, trust_remote_code=False)  # never a prompt, never its code
    except (OSError, ValueError) as err:
        from ckptgeo.engine.model import needs_own_code

        own = needs_own_code(path)
        if own is not None:
            raise UnsafeFileError(f"cannot load the tokenizer from {path}: the repository needs its own code ({own}), "
                                  f"which ckptgeo does not run; nothing was measured.", path=str(path)) from None
        raise CorruptCheckpointError(f"cannot load the tokenizer from {path}: {err} Restore or re-save the files "
                                     f"there (the tokenizer is read once, from the first folder that holds it); "
                                     f"nothing was measured.", path=str(path)) from err


def revision_row(base: dict, status: str, chash: str, t0: float, *, files: list[WeightFile] = (),
                 error: str | None = None, duplicate_of: str | None = None, extra: dict | None = None) -> dict:
    """The ``revisions`` row of one revision: status, error, its weight files' names, sha256 and bytes
    (``extra``: its weight group and seconds per stage, :data:`~ckptgeo.store.schemas.REVISION_SECONDS`)."""
    return {**(extra or {}), **base, "status": status, "error": error, "files": [f.name for f in files],
            "sha256": [f.sha256 for f in files], "bytes": [f.size for f in files],
            "weights_sha256": weights_digest(files), "duplicate_of": duplicate_of,
            "seconds": time.perf_counter() - t0, "config_hash": chash, "ckptgeo_version": __version__}


def _record_failure(dataset: Dataset, name: str, base: dict, err: Exception, chash: str, t0: float) -> None:
    try:
        status = "damaged" if isinstance(err, DamagedSourceError) else "failed"   # damaged: permanent, not retried
        dataset.write_part("revisions", name, [revision_row(base, status, chash, t0,
                                                            error=f"{type(err).__name__}: {err}")])
    except OSError as failed:  # e.g. the same full disk: one line, the traceback only at DEBUG
        log.warning("could not record the failure of %s in revisions/%s: %s", base["revision"], name,
                    getattr(failed, "strerror", None) or failed)
        log.debug("recording the failure of %s", base["revision"], exc_info=True)


def _same_behavior_runs(dataset: Dataset, chash: str) -> dict[str, set[str]]:
    """Other runs in ``dataset`` that measured behaviour with the settings of run ``chash``, and for which of its
    suites (the same items): a scan of every suite then a ``ckptgeo probe --suite logic`` differ in their metrics and
    suites, and their accuracy rows of ``logic`` are the same. Config hash -> suite names."""
    runs = dataset.root / "runs"
    mine = json.loads((runs / f"{chash}.json").read_text())
    mine_suites = mine.get("suites") or {}
    out: dict[str, set[str]] = {}
    for path in sorted(runs.glob("*.json")):
        if path.stem == chash:
            continue
        try:
            other = json.loads(path.read_text())
        except ValueError:
            continue
        if "behavior" not in other.get("metrics", {}) or not isinstance(other.get("suites"), dict) \
                or not isinstance(mine_suites, dict):
            continue
        if all(other.get(k) == mine.get(k) for k in behavior_settings() if k != "suites"):
            shared = {n for n, digest in mine_suites.items() if other["suites"].get(n) == digest}
            if shared:
                out[path.stem] = shared
    return out


def _finish(dataset: Dataset, model: str, cross: bool = False) -> pd.DataFrame:
    """Resolve ``duplicate_of`` over ``model``'s revisions and, when the scan has cross-checkpoint measures,
    rebuild the ``compare`` table (both serialised by a lock, so the last process to finish sees every
    part and artifact); warn about duplicates."""
    from ckptgeo.metrics.cross import combine

    with dataset.lock_all():
        dups = dataset.resolve_duplicates(model)
        if cross:
            combine(dataset, groups=grouped_revisions(dataset.read("revisions")))
    if not dups.empty:
        pairs = ", ".join(f"{r} = {o}" for r, o in zip(dups.revision, dups.duplicate_of))
        warnings.warn(f"revisions with identical weights: {pairs}", DuplicateWeightsWarning, stacklevel=3)
    from ckptgeo.store.dataset import shared_shards

    shared = shared_shards(dataset.read("revisions", model=model))
    if shared:
        which = "; ".join(f"{r} has {', '.join(fs)} of {o}" for _, r, o, fs in shared)
        warnings.warn(f"revisions sharing weight files with another revision: {which}", DuplicateWeightsWarning,
                      stacklevel=3)
    return dups
