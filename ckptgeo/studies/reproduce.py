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
    settings_by_size : mapping of size -> tuple of (task, level)
        Sizes that train only these settings (default: every task x level).
    steps_by_size : mapping of size -> {task: {level: steps}}
        Budgets that differ from ``steps`` at a size.
    n_heldout : int
        Held-out items per run (never trained on); accuracy is measured on ``n_samples`` of them, probes on
        all of them.
    probe_min_class : int
        Probe target classes with fewer held-out items than this are dropped from the probe's items.
    whole_model_window : float
        Whole-model measures are spread over checkpoints up to this multiple of the run's acquisition step
        (from the trainer's own held-out accuracy); over the whole run when not acquired.
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
    whole_model_window: float = 2.0
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

#: Budgets (steps) under :data:`RECIPE`: level 1 with a margin over the acquisition measured on ``tiny`` at
#: seed 0 (the pilot; tasks.py module docstring), level 2 twice level 1 for the fast tasks.
_CPU_STEPS = {
    "copy": {1: 300, 2: 600}, "reverse": {1: 300, 2: 600}, "compare": {1: 300, 2: 600},
    "parity": {1: 500, 2: 1000}, "sort": {1: 300, 2: 600}, "addition": {1: 1200, 2: 1000},
    "modular": {1: 4000, 2: 1000}, "multiplication": {1: 2000, 2: 1000},
}
#: Seeds of the studies: seed 0 was the pilot that fixed which settings are hard (claims.PILOT_HARD), so it
#: is left out.
_SEEDS = (1, 2, 3)
#: Whole-model measures stopped by work, never by wall time: Lanczos products; SGLD chains x draws.
_WORK = {"hessian": {"k": 1, "max_hvp": 20, "max_seconds": None}, "llc": {"num_chains": 2, "num_draws": 100,
                                                                   "max_seconds": None}}

PRESETS: dict[str, Preset] = {
    # About 5 minutes on 2 idle cores (CI runs it as a slow test): 3 tasks x 3 seeds on tiny, short budgets.
    "smoke": Preset(
        "smoke", ("copy", "compare", "parity"), (1,), ("tiny",), _SEEDS,
        {"copy": {1: 150}, "compare": {1: 150}, "parity": {1: 300}}, n_checkpoints=16, n_samples=100,
        probe_checkpoints=4, model_metrics=("hessian", "llc"), model_runs=(("parity", 1, "tiny"),),
        model_checkpoints=10,
        metric_options={"hessian": {"k": 1, "max_hvp": 10, "max_seconds": None},
                        "llc": {"num_chains": 1, "num_draws": 20, "max_seconds": None}},
        n_heldout=150, probe_min_class=5, n_permutations=199, n_noise_curves=30,
        description="3 tasks (copy, compare: easy; parity: hard) x level 1 x 3 seeds on tiny: 9 runs, about "
                    "5 minutes on 2 cores; checks the pipeline end to end, too small to judge a claim"),
    # Designed from steps/s measured on one thread of this machine (tiny 0.055 s, mini 0.26 s, small 0.57 s a
    # step): about 2 hours on 2 idle cores under `torchrun --nproc_per_node 2 ... --threads 1`.
    "cpu": Preset(
        "cpu", _ALL, (1, 2), ("tiny", "mini", "small"), _SEEDS, _CPU_STEPS, n_checkpoints=40, n_samples=200,
        probe_checkpoints=6, model_metrics=("hessian", "llc"),
        model_runs=(("copy", 1, "tiny"), ("parity", 1, "tiny"), ("addition", 1, "tiny")), model_checkpoints=12,
        metric_options=_WORK, n_heldout=400, probe_min_class=4,
        settings_by_size={
            "tiny": tuple((t, 1) for t in _ALL) + tuple((t, 2) for t in _FAST),
            "mini": tuple((t, 1) for t in _FAST + ("addition", "modular", "multiplication")),
            "small": tuple((t, 1) for t in _FAST + ("modular",))},
        # modular and multiplication at the larger sizes: long enough for the collapse floor, not for acquisition
        steps_by_size={"mini": {"modular": {1: 600}, "multiplication": {1: 600}}, "small": {"modular": {1: 600}}},
        description="8 tasks at level 1 and 5 at level 2 on tiny (2 layers), 8 tasks on mini (4 layers), 6 on small "
                    "(6 layers), 3 seeds each: 81 runs, about 2 hours on 2 CPU cores"),
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
                       n_heldout=max(preset.n_heldout, preset.n_samples), device=device, **recipe)


# ---------------------------------------------------------------------------------------------- estimate

def _bench_size(size: str, device: str, n_samples: int, *, steps: int = 3, threads: int | None = None) -> dict:
    """Measured seconds of one training step (batch 128 of modular-L1 items) and of one checkpoint's
    measurement (a forward pass over ``n_samples`` items, RankMe and probes per layer) for ``size``.

    On a CPU the seconds are this process's CPU time (``time.process_time``), which is what the work takes
    on an idle core whatever else the machine runs, under the thread count the runs use (the rule of
    :mod:`ckptgeo._threads`, or ``threads`` as ``--threads`` sets it); on a GPU, wall time after
    ``cuda.synchronize``."""
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
    with torch_threads(count_parameters(model), threads=threads):
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
    labels = np.arange(len(states)) % 10
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        probe(states.numpy()[:40], labels[:40])  # warm-up: the first fit pays scikit-learn's imports
    t0 = clock()
    rankme(states)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # an untrained model's states: the solver may stop at max_iter
        probe(states.numpy(), labels)
    per_layer = clock() - t0
    return {"size": size, "device": str(dev), "step_s": step_s, "forward_s": forward_s,
            "rankme_probe_per_layer_s": per_layer, "n_layers": n_layers, "steps_per_s": 1.0 / step_s}


def estimate(preset: str | Preset, *, device: str = "cpu", bench: Mapping[str, dict] | None = None,
             threads: int | None = None) -> dict:
    """Device-hours the preset needs, from steps per second measured here (one benchmark per size).

    Training: steps / measured steps per second. Measurement: per checkpoint, a forward pass for
    training's own evaluation (over ``n_heldout`` items) and one for the scan (``n_samples``); per probed
    checkpoint, RankMe and a probe per layer (scaled to ``n_heldout`` items). Whole-model measures, from their
    work budgets: a Hessian-vector product counted as two training steps, an SGLD step (batch 32) as a
    quarter of one; measures without a work budget in ``metric_options`` are left out.

    Parameters
    ----------
    threads : int, optional
        CPU threads per process (``--threads``); default on CPU: 1, the setting the estimate is stated for
        (CPU seconds of one thread; one process per core), since several threads' spinning on a busy machine
        counts as CPU time and inflated the estimate about 5x for ``small``.

    Returns
    -------
    dict
        ``bench`` (per size), ``train_hours``, ``scan_hours``, ``model_hours``, ``total_hours``, ``runs``,
        ``device``.
    """
    preset = get_preset(preset)
    if threads is None and device == "cpu":
        threads = 1
    if not bench:
        from ckptgeo.engine.plan import rank_device

        rank_device(device)  # a CUDA device that is not here: a clear error before any benchmark
    bench = dict(bench) if bench else {s: _bench_size(s, device, preset.n_samples, threads=threads)
                                       for s in preset.sizes}
    runs = plan_study(preset, "-")
    train_s = sum(r.steps * bench[r.size]["step_s"] for r in runs)
    held = max(preset.n_heldout, preset.n_samples)
    scan_s = sum(preset.n_checkpoints * bench[r.size]["forward_s"] * (1 + held / preset.n_samples)
                 + preset.probe_checkpoints * bench[r.size]["n_layers"] * bench[r.size]["rankme_probe_per_layer_s"]
                 * max(held / 128, 1.0) for r in runs)
    hessian = preset.metric_options.get("hessian", {}).get("max_hvp") or 0
    llc = preset.metric_options.get("llc", {})
    sgld = (llc.get("num_chains") or 0) * (llc.get("num_draws") or 0)
    model_s = sum(preset.model_checkpoints * bench[r.size]["step_s"]
                  * (2 * hessian * ("hessian" in r.model_metrics) + sgld / 4 * ("llc" in r.model_metrics))
                  for r in runs if r.model_metrics)
    return {"bench": bench, "train_hours": train_s / 3600, "scan_hours": scan_s / 3600, "model_hours": model_s / 3600,
            "total_hours": (train_s + scan_s + model_s) / 3600, "runs": len(runs), "device": device}


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
                     f"checkpoints (up to {preset.whole_model_window:g} x the acquisition step) of {len(with_model)} "
                     "run(s), stopped by work" + "".join(f"; {m} " + ", ".join(f"{k}={v}" for k, v in o.items())
                                                         for m, o in preset.metric_options.items()))
    return "\n".join(lines)


def _budgets(preset: Preset) -> str:
    return "; ".join(sorted({f"{r.task}-L{r.level} on {r.size}: {r.steps}" for r in plan_study(preset, "-")}))


def estimate_text(preset: str | Preset, est: dict) -> str:
    """An :func:`estimate` as text for ``--dry-run``."""
    preset = get_preset(preset)
    lines = [f"estimate on {est['device']} (measured steps/s, one benchmark per size"
             + ("; CPU seconds of one thread, i.e. an idle core):" if est["device"] == "cpu" else "):")]
    for s, b in est["bench"].items():
        lines.append(f"  {s:>7}: {b['steps_per_s']:8.1f} steps/s; forward of {preset.n_samples} items "
                     f"{b['forward_s']:.3f} s")
    lines.append(f"  training {est['train_hours']:.2f} h + measuring {est['scan_hours']:.2f} h + whole-model measures "
                 f"{est.get('model_hours', 0.0):.2f} h (from their work budgets) = {est['total_hours']:.2f} "
                 f"device-hours for {est['runs']} runs")
    if est["device"] == "cpu":
        wall_h = est["total_hours"] / 2
        lines.append(f"  on 2 idle cores (torchrun --nproc_per_node 2 ... --threads 1): about "
                     + (f"{wall_h:.1f} h" if wall_h >= 1 else f"{wall_h * 60:.0f} min") + " of wall time")
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
    from ckptgeo.engine.scan import scan

    scan(run.folder, out=dataset, metrics=("rankme", "behavior"), n_samples=preset.n_samples, device=device,
         seed=seed)
    manifest = json.loads((run.folder / "manifest.json").read_text(encoding="utf-8"))
    schedule = manifest["schedule"]
    subset = checkpoint_subset(schedule, preset.probe_checkpoints)
    suite, n_items = probe_suite(run, dataset.parent / "probe-suites", min_class=preset.probe_min_class)
    if n_items:
        scan(run.folder, out=dataset, metrics=("probe",), suites=[str(suite)], n_samples=n_items, device=device,
             seed=seed, revisions=",".join(f"step{s}" for s in subset))
    if run.model_metrics:
        subset = whole_model_checkpoints(manifest, preset.model_checkpoints, preset.whole_model_window)
        options = {m: dict(o) for m, o in preset.metric_options.items() if m in run.model_metrics}
        scan(run.folder, out=dataset, metrics=run.model_metrics, n_samples=preset.n_samples, device=device,
             seed=seed, revisions=",".join(f"step{s}" for s in subset), metric_options=options or None)


def probe_suite(run: StudyRun, folder: Path, *, min_class: int = 5) -> tuple[Path, int]:
    """Write the probe's items of a run: its held-out items labelled with the model's own target.

    The label is the first answer token exactly (what the model must emit at the read position, the first
    token the accuracy scores), not the suite's coarser ``label``; classes with fewer than ``min_class``
    items are dropped (stratified cross-validation needs several per class). The header records both.

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
    if not keep or len({lab for _, lab in keep}) < 2:
        return path, 0
    header = dict(suite.header) | {"name": name, "n_items": len(keep), "probe_target": "first answer token",
                                   "probe_min_class": min_class, "probe_dropped_classes": dropped}
    write_jsonl(path, [dataclasses.replace(it, label=lab) for it, lab in keep], header=header)
    return path, len(keep)


def whole_model_checkpoints(manifest: Mapping, n: int, window: float = 2.0) -> list[int]:
    """``n`` checkpoints around a run's acquisition for the whole-model measures.

    Acquisition is found on the trainer's held-out accuracy (the manifest's ``history``, same rule as the
    analysis); the checkpoints are spread evenly by index over those up to ``window`` x the acquisition step
    (at least ``n`` of them), or over the whole run when it did not acquire.

    Examples
    --------
    >>> h = [{"step": s, "accuracy": {"t": float(s >= 40)}} for s in range(0, 200, 10)]
    >>> whole_model_checkpoints({"schedule": list(range(0, 200, 10)), "history": h, "chance": {"t": 0.01}}, 5)
    [0, 20, 40, 60, 80]
    """
    from ckptgeo.analysis.events import acquisition_step

    schedule = sorted(int(s) for s in manifest["schedule"])
    history = sorted(manifest.get("history") or [], key=lambda h: h["step"])
    chance = manifest.get("chance") or {}
    acq = None
    if history and history[0].get("accuracy"):
        suite = sorted(history[0]["accuracy"])[0]
        steps = [h["step"] for h in history if suite in (h.get("accuracy") or {})]
        accs = [h["accuracy"][suite] for h in history if suite in (h.get("accuracy") or {})]
        acq = acquisition_step(steps, accs, chance=chance.get(suite)).step
    pool = schedule
    if acq:
        inside = [s for s in schedule if s <= window * acq]
        pool = inside if len(inside) >= n else schedule[:max(n, len(inside))]
    return checkpoint_subset(pool, n)


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
    from ckptgeo.studies.claims import claim_table, rules, runs_table, spacing_table

    analysis = analyze(dataset)
    write_report(dataset, analysis=analysis, plots=plots)
    claims = claim_table(analysis.events, analysis.top_down, analysis.probe_lead, curves=analysis.curves,
                         accuracy=analysis.accuracy, probes=analysis.probes, config=analysis.config,
                         n_permutations=preset.n_permutations, n_resamples=preset.n_permutations,
                         n_noise_curves=preset.n_noise_curves)
    spacing = spacing_table(analysis.events, analysis.curves, analysis.accuracy, config=analysis.config)
    table = runs_table(analysis.events)
    grid_png = plot_grid(table, out / "figures" / "grid.png") if plots else None
    manifests = {}
    for r in runs:
        path = r.folder / "manifest.json"
        if path.is_file():
            manifests[r.name] = json.loads(path.read_text(encoding="utf-8"))
    report = _write_markdown(out, preset, claims, spacing, table, manifests, grid_png, seconds)
    preset_record = dataclasses.asdict(preset) | {
        "steps": {t: dict(v) for t, v in preset.steps.items()},
        "settings_by_size": {k: list(v) for k, v in preset.settings_by_size.items()},
        "steps_by_size": {k: {t: dict(v) for t, v in d.items()} for k, d in preset.steps_by_size.items()}}
    study = {"preset": preset_record, "runs": [r.name for r in runs], "seconds": seconds, "recipe": RECIPE,
             "horizon_factor": HORIZON_FACTOR, "rules": rules()}
    atomic_write_text(out / "study.json", json.dumps(study, indent=1, default=str))
    summary = dataset / "summary"
    summary.mkdir(parents=True, exist_ok=True)
    atomic_write_text(summary / "claims_rules.json", json.dumps({"preset": preset.name, "rules": rules(),
                                                                "recipe": RECIPE}, indent=1, default=str))
    claims.to_parquet(summary / "claims.parquet", index=False)
    spacing.to_parquet(summary / "claims_spacing.parquet", index=False)
    return StudyResult(out, report, claims=claims, analysis=analysis, seconds=seconds)


def _claims_view(claims):
    import math

    import pandas as pd

    def num(x, pct=True):
        return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else (f"{x:.0%}" if pct else f"{x:.3g}")

    return pd.DataFrame({
        "claim": claims["claim"], "source": claims["source"], "measured [95% interval]": claims["measured"],
        "null": [num(v, pct=i not in ("top_down",) and not str(i).startswith(("across", "floor")))
                 for i, v in zip(claims["id"], claims["null"])],
        "p": [num(v, pct=False) for v in claims["p_value"]],
        "verdict": claims["verdict"], "test": claims["test"], "reason": claims["reason"]})


def _spacing_view(spacing):
    import pandas as pd

    def rate(k, n, lo, hi):
        return f"{int(k)}/{int(n)} [{lo:.0%}, {hi:.0%}]" if n else "0/0"

    return pd.DataFrame({
        "every k-th checkpoint kept": spacing["factor"], "checkpoints per run (median)": spacing["checkpoints"],
        "hard runs precursor": [rate(*r) for r in spacing[["hard_k", "hard_n", "hard_low", "hard_high"]].to_numpy()],
        "easy runs precursor": [rate(*r) for r in spacing[["easy_k", "easy_n", "easy_low", "easy_high"]].to_numpy()]})


def _cannot_say(preset: Preset) -> str:
    from ckptgeo.training.sizes import get_size

    sizes = ", ".join(f"{s} ({get_size(s).n_parameters() / 1e6:.1f}M)" for s in preset.sizes)
    return f"""\
* **Whether the paper's own rules give the paper's numbers.** The paper's operational definitions (hard,
  precursor, thresholds, checkpoint spacing) are not available here; each verdict says whether *ckptgeo's*
  rules, written above and in `dataset/summary/claims_rules.json`, reproduce the claim on *this* grid.
* **Anything beyond these sizes**: {sizes}; the paper reaches 151M parameters and Pythia-2.8B. The Pythia row
  is not measured.
* **"Hard relative to capacity"** in the paper's sense: hard and easy are fixed per (task, level) from a pilot on
  `tiny` and applied at every size, so a setting easy for a larger model still counts as hard.
* **Causation.** A permutation p-value says a rate is higher than when acquisition is unrelated to the curve
  within a schedule; it cannot tell a precursor from two effects of one cause (the learning-rate schedule, the
  data), nor say that intervening on the geometry would move acquisition.
* **More than {len(preset.seeds)} seeds' worth of spread**, other optimisers or schedules (one recipe), or other
  machines: training is bitwise reproducible on one machine, not across CPUs.
* **The rest of a multi-token answer**: probes read the first answer token only.
* **Twelve rows, no correction**: each test is at alpha 0.05 on its own; across the rows about one false
  rejection in twenty is expected by chance.
* **Noise beyond iid**: the noise null draws independent Gaussian values per checkpoint; real curves are
  autocorrelated, which the permutation null keeps (it reuses the real curves).
"""


def _write_markdown(out: Path, preset: Preset, claims, spacing, runs, manifests: dict, grid_png,
                    seconds: dict) -> Path:
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
             "## Claims\n",
             "Each row: the paper's statement and where it comes from, the value measured here with its 95% "
             "interval, the value the same rule gives by chance (null), the test's p-value, and the verdict that "
             "test gives. Machine-readable: `dataset/summary/claims.parquet`.\n",
             _md(_claims_view(claims), max_rows=100),
             "## Checkpoint spacing as a factor\n",
             "The RankMe precursor rates again, with acquisition found again, when only every k-th checkpoint of "
             "each run is kept (the first and last always). A verdict that moves with k depends on the spacing.\n",
             _md(_spacing_view(spacing), max_rows=20),
             "## What this study cannot say\n", _cannot_say(preset),
             "## How the verdicts are reached\n", claims_mod.DEFINITIONS,
             "Every rule and threshold: `study.json` (`rules`) and `dataset/summary/claims_rules.json`.\n",
             "## Recipe\n",
             f"AdamW, lr {RECIPE['lr']:g}, weight decay {RECIPE['weight_decay']:g} (matrices and embeddings), batch "
             f"{RECIPE['batch_size']} fresh items per step, {RECIPE['warmup_steps']} warm-up steps, then a cosine to "
             f"{RECIPE['min_lr_ratio']:g} x lr at {HORIZON_FACTOR} x the run's steps (so the lr ends each run "
             "at 0.55-0.7 of its peak, the warm-up's share of the horizon making up the difference); gradient "
             f"clipping at 1.0. Seeds {', '.join(map(str, preset.seeds))}. Steps: " + _budgets(preset)
             + ". Every run's `manifest.json` holds its `recipe`.\n"]
    if grid_png is not None:
        parts += ["## The grid at a glance\n", f"![grid]({Path(grid_png).relative_to(out).as_posix()})\n",
                  "Each cell is one run (task x level, per size): colour = RankMe status at the summary layer; the "
                  "number is the precursor gap in steps (acquisition - recovery onset), or the status.\n"]
    parts += ["## Runs\n", _md(runs.drop(columns=["n_parameters", "suite", "config_hash"], errors="ignore"),
                                max_rows=400),
              "Per-run RankMe/accuracy figures and every table: `dataset/report.md`, `dataset/figures/`.\n"]
    path = out / "reproduction.md"
    atomic_write_text(path, "\n".join(parts))
    return path
