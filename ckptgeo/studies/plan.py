"""The runs of a study and how they are shared: :func:`plan_study` (the grid), :func:`assign` (load balance
between a launcher's processes), the checkpoints each measure runs at (:func:`checkpoint_subset`,
:func:`whole_model_checkpoints`), each run's :class:`~ckptgeo.training.config.TrainConfig`
(:func:`train_template`) and the plan as text (:func:`plan_text`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from ckptgeo.errors import InvalidParameterError
from ckptgeo.studies.presets import HORIZON_FACTOR, RECIPE, Preset, get_preset

__all__ = ["StudyRun", "plan_study", "run_cost", "assign", "checkpoint_subset", "whole_model_checkpoints",
           "train_template", "plan_text", "budgets_text"]


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
    from ckptgeo.training.runfolder import run_name

    preset = get_preset(preset)
    runs = []
    for size in preset.sizes:
        get_size(size)
        for task, level in preset.settings(size):
            get_level(task, level)
            steps = preset.budget(task, level, size)
            if not steps:
                raise InvalidParameterError(f"Preset {preset.name!r} gives no step budget for {task}-L{level}.",
                                            name="steps", value=(task, level))
            wants = preset.model_runs_all or (task, level, size) in preset.model_runs
            for seed in preset.seeds:
                runs.append(StudyRun(task, level, size, seed, int(steps),
                                     Path(out) / "runs" / run_name(task, level, size, seed),
                                     preset.model_metrics if wants else ()))
    return runs


def run_cost(run: StudyRun) -> float:
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
    cost = {r.name: run_cost(r) for r in runs}
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


def train_template(run: StudyRun, preset: Preset, device: str, *, threads: int | None = None):
    """The :class:`~ckptgeo.training.config.TrainConfig` of ``run``: the recipe, a horizon of
    :data:`~ckptgeo.studies.presets.HORIZON_FACTOR` x its steps, the preset's checkpoints and held-out items,
    and ``threads`` (None: the rule of :mod:`ckptgeo._threads`)."""
    from ckptgeo.training.config import TrainConfig

    recipe = RECIPE | {"warmup_steps": min(RECIPE["warmup_steps"], run.steps)}  # a very short run warms up less
    return TrainConfig(tasks=(run.task,), levels=(run.level,), out=str(run.folder), n_steps=run.steps,
                       schedule_steps=HORIZON_FACTOR * run.steps, n_checkpoints=preset.n_checkpoints,
                       n_heldout=max(preset.n_heldout, preset.n_samples), device=device, threads=threads, **recipe)


def whole_model_checkpoints(manifest: Mapping, n: int) -> list[int]:
    """``n`` checkpoints of a run's schedule for the whole-model measures, spread evenly by index.

    The grid depends on the schedule only, never on the run's acquisition: runs on one schedule share it, so
    another run's acquisition falls on this run's grid as its own does, and one within-schedule null serves
    the whole-model rows as it serves RankMe (a grid centred on each run's own acquisition put it at the same
    index in every run, which the null could not undo).

    Examples
    --------
    >>> whole_model_checkpoints({"schedule": list(range(0, 200, 10))}, 5)
    [0, 50, 100, 140, 190]
    """
    return checkpoint_subset(sorted(int(s) for s in manifest["schedule"]), n)


def plan_text(preset: str | Preset, out: str | Path) -> str:
    """The plan as text for ``--dry-run``."""
    preset = get_preset(preset)
    runs = plan_study(preset, out)
    lines = [f"preset {preset.name}: {preset.description}",
             f"  {len(runs)} runs in {Path(out) / 'runs'}; seeds {', '.join(map(str, preset.seeds))}; "
             f"{preset.n_checkpoints} checkpoints each; RankMe per layer and accuracy ({preset.n_samples} held-out "
             f"items) at every checkpoint, probes (first answer token, {preset.n_heldout} held-out items) at "
             f"{preset.probe_checkpoints}",
             f"  recipe: AdamW lr {RECIPE['lr']:g}, weight decay {RECIPE['weight_decay']:g}, batch "
             f"{RECIPE['batch_size']}, warm-up {RECIPE['warmup_steps']}, cosine horizon {HORIZON_FACTOR} x steps"]
    seen: dict = {}
    for size in preset.sizes:
        mine = [r for r in runs if r.size == size]
        settings = tuple(sorted({(r.task, r.level, r.steps) for r in mine}))
        shown = (f"the same settings as {seen[settings]}" if settings in seen else
                 "steps " + ", ".join(f"{t}-L{lv} {st}" for t, lv, st in settings))
        seen.setdefault(settings, size)
        lines.append(f"  {size}: {len(mine)} runs; {shown}")
    with_model = [r for r in runs if r.model_metrics]
    if with_model:
        lines.append(f"  whole-model measures {', '.join(preset.model_metrics)} at {preset.model_checkpoints} "
                     f"checkpoints (spread over the schedule, shared by its runs) of {len(with_model)} "
                     "run(s), stopped by work" + "".join(f"; {m} " + ", ".join(f"{k}={v}" for k, v in o.items())
                                                         for m, o in preset.metric_options.items()))
    return "\n".join(lines)


def budgets_text(preset: Preset) -> str:
    """Each (task, level, size)'s steps, one clause each."""
    return "; ".join(sorted({f"{r.task}-L{r.level} on {r.size}: {r.steps}" for r in plan_study(preset, "-")}))
