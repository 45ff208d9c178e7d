"""``ckptgeo reproduce``: the paper's anatomy, claim by claim, from the toolkit's own training grid.

One call trains a grid (tasks x levels x sizes x seeds, :func:`ckptgeo.training.grid.train_grid`), scans every
run (:func:`scan_run`: one scan of per-layer RankMe and accuracy at every checkpoint with the whole-model
measures at a subset, and one scan of the probes at a subset), analyses the lot
(:func:`ckptgeo.analysis.analyze`) and writes the claim table (:func:`ckptgeo.claimtable.table.claim_table`)
into ``reproduction.md`` with a grid-at-a-glance figure::

    OUT/
      runs/<task>-L<level>-<size>-s<seed>/   step{N}/ checkpoints, suites/, manifest.json (recipe)
      dataset/                               geometry/ behavior/ probes/ revisions/ events/ summary/
        figures/*.png  report.md             per-run RankMe/accuracy figures and the analysis report
      reproduction.md                        one row per claim: paper, measured, verdict, evidence
      figures/grid.png                       task x level x size cells by status, with the gap
      study.json                             the plan and the time each stage took

Every stage resumes: finished runs are skipped by :func:`train_grid`, measured revisions by :func:`scan`,
and the analysis is cheap and redone. Under a launcher (``torchrun --nproc_per_node N``, ``accelerate
launch``) the runs are split between the N processes (:func:`assign`: longest first, to the least
loaded); the last process to finish its share analyses
(the others leave a marker in ``OUT/.done/`` and return).

The parts: :mod:`~ckptgeo.studies.presets` (the presets and the training recipe, :data:`RECIPE`),
:mod:`~ckptgeo.studies.plan` (the grid, load balance, checkpoint subsets), :mod:`~ckptgeo.studies.estimate`
(``--dry-run``'s cost benchmark), :mod:`~ckptgeo.studies.coordination` (a launcher's processes) and
:mod:`~ckptgeo.studies.report` (reproduction.md, study.json); this module runs them in order.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import time
from pathlib import Path

from ckptgeo.studies.coordination import one_process, wait_for_others
from ckptgeo.studies.estimate import estimate, estimate_text
from ckptgeo.studies.plan import (StudyRun, assign, checkpoint_subset, plan_study, plan_text, run_cost,
                                  train_template, whole_model_checkpoints)
from ckptgeo.studies.presets import HORIZON_FACTOR, PRESETS, RECIPE, Preset, get_preset
from ckptgeo.studies.report import StudyResult, write_study

# the study's parts live in presets, plan, estimate, coordination and report; their public names are
# importable from here as before
__all__ = ["Preset", "PRESETS", "RECIPE", "HORIZON_FACTOR", "StudyRun", "StudyResult", "plan_study", "plan_text",
           "estimate", "assign", "estimate_text", "run_reproduce", "get_preset", "checkpoint_subset",
           "whole_model_checkpoints", "probe_suite", "scan_run"]

log = logging.getLogger(__name__)


def run_reproduce(preset: str | Preset = "cpu", out: str | Path = "results/reproduce", *, device: str = "cpu",
                  seed: int = 0, plots: bool = True, rank: int | None = None,
                  world_size: int | None = None, threads: int | None = None) -> StudyResult:
    """Train, scan and analyse a preset's grid and write ``reproduction.md`` (layout: module docstring).

    Parameters
    ----------
    preset : str or Preset, default="cpu"
        ``"smoke"`` (9 runs), ``"cpu"`` (81 runs, 2 CPU cores), ``"paper"`` (432 runs, GPUs), or a
        :class:`Preset`.
    out : path, default="results/reproduce"
    device : str, default="cpu"
        Training and scanning device (``cuda`` maps to the local rank's GPU under a launcher).
    seed : int, default=0
        The scans' seed (item selection, probe folds); the runs' seeds come from the preset.
    plots : bool, default=True
        Draw the per-run figures and the grid figure.
    rank, world_size : int, optional
        This process's share (default: the launcher's ``RANK`` / ``WORLD_SIZE``).
    threads : int, optional
        torch CPU threads of every training run and scan (``--threads``); default: the rule of
        :mod:`ckptgeo._threads` (one thread below 10M parameters, else this process's share of the cores).

    Returns
    -------
    StudyResult
        ``analysed`` is False in a process that finished its share before the others (it leaves the
        analysis to the last one).

    Raises
    ------
    InvalidParameterError
        An unknown preset, or a preset naming an unknown task, level or size; a CUDA device that is
        not here.
    RunMismatchError
        A run folder in ``OUT/runs`` holds a run with other settings.
    """
    from tqdm.auto import tqdm

    from ckptgeo.constants import NO_PROGRESS
    from ckptgeo.engine.plan import rank_device
    from ckptgeo.engine.scan import shard
    from ckptgeo.training.grid import train_grid

    preset = get_preset(preset)
    out = Path(out)
    runs = plan_study(preset, out)
    env_rank, env_world = shard()
    rank = env_rank if rank is None else rank
    world = env_world if world_size is None else world_size
    mine = assign(runs, world)[rank]
    device = rank_device(device)
    dataset = out / "dataset"
    out.mkdir(parents=True, exist_ok=True)
    key = f"{preset.name}-" + hashlib.sha256(" ".join(r.name for r in runs).encode()).hexdigest()[:12]
    seconds = {"train": 0.0, "scan": 0.0, "train_cpu": 0.0, "scan_cpu": 0.0}
    bar = tqdm(total=2 * len(mine) + 1, desc=f"reproduce {preset.name}", unit="stage", disable=NO_PROGRESS or None,
               dynamic_ncols=True, position=0)
    started, cost_done, stages = time.perf_counter(), 0.0, 0
    cost_all = sum(run_cost(r) for r in mine) or 1.0

    def stage_done(what: str, run: StudyRun, fraction: float) -> None:
        """A progress line in the log when there is no bar (no terminal, CKPTGEO_NO_PROGRESS)."""
        nonlocal cost_done, stages
        cost_done, stages = cost_done + fraction * run_cost(run), stages + 1
        bar.update(1)
        if bar.disable:  # a disabled bar counts nothing: the stage count is ours
            elapsed = time.perf_counter() - started
            eta = elapsed * (cost_all - cost_done) / cost_done if cost_done else float("nan")
            log.info("reproduce %s [rank %d/%d]: %s %s (stage %d/%d, %.0f s elapsed, ETA %.0f s by steps x "
                     "parameters)", preset.name, rank, world, what, run.name, stages, 2 * len(mine) + 1, elapsed,
                     eta)

    try:
        for run in mine:
            bar.set_postfix_str(f"train {run.name}")
            t0, c0 = time.perf_counter(), time.process_time()
            train_grid([run.task], [run.level], [run.size], out=out / "runs", seeds=[run.seed],
                       template=train_template(run, preset, device, threads=threads), rank=0, world_size=1)
            seconds["train"] += time.perf_counter() - t0
            seconds["train_cpu"] += time.process_time() - c0
            stage_done("trained", run, 0.8)
            bar.set_postfix_str(f"scan {run.name}")
            t0, c0 = time.perf_counter(), time.process_time()
            scan_run(run, preset, dataset, device, seed, threads=threads)
            seconds["scan"] += time.perf_counter() - t0
            seconds["scan_cpu"] += time.process_time() - c0
            stage_done("scanned", run, 0.2)
        if not wait_for_others(out, key, rank, world):
            log.info("rank %d/%d: share done; the last process to finish analyses", rank, world)
            return StudyResult(out, None, seconds=seconds, analysed=False)
        bar.set_postfix_str("analyse")
        t0 = time.perf_counter()
        result = write_study(preset, out, dataset, runs, plots=plots, seconds=seconds)
        seconds["analyse"] = time.perf_counter() - t0
        bar.update(1)
    finally:
        bar.close()
    return result


def scan_run(run: StudyRun, preset: Preset, dataset: Path, device: str, seed: int, *,
             threads: int | None = None) -> None:
    """Measure one trained run into ``dataset``, in two scans, each revision loaded once per scan.

    1. The run's held-out suite at ``preset.n_samples`` items: RankMe per layer and behaviour at every
       checkpoint, and the whole-model measures (``run.model_metrics``) at
       :func:`~ckptgeo.studies.plan.whole_model_checkpoints` only, through their ``revisions`` option.
    2. The probe at :func:`~ckptgeo.studies.plan.checkpoint_subset` checkpoints, on the run's probe suite
       (:func:`probe_suite`: all held-out items, labelled by their first answer token, rare classes dropped).

    The probe keeps a scan of its own because a scan has one list of suites and one ``n_samples`` for every
    measure: RankMe and behaviour would otherwise be measured on the probe's items too (other items, other
    counts), and the probe on the accuracy suite's coarser labels.
    """
    from ckptgeo.engine.scan import scan

    manifest = json.loads((run.folder / "manifest.json").read_text(encoding="utf-8"))
    options = None
    if run.model_metrics:
        at = ",".join(f"step{s}" for s in whole_model_checkpoints(manifest, preset.model_checkpoints))
        options = {m: {**dict(preset.metric_options.get(m, {})), "revisions": at} for m in run.model_metrics}
    probe_at = checkpoint_subset(manifest["schedule"], preset.probe_checkpoints)
    suite, n_items = probe_suite(run, dataset.parent / "probe-suites", min_class=preset.probe_min_class)
    with one_process():
        scan(run.folder, out=dataset, metrics=("rankme", "behavior", *run.model_metrics),
             n_samples=preset.n_samples, device=device, seed=seed, metric_options=options, threads=threads)
        if n_items:
            scan(run.folder, out=dataset, metrics=("probe",), suites=[str(suite)], n_samples=n_items,
                 device=device, seed=seed, revisions=",".join(f"step{s}" for s in probe_at), threads=threads)


#: a probe needs the classes it keeps (``min_class`` items or more) to hold at least this share of the held-out
#: items; otherwise it would read the target on a small, easier subset (modular's first answer token has 95
#: values: 400 items keep 20 at 10 per class), and the run is not probed
PROBE_MIN_COVERAGE = 0.5


def probe_suite(run: StudyRun, folder: Path, *, min_class: int = 5) -> tuple[Path, int]:
    """Write the probe's items of a run: its held-out items labelled with the model's own target.

    The label is the first answer token exactly (what the model must emit at the read position, the first
    token the accuracy scores), not the suite's coarser ``label``; classes with fewer than ``min_class``
    items are dropped (stratified cross-validation needs several per class). The header records both.
    When the kept classes hold fewer than :data:`PROBE_MIN_COVERAGE` of the items, nothing is probed.

    Returns
    -------
    (Path, int)
        ``folder/<run>/<suite>.jsonl`` and the number of items kept (0: nothing to probe, no file).
    """
    from collections import Counter

    from ckptgeo.suites.items import load_jsonl, write_jsonl
    from ckptgeo.suites.tasks import suite_name

    name = suite_name(run.task, run.level)
    suite = load_jsonl(run.folder / "suites" / f"{name}.jsonl")
    labels = [it.target.split()[0] if it.target and it.target.split() else None for it in suite.items]
    counts = Counter(lab for lab in labels if lab is not None)
    keep = [(it, lab) for it, lab in zip(suite.items, labels) if lab is not None and counts[lab] >= min_class]
    dropped = sorted(c for c, n in counts.items() if n < min_class)
    path = folder / run.name / f"{name}.jsonl"
    if not keep or len({lab for _, lab in keep}) < 2 or len(keep) < PROBE_MIN_COVERAGE * len(suite.items):
        log.info("%s: not probed: classes of %d or more items hold %d of %d held-out items (%d classes in all)",
                 run.name, min_class, len(keep), len(suite.items), len(counts))
        return path, 0
    header = dict(suite.header) | {"name": name, "n_items": len(keep), "probe_target": "first answer token",
                                   "probe_min_class": min_class, "probe_dropped_classes": dropped}
    write_jsonl(path, [dataclasses.replace(it, label=lab) for it, lab in keep], header=header)
    return path, len(keep)
