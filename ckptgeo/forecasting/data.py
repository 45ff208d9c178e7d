"""The runs a forecast reads: one accuracy curve and its RankMe curves per (model, suite, config_hash).

:func:`runs_from_tables` turns an analysis's tables (``accuracy``, ``curves``, ``acquisitions``) into
:class:`RunCurves`, each on its accuracy grid, with its acquisition (the analysis's own rule, from the
``acquisitions`` table) and its identity (task, level, size, seed, difficulty class) for the held-out splits.
Nothing here fits or scores.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ckptgeo.analysis.curves import grid_run, preferred_variant, split_seed
from ckptgeo.analysis.tables import model_size

__all__ = ["RunCurves", "runs_from_tables", "run_identity"]

#: a training grid's run name, ``<task>-L<level>-<size>-s<seed>`` (``ckptgeo train --grid``)
_LEVEL = re.compile(r"^(?P<task>.+)-L(?P<level>\d+)$")


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
    task, level, size, seed, difficulty : identity for the held-out splits (level, seed: None where unknown).
    size_order : float
        Orders sizes: the parameter count from the name, else the number of layers.
    tokens : ndarray of float, shape (n_checkpoints,)
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

    @property
    def name(self) -> str:
        """``model`` alone, or ``model / suite`` where the model has several suites."""
        return self.key[0] if self.key[1] in self.key[0] else f"{self.key[0]} / {self.key[1]}"

    @property
    def acquisition_step(self) -> int | None:
        return None if self.acquisition_index is None else int(self.steps[self.acquisition_index])

    @property
    def confirmed_index(self) -> int | None:
        """Index of the checkpoint at which the acquisition is known (the window's last checkpoint)."""
        return None if self.acquisition_index is None else self.acquisition_index + self.window - 1


def run_identity(model: str, suite: str) -> dict:
    """Task, level, size name and seed of a run from its model and suite names.

    Examples
    --------
    >>> run_identity("parity-L1-tiny-s2", "parity-L1")
    {'task': 'parity', 'level': 1, 'size': 'tiny', 'seed': 2}
    >>> run_identity("EleutherAI/pythia-160m-seed3", "logic")
    {'task': 'logic', 'level': None, 'size': '160m', 'seed': 3}
    """
    run = grid_run(model)
    if run is not None:
        return run
    lvl = _LEVEL.match(str(suite))
    base, seed = split_seed(str(model))
    size = re.search(r"(\d+(?:\.\d+)?[kmbt]|\d+x\d+)(?![a-z0-9])", base.rsplit("/", 1)[-1], re.I)
    return {"task": lvl["task"] if lvl else str(suite), "level": int(lvl["level"]) if lvl else None,
            "size": size.group(1).lower() if size else "", "seed": seed}


def _rankme_layers(curves: pd.DataFrame) -> pd.DataFrame:
    """The RankMe rows to read: uncentred where a run has both variants; layer 0 (embeddings) left out."""
    return preferred_variant(curves[(curves["metric"] == "rankme") & (curves["layer"] > 0)])


def runs_from_tables(accuracy: pd.DataFrame, curves: pd.DataFrame, acquisitions: pd.DataFrame) -> list[RunCurves]:
    """One :class:`RunCurves` per behaviour curve of an analysis.

    Parameters
    ----------
    accuracy, curves, acquisitions : DataFrame
        ``Analysis.tables["accuracy"]``, ``["curves"]`` and ``["acquisitions"]``.

    Returns
    -------
    list of RunCurves
        Sorted by (model, suite, config_hash). RankMe is taken from the geometry curves of the same model, suite
        and config_hash, else of the only config of that (model, suite), else none (behaviour features only).
    """
    if accuracy is None or accuracy.empty or acquisitions is None or acquisitions.empty:
        return []
    rk = _rankme_layers(curves) if curves is not None and len(curves) else pd.DataFrame(
        columns=["model", "suite", "config_hash", "layer", "step", "value"])
    rk_by = {k: g for k, g in rk.groupby(["model", "suite"], sort=False)}
    acq_by = {(r.model, r.suite, r.config_hash): r for r in acquisitions.itertuples(index=False)}
    runs = []
    for (model, suite, chash), g in accuracy.groupby(["model", "suite", "config_hash"], sort=True):
        a = acq_by.get((model, suite, chash))
        g = g[np.isfinite(g["accuracy"].to_numpy(float))].sort_values("step")
        if a is None or len(g) < 2:
            continue
        steps = g["step"].to_numpy(np.int64)
        n_items = g["n_items"].to_numpy(float) if "n_items" in g.columns else np.full(len(g), np.nan)
        geo = rk_by.get((model, suite))
        layers: dict[int, np.ndarray] = {}
        if geo is not None and len(geo):
            if (geo["config_hash"] == chash).any():
                geo = geo[geo["config_hash"] == chash]
            elif geo["config_hash"].nunique() > 1:
                geo = geo.iloc[0:0]
            for layer, lg in geo.groupby("layer"):
                s = lg.groupby("step")["value"].mean()
                layers[int(layer)] = s.reindex(steps).to_numpy(float)
        acq_step = a.acquisition_step
        idx = None
        if a.status == "acquired" and not pd.isna(acq_step):
            hits = np.nonzero(steps == int(acq_step))[0]
            idx = int(hits[0]) if len(hits) else None
        ident = run_identity(model, suite)
        n_layers = max(layers) if layers else 0
        params = model_size(model)
        tokens = g["tokens"].to_numpy(float) if "tokens" in g.columns else None
        runs.append(RunCurves(
            key=(model, suite, chash), steps=steps, accuracy=g["accuracy"].to_numpy(float), n_items=n_items,
            chance=float(a.chance) if not pd.isna(a.chance) else math.nan, threshold=float(a.acc_threshold),
            rankme=layers, acquisition_index=idx, window=int(a.window), task=str(getattr(a, "task", ident["task"])),
            level=ident["level"], size=ident["size"], seed=ident["seed"], difficulty=str(getattr(a, "difficulty", "")),
            size_order=params if math.isfinite(params) else float(n_layers), tokens=tokens))
    return runs
