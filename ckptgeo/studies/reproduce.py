"""``ckptgeo reproduce``: the paper's anatomy, claim by claim, from the toolkit's own training grid.

One call trains a grid (tasks x levels x sizes x seeds, :func:`ckptgeo.training.grid.train_grid`), scans every
run (:func:`ckptgeo.engine.scan.scan`: per-layer RankMe and accuracy at every checkpoint, probes and the
whole-model measures at a subset), analyses the lot (:func:`ckptgeo.analysis.analyze`) and writes the claim
table (:func:`ckptgeo.studies.claims.claim_table`) into ``reproduction.md`` with a grid-at-a-glance figure::

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

The training recipe (:data:`RECIPE`): AdamW at lr 1e-3, weight decay 0.1, batch 128, 100 warm-up steps,
then a cosine whose horizon is twice the run's budget, so the learning rate is still 0.55-0.7 of its peak
at the run's last step (0.56 for 4000 steps, 0.69 for 300): near its peak while the fast tasks acquire
and decaying while the slow ones climb, which lets them settle above the acquisition threshold. (Under a near-constant rate modular-L1 on ``tiny`` hovered around
0.5 held-out accuracy: with a horizon four times a 3000-step budget it reached 0.52-0.55 by step 3000
without holding above 0.5 for three checkpoints; at a constant rate without clipping it held 0.53-0.57
from step 2603 to 2877 and fell back to 0.475 at 3000. Measurements under this recipe are in
:mod:`ckptgeo.suites.tasks`.) Fresh items every batch. Each run's manifest records the recipe
(``recipe``), with the thread count and tokens per step.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from ckptgeo._io import atomic_write_text
from ckptgeo.errors import InvalidParameterError

__all__ = ["Preset", "PRESETS", "RECIPE", "StudyRun", "StudyResult", "plan_study", "plan_text", "estimate", "assign",
           "estimate_text", "run_reproduce", "get_preset", "checkpoint_subset"]

log = logging.getLogger(__name__)

#: The optimisation shared by every run of a study (TrainConfig fields); ``schedule_steps`` is
#: ``HORIZON_FACTOR`` x the run's steps.
RECIPE = {"lr": 1e-3, "weight_decay": 0.1, "batch_size": 128, "warmup_steps": 100, "min_lr_ratio": 0.1,
          "grad_clip": 1.0}
HORIZON_FACTOR = 2


@dataclass(frozen=True)
class Preset:
    """A study: which runs, how long each trains, what is measured where.

    Attributes
    ----------
    name : str
    tasks, levels, sizes, seeds : tuples
        The grid (every combination is a run).
    steps : mapping of task -> {level: steps}
        Each task level's training budget in optimiser steps, the same at every size.
    n_checkpoints : int
        Checkpoints per run (:func:`ckptgeo.training.trainer.checkpoint_steps`); RankMe and accuracy are
        measured at every one.
    n_samples : int
        Held-out items measured per suite.
    probe_checkpoints : int
        Checkpoints per run (evenly spread by index, first and last included) at which probes are fitted.
    model_metrics : tuple of str
        Whole-model measures (``hessian``, ``llc``, ``grad_rank`` ...), measured at ``model_checkpoints``
        checkpoints of the runs in ``model_runs``.
    model_runs : tuple of (task, level, size)
        Runs that get the whole-model measures (all seeds); empty with ``model_runs_all``: every run.
    model_runs_all : bool
    model_checkpoints : int
    metric_options : mapping of measure -> {option: value}
        Settings of the whole-model measures (as ``--metric-option``), recorded in each row's ``settings``;
        measures not named keep their defaults.
    description : str
    levels_by_size : mapping of size -> levels
        Sizes that train other levels than ``levels`` (the cpu preset trains level 2 on ``tiny`` only).
    """

    name: str
    tasks: tuple[str, ...]
    levels: tuple[int, ...]
    sizes: tuple[str, ...]
    seeds: tuple[int, ...]
    steps: Mapping[str, Mapping[int, int]]
    n_checkpoints: int = 40
    n_samples: int = 200
    probe_checkpoints: int = 12
    model_metrics: tuple[str, ...] = ()
    model_runs: tuple[tuple[str, int, str], ...] = ()
    model_runs_all: bool = False
    model_checkpoints: int = 8
    metric_options: Mapping[str, Mapping[str, object]] = field(default_factory=dict)
    description: str = ""
    levels_by_size: Mapping[str, tuple[int, ...]] = field(default_factory=dict)


_ALL = ("copy", "reverse", "compare", "parity", "addition", "modular", "sort", "multiplication")

#: Budgets (steps) under :data:`RECIPE`, the same at every size: level 1 with a margin over the acquisition
#: measured on ``tiny`` (tasks.py module docstring); level 2 twice level 1 for the fast tasks and less than
#: level 1 for the slow ones: harder levels acquire later or not at all.
_CPU_STEPS = {
    "copy": {1: 300, 2: 600}, "reverse": {1: 300, 2: 600}, "compare": {1: 300, 2: 600},
    "parity": {1: 500, 2: 1000}, "sort": {1: 300, 2: 600}, "addition": {1: 1200, 2: 1000},
    "modular": {1: 4000, 2: 1000}, "multiplication": {1: 2000, 2: 1000},
}

PRESETS: dict[str, Preset] = {
    # Measured: `torchrun --nproc_per_node 2 -m ckptgeo reproduce --preset cpu --threads 1` took 42 min 55 s
    # wall on 2 CPU cores (other jobs used the cores for its first quarter): 4,305 s of training over the 24
    # runs (15,300 tiny steps, 8,900 mini steps; mini about 2.5 steps/s there against 5.8 on an idle core),
    # 693 s of scans (232 s and 461 s in the two processes: RankMe and accuracy at 40 checkpoints, probes at 8,
    # Hessian and LLC at 5 of 3 runs) and about 35 s of analysis. The mini runs dominate: modular-L1-mini alone
    # trains 4,000 steps (27 min there).
    "cpu": Preset(
        "cpu", _ALL, (1, 2), ("tiny", "mini"), (0,), _CPU_STEPS, n_checkpoints=40, n_samples=200,
        probe_checkpoints=8, model_metrics=("hessian", "llc"),
        model_runs=(("copy", 1, "tiny"), ("addition", 1, "tiny"), ("modular", 1, "tiny")), model_checkpoints=5,
        # more SGLD than the language-model defaults (2 x 50): cheap on tiny, and the LLC claim needs a steady curve
        metric_options={"llc": {"num_chains": 4, "num_draws": 100}},
        levels_by_size={"mini": (1,)},
        description="8 tasks x levels 1-2 on tiny, level 1 on mini, 1 seed: 24 runs on 2 CPU cores"),
    "paper": Preset(
        "paper", _ALL, (1, 2, 3), ("tiny", "mini", "small", "medium", "large", "xl"), (0, 1),
        {t: {1: 10000, 2: 20000, 3: 30000} for t in _ALL}, n_checkpoints=200, n_samples=200,
        probe_checkpoints=50, model_metrics=("grad_rank", "grad_cov_rank", "hessian", "llc"), model_runs_all=True,
        model_checkpoints=40,
        description="8 tasks x 3 levels x 6 sizes x 2 seeds: 288 runs, for GPUs"),
}


def get_preset(name: str | Preset) -> Preset:
    """The preset called ``name`` (a :class:`Preset` is returned as is).

    Raises
    ------
    InvalidParameterError
        Unknown name.
    """
    if isinstance(name, Preset):
        return name
    if name not in PRESETS:
        raise InvalidParameterError(f"Unknown preset {name!r}. Available: {', '.join(PRESETS)}.", name="preset",
                                    value=name)
    return PRESETS[name]


@dataclass(frozen=True)
class StudyRun:
    """One run of a study: its grid cell, budget, folder and what its scans measure."""

    task: str
    level: int
    size: str
    seed: int
    steps: int
    folder: Path
    model_metrics: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.folder.name


def plan_study(preset: str | Preset, out: str | Path) -> list[StudyRun]:
    """The runs of ``preset`` in the order they are trained (size, task, level, seed).

    Raises
    ------
    InvalidParameterError
        A task, level or size the toolkit does not have, or a task level without a budget.
    """
    from ckptgeo.training.sizes import get_size
    from ckptgeo.suites.tasks import get_level
    from ckptgeo.training.trainer import run_name

    preset = get_preset(preset)
    runs = []
    for size in preset.sizes:
        get_size(size)
        for task in preset.tasks:
            for level in preset.levels_by_size.get(size, preset.levels):
                get_level(task, level)
                steps = preset.steps.get(task, {}).get(level)
                if not steps:
                    raise InvalidParameterError(f"Preset {preset.name!r} gives no step budget for {task}-L{level}.",
                                                name="steps", value=(task, level))
                wants = preset.model_runs_all or (task, level, size) in preset.model_runs
                for seed in preset.seeds:
                    runs.append(StudyRun(task, level, size, seed, int(steps),
                                         Path(out) / "runs" / run_name(task, level, size, seed),
                                         preset.model_metrics if wants else ()))
    return runs


def _cost(run: StudyRun) -> float:
    """A run's relative cost: steps x non-embedding parameters."""
    from ckptgeo.training.sizes import get_size

    return float(run.steps * get_size(run.size).n_parameters(embeddings=False))


def assign(runs: list[StudyRun], world: int) -> list[list[StudyRun]]:
    """Runs per process: the longest first, each to the least loaded process (cost: steps x non-embedding
    parameters), so that the processes of a launcher finish together. Deterministic: every process computes
    the same split.

    Examples
    --------
    >>> from pathlib import Path
    >>> runs = [StudyRun("copy", 1, "tiny", 0, s, Path(f"r{s}")) for s in (100, 300, 200, 400)]
    >>> [[r.steps for r in share] for share in assign(runs, 2)]
    [[400, 100], [300, 200]]
    """
    shares: list[list[StudyRun]] = [[] for _ in range(world)]
    load = [0.0] * world
    cost = {r.name: _cost(r) for r in runs}
    for r in sorted(runs, key=lambda r: (-cost[r.name], r.name)):
        i = min(range(world), key=lambda j: (load[j], j))
        shares[i].append(r)
        load[i] += cost[r.name]
    return shares


def checkpoint_subset(steps, n: int) -> list[int]:
    """``n`` checkpoints spread evenly by index over ``steps`` (first and last included).

    Examples
    --------
    >>> checkpoint_subset([0, 1, 2, 4, 8, 16, 32, 64], 4)
    [0, 2, 16, 64]
    """
    steps = sorted(steps)
    if n >= len(steps):
        return steps
    idx = sorted({round(i * (len(steps) - 1) / (n - 1)) for i in range(n)})
    return [steps[i] for i in idx]


def _template(run: StudyRun, preset: Preset, device: str):
    from ckptgeo.training.trainer import TrainConfig

    recipe = RECIPE | {"warmup_steps": min(RECIPE["warmup_steps"], run.steps)}  # a very short run warms up less
    return TrainConfig(tasks=(run.task,), levels=(run.level,), out=str(run.folder), n_steps=run.steps,
                       schedule_steps=HORIZON_FACTOR * run.steps, n_checkpoints=preset.n_checkpoints,
                       n_heldout=preset.n_samples, device=device, **recipe)


# ---------------------------------------------------------------------------------------------- estimate

def _bench_size(size: str, device: str, n_samples: int, *, steps: int = 3) -> dict:
    """Measured seconds of one training step (batch 128 of modular-L1 items) and of one checkpoint's
    measurement (a forward pass over ``n_samples`` items, RankMe and probes per layer) for ``size``.

    On a CPU the seconds are this process's CPU time (``time.process_time``), which is what the work takes
    on an idle core whatever else the machine runs, under the thread count the runs use (the rule of
    :mod:`ckptgeo._threads`); on a GPU, wall time after ``cuda.synchronize``."""
    import torch
    from transformers import GPTNeoXForCausalLM

    from ckptgeo._threads import torch_threads
    from ckptgeo.suites.vocab import build_tokenizer
    from ckptgeo.training.sizes import build_config, count_parameters, get_size

    tok = build_tokenizer()
    dev = torch.device(device)
    model = GPTNeoXForCausalLM(build_config(get_size(size), vocab_size=len(tok))).to(dev)
    # the thread count the study's runs use: process time over more threads than the work can fill (spinning
    # while the machine is busy) would count far more CPU seconds than the work needs
    with torch_threads(count_parameters(model)):
        return _bench_model(model, size, dev, n_samples, steps, tok)


def _bench_model(model, size, dev, n_samples, steps, tok) -> dict:
    import random

    import numpy as np
    import torch

    from ckptgeo.metrics.probe import probe
    from ckptgeo.metrics.rankme import rankme
    from ckptgeo.suites.tasks import sample
    from ckptgeo.training.trainer import _answer_loss, _encode

    clock = time.perf_counter if dev.type == "cuda" else time.process_time
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    rng = random.Random(0)
    items = [sample("modular", 1, rng) for _ in range(RECIPE["batch_size"])]
    ids, attn, target = (t.to(dev) for t in _encode(items, tok.get_vocab(), tok.pad_token_id, torch))

    def step():
        loss = _answer_loss(model(input_ids=ids, attention_mask=attn).logits, ids, target, torch)
        opt.zero_grad()
        loss.backward()
        opt.step()

    step()  # warm-up (allocations, kernels)
    if dev.type == "cuda":
        torch.cuda.synchronize()
    t0 = clock()
    for _ in range(steps):
        step()
    if dev.type == "cuda":
        torch.cuda.synchronize()
    step_s = (clock() - t0) / steps
    model.eval()
    t0 = clock()
    with torch.no_grad():
        hs = model(input_ids=ids[: min(n_samples, len(ids))], output_hidden_states=True).hidden_states
    n_layers = len(hs)
    forward_s = (clock() - t0) * max(n_samples / len(ids), 1.0)
    states = hs[-1][:, -1].float().cpu()
    t0 = clock()
    rankme(states)
    labels = np.arange(len(states)) % 10
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # an untrained model's states: the solver may stop at max_iter
        probe(states.numpy(), labels)
    per_layer = clock() - t0
    return {"size": size, "device": str(dev), "step_s": step_s, "forward_s": forward_s,
            "rankme_probe_per_layer_s": per_layer, "n_layers": n_layers, "steps_per_s": 1.0 / step_s}


def estimate(preset: str | Preset, *, device: str = "cpu", bench: Mapping[str, dict] | None = None) -> dict:
    """Device-hours the preset needs, from steps per second measured here (one benchmark per size).

    Training: steps / measured steps per second. Measurement: per checkpoint, a forward pass for
    training's own evaluation and one for the scan; per probed checkpoint, RankMe and a probe per layer.
    Whole-model measures are not in the estimate (their cost depends on their settings).

    Returns
    -------
    dict
        ``bench`` (per size), ``train_hours``, ``scan_hours``, ``total_hours``, ``runs``, ``device``.
    """
    preset = get_preset(preset)
    if not bench:
        from ckptgeo.engine.plan import rank_device

        rank_device(device)  # a CUDA device that is not here: a clear error before any benchmark
    bench = dict(bench) if bench else {s: _bench_size(s, device, preset.n_samples) for s in preset.sizes}
    runs = plan_study(preset, "-")
    train_s = sum(r.steps * bench[r.size]["step_s"] for r in runs)
    scan_s = sum(preset.n_checkpoints * 2 * bench[r.size]["forward_s"]
                 + preset.probe_checkpoints * bench[r.size]["n_layers"] * bench[r.size]["rankme_probe_per_layer_s"]
                 for r in runs)
    return {"bench": bench, "train_hours": train_s / 3600, "scan_hours": scan_s / 3600,
            "total_hours": (train_s + scan_s) / 3600, "runs": len(runs), "device": device}


def plan_text(preset: str | Preset, out: str | Path) -> str:
    """The plan as text for ``--dry-run``."""
    preset = get_preset(preset)
    runs = plan_study(preset, out)
    lines = [f"preset {preset.name}: {preset.description}",
             f"  {len(runs)} runs in {Path(out) / 'runs'}; {preset.n_checkpoints} checkpoints each; RankMe per layer "
             f"and accuracy at every checkpoint, probes at {preset.probe_checkpoints}",
             f"  recipe: AdamW lr {RECIPE['lr']:g}, weight decay {RECIPE['weight_decay']:g}, batch "
             f"{RECIPE['batch_size']}, warm-up {RECIPE['warmup_steps']}, cosine horizon {HORIZON_FACTOR} x steps",
             "  steps per task level: " + _budgets(preset)]
    for size, levels in preset.levels_by_size.items():
        lines.append(f"  {size}: levels {'/'.join(map(str, levels))} only")
    with_model = [r for r in runs if r.model_metrics]
    if with_model:
        lines.append(f"  whole-model measures {', '.join(preset.model_metrics)} at {preset.model_checkpoints} "
                     f"checkpoints of {len(with_model)} run(s)" + "".join(
                         f"; {m} " + ", ".join(f"{k}={v}" for k, v in o.items())
                         for m, o in preset.metric_options.items()))
    return "\n".join(lines)


def _budgets(preset: Preset) -> str:
    return ("; ".join(f"{t} " + "/".join(str(preset.steps[t][lv]) for lv in preset.levels) for t in preset.tasks)
            + f" (levels {'/'.join(map(str, preset.levels))})")


def estimate_text(preset: str | Preset, est: dict) -> str:
    """An :func:`estimate` as text for ``--dry-run``."""
    preset = get_preset(preset)
    lines = [f"estimate on {est['device']} (measured steps/s, one benchmark per size"
             + ("; CPU seconds of one thread, i.e. an idle core):" if est["device"] == "cpu" else "):")]
    for s, b in est["bench"].items():
        lines.append(f"  {s:>7}: {b['steps_per_s']:8.1f} steps/s; forward of {preset.n_samples} items "
                     f"{b['forward_s']:.3f} s")
    lines.append(f"  training {est['train_hours']:.2f} h + measuring {est['scan_hours']:.2f} h = "
                 f"{est['total_hours']:.2f} device-hours for {est['runs']} runs (whole-model measures not included)")
    if est["device"] == "cpu":
        lines.append("  (measured on this CPU; on a GPU machine run `ckptgeo reproduce --preset paper --dry-run "
                     "--device cuda` for GPU-hours)")
    return "\n".join(lines)


# -------------------------------------------------------------------------------------------------- run

@dataclass
class StudyResult:
    """What :func:`run_reproduce` produced: the report, the claim table, the analysis, and stage times."""

    out: Path
    report: Path | None
    claims: object = None
    analysis: object = None
    seconds: dict = field(default_factory=dict)
    analysed: bool = True


def _one_process():
    """The study splits *runs* between a launcher's processes; each run's scan must then measure every
    revision itself, not its rank's share (:func:`ckptgeo.engine.scan.shard` reads the launcher's variables)."""
    from unittest import mock

    return mock.patch.dict(os.environ, {"RANK": "0", "WORLD_SIZE": "1", "SLURM_PROCID": "0", "SLURM_NTASKS": "1"})


def _scan_run(run: StudyRun, preset: Preset, dataset: Path, device: str, seed: int) -> None:
    with _one_process():
        _scan_run_here(run, preset, dataset, device, seed)


def _scan_run_here(run: StudyRun, preset: Preset, dataset: Path, device: str, seed: int) -> None:
    import json as _json

    from ckptgeo.engine.scan import scan

    scan(run.folder, out=dataset, metrics=("rankme", "behavior"), n_samples=preset.n_samples, device=device,
         seed=seed)
    schedule = _json.loads((run.folder / "manifest.json").read_text(encoding="utf-8"))["schedule"]
    subset = checkpoint_subset(schedule, preset.probe_checkpoints)
    scan(run.folder, out=dataset, metrics=("probe",), n_samples=preset.n_samples, device=device, seed=seed,
         revisions=",".join(f"step{s}" for s in subset))
    if run.model_metrics:
        subset = checkpoint_subset(schedule, preset.model_checkpoints)
        options = {m: dict(o) for m, o in preset.metric_options.items() if m in run.model_metrics}
        scan(run.folder, out=dataset, metrics=run.model_metrics, n_samples=preset.n_samples, device=device,
             seed=seed, revisions=",".join(f"step{s}" for s in subset), metric_options=options or None)


def _wait_for_others(out: Path, key: str, rank: int, world: int) -> bool:
    """Mark this process's share done; True for the process that finds every share done (it analyses).

    The markers live in ``OUT/.done/``; the process that finds all ``world`` of them (under a lock) removes
    them, so a rerun starts counting afresh and exactly one process of each run analyses."""
    import fcntl

    marks = out / ".done"
    marks.mkdir(parents=True, exist_ok=True)
    (marks / f"rank{rank}-of-{world}").write_text(key, encoding="utf-8")
    with open(marks / ".lock", "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        done = [p for p in marks.glob(f"rank*-of-{world}") if p.read_text(encoding="utf-8") == key]
        if len(done) < world:
            return False
        for p in done:
            p.unlink()
        return True


def run_reproduce(preset: str | Preset = "cpu", out: str | Path = "results/reproduce", *, device: str = "cpu",
                  seed: int = 0, plots: bool = True, rank: int | None = None,
                  world_size: int | None = None) -> StudyResult:
    """Train, scan and analyse a preset's grid and write ``reproduction.md`` (layout: module docstring).

    Parameters
    ----------
    preset : str or Preset, default="cpu"
        ``"cpu"`` (24 runs, 2 CPU cores) or ``"paper"`` (288 runs, GPUs), or a :class:`Preset`.
    out : path, default="results/reproduce"
    device : str, default="cpu"
        Training and scanning device (``cuda`` maps to the local rank's GPU under a launcher).
    seed : int, default=0
        The scans' seed (item selection, probe folds); the runs' seeds come from the preset.
    plots : bool, default=True
        Draw the per-run figures and the grid figure.
    rank, world_size : int, optional
        This process's share (default: the launcher's ``RANK`` / ``WORLD_SIZE``).

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
    cost_all = sum(_cost(r) for r in mine) or 1.0

    def stage_done(what: str, run: StudyRun, fraction: float) -> None:
        """A progress line in the log when there is no bar (no terminal, CKPTGEO_NO_PROGRESS)."""
        nonlocal cost_done, stages
        cost_done, stages = cost_done + fraction * _cost(run), stages + 1
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
                       template=_template(run, preset, device), rank=0, world_size=1)
            seconds["train"] += time.perf_counter() - t0
            seconds["train_cpu"] += time.process_time() - c0
            stage_done("trained", run, 0.8)
            bar.set_postfix_str(f"scan {run.name}")
            t0, c0 = time.perf_counter(), time.process_time()
            _scan_run(run, preset, dataset, device, seed)
            seconds["scan"] += time.perf_counter() - t0
            seconds["scan_cpu"] += time.process_time() - c0
            stage_done("scanned", run, 0.2)
        if not _wait_for_others(out, key, rank, world):
            log.info("rank %d/%d: share done; the last process to finish analyses", rank, world)
            return StudyResult(out, None, seconds=seconds, analysed=False)
        bar.set_postfix_str("analyse")
        t0 = time.perf_counter()
        result = _analyse(preset, out, dataset, runs, plots=plots, seconds=seconds)
        seconds["analyse"] = time.perf_counter() - t0
        bar.update(1)
    finally:
        bar.close()
    return result


def _analyse(preset: Preset, out: Path, dataset: Path, runs: list[StudyRun], *, plots: bool, seconds: dict):
    from ckptgeo.analysis import analyze
    from ckptgeo.analysis.figures import plot_grid, write_report
    from ckptgeo.studies.claims import claim_table, runs_table

    analysis = analyze(dataset)
    write_report(dataset, analysis=analysis, plots=plots)
    claims = claim_table(analysis.events, analysis.top_down, analysis.probe_lead)
    grid_png = plot_grid(runs_table(analysis.events), out / "figures" / "grid.png") if plots else None
    manifests = {}
    for r in runs:
        path = r.folder / "manifest.json"
        if path.is_file():
            manifests[r.name] = json.loads(path.read_text(encoding="utf-8"))
    report = _write_markdown(out, preset, claims, runs_table(analysis.events), manifests, grid_png, seconds)
    study = {"preset": dataclasses.asdict(preset) | {"steps": {t: dict(v) for t, v in preset.steps.items()},
                                                     "levels_by_size": dict(preset.levels_by_size)},
             "runs": [r.name for r in runs], "seconds": seconds, "recipe": RECIPE, "horizon_factor": HORIZON_FACTOR}
    atomic_write_text(out / "study.json", json.dumps(study, indent=1, default=str))
    return StudyResult(out, report, claims=claims, analysis=analysis, seconds=seconds)


def _write_markdown(out: Path, preset: Preset, claims, runs, manifests: dict, grid_png, seconds: dict) -> Path:
    from ckptgeo.analysis.figures import _md
    from ckptgeo.studies import claims as claims_mod

    train_s = sum(m.get("seconds") or 0.0 for m in manifests.values())
    threads = sorted({m.get("recipe", {}).get("threads") for m in manifests.values()} - {None})
    parts = [f"# Reproduction of arXiv:2602.15997 with the `{preset.name}` preset\n",
             (f"{preset.description}. " if preset.description else "")
             + f"{len(manifests)} of {len(plan_study(preset, out))} runs trained; training took {train_s:.0f} s in "
             f"all (sum over runs, from the manifests). The invocation that wrote this file spent "
             f"{seconds.get('train', 0):.0f} s training ({seconds.get('train_cpu', 0):.0f} s of CPU) and "
             f"{seconds.get('scan', 0):.0f} s scanning ({seconds.get('scan_cpu', 0):.0f} s of CPU), in this process "
             f"(others under a launcher add theirs). Threads per process: {', '.join(map(str, threads)) or '?'}.\n",
             "## Claims\n", _md(claims.drop(columns=["id"]), max_rows=100),
             "## How the verdicts are reached\n", claims_mod.DEFINITIONS,
             "## Recipe\n",
             f"AdamW, lr {RECIPE['lr']:g}, weight decay {RECIPE['weight_decay']:g} (matrices and embeddings), batch "
             f"{RECIPE['batch_size']} fresh items per step, {RECIPE['warmup_steps']} warm-up steps, then a cosine to "
             f"{RECIPE['min_lr_ratio']:g} x lr at {HORIZON_FACTOR} x the run's steps (so the lr ends each run "
             "at 0.55-0.7 of its peak, the warm-up's share of the horizon making up the difference); gradient clipping at 1.0. Steps per task level: "
             + _budgets(preset) + ". Every run's `manifest.json` holds its `recipe`.\n"]
    if grid_png is not None:
        parts += ["## The grid at a glance\n", f"![grid]({Path(grid_png).relative_to(out).as_posix()})\n",
                  "Each cell is one run (task x level, per size): colour = RankMe status at the summary layer; the "
                  "number is the precursor gap in steps (acquisition - recovery onset), or the status.\n"]
    parts += ["## Runs\n", _md(runs.drop(columns=["n_parameters"], errors="ignore"), max_rows=400),
              "Per-run RankMe/accuracy figures and every table: `dataset/report.md`, `dataset/figures/`.\n"]
    path = out / "reproduction.md"
    atomic_write_text(path, "\n".join(parts))
    return path
