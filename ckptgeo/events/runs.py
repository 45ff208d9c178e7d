"""One row per run, for a paper: the summary layer's events of each (model, suite, settings), as CSV and LaTeX.

::

    OUT/summary/
      runs.csv     model, task, level, size, seed, measure, layer, acquisition_step, collapse_step, floor,
                   onset_step, gap_steps, spacing_steps, status
      runs.tex     the same rows as a LaTeX ``tabular`` (booktabs rules), a row of units under the header,
                   to ``\\input`` into a paper

Fed from the events table (:func:`ckptgeo.analysis.pipeline.analyze`): a run is one (model, suite,
config_hash) curve family of ``measure`` (RankMe), read at its summary layer ``layer`` (the deepest).
Steps are training steps; ``floor`` is the collapse floor in the measure's unit (RankMe: effective
dimensions); ``gap_steps`` is acquisition - recovery onset; ``spacing_steps`` is the checkpoint spacing at
acquisition (the step's resolution); ``size`` the parameter
count the model name gives (``160M``, ``2.8B``), else the count the dataset's ``models.json`` records (a
monitored model: ``434K`` for a tiny copy-L1 run), else the size name of a ``ckptgeo train`` run (``tiny``), else empty; ``seed`` the
run's seed from
its name (``-s1``, ``-seed1``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Mapping

import pandas as pd

from ckptgeo._io import atomic_write_text
from ckptgeo.events.curves import model_size, run_identity, run_rows

__all__ = ["RUNS_COLUMNS", "RUNS_UNITS", "runs_table", "runs_latex", "write_runs_table", "write_runs_files", "params_text"]

#: the columns of the runs table, in order
RUNS_COLUMNS = ["model", "task", "level", "size", "seed", "measure", "layer", "acquisition_step", "collapse_step",
                "floor", "onset_step", "gap_steps", "spacing_steps", "status"]
#: the unit of each column with one (the row of units under runs.tex's header)
RUNS_UNITS = {"acquisition_step": "step", "collapse_step": "step", "onset_step": "step", "gap_steps": "steps",
              "spacing_steps": "steps", "layer": "hidden state"}
#: a measure's unit, for ``floor``
MEASURE_UNITS = {"rankme": "eff. dim."}


def params_text(n: float) -> str:
    """A parameter count as a paper writes it: ``160M``, ``2.8B``, ``410K``; ``""`` for NaN.

    Examples
    --------
    >>> params_text(2.8e9), params_text(1.6e8), params_text(393216.0), params_text(float("nan"))
    ('2.8B', '160M', '393K', '')
    """
    if n is None or not math.isfinite(n):
        return ""
    for scale, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= scale:
            return f"{n / scale:.3g}{unit}"
    return f"{n:.0f}"


def _size(model: str, model_size, counted: Mapping[str, int]) -> str:
    """``2.8B`` from the name's parameter count or shape; else the recorded count (``counted``); else the size
    name of a ``ckptgeo train`` run (``copy-L1-tiny-s0`` -> ``tiny``); else ``""``."""
    import re

    text = params_text(model_size(model)) or params_text(float(counted.get(model, math.nan)))
    if text:
        return text
    m = re.search(r"-L\d+-(?P<size>[a-z]+)(?:-s\d+)?$", str(model))
    return m.group("size") if m else ""


def runs_table(events: pd.DataFrame, *, metric: str = "rankme",
               n_parameters: Mapping[str, int] | None = None) -> pd.DataFrame:
    """One row per run (columns :data:`RUNS_COLUMNS`) from an events table, sorted by model, task and level.

    Parameters
    ----------
    events : DataFrame
        The events table (``events/events.parquet``).
    metric : str, default="rankme"
        The geometry measure whose collapse, floor and onset the row reports; uncentred rows are preferred.
    n_parameters : mapping of str to int, optional
        Model -> parameter count recorded with the dataset (:meth:`ckptgeo.store.dataset.Dataset.model_parameters`),
        the ``size`` of a model whose name gives none.

    Returns
    -------
    DataFrame
        Steps as nullable integers (missing: no such event), ``floor`` as float, ``level`` as a nullable
        integer (missing for a suite that is not a task level).
    """
    e = run_rows(events, metric)
    if e is None or e.empty:
        return pd.DataFrame(columns=RUNS_COLUMNS)
    rows = []
    for r in e.itertuples(index=False):
        run = run_identity(r.model, r.suite, getattr(r, "task", None))
        rows.append({"model": r.model, "task": run["task"], "level": run["level"], "size": _size(r.model, model_size, n_parameters or {}),
                     "seed": run["seed"], "measure": metric, "layer": r.layer,
                     "acquisition_step": r.acquisition_step, "collapse_step": r.collapse_step,
                     "floor": r.collapse_floor, "onset_step": r.onset_step, "gap_steps": r.gap_steps,
                     "spacing_steps": r.resolution_steps, "status": r.status})
    df = pd.DataFrame(rows, columns=RUNS_COLUMNS)
    for c in ("level", "seed", "layer", "acquisition_step", "collapse_step", "onset_step", "gap_steps", "spacing_steps"):
        df[c] = pd.array([None if pd.isna(v) else int(v) for v in df[c]], dtype="Int64")
    df["floor"] = df["floor"].astype(float)
    return df.sort_values(["model", "task", "level"], kind="stable", ignore_index=True)


_TEX = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{",
        "}": r"\}", "~": r"\textasciitilde{}", "^": r"\^{}"}


def _tex(text) -> str:
    """``text`` with LaTeX's special characters escaped."""
    return "".join(_TEX.get(ch, ch) for ch in str(text))


def _cell(v, floatfmt: str) -> str:
    if v is None or (not isinstance(v, str) and pd.isna(v)):
        return "--"
    if isinstance(v, float):
        return floatfmt.format(v)
    return _tex(v)


def _unit(column: str, table: pd.DataFrame) -> str:
    """The unit of a runs column (``floor``: its measure's, when the table has one measure)."""
    if column == "floor" and "measure" in table.columns and table["measure"].nunique() == 1:
        m = str(table["measure"].iloc[0])
        return MEASURE_UNITS.get(m, m)
    return RUNS_UNITS.get(column, "")


def runs_latex(table: pd.DataFrame, *, floatfmt: str = "{:.2f}") -> str:
    """The runs table as a LaTeX ``tabular`` with booktabs rules (``\\usepackage{booktabs}``); a missing
    value is ``--``.

    Examples
    --------
    >>> import pandas as pd
    >>> print(runs_latex(pd.DataFrame([{"model": "copy-L1_x", "floor": 4.356}])))
    \\begin{tabular}{lr}
    \\toprule
    model & floor \\\\
    \\midrule
    copy-L1\\_x & 4.36 \\\\
    \\bottomrule
    \\end{tabular}
    <BLANKLINE>
    """
    numeric = [pd.api.types.is_numeric_dtype(table[c]) for c in table.columns]
    lines = [r"\begin{tabular}{" + "".join("r" if n else "l" for n in numeric) + "}", r"\toprule",
             " & ".join(_tex(c) for c in table.columns) + r" \\"]
    units = [_unit(c, table) for c in table.columns]
    if any(units):
        lines.append(" & ".join(_tex(f"({u})") if u else "" for u in units) + r" \\")
    lines.append(r"\midrule")
    lines += [" & ".join(_cell(v, floatfmt) for v in row) + r" \\" for row in table.itertuples(index=False)]
    lines += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(lines) + "\n"


def write_runs_table(events: pd.DataFrame, folder: str | Path, *, metric: str = "rankme") -> tuple[Path, Path]:
    """Write ``runs.csv`` and ``runs.tex`` (:func:`runs_table`) into ``folder``, atomically.

    Returns
    -------
    (Path, Path)
        The CSV and the LaTeX file.
    """
    return write_runs_files(runs_table(events, metric=metric), folder)


def write_runs_files(table: pd.DataFrame, folder: str | Path) -> tuple[Path, Path]:
    """Write a :func:`runs_table` as ``runs.csv`` and ``runs.tex`` into ``folder``, atomically (CSV, LaTeX)."""
    folder = Path(folder)
    csv = atomic_write_text(folder / "runs.csv", table.to_csv(index=False, float_format="%.4g"))
    tex = atomic_write_text(folder / "runs.tex", runs_latex(table))
    return csv, tex
