"""Reading a ckptgeo dataset's tables, and labelling its models and suites.

Tables are read with :func:`ckptgeo.store.dataset.read_table` (always a DataFrame, empty when the table
has no part); revisions whose weights another revision also serves are left out
(:func:`leave_out_grouped`, the one place that decides it), and curves are cleaned to one value per
(model, suite, config_hash, metric, layer, step), with the training tokens there (:func:`events_in_tokens`
gives the events in tokens too). Models get a size (:func:`model_size`) and a seed (:func:`split_seed`) from their names; suites a task and a
difficulty class (see :mod:`ckptgeo.analysis.pipeline` for the rules).
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

from ckptgeo._io import safe_name
from ckptgeo.events.curves import CURVE_KEYS, model_size, split_seed, with_defaults
from ckptgeo.errors import DatasetLayoutError
from ckptgeo.sources.groups import grouped_revisions, groups_of

__all__ = ["DIFFICULTY_CLASSES", "check_difficulty", "model_size", "split_seed", "leave_out_grouped", "grouped_revisions", "left_out_text", "LEFT_OUT_COLUMNS", "events_in_tokens",
           "in_tokens", "X_AXES"]

#: what a curve's x axis can be: training steps (within a stage) or training tokens seen
X_AXES = ("steps", "tokens")

logger = logging.getLogger(__name__)

_LEVEL = re.compile(r"^(?P<task>.+)-L(?P<level>\d+)$")


# --------------------------------------------------------------------------------------------- cleaning

def require_columns(df: pd.DataFrame, table: str, cols: tuple[str, ...], root: Path) -> None:
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise DatasetLayoutError(
            f"Table {table!r} in {root} lacks column(s) {missing}; found {list(df.columns)}. Was it written by "
            "`ckptgeo scan`?", path=str(root / table))


#: columns of the table of revisions :func:`leave_out_grouped` left out
LEFT_OUT_COLUMNS = ["model", "revision", "stage", "step", "tokens", "group", "reason"]


def leave_out_grouped(tables: Mapping[str, pd.DataFrame], revisions: pd.DataFrame, *,
                      keep: str | list[str] | tuple[str, ...] | None = None
                      ) -> tuple[dict[str, pd.DataFrame], pd.DataFrame]:
    """Leave out of ``tables`` every revision whose weights another revision (at another training point)
    also serves, or one of whose weight files another holds (pythia#205, #206): such a group's members cannot
    be told apart by their hashes, so none of them is trusted to be the step its name says.

    Parameters
    ----------
    tables : mapping of str to DataFrame
        Rows with ``model`` and ``revision`` columns (geometry, behavior, probes).
    revisions : DataFrame
        The dataset's ``revisions`` table (empty: nothing is left out).
    keep : {None, "latest"} or list of str, default=None
        None: leave every group out whole. ``"latest"``: keep the latest member of each group. A list of
        revision names: keep those (at most one per group). A kept member that was not measured itself
        (``status == "duplicate"``) takes the rows measured on its identical weights, at its own step.

    Returns
    -------
    (dict of str to DataFrame, DataFrame)
        The tables without the left-out rows, and one row per revision left out
        (:data:`LEFT_OUT_COLUMNS`: its group, the earliest member, and why).

    Raises
    ------
    InvalidParameterError
        ``keep`` names a revision in no group, or two of one group.
    """
    from ckptgeo.errors import InvalidParameterError

    tables = dict(tables)
    empty = pd.DataFrame(columns=LEFT_OUT_COLUMNS)
    if revisions.empty or not {"model", "revision", "step", "status"} <= set(revisions.columns):
        if keep not in (None, "latest"):
            raise InvalidParameterError(f"keep={keep!r}: the dataset has no revisions table, so no group to keep "
                                        f"from", name="keep", value=keep)
        return tables, empty
    revs = revisions.assign(model=revisions["model"].astype(str), revision=revisions["revision"].astype(str))
    revs = revs[revs["status"].astype(str).isin(["ok", "duplicate"])].drop_duplicates(["model", "revision"],
                                                                                       keep="last")
    groups = groups_of(revs)
    info = revs.set_index(["model", "revision"])
    members: dict[tuple[str, str], list[str]] = {}
    for (m, r), (gid, _) in groups.items():
        members.setdefault((m, gid), []).append(r)
    for key in members:
        members[key].sort(key=lambda r: (info.loc[(key[0], r), "stage"] if "stage" in info.columns
                                         and pd.notna(info.loc[(key[0], r), "stage"]) else "",
                                         int(info.loc[(key[0], r), "step"])))
    kept: dict[tuple[str, str], str] = {}   # (model, kept revision) -> the revision whose rows it takes
    if keep == "latest":
        wanted = {(m, rs[-1]) for (m, _), rs in members.items()}
    elif keep is None:
        wanted = set()
    else:
        names = [keep] if isinstance(keep, str) else list(keep)
        wanted = {(m, r) for (m, r) in groups if r in names}
        missing = sorted(set(names) - {r for _, r in wanted})
        if missing:
            raise InvalidParameterError(f"--keep-grouped {', '.join(missing)}: not in any group of revisions serving "
                                        f"the same weights (grouped: {', '.join(sorted({r for _, r in groups}))})",
                                        name="keep", value=keep)
        per_group = pd.Series([groups[k][0] for k in wanted]).value_counts() if wanted else pd.Series(dtype=int)
        if (per_group > 1).any():
            raise InvalidParameterError(f"--keep-grouped keeps at most one revision per group; group "
                                        f"{per_group.index[per_group > 1][0]} is named more than once",
                                        name="keep", value=keep)
    measured = {(m, r) for t in tables.values() if len(t) and "revision" in t.columns
                for m, r in zip(t["model"].astype(str), t["revision"].astype(str))}
    for m, r in wanted:
        twin = r
        if (m, r) not in measured:   # a duplicate: the rows of its identical, measured twin
            same = [o for o in members[(m, groups[(m, r)][0])] if (m, o) in measured
                    and info.loc[(m, o), "weights_sha256"] == info.loc[(m, r), "weights_sha256"]]
            twin = same[0] if same else r
        kept[(m, r)] = twin
    out_rows = [{"model": m, "revision": r, "stage": info.loc[(m, r)].get("stage"),
                 "step": int(info.loc[(m, r), "step"]), "tokens": info.loc[(m, r)].get("tokens"),
                 "group": gid, "reason": why} for (m, r), (gid, why) in groups.items() if (m, r) not in kept]
    left_out = pd.DataFrame(out_rows, columns=LEFT_OUT_COLUMNS).sort_values(["model", "step"], ignore_index=True)
    left_out.attrs["kept"] = sorted(r for _, r in kept)   # members kept on purpose (left_out_text says so)
    drop = set(groups)
    if "status" in revs.columns:   # duplicates outside any group (e.g. recorded by an older ckptgeo)
        d = revs[revs["status"].astype(str) == "duplicate"]
        drop |= set(zip(d["model"], d["revision"]))
    for name, t in tables.items():
        if t.empty or "revision" not in t.columns:
            continue
        keys = list(zip(t["model"].astype(str), t["revision"].astype(str)))
        parts = [t.loc[[k not in drop for k in keys]]]
        for (m, r), twin in kept.items():
            rows = t.loc[[k == (m, twin) for k in keys]].copy()
            for col in ("revision", "step", "stage", "tokens", "commit"):
                if col in rows.columns and col in info.columns or col == "revision":
                    rows[col] = r if col == "revision" else info.loc[(m, r), col]
            parts.append(rows)
        tables[name] = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
    if len(left_out):
        logger.info("%d revisions left out of the analysis: their weights are served by other revisions too",
                    len(left_out))
    return tables, left_out


def left_out_text(left_out: pd.DataFrame | None) -> str:
    """``"N revisions left out and why"``: one line, then one line per group (for the console and report.md)."""
    if left_out is None or left_out.empty:
        return "0 revisions left out (no two revisions serve the same weights)."
    kept = left_out.attrs.get("kept") or []
    hint = (f"kept on purpose with --keep-grouped: {', '.join(kept)}" if kept else
            "keep one per group on purpose with --keep-grouped latest or --keep-grouped NAME,...")
    lines = [f"{len(left_out)} revision{'s' if len(left_out) != 1 else ''} left out of events, figures and claims "
             f"(their weights are served by another revision too; {hint}):"]
    for (model, _), g in left_out.groupby(["model", "group"], sort=False):
        lines.append(f"  {model}: {g['reason'].iloc[0]}")
    return "\n".join(lines)


def _step_to_tokens(curves: pd.DataFrame, accuracy: pd.DataFrame) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """model (``name@stage`` where staged) -> (steps, tokens) of its checkpoints with known tokens, by step."""
    frames = [t[["model", "step", "tokens"]] for t in (curves, accuracy) if len(t) and "tokens" in t.columns]
    if not frames:
        return {}
    both = pd.concat(frames, ignore_index=True).dropna(subset=["tokens"]).drop_duplicates(["model", "step"])
    return {m: (g["step"].to_numpy(dtype=float), g["tokens"].to_numpy(dtype=float))
            for m, g in both.sort_values("step").groupby("model", sort=False)}


def in_tokens(model: str, steps, table: Mapping[str, tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """Training tokens at ``steps`` of ``model``'s curve: linear between its checkpoints (exact for a constant
    batch), NaN where the model records no tokens or a step lies outside its checkpoints."""
    steps = np.asarray(steps, dtype=float)
    if model not in table:
        return np.full(steps.shape, np.nan)
    s, t = table[model]
    out = np.interp(steps, s, t) if len(s) > 1 else np.where(steps == s[0], t[0], np.nan)
    return np.where((steps < s.min()) | (steps > s.max()) | np.isnan(steps), np.nan, out)


def events_in_tokens(events: pd.DataFrame, curves: pd.DataFrame, accuracy: pd.DataFrame) -> pd.DataFrame:
    """``events`` with its checkpoints also in training tokens (:data:`ckptgeo.store.schemas.EVENT_TOKENS`).

    Events are found per curve in steps; a curve never spans two stages (steps restart in each stage, so each
    stage is its own curve, ordered by step), and within a stage tokens grow with steps, so the same
    checkpoints in tokens are the events a tokens axis would find. ``gap_tokens`` = acquisition - onset,
    where ``gap_steps`` is defined.
    """
    table = _step_to_tokens(curves, accuracy)
    events = events.copy()
    for c in ("first", "last", "acquisition", "collapse", "onset", "collapse_onset"):
        col = f"{c}_step"
        values = [in_tokens(m, [np.nan if pd.isna(v) else float(v)], table)[0]
                  for m, v in zip(events["model"], events[col])] if len(events) else []
        events[f"{c}_tokens"] = pd.array(np.round(np.asarray(values, dtype=float)), dtype="Float64").astype("Int64")
    gap = events["acquisition_tokens"] - events["onset_tokens"]
    events["gap_tokens"] = gap.where(events["gap_steps"].notna())
    return events


def check_x(x: str, curves: pd.DataFrame, accuracy: pd.DataFrame) -> None:
    """Refuse an ``x`` axis the tables cannot give.

    Raises
    ------
    InvalidParameterError
        ``x`` is not one of :data:`X_AXES`, or is "tokens" and a curve's checkpoints record no tokens.
    """
    from ckptgeo.errors import InvalidParameterError

    if x not in X_AXES:
        raise InvalidParameterError(f"x={x!r}: use one of {', '.join(X_AXES)}", name="x", value=x)
    if x == "tokens":
        frames = [t[["model", "tokens"]] for t in (curves, accuracy) if len(t)]
        both = pd.concat(frames) if frames else pd.DataFrame(columns=["model", "tokens"])
        missing = sorted(set(both.loc[both["tokens"].isna(), "model"]))
        if missing:
            raise InvalidParameterError(
                f"--x tokens: {', '.join(missing[:3])} records no training tokens (its branch names give none and "
                f"its naming scheme has no known global batch); use --x steps", name="x", value=x)


def clean_geometry(geo: pd.DataFrame) -> pd.DataFrame:
    """One value per curve and step. Values a budget cut short (``converged`` False) and negative LLC
    estimates are left out (NaN: a missing checkpoint) and counted per step in ``unconverged`` / ``negative``;
    ``value_low`` / ``value_high`` (the measurement interval) are carried where recorded."""
    geo = with_defaults(geo)
    geo = geo[geo["step"].notna()].copy()
    geo["layer"] = geo["layer"].astype("int64")
    geo["metric"] = geo["metric"].astype(str)
    value = pd.to_numeric(geo["value"], errors="coerce").astype("float64")
    unconverged = (geo["converged"].astype("object") == False) if "converged" in geo.columns \
        else pd.Series(False, index=geo.index)  # noqa: E712 (null is not False)
    negative = (geo["metric"] == "llc") & (value < 0)
    geo = geo.assign(value=value.where(~(unconverged | negative)), unconverged=unconverged.astype("int64"),
                     negative=negative.astype("int64"))
    key = CURVE_KEYS + ["metric", "layer"]
    if "index" in geo.columns:
        idx = pd.to_numeric(geo["index"], errors="coerce").fillna(-1)
        geo = geo.assign(_idx=idx)
        lowest = geo.groupby(key, sort=False)["_idx"].transform("min")
        geo = geo[geo["_idx"] == lowest].drop(columns="_idx")
    agg = {"value": ("value", "mean"), "unconverged": ("unconverged", "max"), "negative": ("negative", "max")}
    for bound in ("value_low", "value_high"):
        if bound in geo.columns:
            geo[bound] = pd.to_numeric(geo[bound], errors="coerce").astype("float64")
            agg[bound] = (bound, "mean")
    for extra in ("centered", "seed", "tokens"):
        if extra in geo.columns:
            agg[extra] = (extra, "first")
    if "tokens" in geo.columns:
        geo = geo.assign(tokens=pd.to_numeric(geo["tokens"], errors="coerce").astype("float64"))
    out = geo.groupby(key + ["step"], sort=True, dropna=False).agg(**agg).reset_index()
    out["step"] = out["step"].astype("int64")
    return out


def loss_curves(beh: pd.DataFrame) -> pd.DataFrame:
    """The task loss the scan recorded (behaviour rows ``metric == "loss"``, nats per answer token) as
    whole-model curves (``metric`` "loss", ``layer`` -1) beside the geometry's, so that the same onset rule,
    gap and nulls apply to it. Empty where the dataset has no loss rows (written before they were recorded)."""
    cols = CURVE_KEYS + ["metric", "layer", "step", "value", "tokens"]
    if beh.empty or "metric" not in beh.columns or not (beh["metric"].astype(str) == "loss").any():
        return pd.DataFrame(columns=cols)
    loss = with_defaults(beh[beh["metric"].astype(str) == "loss"])
    loss = loss[loss["step"].notna()].assign(value=lambda d: pd.to_numeric(d["value"], errors="coerce"),
                                             layer=-1, metric="loss")
    agg = {"value": ("value", "mean")}
    if "tokens" in loss.columns:   # the checkpoint's training tokens, as the geometry's curves carry them
        loss = loss.assign(tokens=pd.to_numeric(loss["tokens"], errors="coerce").astype("float64"))
        agg["tokens"] = ("tokens", "first")
    out = loss.groupby(CURVE_KEYS + ["metric", "layer", "step"], sort=True).agg(**agg).reset_index()
    out["step"] = out["step"].astype("int64")
    out["layer"] = out["layer"].astype("int64")
    return out


def clean_behavior(beh: pd.DataFrame) -> pd.DataFrame:
    beh = with_defaults(beh)
    beh = beh[beh["step"].notna()]
    metric = beh["metric"].astype(str)
    has_acc = beh.assign(_a=metric == "accuracy").groupby(["model", "suite"])["_a"].transform("any")
    beh = beh[(metric == "accuracy") | (~has_acc & (metric == "accuracy_norm"))]
    chance = beh["chance"] if "chance" in beh.columns else pd.Series(np.nan, index=beh.index)
    beh = beh.assign(accuracy=pd.to_numeric(beh["value"], errors="coerce").astype("float64"),
                     chance=pd.to_numeric(chance, errors="coerce").astype("float64"))
    tokens = beh["tokens"] if "tokens" in beh.columns else pd.Series(np.nan, index=beh.index)
    beh = beh.assign(tokens=pd.to_numeric(tokens, errors="coerce").astype("float64"))
    agg = {"accuracy": ("accuracy", "mean"), "chance": ("chance", "median"), "tokens": ("tokens", "first")}
    if "n_items" in beh.columns:  # for accuracy's binomial interval (the fewest items of repeated rows)
        beh = beh.assign(n_items=pd.to_numeric(beh["n_items"], errors="coerce").astype("float64"))
        agg["n_items"] = ("n_items", "min")
    out = beh.groupby(CURVE_KEYS + ["step"], sort=True).agg(**agg).reset_index()
    out["step"] = out["step"].astype("int64")
    return out


# ------------------------------------------------------------------------------------------ labelling

@lru_cache(maxsize=256)
def _header_difficulty(suite: str) -> str | None:
    try:
        from ckptgeo.suites.items import diagnostics_dir

        if safe_name(suite) != suite:  # a name read from a table: never a path out of the bundled folder
            return None
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


#: the difficulty classes a user may assign (``--difficulty SUITE=CLASS``): those the claims contrast (``easy``, ``hard``,
#: as ``ckptgeo demo`` records them) and the level labels the default gives (``L1``, ``L2``, ...). "early", "late" and
#: "not acquired" are not among them: the analysis derives those from the outcome itself.
DIFFICULTY_CLASSES = ("easy", "hard", "L<k>")


def check_difficulty(user: Mapping[str, str] | None, suites) -> None:
    """Refuse a ``difficulty`` mapping (``--difficulty``) that names a suite the dataset does not hold or a class
    outside :data:`DIFFICULTY_CLASSES`, naming the closest valid one.

    Raises
    ------
    InvalidParameterError
        An unknown suite or class.

    Examples
    --------
    >>> check_difficulty({"logic": "hardd"}, ["logic"])
    Traceback (most recent call last):
    ...
    ckptgeo.errors.InvalidParameterError: --difficulty logic=hardd: 'hardd' is not a difficulty class; use easy, hard or L<k> (e.g. L2). Did you mean 'hard'?
    """
    import difflib

    from ckptgeo.errors import InvalidParameterError

    known = sorted({str(s) for s in suites})
    for suite, cls in (user or {}).items():
        if suite not in known:
            close = difflib.get_close_matches(str(suite), known, n=1)
            raise InvalidParameterError(
                f"--difficulty {suite}={cls}: the dataset holds no suite {suite!r}"
                + (f"; did you mean {close[0]!r}?" if close else "") + f" Its suites: {', '.join(known) or 'none'}.",
                name="difficulty", value=suite)
        if not (str(cls) in ("easy", "hard") or re.fullmatch(r"L\d+", str(cls))):
            close = difflib.get_close_matches(str(cls).lower(), ["easy", "hard"], n=1)
            raise InvalidParameterError(
                f"--difficulty {suite}={cls}: {cls!r} is not a difficulty class; use easy, hard or L<k> (e.g. L2)."
                + (f" Did you mean {close[0]!r}?" if close else ""), name="difficulty", value=cls)


def difficulty_classes(acq: pd.DataFrame, user: Mapping[str, str] | None) -> dict[tuple[str, str], tuple[str, str]]:
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
