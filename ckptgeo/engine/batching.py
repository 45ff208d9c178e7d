"""The forward batch size a scan uses when none is given: from the GPU's free memory, or measured on the CPU.

On a GPU the batch is as large as half the free memory holds (:func:`~ckptgeo.engine.forward.auto_batch_size`).
On a CPU the fastest batch depends on the model's width, the suite's lengths and the cores, so it is
measured: at the first revision a scan measures, each candidate of :data:`CPU_BATCH_CANDIDATES` (those the
machine's available memory holds) runs the suite's first items, and the one costing the fewest CPU seconds
per item is kept for the rest of the scan (:func:`choose_batch_size`). CPU seconds (user + system of the
whole process, every thread) are what the work costs; wall seconds on a shared machine also count the time
spent waiting for a core, which another process decides. The batch size changes speed and memory, never
values (items are scored one by one; RankMe and accuracy agree across batch sizes to float rounding). The
choice and its measurements are logged and written into the run's record (``runs/<hash>.json``,
``runtime.batch_sizes``); a resumed scan on a CPU takes the recorded batch sizes instead of measuring again,
so every revision of a dataset is measured the same way (:func:`recorded_batch_sizes`).

Cost: one untimed sweep (the largest candidate's buffers allocated once) and one timed sweep per candidate
over at most ``max(CPU_BATCH_CANDIDATES)`` items: for a 200-item suite, about 1.3 sweeps once per scan and
suite. ``--batch-size`` skips it.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass, field
from typing import Callable

from ckptgeo.metrics._autodiff import available_host_bytes

__all__ = ["BatchChoice", "CPU_BATCH_CANDIDATES", "CPU_TOLERANCE", "choose_batch_size", "measure_batch_size",
           "recorded_batch_sizes", "process_cpu_seconds"]

log = logging.getLogger(__name__)

#: batch sizes (items per forward batch) timed on a CPU; at most the largest of them items are timed
CPU_BATCH_CANDIDATES = (16, 32, 64)
#: the smallest candidate within this share of the cheapest is kept (less memory; closer costs are noise)
CPU_TOLERANCE = 0.05


def process_cpu_seconds() -> float:
    """User + system CPU seconds of this process so far, every thread (``os.times``)."""
    t = os.times()
    return t.user + t.system


@dataclass(frozen=True)
class BatchChoice:
    """The forward batch size of one suite and why.

    ``batch_size``: items per batch. ``chosen_by``: ``"--batch-size"``, ``"GPU memory"``, ``"measured"``,
    ``"too few items"`` (every candidate is one batch) or ``"available memory"`` (it holds no larger batch).
    ``suite``: the suite's name. ``revision``: the revision it was measured at. ``items``: items timed per
    candidate. ``cpu_seconds_per_item``: CPU seconds per item by candidate (empty unless measured).
    """

    batch_size: int
    chosen_by: str
    suite: str = ""
    revision: str = ""
    items: int = 0
    cpu_seconds_per_item: dict[int, float] = field(default_factory=dict)

    def record(self) -> dict:
        """As written into the run's record (JSON keys are text)."""
        out = dataclasses.asdict(self)
        out["cpu_seconds_per_item"] = {str(b): round(s, 6) for b, s in self.cpu_seconds_per_item.items()}
        return out

    def describe(self) -> str:
        """One line for the log, e.g. ``batch size 32 for suite x: measured at step0 on 64 items, CPU seconds
        per item 16: 0.120, 32: 0.081, 64: 0.083 (the smallest within 5% of the cheapest)``."""
        head = f"batch size {self.batch_size} for suite {self.suite}: "
        if self.chosen_by != "measured":
            return head + self.chosen_by
        costs = ", ".join(f"{b}: {s:.4g}" for b, s in self.cpu_seconds_per_item.items())
        return (head + f"measured at {self.revision} on {self.items} items, CPU seconds per item {costs} (the "
                f"smallest within {CPU_TOLERANCE:.0%} of the cheapest)")


def measure_batch_size(sweep: Callable[[int], object], candidates: tuple[int, ...], n_items: int, *,
                       clock: Callable[[], float] = process_cpu_seconds) -> tuple[int, dict[int, float]]:
    """Time ``sweep(b)`` for each candidate batch size ``b`` and keep the cheapest per item.

    Parameters
    ----------
    sweep : callable
        Runs the same ``n_items`` items at batch size ``b``.
    candidates : tuple of int
        Batch sizes, at least one, ascending.
    n_items : int
        Items each sweep runs (the cost is per item).
    clock : callable
        Seconds so far (default: this process's CPU seconds; a test passes a fake one).

    Returns
    -------
    (int, dict of int to float)
        The smallest candidate costing at most (1 + :data:`CPU_TOLERANCE`) times the cheapest, and the
        seconds per item by candidate. The first call (at the largest candidate) is not timed: it pays the
        one-time costs (the allocator growing to the largest batch's buffers).
    """
    sweep(candidates[-1])
    costs = {}
    for b in candidates:
        t0 = clock()
        sweep(b)
        costs[b] = (clock() - t0) / max(n_items, 1)
    best = min(costs.values())
    return min(b for b in candidates if costs[b] <= best * (1 + CPU_TOLERANCE)), costs


def choose_batch_size(model, ps, config, *, revision: str = "", with_probes: bool = True,
                      clock: Callable[[], float] = process_cpu_seconds, free_bytes: int | None = None) -> BatchChoice:
    """The forward batch size of suite ``ps`` for a scan with ``config`` (its ``batch_size``, ``device``,
    ``position`` and ``share_prefix``), at the revision whose ``model`` is loaded.

    ``config.batch_size`` set: that. On a GPU: :func:`~ckptgeo.engine.forward.auto_batch_size`. On a CPU: the
    candidates of :data:`CPU_BATCH_CANDIDATES`, each capped at the suite's items and at what half of
    ``free_bytes`` (default: :func:`ckptgeo.metrics._autodiff.available_host_bytes`) holds at the suite's longest item, timed on the suite's
    first items (:func:`measure_batch_size` with ``clock``); when the caps leave one candidate, nothing is
    timed.
    """
    import torch

    from ckptgeo.engine.forward import auto_batch_size, run_suite

    name = ps.suite.name
    if config.batch_size is not None:
        return BatchChoice(config.batch_size, "--batch-size", name)
    device = torch.device(config.device)
    if device.type == "cuda":
        return BatchChoice(auto_batch_size(model, ps, device), "GPU memory", name)
    n = len(ps.items)
    free = available_host_bytes() if free_bytes is None else free_bytes
    cap = auto_batch_size(model, ps, device, free_bytes=free) if free is not None else max(n, 1)  # <= items
    candidates = tuple(sorted({min(b, cap) for b in CPU_BATCH_CANDIDATES}))
    if len(candidates) == 1:
        return BatchChoice(candidates[0], "too few items" if cap >= n else "available memory", name)
    trial = dataclasses.replace(ps, items=ps.items[:candidates[-1]])

    def sweep(b: int):
        run_suite(model, trial, batch_size=b, position=config.position, device=device, revision=revision,
                  with_probes=with_probes, share_prefix=config.share_prefix,
                  precision_kind=getattr(config, "precision", "fp32"))   # a MonitorConfig has none: fp32

    with torch.no_grad():
        chosen, costs = measure_batch_size(sweep, candidates, len(trial.items), clock=clock)
    return BatchChoice(chosen, "measured", name, revision, len(trial.items), costs)


def recorded_batch_sizes(runtime: dict, device) -> dict[str, BatchChoice]:
    """The measured batch sizes of a scan's record (``runtime["batch_sizes"]`` of ``runs/<hash>.json``), by
    suite name, for a scan resumed on ``device``: a CPU's measured choices (others are not reused; a GPU
    reads its free memory again). Records that do not parse are ignored."""
    import torch

    if torch.device(device).type == "cuda":
        return {}
    out = {}
    for record in runtime.get("batch_sizes") or []:
        try:
            costs = {int(b): float(s) for b, s in (record.get("cpu_seconds_per_item") or {}).items()}
            choice = BatchChoice(**{**record, "cpu_seconds_per_item": costs})
        except (TypeError, ValueError, AttributeError):
            continue
        if choice.chosen_by == "measured" and isinstance(choice.batch_size, int) and choice.batch_size >= 1:
            out[choice.suite] = choice
    return out
