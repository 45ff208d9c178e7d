"""The settings of one training run (:class:`TrainConfig`), each declared once.

Every field is declared with :func:`ckptgeo._settings.setting` (the base of every settings class), as a
:class:`TrainSetting`: its default, what it admits, its command-line flag and help (``ckptgeo train``) and
whether it belongs to the optimisation recipe a study shares (:data:`ckptgeo.studies.presets.RECIPE`); the
checks, the CLI and the study derive theirs from it (:func:`validate_config`, :func:`cli_settings`,
:func:`recipe_defaults`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import ckptgeo._settings as _settings
from ckptgeo._settings import Interval, Setting, validate_params
from ckptgeo.errors import InvalidParameterError
from ckptgeo.suites.tasks import get_level
from ckptgeo.training.sizes import SIZES, get_size

__all__ = ["TrainConfig", "TrainSetting", "validate_config", "settings_record", "cli_settings", "recipe_defaults",
           "field_defaults"]


@dataclass(frozen=True)
class TrainSetting(Setting):
    """A training setting's declaration: the base :class:`~ckptgeo._settings.Setting` and ``recipe``, whether
    it is part of the optimisation recipe a study shares."""

    recipe: bool = False


def _setting(default=dataclasses.MISSING, flag: str | None = None, help: str = "", *, admits: tuple = (),
             recipe: bool = False, **declaration):
    """A :class:`TrainConfig` field: its default, flag (``None``: no flag), the flag's help (``%(default)s``
    reads the default), what it admits and whether it is part of the shared recipe."""
    return _settings.setting(default, cls=TrainSetting, flag=flag, help=help, admits=admits, recipe=recipe,
                             **declaration)


_POSITIVE = (Interval(int, 1, None),)


@dataclass(frozen=True)
class TrainConfig:
    """Settings of one training run.

    Attributes
    ----------
    tasks : tuple of str
        Tasks from :data:`ckptgeo.training.TASKS`; more than one trains a mixture (each item's task drawn
        uniformly).
    levels : tuple of int
        The level of each task (same length as ``tasks``).
    out : str
        The run folder.
    size : str, default="tiny"
        A name from :data:`ckptgeo.training.SIZES`.
    n_steps : int, default=1000
        Optimiser updates.
    seed : int, default=0
        Seeds the initial weights, the training items and the held-out items.
    batch_size : int, default=128
        Items per update.
    lr : float, default=1e-3
        Peak learning rate of AdamW.
    weight_decay : float, default=0.1
        AdamW's decoupled weight decay, on weight matrices and embeddings only (not biases or norms).
    warmup_steps : int, default=100
        Linear warm-up from 0 to ``lr``, then a cosine decay to ``min_lr_ratio * lr`` at the schedule's
        horizon.
    min_lr_ratio : float, default=0.1
        Learning rate at the horizon as a fraction of ``lr``.
    grad_clip : float, default=1.0
        Maximum global gradient norm; 0 turns clipping off.
    n_checkpoints : int, default=100
        At most this many checkpoints, step 0 and ``n_steps`` included (see
        :func:`ckptgeo.training.schedule.checkpoint_steps`).
    n_heldout : int, default=200
        Held-out evaluation items per task.
    device : str, default="auto"
        ``"auto"`` (``cuda:$LOCAL_RANK`` when CUDA is present, else ``cpu``), ``"cpu"``, ``"cuda"``,
        ``"cuda:1"`` ... On CUDA the forward pass runs under bf16 autocast; weights stay float32.
    monitor : int, default=0
        Measure the live model every ``monitor`` steps (step 0 and the powers of two below it too) with
        :class:`ckptgeo.monitor.Monitor`: per-layer RankMe and accuracy on the held-out items into
        ``OUT/monitor/`` (the rows ``ckptgeo scan OUT`` would write, no checkpoint needed), live events
        in the log and a live status in the progress bar. 0 turns it off. Free to change on resume.
    forecast_from : str or None, default=None
        With ``monitor``: a dataset of finished runs; :class:`ckptgeo.monitor.Monitor` forecasts each task's
        acquisition at every measuring step from a model fitted to them (``ckptgeo.forecasting.live``). Free to
        change on resume.
    threads : int or None, default=None
        torch CPU threads; None = :func:`ckptgeo._threads.default_threads` of the model's size (1 below
        10M parameters). Results can differ in the last bits between thread counts, so the count and
        torch's deterministic settings are recorded in the manifest (``runtime``, one entry per start).
    schedule_steps : int or None, default=None
        The cosine's horizon: the step at which the learning rate reaches ``min_lr_ratio * lr``. None:
        ``n_steps`` (the whole decay inside the run). A horizon past ``n_steps`` holds the learning rate
        above its floor through the run: with ``min_lr_ratio=0.1`` it ends at 0.55-0.7 of ``lr`` when
        ``n_steps = horizon / 2`` (the study recipe, :data:`ckptgeo.studies.presets.HORIZON_FACTOR`) and at
        0.87-0.93 when ``n_steps = horizon / 4``, more the larger the warm-up's share of the horizon.
    """

    tasks: tuple[str, ...] = _setting(flag="--tasks")
    levels: tuple[int, ...] = _setting(flag="--levels")
    out: str = _setting(flag="--out")
    size: str = _setting("tiny", "--size", "model size (default %(default)s)", choices=tuple(SIZES))
    n_steps: int = _setting(1000, "--steps", "optimiser steps (default %(default)s)", admits=_POSITIVE)
    seed: int = _setting(0, "--seed", "seed of weights and items (default %(default)s)",
                         admits=(Interval(int, 0, None),))
    batch_size: int = _setting(128, "--batch-size", "items per step (default %(default)s)", admits=_POSITIVE,
                               recipe=True)
    lr: float = _setting(1e-3, "--lr", "peak AdamW learning rate (default %(default)s)",
                         admits=(Interval(float, 0, None, closed="neither"),), recipe=True)
    weight_decay: float = _setting(0.1, "--weight-decay", "AdamW weight decay (default %(default)s)",
                                   admits=(Interval(float, 0, None),), recipe=True)
    warmup_steps: int = _setting(100, "--warmup", "warm-up steps (default %(default)s; at most --steps)",
                                 admits=(Interval(int, 0, None),), recipe=True)
    min_lr_ratio: float = _setting(0.1, admits=(Interval(float, 0, 1),), recipe=True)
    grad_clip: float = _setting(1.0, admits=(Interval(float, 0, None),), recipe=True)
    n_checkpoints: int = _setting(100, "--checkpoints", "largest number of checkpoints (default %(default)s)",
                                  admits=(Interval(int, 2, None),))
    n_heldout: int = _setting(200, "--heldout", "held-out items per task (default %(default)s)", admits=_POSITIVE)
    device: str = _setting("auto", "--device", "%(default)s (default), cpu, cuda, cuda:N")
    monitor: int = _setting(0, "--monitor", "measure the live model every N steps (and at 0 and the powers of two "
                            "below N): per-layer RankMe and accuracy into OUT/monitor (analyze it like a scan), live "
                            "collapse / recovery / acquisition lines and a status in the progress bar; "
                            "%(default)s = off (default)", admits=(Interval(int, 0, None),), metavar="N")
    forecast_from: str | None = _setting(None, "--forecast-from", "with --monitor: a dataset of finished runs (e.g. a "
                                         "study's dataset/); a forecast of acquisition fitted to them is printed at "
                                         "every measuring step and written to OUT/monitor/live_forecast",
                                         metavar="DATASET")
    threads: int | None = _setting(None, "--threads", "torch intra-op CPU threads (default: 1 for models under 10M "
                                   "parameters, else the physical cores, shared among the processes torchrun "
                                   "started on the node)", admits=(Interval(int, 1, None), None))
    schedule_steps: int | None = _setting(None, "--horizon", "step at which the cosine reaches its floor (default: "
                                          "--steps); e.g. 2 x --steps, the recipe of `ckptgeo reproduce`, ends the run "
                                          "at 0.55-0.7 x --lr, more the larger the warm-up's share (4 x: 0.87-0.93 x)")

    @property
    def horizon(self) -> int:
        """The step at which the cosine reaches its floor (``schedule_steps``, or ``n_steps``)."""
        return self.n_steps if self.schedule_steps is None else self.schedule_steps


def field_defaults() -> dict:
    """``{field: default}`` of the fields of :class:`TrainConfig` that have one."""
    return _settings.defaults(TrainConfig)


def recipe_defaults() -> dict:
    """The optimisation settings a study shares (fields declared ``recipe``), at their defaults:
    ``{"batch_size": 128, "lr": 0.001, ...}``."""
    return {f.name: f.default for f, s in _settings.declared(TrainConfig) if s.recipe}


def cli_settings() -> list[tuple[str, str, dict]]:
    """The flags of the fields that have a default and a flag: ``(field, flag, argparse keywords)``
    (:func:`ckptgeo._settings.flag_keywords`: ``type``, ``default``, ``help``, ``choices`` ...), in field order."""
    return [(f.name, s.flag, _settings.flag_keywords(TrainConfig, f, s)) for f, s in _settings.declared(TrainConfig)
            if s.flag is not None and f.default is not dataclasses.MISSING]


def settings_record(config: TrainConfig) -> dict:
    """The settings as JSON-ready values (the manifest's ``config``)."""
    d = dataclasses.asdict(config)
    d["tasks"], d["levels"] = list(config.tasks), list(config.levels)
    return d


def validate_config(config: TrainConfig) -> None:
    """Check every setting of ``config``.

    Raises
    ------
    InvalidParameterError
        A setting outside its range, an unknown task, level or size, levels that do not match the tasks,
        a task level given twice, or a horizon or warm-up that does not fit the run.
    """
    validate_params(config, owner="TrainConfig")
    if isinstance(config.tasks, str) or not config.tasks:
        raise InvalidParameterError(f"The 'tasks' parameter of TrainConfig must be a non-empty tuple of task "
                                    f"names. Got {config.tasks!r}.", name="tasks", value=config.tasks)
    if isinstance(config.levels, (int, str)) or len(config.levels) != len(config.tasks):
        raise InvalidParameterError(f"The 'levels' parameter of TrainConfig must give one level per task "
                                    f"({len(config.tasks)}). Got {config.levels!r}.", name="levels",
                                    value=config.levels)
    pairs = list(zip(config.tasks, config.levels))
    for task, level in pairs:
        get_level(task, level)
    if len(set(pairs)) != len(pairs):
        raise InvalidParameterError(f"Task levels repeat in {pairs}.", name="tasks", value=config.tasks)
    get_size(config.size)
    if config.schedule_steps is not None and (isinstance(config.schedule_steps, bool)
                                              or not isinstance(config.schedule_steps, int)
                                              or config.schedule_steps < config.warmup_steps):
        raise InvalidParameterError(f"The 'schedule_steps' parameter of TrainConfig must be None or an int >= "
                                    f"warmup_steps ({config.warmup_steps}). Got {config.schedule_steps!r}.",
                                    name="schedule_steps", value=config.schedule_steps)
    if config.forecast_from is not None and not config.monitor:
        raise InvalidParameterError("--forecast-from forecasts from the live monitor's curves: give --monitor N too.",
                                    name="forecast_from", value=config.forecast_from)
    if config.warmup_steps > config.n_steps:
        raise InvalidParameterError(f"The 'warmup_steps' parameter ({config.warmup_steps}) exceeds 'n_steps' "
                                    f"({config.n_steps}).", name="warmup_steps", value=config.warmup_steps)
