"""What is known about a run at each checkpoint: the two feature sets of the forecast.

Every feature at checkpoint ``i`` is computed from checkpoints ``0..i`` only (a forecast made at ``i`` could
have been made live). Two sets, always side by side:

``behaviour``
    accuracy's progress from chance to the acquisition threshold, ``(acc - chance) / (threshold - chance)``,
    with its 95% Wilson interval's ends (where the item count is known), its running maximum, its slope per
    unit of the clock over the last two checkpoints, the number of consecutive checkpoints above the threshold
    (a window being filled), the clock (``plan_clock``: ``log1p`` of the step in thousandths of the run's planned
    steps, :func:`ckptgeo.forecasting.data.plan_clock`), where recorded ``log1p(tokens)`` (off by default: inside
    one training grid it is the step times a constant), and the task loss: ``log`` of the loss (nats per answer
    token) at the last measured checkpoint, its slope per unit of the clock over the last two checkpoints, and
    ``loss_known`` (1 once a loss has been measured). A run without a loss curve (a dataset written before the
    scan recorded it) has 0 in all three: ``loss_known`` tells the model the other two say nothing.
``geometry``
    the behaviour set plus, for three layers at fixed relative depth (the first block, the middle block, the deepest
    layer: the same three for every model size), RankMe's log ratio to its first value, the fall to its running
    minimum as a fraction of the first value, the fraction of that fall regained since (recovery), its log slope per
    unit of the clock over the last two checkpoints, and ``log1p`` of the checkpoints since the collapse (running
    minimum, counted once RankMe fell by ``min_drop``) and since the recovery onset (``recovery`` of the fall
    regained); and, where the scan measured them (the ``compare`` table), the cross-checkpoint measures known at
    checkpoint ``i``: linear CKA of the summary layer against the previous and the first checkpoint, the whole
    model's relative weight distance from them, and ``cross_known`` (1 once any of them has been measured). A
    checkpoint not measured carries the last value forward; before the first, and in a run without them, all five
    are 0 (``cross_known`` 0).

:func:`null_copy` replaces every run's geometry by noise drawn from one distribution for all runs (the mean and
standard deviation pooled over every run's curves): geometry that says nothing of the run's task, size or
acquisition, on which the geometry set must show no skill. :func:`sibling_copy` gives every run the geometry of
another seed of its own setting: geometry that knows the run's task, size and schedule but not its timing, the
level the geometry must beat before it is said to forecast *this* run's acquisition.
"""

from __future__ import annotations

import math

import numpy as np

from ckptgeo.events.records import DEFAULT_MIN_DROP, DEFAULT_RECOVERY
from ckptgeo.forecasting.data import CROSS_CURVES, RunCurves, plan_clock

__all__ = ["FEATURE_SETS", "behaviour_names", "geometry_names", "feature_names", "run_features", "null_copy",
           "sibling_copy"]

#: the two feature sets, in the order every table shows them
FEATURE_SETS = ("behaviour", "geometry")
#: layers read, by relative depth (first block, middle block, deepest layer)
_DEPTHS = ("first", "middle", "last")
_PER_LAYER = ("log_ratio", "drop", "recovered", "slope", "since_collapse", "since_onset")
_Z = 1.959963984540054  # 95% two-sided normal quantile


def behaviour_names(with_tokens: bool = False) -> list[str]:
    names = ["progress", "progress_low", "progress_high", "progress_max", "progress_slope", "above_run", "plan_clock"]
    return names + (["log_tokens"] if with_tokens else []) + ["log_loss", "loss_slope", "loss_known"]


def geometry_names() -> list[str]:
    return [f"rankme_{d}_{f}" for d in _DEPTHS for f in _PER_LAYER] + list(CROSS_CURVES) + ["cross_known"]


def feature_names(feature_set: str, with_tokens: bool = False) -> list[str]:
    """The columns of ``feature_set`` ("behaviour" or "geometry")."""
    return behaviour_names(with_tokens) + (geometry_names() if feature_set == "geometry" else [])


def _wilson(acc: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n = np.where(np.isfinite(n) & (n > 0), n, np.nan)
    denom = 1 + _Z ** 2 / n
    centre = (acc + _Z ** 2 / (2 * n)) / denom
    half = _Z * np.sqrt(acc * (1 - acc) / n + _Z ** 2 / (4 * n ** 2)) / denom
    lo, hi = centre - half, centre + half
    return np.where(np.isfinite(lo), lo, acc), np.where(np.isfinite(hi), hi, acc)


def _slope(y: np.ndarray, x: np.ndarray, lag: int = 2) -> np.ndarray:
    out = np.zeros_like(y)
    for i in range(1, len(y)):
        j = max(0, i - lag)
        dx = x[i] - x[j]
        out[i] = (y[i] - y[j]) / dx if dx > 0 and np.isfinite(y[i]) and np.isfinite(y[j]) else 0.0
    return out


def _fill(v: np.ndarray) -> np.ndarray:
    """Carry the last measured value forward over unmeasured checkpoints (causal)."""
    v = np.asarray(v, float).copy()
    last = math.nan
    for i in range(len(v)):
        if np.isfinite(v[i]):
            last = v[i]
        else:
            v[i] = last
    return v


def _loss_features(loss: np.ndarray | None, x: np.ndarray) -> np.ndarray:
    """(n_checkpoints, 3) causal features of the task loss: log loss, its slope per unit of the clock ``x``, known."""
    out = np.zeros((len(x), 3))
    if loss is None:
        return out
    v = _fill(np.where(np.asarray(loss, float) > 0, loss, np.nan))
    known = np.isfinite(v)
    logv = np.log(np.where(known, v, 1.0))
    out[:, 0] = logv
    out[:, 1] = np.where(known, _slope(np.where(known, logv, np.nan), x), 0.0)
    out[:, 2] = known
    return out


def _cross_features(cross: dict, n: int) -> np.ndarray:
    """(n_checkpoints, len(CROSS_CURVES) + 1) causal cross-checkpoint features: each curve carried forward (0
    before its first value, or absent), and whether any has been measured yet."""
    out = np.zeros((n, len(CROSS_CURVES) + 1))
    for j, name in enumerate(CROSS_CURVES):
        if name in cross:
            v = _fill(cross[name])
            out[:, j] = np.where(np.isfinite(v), v, 0.0)
            out[:, -1] = np.maximum(out[:, -1], np.isfinite(v))
    return out


def _layer_features(v: np.ndarray, x: np.ndarray, min_drop: float, recovery: float) -> np.ndarray:
    """(n_checkpoints, 6) causal features of one RankMe curve (zeros before its first measured value)."""
    n = len(v)
    out = np.zeros((n, len(_PER_LAYER)))
    v = _fill(v)
    ok = np.isfinite(v) & (v > 0)
    if not ok.any():
        return out
    first_i = int(np.argmax(ok))
    v0 = v[first_i]
    run_min, min_i, onset_i = v0, first_i, None
    for i in range(first_i, n):
        if v[i] < run_min:
            run_min, min_i, onset_i = v[i], i, None
        fall = v0 - run_min
        regained = (v[i] - run_min) / fall if fall > 0 else 0.0
        collapsed = fall > min_drop * v0
        if collapsed and onset_i is None and i > min_i and regained >= recovery:
            onset_i = i
        out[i, 0] = math.log(v[i] / v0)
        out[i, 1] = fall / v0
        out[i, 2] = min(regained, 2.0)
        out[i, 4] = math.log1p(i - min_i) if collapsed else 0.0
        out[i, 5] = math.log1p(i - onset_i + 1) if onset_i is not None else 0.0
    logv = np.log(np.where(np.isfinite(v) & (v > 0), v, v0))
    out[:, 3] = _slope(logv, x)
    out[:first_i] = 0.0
    return out


def _pick_layers(layers: dict) -> list[int | None]:
    if not layers:
        return [None, None, None]
    ks = sorted(layers)
    return [ks[0], ks[(len(ks) - 1) // 2], ks[-1]]


def run_features(run: RunCurves, feature_set: str, *, min_drop: float = DEFAULT_MIN_DROP, recovery: float = DEFAULT_RECOVERY,
                 with_tokens: bool = False) -> np.ndarray:
    """The features of ``run`` at each of its checkpoints.

    Returns
    -------
    ndarray of shape (n_checkpoints, len(feature_names(feature_set, with_tokens)))
        Row ``i`` uses checkpoints ``0..i`` only; finite everywhere (a missing layer gives zeros).
    """
    acc = np.clip(np.asarray(run.accuracy, float), 0.0, 1.0)
    chance = run.chance if math.isfinite(run.chance) else 0.0
    span = max(run.threshold - chance, 1e-6)
    lo, hi = _wilson(acc, np.asarray(run.n_items, float))
    x = plan_clock(run.steps, run.plan)
    prog = np.clip((acc - chance) / span, -1.0, 2.0)
    above = np.zeros(len(acc))
    for i in range(len(acc)):
        above[i] = (above[i - 1] + 1 if i else 1) if acc[i] > run.threshold else 0
    cols = [prog, np.clip((lo - chance) / span, -1, 2), np.clip((hi - chance) / span, -1, 2),
            np.maximum.accumulate(prog), _slope(prog, x), np.minimum(above, run.window), x]
    if with_tokens:
        t = run.tokens if run.tokens is not None else np.full(len(acc), np.nan)
        cols.append(np.log1p(np.where(np.isfinite(t), t, 0.0)))
    feats = np.column_stack([*cols, _loss_features(run.loss, x)])
    if feature_set == "geometry":
        per = [(_layer_features(run.rankme[k], x, min_drop, recovery) if k is not None
                else np.zeros((len(acc), len(_PER_LAYER)))) for k in _pick_layers(run.rankme)]
        feats = np.column_stack([feats, *per, _cross_features(run.cross, len(acc))])
    elif feature_set != "behaviour":
        raise ValueError(f"feature_set must be one of {FEATURE_SETS}; got {feature_set!r}")
    return np.nan_to_num(feats, nan=0.0, posinf=0.0, neginf=0.0)


def null_copy(runs: list[RunCurves], *, seed: int = 0) -> list[RunCurves]:
    """``runs`` with every RankMe and cross-checkpoint curve (so every geometry feature: RankMe ratios, slopes,
    collapse and onset counters, CKA, weight distance) replaced by independent Gaussian noise at the mean and
    standard deviation pooled over all runs' curves of that kind (RankMe over every run and layer; each
    cross-checkpoint measure by name over every run), on the checkpoints the run measured, floored as the measure is
    (RankMe at 1e-3, the others at 0). Every run's geometry is drawn from one distribution: it says nothing of the
    run's task, size or acquisition. Accuracy and loss (behaviour) are kept.

    Two nulls that leak, and why they are not used: noise at each curve's *own* mean and sd keeps the run's level
    and spread, which differ by task and size (the test then "finds" skill by recognising the task); another run's
    curves, shuffled among the runs of a schedule, carry the donor's task, and any rule for picking donors (another
    task, or not the run itself) ties the donor's task to the run's own.
    """
    import dataclasses

    rng = np.random.default_rng(seed)

    def pooled(curves) -> tuple[float, float]:
        v = np.concatenate([np.asarray(c, float) for c in curves] or [np.ones(1)])
        v = v[np.isfinite(v)]
        return (float(np.mean(v)), float(np.std(v))) if len(v) else (1.0, 0.0)

    rk = pooled([v for r in runs for v in r.rankme.values()])
    names = sorted({n for r in runs for n in r.cross})
    cx = {name: pooled([r.cross[name] for r in runs if name in r.cross]) for name in names}

    def noise(v, mu_sd, floor):
        ok = np.isfinite(np.asarray(v, float))
        return np.where(ok, np.maximum(rng.normal(mu_sd[0], mu_sd[1], size=len(ok)), floor), np.nan)

    return [dataclasses.replace(run, rankme={k: noise(v, rk, 1e-3) for k, v in run.rankme.items()},
                                cross={k: noise(v, cx[k], 0.0) for k, v in run.cross.items()}) for run in runs]


def setting_of(run: RunCurves) -> tuple:
    """What two runs must share for one's geometry to stand in for the other's: task, level, size, suite,
    difficulty, the checkpoint steps and the measured layers (only the seed may differ)."""
    return (run.task, run.level, run.size, run.key[1], run.difficulty, tuple(np.asarray(run.steps).tolist()),
            tuple(sorted(run.rankme)), tuple(sorted(run.cross)))


def sibling_copy(runs: list[RunCurves], *, seed: int = 0) -> tuple[list[RunCurves], np.ndarray]:
    """``runs`` with each run's RankMe and cross-checkpoint curves taken from a *sibling*: another seed's run of
    the same setting (:func:`setting_of`), so its geometry knows the task, size and schedule but not this run's
    timing. Within a setting the runs are put in a random order (``seed``) and each takes the next one's curves
    (a cycle: every run gives and takes once). Accuracy and loss are the run's own.

    Returns
    -------
    copies : list of RunCurves, len(runs)
        A run without a sibling (a setting with one seed, or seeds of unknown number) keeps its own curves.
    swapped : ndarray of bool, shape (len(runs),)
        Which runs took a sibling's curves: only these say anything in a comparison with the run's own geometry.
    """
    import dataclasses

    rng = np.random.default_rng(seed)
    groups: dict[tuple, list[int]] = {}
    for i, r in enumerate(runs):
        if r.seed is not None:
            groups.setdefault(setting_of(r), []).append(i)
    copies, swapped = list(runs), np.zeros(len(runs), bool)
    for members in groups.values():
        if len({runs[i].seed for i in members}) < len(members) or len(members) < 2:
            continue   # one seed, or two runs with one seed: no sibling to take from
        order = [members[j] for j in rng.permutation(len(members))]
        for a, b in zip(order, order[1:] + order[:1]):
            copies[a] = dataclasses.replace(runs[a], rankme=dict(runs[b].rankme), cross=dict(runs[b].cross))
            swapped[a] = True
    return copies, swapped
