"""The runs a forecast reads: one accuracy curve per (model, suite, config_hash), with its task loss, RankMe
and cross-checkpoint curves.

:func:`runs_from_tables` turns an analysis's tables (``accuracy``, ``curves``, ``acquisitions`` and, where the
dataset has cross-checkpoint measures, ``compare``) into :class:`RunCurves`, each on its accuracy grid, with its
acquisition (the analysis's own rule, from the ``acquisitions`` table) and its identity (task, level, size, seed,
difficulty class) for the held-out splits. Curves are read through the curve contract
(:mod:`ckptgeo.events.curves`): RankMe's preferred variant, CKA at its summary layer, the run identity; runs
with no data are left out. Nothing here fits or scores.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ckptgeo.events import curves as contract
from ckptgeo.events.curves import model_size, with_defaults

__all__ = ["RunCurves", "CROSS_CURVES", "PLAN_UNITS", "plan_clock", "runs_from_tables", "run_identity", "cross_curves"]

#: the forecast's clock counts a run's planned steps as this many units (so a run planned for this many steps
#: has the clock ``log1p(step)``)
PLAN_UNITS = 1000

#: the cross-checkpoint curves a run may carry (``compare`` table, partners ``previous`` and ``first`` only: a
#: ``reference`` partner such as the last checkpoint is not known during training): linear CKA of the summary
#: layer's hidden states (:func:`ckptgeo.events.curves.summary_rows`) and the whole model's relative weight
#: distance (``block == "model"``)
CROSS_CURVES = ("cka_previous", "cka_first", "weight_distance_previous", "weight_distance_first")


@dataclass
class RunCurves:
    """One run's curves on its accuracy grid.

    Attributes
    ----------
    key : tuple of str
        (model, suite, config_hash) of the behaviour curve.
    steps : ndarray of int, shape (n_checkpoints,)
        Training steps, increasing.
    accuracy : ndarray of float, shape (n_checkpoints,)
    n_items : ndarray of float, shape (n_checkpoints,)
        Items behind each accuracy (NaN where unknown).
    chance, threshold : float
        Chance accuracy (NaN where unknown) and the acquisition threshold used.
    rankme : dict of int to ndarray
        Per layer, RankMe on ``steps`` (NaN where that checkpoint was not measured); layer 0 left out.
    acquisition_index : int or None
        Index in ``steps`` of the acquisition checkpoint; None when not acquired in the run (never, or censored).
    window : int
        Checkpoints above threshold that confirm an acquisition.
    task, level, size, seed, difficulty : identity for the held-out splits (level, seed: None where unknown);
        ``difficulty`` is the analysis's label (``L1``, or the user's); :attr:`difficulty_class` is hard / easy.
    size_order : float
        Orders sizes: the parameter count from the name, else the number of layers.
    tokens : ndarray of float, shape (n_checkpoints,)
    loss : ndarray of float, shape (n_checkpoints,), or None
        The task loss (nats per answer token, the behaviour table's ``loss`` rows) on ``steps`` (NaN where that
        checkpoint was not measured); None where the run has no loss curve (datasets written before it was recorded).
    cross : dict of str to ndarray
        Per name of :data:`CROSS_CURVES` the run has, its values on ``steps`` (NaN where not measured); empty where
        the scan measured no cross-checkpoint measure.
    planned_steps : int or None
        The steps the run was planned to train for (known before it starts); None: the last of ``steps`` (a
        finished run's grid ends at its plan). The forecast's clock is the step as a fraction of it (:attr:`plan`).
    """

    key: tuple
    steps: np.ndarray
    accuracy: np.ndarray
    n_items: np.ndarray
    chance: float
    threshold: float
    rankme: dict = field(default_factory=dict)
    acquisition_index: int | None = None
    window: int = 3
    task: str = ""
    level: int | None = None
    size: str = ""
    seed: int | None = None
    difficulty: str = ""
    size_order: float = math.nan
    tokens: np.ndarray | None = None
    loss: np.ndarray | None = None
    cross: dict = field(default_factory=dict)
    planned_steps: int | None = None

    @property
    def plan(self) -> float:
        """The run's planned steps: ``planned_steps``, else its last step (at least 1)."""
        return float(max(1, self.planned_steps if self.planned_steps else int(self.steps[-1])))

    @property
    def name(self) -> str:
        """``model`` alone, or ``model / suite`` where the model has several suites."""
        return self.key[0] if self.key[1] in self.key[0] else f"{self.key[0]} / {self.key[1]}"

    @property
    def difficulty_class(self) -> str:
        """``"hard"`` / ``"easy"``: the label where it is one already (the demo's, a user's), else the studies' rule
        fixed before the outcome for a run with a level (:func:`ckptgeo.suites.tasks.is_hard`: level >= 2, or a
        level-1 task of the pilot's hard list), else the analysis's label as it is (e.g. ``early`` / ``late``).

        Examples
        --------
        >>> r = RunCurves(("copy-L2-tiny-s1", "copy-L2", ""), np.arange(2), np.zeros(2), np.zeros(2), 0.0, 0.5,
        ...               task="copy", level=2, difficulty="L2")
        >>> r.difficulty_class
        'hard'
        """
        if self.difficulty in ("hard", "easy") or self.level is None or not self.task:
            return self.difficulty
        from ckptgeo.suites.tasks import is_hard

        return "hard" if is_hard(self.task, self.level) else "easy"

    @property
    def acquisition_step(self) -> int | None:
        return None if self.acquisition_index is None else int(self.steps[self.acquisition_index])

    @property
    def confirmed_index(self) -> int | None:
        """Index of the checkpoint at which the acquisition is known (the window's last checkpoint)."""
        return None if self.acquisition_index is None else self.acquisition_index + self.window - 1


def plan_clock(steps, plan: float) -> np.ndarray:
    """The forecast's training clock: ``log1p(PLAN_UNITS * step / plan)``, the step as a share of the run's planned
    steps (:attr:`RunCurves.plan`) on a log scale. Runs of different lengths whose checkpoints sit at the same
    shares of their plans (the trainer's grids, a learning-rate schedule set by the plan) read the same clock;
    past the plan it keeps growing.

    Examples
    --------
    >>> plan_clock([0, 150, 300], 300).round(3).tolist()
    [0.0, 6.217, 6.909]
    >>> bool(np.allclose(plan_clock([94, 3000], 3000), plan_clock([9.4, 300], 300)))
    True
    """
    return np.log1p(PLAN_UNITS * np.asarray(steps, float) / float(plan))


def run_identity(model: str, suite: str) -> dict:
    """Task, level, size name and seed of a run: :func:`ckptgeo.events.curves.run_identity`, with the size
    read from the model's name where the contract gives none (``160m``, ``4x256``: the across-sizes split needs it)
    and ``""`` for no size.

    Examples
    --------
    >>> run_identity("parity-L1-tiny-s2", "parity-L1")
    {'task': 'parity', 'level': 1, 'size': 'tiny', 'seed': 2}
    >>> run_identity("EleutherAI/pythia-160m-seed3", "logic")
    {'task': 'logic', 'level': None, 'size': '160m', 'seed': 3}
    """
    ident = contract.run_identity(str(model), str(suite))
    if not ident["size"]:
        base = contract.split_seed(str(model))[0].rsplit("/", 1)[-1]
        size = re.search(r"(\d+(?:\.\d+)?[kmbt]|\d+x\d+)(?![a-z0-9])", base, re.I)
        ident["size"] = size.group(1).lower() if size else ""
    return ident


def _rankme_layers(curves: pd.DataFrame) -> pd.DataFrame:
    """The RankMe rows to read: uncentred where a run has both variants; layer 0 (embeddings) left out."""
    return contract.preferred_variant(curves[(curves["metric"] == "rankme") & (curves["layer"] > 0)])


def cross_curves(compare: pd.DataFrame | None) -> pd.DataFrame:
    """The ``compare`` rows a forecast reads, one curve per (model, suite, config_hash, name of
    :data:`CROSS_CURVES`): CKA at its summary layer, the whole model's weight distance (its rows have no suite:
    ``suite`` ""), partners ``previous`` and ``first``; columns ``model, suite, config_hash, name, step, value``.
    Empty where ``compare`` is None or empty."""
    cols = ["model", "suite", "config_hash", "name", "step", "value"]
    if compare is None or len(compare) == 0 or not {"metric", "against", "step", "value"} <= set(compare.columns):
        return pd.DataFrame(columns=cols)
    c = compare[compare["against"].isin(("previous", "first")) & compare["step"].notna()].copy()
    c["suite"] = c["suite"].astype("object").where(c["suite"].notna(), "") if "suite" in c else ""
    c = with_defaults(c).assign(value=lambda d: pd.to_numeric(d["value"], errors="coerce"))
    cka = c[(c["metric"] == "cka") & c["layer"].notna() & (c["layer"] >= 0)]
    cka = contract.summary_rows(cka.assign(layer=cka["layer"].astype("int64"))) if len(cka) else cka
    wd = c[(c["metric"] == "weight_distance") & (c["block"] == "model")] if "block" in c else c.iloc[0:0]
    parts = [f.assign(name=f["metric"] + "_" + f["against"]) for f in (cka, wd) if len(f)]
    if not parts:
        return pd.DataFrame(columns=cols)
    out = pd.concat(parts, ignore_index=True).assign(step=lambda d: d["step"].astype("int64"))
    return out.groupby(cols[:-1], sort=True)["value"].mean().reset_index()


def _for_run(frame: pd.DataFrame | None, chash: str) -> pd.DataFrame | None:
    """The rows of one run's curve family taken at the run's settings: those of ``chash``, else those of the only
    settings there are, else none (several other settings: which one speaks for the run is unknown)."""
    if frame is None or len(frame) == 0:
        return None
    if (frame["config_hash"] == chash).any():
        return frame[frame["config_hash"] == chash]
    return frame if frame["config_hash"].nunique() == 1 else None


def _on_steps(rows: pd.DataFrame, steps: np.ndarray) -> np.ndarray:
    return rows.groupby("step")["value"].mean().reindex(steps).to_numpy(float)


def runs_from_tables(accuracy: pd.DataFrame, curves: pd.DataFrame, acquisitions: pd.DataFrame,
                     compare: pd.DataFrame | None = None) -> list[RunCurves]:
    """One :class:`RunCurves` per behaviour curve of an analysis.

    Parameters
    ----------
    accuracy, curves, acquisitions : DataFrame
        ``Analysis.tables["accuracy"]``, ``["curves"]`` (RankMe, and the task loss as ``metric == "loss"``,
        layer -1) and ``["acquisitions"]``.
    compare : DataFrame, optional
        ``Analysis.tables["compare"]`` (None where the dataset has no cross-checkpoint measure).

    Returns
    -------
    list of RunCurves
        Sorted by (model, suite, config_hash); runs whose acquisition status is ``no_data`` are left out. RankMe,
        loss and the cross-checkpoint curves are each taken from the rows of the same model, suite and
        config_hash, else of the only settings of that (model, suite), else none (the features then say so:
        :mod:`ckptgeo.forecasting.features`). Weight distance has no suite: it is matched on the model.
    """
    if accuracy is None or accuracy.empty or acquisitions is None or acquisitions.empty:
        return []
    empty = pd.DataFrame(columns=["model", "suite", "config_hash", "metric", "layer", "step", "value"])
    has = curves is not None and len(curves) > 0
    rk = _rankme_layers(curves) if has else empty
    loss = curves[(curves["metric"] == "loss")] if has else empty
    rk_by = {k: g for k, g in rk.groupby(["model", "suite"], sort=False)}
    loss_by = {k: g for k, g in loss.groupby(["model", "suite"], sort=False)}
    cross = cross_curves(compare)
    cross_by = {k: g for k, g in cross.groupby(["model", "suite"], sort=False)}
    acq_by = {(r.model, r.suite, r.config_hash): r for r in acquisitions.itertuples(index=False)}
    runs = []
    for (model, suite, chash), g in accuracy.groupby(["model", "suite", "config_hash"], sort=True):
        a = acq_by.get((model, suite, chash))
        g = g[np.isfinite(g["accuracy"].to_numpy(float))].sort_values("step")
        if a is None or a.status == "no_data" or len(g) < 2:
            continue
        steps = g["step"].to_numpy(np.int64)
        n_items = g["n_items"].to_numpy(float) if "n_items" in g.columns else np.full(len(g), np.nan)
        layers: dict[int, np.ndarray] = {}
        geo = _for_run(rk_by.get((model, suite)), chash)
        if geo is not None:
            for layer, lg in geo.groupby("layer"):
                layers[int(layer)] = _on_steps(lg, steps)
        lrows = _for_run(loss_by.get((model, suite)), chash)
        xcurves: dict[str, np.ndarray] = {}
        for rows in (_for_run(cross_by.get((model, suite)), chash), _for_run(cross_by.get((model, "")), chash)):
            for name, xg in (rows.groupby("name") if rows is not None else ()):
                xcurves[str(name)] = _on_steps(xg, steps)
        acq_step = a.acquisition_step
        idx = None
        if a.status == "acquired" and not pd.isna(acq_step):
            hits = np.nonzero(steps == int(acq_step))[0]
            idx = int(hits[0]) if len(hits) else None
        ident = run_identity(model, suite)
        n_layers = max(layers) if layers else 0
        params = model_size(model)
        tokens = g["tokens"].to_numpy(float) if "tokens" in g.columns else None
        task = str(getattr(a, "task", "") or "") or str(ident["task"] or suite)
        runs.append(RunCurves(
            key=(model, suite, chash), steps=steps, accuracy=g["accuracy"].to_numpy(float), n_items=n_items,
            chance=float(a.chance) if not pd.isna(a.chance) else math.nan, threshold=float(a.acc_threshold),
            rankme=layers, acquisition_index=idx, window=int(a.window), task=task,
            level=ident["level"], size=ident["size"], seed=ident["seed"], difficulty=str(getattr(a, "difficulty", "")),
            size_order=params if math.isfinite(params) else float(n_layers), tokens=tokens,
            loss=_on_steps(lrows, steps) if lrows is not None else None, cross=xcurves))
    return runs
