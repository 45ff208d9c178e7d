"""Grids of training runs and the ``ckptgeo train`` command.

:func:`train_grid` trains tasks x levels x sizes x seeds, one :func:`ckptgeo.training.trainer.train` run each in
``OUT/<task>-L<level>-<size>-s<seed>/``, skipping runs whose manifest says complete, and splits the runs
across processes by the launcher's rank (``accelerate launch``, ``torchrun``: see
:func:`ckptgeo.engine.scan.shard`).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ckptgeo.errors import InvalidParameterError
from ckptgeo.suites.tasks import get_level
from ckptgeo.training.sizes import get_size
from ckptgeo.training.config import TrainConfig
from ckptgeo.training.runfolder import MANIFEST_NAME, is_run_folder, read_manifest, run_name
from ckptgeo.training.trainer import train

__all__ = ["GridReport", "train_grid"]

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------------------- grid

@dataclass(frozen=True)
class GridReport:
    """What one process of :func:`train_grid` did.

    Attributes
    ----------
    assigned : tuple of Path
        The run folders this process owns (runs ``rank::world_size`` of the grid).
    trained : tuple of Path
        Those it trained (or finished) now.
    skipped : tuple of Path
        Those already complete.
    rank, world_size : int
        This process's share of the grid.
    """

    assigned: tuple[Path, ...]
    trained: tuple[Path, ...]
    skipped: tuple[Path, ...]
    rank: int
    world_size: int


def train_grid(tasks: Sequence[str], levels: Sequence[int], sizes: Sequence[str], *, out: str | Path,
               seeds: Sequence[int] = (0,), template: TrainConfig | None = None, rank: int | None = None,
               world_size: int | None = None) -> GridReport:
    """Train every task x level x size x seed, one run folder each, resumably and split across processes.

    Runs are ordered size, task, level, seed; process ``rank`` takes runs ``rank::world_size``. A run
    whose manifest says ``"complete": true`` is skipped; an interrupted one resumes (see :func:`train`).

    Parameters
    ----------
    tasks, levels, sizes : sequences
        The grid's axes.
    out : str or Path
        The grid folder; run ``r`` goes to ``out/<task>-L<level>-<size>-s<seed>``.
    seeds : sequence of int, default=(0,)
        Seeds (one run each).
    template : TrainConfig, optional
        Every other setting (``n_steps``, ``lr``, ``n_checkpoints``, ``device`` ...); its ``tasks``,
        ``levels``, ``size``, ``seed`` and ``out`` are replaced per run.
    rank, world_size : int, optional
        This process's share; default from ``RANK`` and ``WORLD_SIZE`` (set by ``accelerate launch``).

    Returns
    -------
    GridReport

    Raises
    ------
    InvalidParameterError
        An unknown task, level or size, or a rank outside ``0 .. world_size - 1``.
    RunMismatchError
        A run folder holds a run with other settings.
    """
    from ckptgeo.engine.scan import shard

    env_rank, env_world = shard()
    rank = env_rank if rank is None else rank
    world_size = env_world if world_size is None else world_size
    if world_size < 1 or not 0 <= rank < world_size:
        raise InvalidParameterError(f"Rank {rank} is outside 0..{world_size - 1} (WORLD_SIZE={world_size}).",
                                    name="rank", value=rank)
    for task in tasks:
        for level in levels:
            get_level(task, level)
    for size in sizes:
        get_size(size)
    base = template or TrainConfig(tasks=(tasks[0],), levels=(levels[0],), out=str(out))
    out = Path(out)
    runs = [(s, t, l, seed) for s in sizes for t in tasks for l in levels for seed in seeds]
    mine = runs[rank::world_size]
    assigned, trained, skipped = [], [], []
    for size, task, level, seed in mine:
        folder = out / run_name(task, level, size, seed)
        assigned.append(folder)
        manifest = folder / MANIFEST_NAME
        if is_run_folder(folder) and (read_manifest(manifest) or {}).get("complete"):
            skipped.append(folder)
            continue
        logger.info("rank %d/%d: training %s", rank, world_size, folder.name)
        train(dataclasses.replace(base, tasks=(task,), levels=(level,), size=size, seed=seed, out=str(folder)))
        trained.append(folder)
    return GridReport(tuple(assigned), tuple(trained), tuple(skipped), rank, world_size)


# ---------------------------------------------------------------------------------------------------- CLI
