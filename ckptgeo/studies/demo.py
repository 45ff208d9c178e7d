"""``ckptgeo demo``: the whole job on a CPU in minutes.

Trains the smallest model on an easy and a hard algorithmic setting (dense checkpoints), scans every
checkpoint of both runs into one dataset (per-layer RankMe and exact-match accuracy on each run's
held-out items), analyses it (acquisition, collapse, recovery, precursor gap, top-down order) and
prints the events table. Every stage resumes: a rerun skips finished training runs and revisions.

::

    OUT/
      runs/<task>-L<level>-<size>-s<seed>/   step{N}/ checkpoints, suites/, manifest.json
      dataset/                               geometry/ behavior/ revisions/ events/ summary/
        figures/*.png  report.md
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["DemoSetting", "DEMO_SETTINGS", "run_demo", "demo_difficulty"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DemoSetting:
    """One training run of the demo: ``task`` at ``level`` for ``n_steps`` optimiser steps with
    ``n_checkpoints`` checkpoints, described as ``role`` ("easy" / "hard") in the log. The ``difficulty``
    column of the analysis comes from the studies' rule (:func:`demo_difficulty`), not from ``role``."""

    role: str
    task: str
    level: int
    n_steps: int
    n_checkpoints: int = 40


#: an easy setting (acquired within a few hundred steps) and a hard one (a long collapse first).
DEMO_SETTINGS = (
    DemoSetting("easy", "copy", 1, 300, 30),
    DemoSetting("hard", "addition", 1, 1000, 50),
)


def demo_difficulty(settings=DEMO_SETTINGS) -> dict[str, str]:
    """Suite -> ``"hard"`` / ``"easy"`` for the demo's runs, by the studies' rule fixed before the outcome
    (:func:`ckptgeo.suites.tasks.is_hard`: level >= 2, or a level-1 task of ``PILOT_HARD``), so the demo's
    ``difficulty`` column says what a study's would (by level alone both demo settings are ``L1``).

    Examples
    --------
    >>> demo_difficulty()
    {'copy-L1': 'easy', 'addition-L1': 'hard'}
    """
    from ckptgeo.suites.tasks import is_hard
    from ckptgeo.suites.tasks import suite_name

    return {suite_name(s.task, s.level): "hard" if is_hard(s.task, s.level) else "easy" for s in settings}


def run_demo(out: str | Path = "results/demo", *, settings=DEMO_SETTINGS, size: str = "tiny", seed: int = 0,
             n_samples: int = 200, device: str = "cpu", plots: bool = True, threads: int | None = None):
    """Train, scan and analyse the demo settings; returns the :class:`~ckptgeo.analysis.pipeline.Analysis`.

    Parameters
    ----------
    out : path, default="results/demo"
        Folder for the runs and the dataset (layout in the module docstring).
    settings : sequence of DemoSetting
        The runs to train (default :data:`DEMO_SETTINGS`: copy level 1, addition level 1).
    size : str, default="tiny"
        Model size name (``ckptgeo.training.SIZES``); the tiny model has about 0.4M parameters.
    n_samples : int, default=200
        Held-out items measured per checkpoint.
    threads : int or None, default=None
        torch CPU threads for training and scanning; None = the size rule of :mod:`ckptgeo._threads`
        (one thread for the tiny model).
    """
    from ckptgeo.analysis.pipeline import analyze
    import ckptgeo.forecasting.tables  # noqa: F401  (registers the forecast step and figure)
    from ckptgeo.analysis.report import write_report
    from ckptgeo.engine.scan import scan
    from ckptgeo.training.trainer import TrainConfig, train

    out = Path(out)
    dataset = out / "dataset"
    for s in settings:
        t0 = time.perf_counter()
        run = out / "runs" / f"{s.task}-L{s.level}-{size}-s{seed}"
        log.info("training %s setting: %s level %d, %d steps -> %s", s.role, s.task, s.level, s.n_steps, run)
        train(TrainConfig(tasks=(s.task,), levels=(s.level,), out=str(run), size=size, n_steps=s.n_steps,
                          seed=seed, n_checkpoints=s.n_checkpoints, device=device, threads=threads))
        log.info("scanning %s", run)
        scan(run, out=dataset, n_samples=n_samples, device=device, seed=seed, threads=threads)
        log.info("%s setting done in %.0f s", s.role, time.perf_counter() - t0)
    from ckptgeo.store.dataset import Dataset

    Dataset(dataset).record_difficulty(demo_difficulty(settings))   # a later `ckptgeo analyze` of it says the same
    result = analyze(dataset)
    write_report(dataset, analysis=result, plots=plots)
    return result
