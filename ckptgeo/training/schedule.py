"""When a run checkpoints and how fast it learns: the checkpoint schedule, the learning-rate schedule,
the optimiser, and the recipe a manifest records."""

from __future__ import annotations

import math
from typing import Sequence

from ckptgeo.errors import InvalidParameterError
from ckptgeo.suites.items import Item
from ckptgeo.training.config import TrainConfig

__all__ = ["checkpoint_steps", "lr_factor", "tokens_per_step", "build_optimizer", "recipe_record"]


def checkpoint_steps(n_steps: int, n_checkpoints: int) -> tuple[int, ...]:
    """The checkpoint schedule: step 0, powers of two up to the regular interval, then every interval.

    The interval is the smallest one that keeps the count at or below ``n_checkpoints``; step 0 and
    ``n_steps`` are always in. With ``n_checkpoints > n_steps`` every step is a checkpoint.

    Parameters
    ----------
    n_steps : int
        Training steps (>= 1).
    n_checkpoints : int
        Largest number of checkpoints wanted (>= 2).

    Returns
    -------
    tuple of int
        Sorted steps, in optimiser updates.

    Raises
    ------
    InvalidParameterError
        ``n_steps < 1`` or ``n_checkpoints < 2``.

    Examples
    --------
    >>> checkpoint_steps(100, 12)
    (0, 1, 2, 4, 8, 15, 30, 45, 60, 75, 90, 100)
    >>> len(checkpoint_steps(1000, 100))
    96
    """
    if isinstance(n_steps, bool) or not isinstance(n_steps, int) or n_steps < 1:
        raise InvalidParameterError(f"The 'n_steps' parameter must be an int >= 1. Got {n_steps!r}.",
                                    name="n_steps", value=n_steps)
    if isinstance(n_checkpoints, bool) or not isinstance(n_checkpoints, int) or n_checkpoints < 2:
        raise InvalidParameterError(f"The 'n_checkpoints' parameter must be an int >= 2. Got {n_checkpoints!r}.",
                                    name="n_checkpoints", value=n_checkpoints)
    if n_checkpoints > n_steps:
        return tuple(range(n_steps + 1))
    for interval in range(1, n_steps + 1):
        steps = {0, n_steps, *range(interval, n_steps + 1, interval)}
        p = 1
        while p < interval:
            steps.add(p)
            p *= 2
        if len(steps) <= n_checkpoints:
            return tuple(sorted(steps))
    return (0, n_steps)  # pragma: no cover  (interval = n_steps always fits)


def lr_factor(config: TrainConfig, step: int) -> float:
    """The learning rate at ``step`` as a fraction of ``config.lr``: linear warm-up, then cosine to the horizon.

    Examples
    --------
    >>> import dataclasses
    >>> c = TrainConfig(tasks=("copy",), levels=(1,), out="", n_steps=1000, warmup_steps=100)
    >>> round(lr_factor(c, 999), 3), round(lr_factor(dataclasses.replace(c, schedule_steps=4000), 999), 3)
    (0.1, 0.887)
    """
    warm, total, floor = config.warmup_steps, config.horizon, config.min_lr_ratio
    if warm and step < warm:
        return (step + 1) / warm
    progress = (step - warm) / max(1, total - warm)
    return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


def tokens_per_step(config: TrainConfig, heldout: dict[str, Sequence[Item]]) -> int:
    """Tokens of one optimiser step: ``batch_size`` x the mean sequence length (prompt + answer tokens) of
    the run's tasks, from their held-out items (exact for fixed-length task levels; the mean where the
    length is drawn from a range). Padding is not counted."""
    lengths = [len(it.prompt.split()) + len(it.target.split()) for items in heldout.values() for it in items]
    return int(round(config.batch_size * sum(lengths) / max(len(lengths), 1)))


def build_optimizer(model, config: TrainConfig, torch):
    """AdamW (weight decay on matrices and embeddings only) and its :func:`lr_factor` scheduler."""
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": config.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=config.lr)
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda step: lr_factor(config, step))


def recipe_record(config: TrainConfig, per_step: int, torch) -> dict:
    """What a reader of the manifest needs to redo the run's optimisation, in one place."""
    return {"optimizer": "AdamW", "lr": config.lr, "weight_decay": config.weight_decay,
            "batch_size": config.batch_size, "warmup_steps": config.warmup_steps,
            "schedule": "linear warm-up, then cosine to min_lr_ratio * lr at schedule_horizon",
            "schedule_horizon": config.horizon, "min_lr_ratio": config.min_lr_ratio, "n_steps": config.n_steps,
            "lr_at_last_step": config.lr * lr_factor(config, config.n_steps - 1), "grad_clip": config.grad_clip,
            "items": "fresh every batch, seeded by (seed, step); held-out prompts excluded",
            "tokens_per_step": per_step, "threads": torch.get_num_threads()}
