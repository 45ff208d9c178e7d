"""How a curve is read: the one place every analysis step, claim row, figure and the monitor asks.

A *curve* is one measure of one run at one layer over the checkpoints: the rows of a (model, suite,
config_hash, metric, layer) family of a geometry table, or the row of that family in the events table. Four
questions have one answer each, here:

* **Which layer speaks for a run** (:func:`summary_layer`, :func:`summary_rows`): the summary layer of each
  (model, suite, config_hash, metric) family (:data:`CURVE_KEYS` and the metric) is its deepest layer; a
  whole-model measure has only layer -1, which is then its summary layer.
* **Which variant of a measure** (:func:`reading`, :func:`preferred_variant`): a measure declares in its
  :class:`~ckptgeo.metrics.registry.MetricSpec` the variant read where a dataset holds several
  (``preferred``: RankMe's uncentred one, ``centered=False``), whether higher is better, and which way it goes at a
  collapse. Where a run has rows of the preferred variant, its others are set aside; a run with none of them
  (only centred RankMe measured) keeps every row.
* **Which runs are counted** in a rate's denominator (:data:`NOT_COUNTED`, :func:`counted`): not those that never
  acquired, had no data, acquired at the first checkpoint or are censored; they are reported apart.
* **What run a model name is** (:func:`run_identity`, :func:`run_rows`): task, level, model size name and seed, from
  a grid run's name (``modular-L1-tiny-s0``) or else from the suite (``modular-L1``) and the name's seed suffix.
  :func:`run_rows` is the one row per run every runs table is built from.

Pure functions over pandas frames; nothing here reads or writes files.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import pandas as pd

__all__ = ["model_size", "with_defaults", "CURVE_KEYS", "NOT_COUNTED", "Reading", "reading", "preferred_variant", "summary_layer", "summary_rows",
           "counted", "grid_run", "split_seed", "run_identity", "run_rows", "run_curves", "run_accuracy",
           "summary_event"]

#: the columns naming one run: a model, the suite it was measured on, and the settings hash of the scan
CURVE_KEYS = ["model", "suite", "config_hash"]

#: event statuses not counted in a rate's denominator (never acquired, no data, acquired at the first checkpoint,
#: censored): reported apart.
NOT_COUNTED = ("never_acquired", "no_data", "acquired_at_start", "censored")

_RUN = re.compile(r"^(?P<task>.+)-L(?P<level>\d+)-(?P<size>[A-Za-z0-9]+)-s(?P<seed>\d+)$")
_SEED = re.compile(r"^(?P<base>.+?)[-_](?:seed|s)(?P<seed>\d+)$", re.I)


@dataclass(frozen=True)
class Reading:
    """How a measure's curve is read, as its spec declares it (:func:`reading`).

    Attributes
    ----------
    preferred : tuple of (str, object)
        ``(column, value)`` pairs of the variant read where a dataset holds several (RankMe: ``("centered",
        False)``); empty: every row is read.
    higher_is_better : bool or None
        Whether a larger value means a better representation or model (None: not an ordered quality).
    collapse : {"falls", "rises"} or None
        Which way the measure moves at a representation collapse (None: it does not mark one).
    """

    preferred: tuple = ()
    higher_is_better: bool | None = None
    collapse: str | None = None


def reading(metric: str) -> Reading:
    """The :class:`Reading` the measure ``metric`` declares (an empty one for a measure this installation does not
    know, e.g. a table written by a plugin that is not installed here).

    >>> reading("rankme")
    Reading(preferred=(('centered', False),), higher_is_better=True, collapse='falls')
    """
    from ckptgeo.errors import InvalidParameterError
    from ckptgeo.metrics.registry import get_metric

    try:
        spec = get_metric(str(metric))
    except InvalidParameterError:
        return Reading()
    return Reading(tuple(spec.preferred), spec.higher_is_better, spec.collapse)


def preferred_variant(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``frame`` (geometry, curves or events rows; a ``metric`` column) of each measure's preferred
    variant (:func:`reading`), run by run: where a (model, suite) has rows of that variant the others are set
    aside; a run with none of them (only centred RankMe measured) keeps all its rows. The variants of one run
    differ in ``config_hash`` (``centered`` is a scan setting), so the run here is the model and suite.

    >>> df = pd.DataFrame({"model": ["a", "a", "b", "a"], "suite": "s", "metric": ["rankme"] * 3 + ["llc"],
    ...                    "centered": [True, False, True, None]})
    >>> preferred_variant(df).index.tolist()
    [1, 2, 3]
    """
    if frame is None or len(frame) == 0 or "metric" not in frame.columns:
        return frame
    keys = [k for k in ("model", "suite") if k in frame.columns]
    keep = pd.Series(True, index=frame.index)
    for metric in pd.unique(frame["metric"]):
        rows = frame["metric"] == metric
        for column, value in reading(metric).preferred:
            if column not in frame.columns:
                continue
            wanted = frame[column].eq(value).fillna(False).astype(bool)
            hit = wanted & rows
            run_has = hit.groupby([frame[k] for k in keys], sort=False).transform("any") if keys else hit.any()
            keep &= ~rows | wanted | ~run_has
    return frame[keep]


def summary_layer(frame: pd.DataFrame) -> pd.Series:
    """Per row of ``frame``, the summary layer of its (model, suite, config_hash, metric) family: the deepest
    layer (-1 for a whole-model measure). Aligned with ``frame``'s index; a frame without some of those columns
    (a hand-made one) is grouped by those it has."""
    if len(frame) == 0:
        return pd.Series(dtype="int64", index=frame.index)
    keys = [k for k in CURVE_KEYS + ["metric"] if k in frame.columns]
    return frame.groupby(keys, sort=False, dropna=False)["layer"].transform("max")


def summary_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``frame`` at the summary layer of their family (:func:`summary_layer`), in ``frame``'s order.

    >>> df = pd.DataFrame({"model": "m", "suite": "s", "config_hash": "h", "metric": "rankme", "layer": [0, 1, 2]})
    >>> summary_rows(df)["layer"].tolist()
    [2]
    """
    if frame is None or len(frame) == 0:
        return frame
    return frame[frame["layer"] == summary_layer(frame)]


def counted(rows: pd.DataFrame) -> pd.Series:
    """Whether each events row counts in a rate's denominator (its ``status`` not in :data:`NOT_COUNTED`)."""
    return ~rows["status"].isin(NOT_COUNTED)


def grid_run(model: str) -> dict | None:
    """``{"task", "level", "size", "seed"}`` of a grid run's name (``ckptgeo train`` and ``reproduce``), else None.

    >>> grid_run("modular-L1-tiny-s0")
    {'task': 'modular', 'level': 1, 'size': 'tiny', 'seed': 0}
    >>> grid_run("EleutherAI/pythia-160m") is None
    True
    """
    m = _RUN.match(str(model))
    if not m:
        return None
    return {"task": m["task"], "level": int(m["level"]), "size": m["size"], "seed": int(m["seed"])}


def split_seed(name: str) -> tuple[str, int | None]:
    """``("<base>", k)`` for a model named ``<base>-seed<k>`` or ``<base>-s<k>``; else ``(name, None)``.

    Examples
    --------
    >>> split_seed("pythia-160m-seed3"), split_seed("add-2x128-s0"), split_seed("pythia-160m")
    (('pythia-160m', 3), ('add-2x128', 0), ('pythia-160m', None))
    """
    m = _SEED.match(str(name))
    return (m.group("base"), int(m.group("seed"))) if m else (str(name), None)


def run_identity(model: str, suite: str | None = None, task: str | None = None) -> dict:
    """``{"task", "level", "size", "seed"}`` of a run: the task and level its ``suite`` names (``"modular-L3"``),
    else those of a grid run's name (:func:`grid_run`), else ``task`` (or the suite itself) and no level; the size
    name of a grid run (else None); the seed from the name's suffix (:func:`split_seed`).

    >>> run_identity("modular-L1-tiny-s2", "modular-L1")
    {'task': 'modular', 'level': 1, 'size': 'tiny', 'seed': 2}
    >>> run_identity("pythia-160m-seed1", "blimp-anaphor")
    {'task': 'blimp-anaphor', 'level': None, 'size': None, 'seed': 1}
    """
    from ckptgeo.suites.tasks import parse_task_level

    grid = grid_run(model) or {}
    task_level = parse_task_level(suite) if suite is not None else None
    if task_level is None and grid:
        task_level = (grid["task"], grid["level"])
    t, level = task_level if task_level else (task or suite, None)
    return {"task": t, "level": level, "size": grid.get("size"), "seed": split_seed(model)[1]}


def run_rows(events: pd.DataFrame, metric: str = "rankme") -> pd.DataFrame:
    """One events row per run (model, suite, config_hash) of ``metric``: its preferred variant
    (:func:`preferred_variant`) at its summary layer (:func:`summary_rows`). Every runs table (``runs.csv``, the
    claims' runs) is built from these rows."""
    if events is None or len(events) == 0:
        return events
    return summary_rows(preferred_variant(events[events["metric"] == metric]))


def run_curves(analysis, model: str, suite: str, metric: str) -> tuple[str | None, pd.DataFrame]:
    """The ``(config_hash, curves rows)`` of one run's ``metric`` that a figure draws: its layers (>= 0) of the
    preferred variant (:func:`preferred_variant`), of the settings with the most rows; ``(None, empty)`` if none."""
    c = analysis.curves
    sub = c[(c["model"] == model) & (c["suite"] == suite) & (c["metric"] == metric) & (c["layer"] >= 0)]
    if sub.empty:
        return None, sub
    sub = preferred_variant(sub)
    chash = sub.groupby("config_hash").size().sort_values(ascending=False, kind="stable").index[0]
    return chash, sub[sub["config_hash"] == chash]


def summary_event(analysis, model: str, suite: str, config_hash: str | None, metric: str):
    """The events row of that run at its summary layer (:func:`summary_rows`), or None."""
    e = analysis.events
    e = e[(e["model"] == model) & (e["suite"] == suite) & (e["config_hash"] == config_hash) & (e["metric"] == metric)]
    return None if e.empty else summary_rows(e).iloc[0]


def run_accuracy(analysis, model: str, suite: str, config_hash: str | None) -> pd.DataFrame:
    """The accuracy rows of that run (those of ``config_hash`` where it has them, else its first settings'),
    sorted by step."""
    acc = analysis.accuracy
    acc = acc[(acc["model"] == model) & (acc["suite"] == suite)]
    if acc.empty:
        return acc
    pick = config_hash if (acc["config_hash"] == config_hash).any() else acc["config_hash"].iloc[0]
    return acc[acc["config_hash"] == pick].sort_values("step")


#: a parameter count in a model name (``160m``, ``2.8b``) and a width x depth shape (``4x256``)
_PARAMS = re.compile(r"(?<![\d.a-z])(\d+(?:\.\d+)?)([kmbt])(?![a-z0-9])", re.I)
_SHAPE = re.compile(r"(?<![\d.])(\d+)x(\d+)(?![\d.])", re.I)
_SCALE = {"k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}


def model_size(name: str) -> float:
    """Parameter count parsed from a model name; NaN when the name does not say.

    Examples
    --------
    >>> model_size("EleutherAI/pythia-2.8b-deduped"), model_size("modular-4x256-s1"), model_size("gpt2")
    (2800000000.0, 3145728.0, nan)
    """
    base = str(name).rsplit("/", 1)[-1]
    m = _PARAMS.search(base)
    if m:
        return float(m.group(1)) * _SCALE[m.group(2).lower()]
    m = _SHAPE.search(base)
    if m:
        return 12.0 * int(m.group(1)) * int(m.group(2)) ** 2
    return math.nan


def with_defaults(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` (a copy) with its curve keys in one form: ``config_hash`` as text (``""`` where missing), ``model``
    and ``suite`` as text, and a model trained in stages split into one ``model@stage`` per stage (steps restart
    in each stage)."""
    df = df.copy()
    if "config_hash" not in df.columns:
        df["config_hash"] = ""
    df["config_hash"] = df["config_hash"].astype("object").where(df["config_hash"].notna(), "").astype(str)
    df["model"] = df["model"].astype(str)
    if "stage" in df.columns and df["stage"].notna().any():
        # steps restart in each stage (OLMo-2's stage-2 ingredients): one curve per model and stage
        df["model"] = [m if s is None or pd.isna(s) else f"{m}@{s}" for m, s in zip(df["model"], df["stage"])]
    df["suite"] = df["suite"].astype(str)
    return df
