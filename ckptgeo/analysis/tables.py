"""Reading a ckptgeo dataset's tables, and labelling its models and suites.

Tables are read with :func:`ckptgeo.store.dataset.read_table` (always a DataFrame, empty when the table
has no part), duplicates flagged in ``revisions`` are dropped,
and curves are cleaned to one value per (model, suite, config_hash, metric, layer, step). Models get a
size (:func:`model_size`) and a seed (:func:`split_seed`) from their names; suites a task and a
difficulty class (see :mod:`ckptgeo.analysis.summary` for the rules).
"""

from __future__ import annotations

import json
import logging
import math
import re
from functools import lru_cache
from pathlib import Path
from typing import Mapping

import numpy as np
import pandas as pd

from ckptgeo.errors import DatasetLayoutError

__all__ = ["model_size", "split_seed"]

logger = logging.getLogger(__name__)

_LEVEL = re.compile(r"^(?P<task>.+)-L(?P<level>\d+)$")
_PARAMS = re.compile(r"(?<![\d.a-z])(\d+(?:\.\d+)?)([kmbt])(?![a-z0-9])", re.I)
_SHAPE = re.compile(r"(?<![\d.])(\d+)x(\d+)(?![\d.])", re.I)
_SEED = re.compile(r"^(?P<base>.+?)[-_](?:seed|s)(?P<seed>\d+)$", re.I)
_SCALE = {"k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}
_KEYS = ["model", "suite", "config_hash"]


# --------------------------------------------------------------------------------------------- cleaning

def _require(df: pd.DataFrame, table: str, cols: tuple[str, ...], root: Path) -> None:
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise DatasetLayoutError(
            f"Table {table!r} in {root} lacks column(s) {missing}; found {list(df.columns)}. Was it written by "
            "`ckptgeo scan`?", path=str(root / table))


def _drop_duplicates(df: pd.DataFrame, dup: set) -> pd.DataFrame:
    if not dup or "revision" not in df.columns:
        return df
    mask = [(m, r) in dup for m, r in zip(df["model"], df["revision"])]
    n = int(np.sum(mask))
    if n:
        logger.info("dropping %d rows of revisions flagged as duplicates", n)
    return df.loc[~np.asarray(mask, dtype=bool)]


def _with_defaults(df: pd.DataFrame) -> pd.DataFrame:
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


def _clean_geometry(geo: pd.DataFrame) -> pd.DataFrame:
    geo = _with_defaults(geo)
    geo = geo[geo["step"].notna()].copy()
    geo["layer"] = geo["layer"].astype("int64")
    geo["metric"] = geo["metric"].astype(str)
    key = _KEYS + ["metric", "layer"]
    if "index" in geo.columns:
        idx = pd.to_numeric(geo["index"], errors="coerce").fillna(-1)
        geo = geo.assign(_idx=idx)
        lowest = geo.groupby(key, sort=False)["_idx"].transform("min")
        geo = geo[geo["_idx"] == lowest].drop(columns="_idx")
    agg = {"value": ("value", "mean")}
    for extra in ("centered", "seed"):
        if extra in geo.columns:
            agg[extra] = (extra, "first")
    geo = geo.assign(value=pd.to_numeric(geo["value"], errors="coerce").astype("float64"))
    out = geo.groupby(key + ["step"], sort=True, dropna=False).agg(**agg).reset_index()
    out["step"] = out["step"].astype("int64")
    return out


def _clean_behavior(beh: pd.DataFrame) -> pd.DataFrame:
    beh = _with_defaults(beh)
    beh = beh[beh["step"].notna()]
    metric = beh["metric"].astype(str)
    has_acc = beh.assign(_a=metric == "accuracy").groupby(["model", "suite"])["_a"].transform("any")
    beh = beh[(metric == "accuracy") | (~has_acc & (metric == "accuracy_norm"))]
    chance = beh["chance"] if "chance" in beh.columns else pd.Series(np.nan, index=beh.index)
    beh = beh.assign(accuracy=pd.to_numeric(beh["value"], errors="coerce").astype("float64"),
                     chance=pd.to_numeric(chance, errors="coerce").astype("float64"))
    agg = {"accuracy": ("accuracy", "mean"), "chance": ("chance", "median")}
    if "n_items" in beh.columns:  # for accuracy's binomial interval (the fewest items of repeated rows)
        beh = beh.assign(n_items=pd.to_numeric(beh["n_items"], errors="coerce").astype("float64"))
        agg["n_items"] = ("n_items", "min")
    out = beh.groupby(_KEYS + ["step"], sort=True).agg(**agg).reset_index()
    out["step"] = out["step"].astype("int64")
    return out


# ------------------------------------------------------------------------------------------ labelling

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


def split_seed(name: str) -> tuple[str, int | None]:
    """``("<base>", k)`` for a model named ``<base>-seed<k>`` or ``<base>-s<k>``; else ``(name, None)``.

    Examples
    --------
    >>> split_seed("pythia-160m-seed3"), split_seed("add-2x128-s0"), split_seed("pythia-160m")
    (('pythia-160m', 3), ('add-2x128', 0), ('pythia-160m', None))
    """
    m = _SEED.match(str(name))
    return (m.group("base"), int(m.group("seed"))) if m else (str(name), None)


@lru_cache(maxsize=256)
def _header_difficulty(suite: str) -> str | None:
    try:
        from ckptgeo.suites.items import diagnostics_dir

        path = diagnostics_dir() / f"{suite}.jsonl"
        if not path.is_file():
            return None
        with open(path, encoding="utf-8") as fh:
            head = json.loads(fh.readline() or "{}")
    except (OSError, ValueError):
        return None
    header = head.get("suite_header") if isinstance(head, dict) else None
    value = header.get("difficulty") if isinstance(header, dict) else None
    return None if value is None else str(value)


def _difficulty(acq: pd.DataFrame, user: Mapping[str, str] | None) -> dict[tuple[str, str], tuple[str, str]]:
    """(model, suite) -> (task, difficulty class)."""
    user = dict(user or {})
    out: dict[tuple[str, str], tuple[str, str]] = {}
    per_pair = acq.groupby(["model", "suite"])["acquisition_step"].min() if len(acq) else pd.Series(dtype=float)
    lm: dict[str, list[tuple[str, float]]] = {}
    for (model, suite), step in per_pair.items():
        lvl = _LEVEL.match(suite)
        task = lvl.group("task") if lvl else suite
        if suite in user:
            out[(model, suite)] = (task, str(user[suite]))
        elif lvl:
            out[(model, suite)] = (task, f"L{int(lvl.group('level'))}")
        elif (hd := _header_difficulty(suite)) is not None:
            out[(model, suite)] = (task, hd)
        else:
            lm.setdefault(model, []).append((suite, step))
    for model, pairs in lm.items():
        steps = [s for _, s in pairs if pd.notna(s)]
        median = float(np.median(steps)) if steps else math.nan
        for suite, step in pairs:
            cls = "not acquired" if pd.isna(step) else ("early" if step <= median else "late")
            out[(model, suite)] = (suite, cls)
    return out
