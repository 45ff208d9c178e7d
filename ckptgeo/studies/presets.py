"""The studies ``ckptgeo reproduce`` runs: :class:`Preset` (which runs, how long, what is measured where),
the built-in :data:`PRESETS` (``smoke``, ``cpu``, ``paper``) and the shared training :data:`RECIPE`.

The training recipe (:data:`RECIPE`): AdamW at lr 1e-3, weight decay 0.1, batch 128, 100 warm-up steps,
then a cosine whose horizon is twice the run's budget, so the learning rate is still 0.55-0.7 of its peak
at the run's last step (0.56 for 4000 steps, 0.69 for 300): near its peak while the fast tasks acquire
and decaying while the slow ones climb, which lets them settle above the acquisition threshold. (Under a
near-constant rate modular-L1 on ``tiny`` hovered around 0.5 held-out accuracy: with a horizon four times a
3000-step budget it reached 0.52-0.55 by step 3000 without holding above 0.5 for three checkpoints; at a
constant rate without clipping it held 0.53-0.57 from step 2603 to 2877 and fell back to 0.475 at 3000.
Measurements under this recipe are in :mod:`ckptgeo.suites.tasks`.) Fresh items every batch. Each run's
manifest records the recipe (``recipe``), with the thread count and tokens per step.

The recipe's values are :class:`~ckptgeo.training.config.TrainConfig`'s defaults of the fields marked
``recipe`` (declared once there); only the horizon (:data:`HORIZON_FACTOR`) is the study's own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from ckptgeo.errors import InvalidParameterError
from ckptgeo.training.config import recipe_defaults

__all__ = ["Preset", "PRESETS", "RECIPE", "HORIZON_FACTOR", "get_preset"]

#: The optimisation shared by every run of a study (TrainConfig fields, at TrainConfig's defaults:
#: lr 1e-3, weight decay 0.1, batch 128, 100 warm-up steps, floor 0.1 x lr, clipping at 1.0);
#: ``schedule_steps`` is ``HORIZON_FACTOR`` x the run's steps.
RECIPE = recipe_defaults()
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
        measured at every one. Runs with the same budget share a checkpoint schedule; the presets put hard and
        easy settings on the same schedules (:data:`SCHEDULES`), so one within-schedule null serves both and
        their leads can be compared.
    n_samples : int
        Held-out items measured per suite.
    probe_checkpoints : int
        Checkpoints per run (evenly spread by index, first and last included) at which probes are fitted.
    model_metrics : tuple of str
        Whole-model measures (``hessian``, ``llc``, ``grad_rank`` ...), measured at ``model_checkpoints``
        checkpoints of the runs in ``model_runs``, spread over the schedule (the same grid for every run of a
        schedule, whatever its acquisition: :func:`ckptgeo.studies.plan.whole_model_checkpoints`).
    model_runs : tuple of (task, level, size)
        Runs that get the whole-model measures (all seeds); empty with ``model_runs_all``: every run.
    model_runs_all : bool
    model_checkpoints : int
    metric_options : mapping of measure -> {option: value}
        Settings of the whole-model measures (as ``--metric-option``), recorded in each row's ``settings``;
        measures not named keep their defaults.
    description : str
    settings_by_size : mapping of size -> tuple of (task, level)
        Sizes that train only these settings (default: every task x level).
    steps_by_size : mapping of size -> {task: {level: steps}}
        Budgets that differ from ``steps`` at a size.
    n_heldout : int
        Held-out items per run (never trained on); accuracy is measured on ``n_samples`` of them, probes on
        all of them.
    probe_min_class : int
        Probe target classes with fewer held-out items than this are dropped from the probe's items.
    n_permutations, n_noise_curves : int
        Work of the claim table's tests (permutations and bootstrap resamples; noise curves per run).
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
    settings_by_size: Mapping[str, tuple[tuple[str, int], ...]] = field(default_factory=dict)
    steps_by_size: Mapping[str, Mapping[str, Mapping[int, int]]] = field(default_factory=dict)
    n_heldout: int = 200
    probe_min_class: int = 5
    n_permutations: int = 999
    n_noise_curves: int = 100

    def settings(self, size: str) -> list[tuple[str, int]]:
        """The (task, level) settings trained at ``size``."""
        if size in self.settings_by_size:
            return list(self.settings_by_size[size])
        return [(t, lv) for t in self.tasks for lv in self.levels]

    def budget(self, task: str, level: int, size: str) -> int | None:
        """Training steps of (task, level) at ``size``."""
        return self.steps_by_size.get(size, {}).get(task, {}).get(level) or self.steps.get(task, {}).get(level)


_ALL = ("copy", "reverse", "compare", "parity", "addition", "modular", "sort", "multiplication")
_FAST = ("copy", "reverse", "compare", "sort", "parity")

#: Checkpoint schedules of the cpu preset: budgets fixed by task family, never by a setting's outcome, so that
#: hard and easy settings share each schedule (one within-schedule null serves both, and the hard-minus-easy
#: contrast of leads compares runs on one grid). ``short``: copy, reverse, compare (easy) and parity at level 1,
#: the five fast tasks at level 2 (hard), on tiny. ``long``: sort at level 1 (easy) beside the three slow tasks at
#: level 1 (hard), on tiny. ``larger``: the fast tasks and addition at level 1 on mini and small (parity the hard
#: one); modular and multiplication there keep 600 steps, for the collapse floor only (they are not acquired).
SCHEDULES = {"short": 600, "long": 3000, "larger": 300}
_CPU_STEPS = {
    "copy": {1: SCHEDULES["short"], 2: SCHEDULES["short"]}, "reverse": {1: SCHEDULES["short"], 2: SCHEDULES["short"]},
    "compare": {1: SCHEDULES["short"], 2: SCHEDULES["short"]}, "parity": {1: SCHEDULES["short"], 2: SCHEDULES["short"]},
    "sort": {1: SCHEDULES["long"], 2: SCHEDULES["short"]}, "addition": {1: SCHEDULES["long"]},
    "modular": {1: SCHEDULES["long"]}, "multiplication": {1: SCHEDULES["long"]},
}
_LARGER = {t: {1: SCHEDULES["larger"]} for t in _FAST + ("addition",)} | {"modular": {1: 600},
                                                                          "multiplication": {1: 600}}
#: Seeds of the studies: seed 0 was the pilot that fixed which settings are hard (ckptgeo.suites.tasks.PILOT_HARD), so it
#: is left out.
_SEEDS = (1, 2, 3)
#: Whole-model measures stopped by work, never by wall time: Lanczos products; SGLD chains x draws. The Lanczos
#: budget lets the top eigenvalue converge at every checkpoint (the smoke study's parity runs needed 4-34 products
#: at tol 1e-3, the most at step 16; 10 left 12 of 30 values unconverged); the LLC starts where the gradient alone
#: lowers it by at most 20 (``llc.max_gradient_bias``: there every negative value had 68-409, every kept one <= 14).
_HESSIAN = {"k": 1, "max_hvp": 60, "max_seconds": None}
_LLC_START = {"max_gradient_bias": 20.0}
_WORK = {"hessian": _HESSIAN, "llc": {"num_chains": 2, "num_draws": 100, "max_seconds": None, **_LLC_START}}

PRESETS: dict[str, Preset] = {
    # About 6 minutes on 2 idle cores (CI runs it as a slow test): 3 tasks x 3 seeds on tiny, one schedule of 300
    # steps for easy and hard alike (copy and compare trained 150 before the schedules were paired).
    "smoke": Preset(
        "smoke", ("copy", "compare", "parity"), (1,), ("tiny",), _SEEDS,
        {"copy": {1: 300}, "compare": {1: 300}, "parity": {1: 300}}, n_checkpoints=16, n_samples=100,
        probe_checkpoints=4, model_metrics=("hessian", "llc"), model_runs=(("parity", 1, "tiny"),),
        model_checkpoints=10,
        metric_options={"hessian": _HESSIAN,
                        "llc": {"num_chains": 1, "num_draws": 20, "max_seconds": None, **_LLC_START}},
        n_heldout=150, probe_min_class=5, n_permutations=199, n_noise_curves=30,
        description="3 tasks (copy, compare: easy; parity: hard) x level 1 x 3 seeds on tiny, one 300-step "
                    "schedule: 9 runs, about 6 minutes on 2 cores; checks the pipeline end to end, too small to "
                    "judge a claim"),
    # About 1.5 hours on 2 idle cores (`--dry-run`: 3.0 device-hours, 2026-12-04; small is 1.5 of them). Three
    # sizes give the across-size rows and the forecast's size split two smaller sizes to learn from.
    "cpu": Preset(
        "cpu", _ALL, (1, 2), ("tiny", "mini", "small"), _SEEDS, _CPU_STEPS, n_checkpoints=40, n_samples=200,
        probe_checkpoints=6, model_metrics=("hessian", "llc"),
        # whole-model measures on one schedule (short), easy and hard: one within-schedule null for both
        model_runs=(("copy", 1, "tiny"), ("parity", 1, "tiny"), ("reverse", 2, "tiny")), model_checkpoints=12,
        # probes: 10 items per class leaves 2 per class in each of the 5 test folds; modular's first answer
        # token (95 values, about 4 items each) is then not probed (reproduce.PROBE_MIN_COVERAGE). At 4 a class
        # its 58-class probe took minutes per checkpoint of a small run (measured 2026-12-01)
        metric_options=_WORK, n_heldout=400, probe_min_class=10,
        settings_by_size={
            "tiny": tuple((t, 1) for t in _ALL) + tuple((t, 2) for t in _FAST),
            "mini": tuple((t, 1) for t in _FAST + ("addition", "modular", "multiplication")),
            "small": tuple((t, 1) for t in _FAST + ("modular",))},
        # modular and multiplication at the larger sizes: long enough for the collapse floor, not for acquisition
        steps_by_size={"mini": _LARGER, "small": _LARGER},
        description="8 tasks at level 1 and 5 at level 2 on tiny (2 layers), 8 tasks on mini (4 layers), 6 on "
                    "small (6 layers), 3 seeds each: 81 runs, about 2 hours on 2 CPU cores"),
    "paper": Preset(
        "paper", _ALL, (1, 2, 3), ("tiny", "mini", "small", "medium", "large", "xl"), _SEEDS,
        {t: {1: 10000, 2: 20000, 3: 30000} for t in _ALL}, n_checkpoints=200, n_samples=500,
        probe_checkpoints=50, model_metrics=("grad_rank", "grad_cov_rank", "hessian", "llc"), model_runs_all=True,
        model_checkpoints=40, n_heldout=1000, probe_min_class=5,
        metric_options={"hessian": {"k": 1, "max_hvp": 40, "max_seconds": None},
                        "llc": {"num_chains": 4, "num_draws": 200, "max_seconds": None}},
        description="8 tasks x 3 levels x 6 sizes x 3 seeds: 432 runs, for GPUs"),
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
