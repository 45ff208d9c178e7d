"""Precursor-gap analysis of a ckptgeo dataset: events per curve and the summaries built on them.

:func:`analyze` reads the dataset's ``geometry``, ``behavior`` and (if present) ``probes`` and
``revisions`` tables, applies :mod:`ckptgeo.events.detect` to every (model, suite, config_hash,
metric, layer) curve, and writes what it finds next to the input::

    DIR/
    ├── geometry/ behavior/ probes/ revisions/   (input, written by ``ckptgeo scan``)
    ├── events/
    │   └── events.parquet          one row per (model, suite, config_hash, metric, layer)
    └── summary/
        ├── acquisitions.parquet    one row per (model, suite, config_hash) of behaviour
        ├── precursor_rates.parquet by metric and difficulty class (summary layer, see below)
        ├── precursor_rates_by_model.parquet
        ├── top_down.parquet        Spearman(depth, collapse onset) per model and suite
        ├── probe_lead.parquet      per (model, suite, layer)
        ├── across_sizes.parquet    collapse floors / acquisition steps of one task at different sizes
        ├── seed_spread.parquet     precursor rates across seeds (empty with one seed)
        ├── difficulty_slope.parquet, seed_events.parquet
        └── runs.csv, runs.tex      one row per run for a paper (:mod:`ckptgeo.events.runs`)
    compare/compare.parquet         the cross-checkpoint step, where the dataset holds artifacts/

Each table is written by a registered **step** (:mod:`ckptgeo.analysis.steps`; the built-ins are
:mod:`ckptgeo.analysis.builtin_steps`) that declares the tables it reads and writes; :func:`analyze` runs
every step in dependency order, including those installed packages add (entry-point group
``ckptgeo.analysis_steps``), and returns them all on :attr:`Analysis.tables`. The code is split by concern:
:mod:`~ckptgeo.analysis.config` (settings, result, rules metadata), :mod:`~ckptgeo.analysis.curve_events`
(events per curve), :mod:`~ckptgeo.analysis.across_runs` (rates, nulls, top-down, probe lead, sizes,
seeds), :mod:`~ckptgeo.analysis.view` (the console view); this module reads the dataset and drives the steps.

Each file is written to a hidden temporary name in its folder and moved into place with
``os.replace`` (:func:`ckptgeo._io.atomic_path`); readers of the folder skip names starting with ``.``.

Choices made where docs/definitions.md leaves room (all recorded or documented; reading and labelling live in
:mod:`ckptgeo.analysis.inputs`):

* Revisions whose weights another revision at another training point also serves, or that share a weight
  file with one (a group: pythia#205, #206), are left out of every table, the whole group, unless
  ``keep_grouped`` keeps one member on purpose (:func:`ckptgeo.analysis.inputs.leave_out_grouped`;
  ``Analysis.left_out`` says which and why). Remaining rows at the same (curve, step) are averaged.
* Measures with an eigenvalue ``index`` (Hessian top-k) use their lowest index (the top eigenvalue).
* A geometry curve takes its accuracy from the behaviour rows of the same (model, suite) with the
  same ``config_hash``; failing that, the only behaviour config; failing that, the one with most
  checkpoints. Behaviour metric ``accuracy`` is used, ``accuracy_norm`` where it is absent.
* RankMe curves (``collapse_metrics``) get collapse, recovery onset and collapse onset; every other
  metric gets an onset of change (docs/definitions.md#onset-of-change).
* Rates are taken at the **summary layer** of each curve family: the deepest layer (the output
  side, after the final layer norm) for per-layer measures, ``-1`` for whole-model ones. Curves
  never acquired, without data, or acquired at the first checkpoint (censored) are counted apart,
  not in the denominator.
* Difficulty class: a user mapping (``difficulty=``, ``--difficulty``) first; else the class the dataset
  records in ``difficulty.json`` (``ckptgeo demo`` records hard/easy by the studies' rule); else ``L<level>`` from a suite named
  ``task-L<level>``; else the ``difficulty`` of a bundled suite's header; else, per model, "early" or
  "late" acquisition around that model's median acquisition step ("not acquired" for the rest).
* Model size is parsed from the model name (``160m``, ``2.8b``, or ``<layers>x<d_model>`` as
  12·layers·d_model² parameters); NaN when it cannot be, and models then sort by depth and name.
* Seeds: a model named ``<base>-seed<k>`` / ``<base>-s<k>`` is seed ``k`` of ``<base>``; otherwise
  several values of the ``seed`` column for one model count as seeds.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Mapping

import pandas as pd

from ckptgeo.analysis.config import (EVENTS_SCHEMA, RULES_KEY, Analysis, AnalysisConfig, config_from, read_rules,
                                     write_table)
from ckptgeo.analysis.steps import INPUTS, all_steps, order_steps, run_steps
from ckptgeo.events.curves import CURVE_KEYS
from ckptgeo.analysis.inputs import (check_difficulty, clean_behavior, clean_geometry, loss_curves, require_columns,
                                    check_x, leave_out_grouped, model_size, split_seed)
from ckptgeo.analysis.view import EVENT_VIEW, events_legend, events_text, events_view, read_runs, run_labels
from ckptgeo.errors import DatasetLayoutError
from ckptgeo.store.dataset import read_difficulty, read_table
from ckptgeo.store.schemas import SCHEMAS

__all__ = [
    "AnalysisConfig", "Analysis", "analyze", "events_text", "events_view", "events_legend", "read_runs", "run_labels",
    "read_table", "model_size", "split_seed", "EVENTS_SCHEMA", "EVENT_VIEW", "RULES_KEY", "read_rules",
    "check_analysis_out",
]

logger = logging.getLogger(__name__)


def check_analysis_out(out: str | os.PathLike, dataset: str | os.PathLike | None = None) -> None:
    """Refuse an analysis output folder that would overwrite someone's files.

    Accepted: a missing or empty folder (dot files aside), the dataset analysed (``dataset``; any ckptgeo
    dataset when None) and an earlier analysis output (``events/events.parquet``).

    Raises
    ------
    DatasetLayoutError
        ``out`` is a file, another dataset than ``dataset`` (its events would be replaced by this one's),
        or a non-empty folder of neither kind.
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise DatasetLayoutError(f"--out {out} is a file, not a folder; choose another --out folder.", path=str(out))
    if dataset is not None and (out / "ckptgeo.json").is_file() and out.resolve() != Path(dataset).resolve():
        raise DatasetLayoutError(
            f"--out {out} is another ckptgeo dataset than {dataset}; writing this analysis there would replace its "
            f"events and report. Choose a new or empty --out folder (or leave --out out to write into {dataset}).",
            path=str(out))
    if not out.is_dir() or (out / "ckptgeo.json").is_file() or (out / "events" / "events.parquet").is_file():
        return
    if any(not p.name.startswith(".") for p in out.iterdir()):
        raise DatasetLayoutError(
            f"--out {out} is not empty and is neither a ckptgeo dataset (no ckptgeo.json) nor an earlier analysis "
            f"(no events/events.parquet); refusing to write report.md, figures/, events/ and summary/ into it. "
            f"Choose a new or empty --out folder.", path=str(out))



def analyze(dir: str | os.PathLike, *, out: str | os.PathLike | None = None,
            difficulty: Mapping[str, str] | None = None, write: bool = True,
            keep_grouped: str | list[str] | None = None, x: str = "steps", config: AnalysisConfig | None = None,
            **settings) -> Analysis:
    """Find acquisition, collapse, recovery and precursor gaps in a scanned dataset.

    Parameters
    ----------
    dir : path
        A ckptgeo dataset (``geometry/`` and ``behavior/`` tables; ``probes/`` and ``revisions/`` used
        when present).
    out : path or None, default=None
        Where ``events/`` and ``summary/`` go; None: ``dir`` itself.
    difficulty : mapping of str to str or None, default=None
        Difficulty class per suite, overriding the dataset's recorded classes (``difficulty.json``,
        :func:`ckptgeo.store.dataset.read_difficulty`) and the defaults (see the module docstring).
    write : bool, default=True
        Write ``events/events.parquet`` and ``summary/*.parquet`` (atomically), each with every rule and
        threshold in its Parquet metadata (:func:`read_rules`).
    keep_grouped : {None, "latest"} or list of str, default=None
        Revisions serving the same weights as another are left out whole; ``"latest"`` keeps the latest of each
        group, a list keeps those named (:func:`ckptgeo.analysis.inputs.leave_out_grouped`).
    x : {"steps", "tokens"}, default="steps"
        The axis of figures and of the events a reader sees. Events carry both: ``*_step`` and ``*_tokens``
        (:func:`ckptgeo.analysis.inputs.events_in_tokens`); "tokens" needs the dataset's ``tokens`` column.
    config : AnalysisConfig or None, default=None
        The analysis settings (:class:`~ckptgeo.analysis.config.AnalysisConfig`: the event rules of
        :class:`~ckptgeo.events.rules.EventRules`, the probe, null and verdict settings); None: the defaults.
    **settings
        Any field of :class:`~ckptgeo.analysis.config.AnalysisConfig` by name, set on ``config``
        (``min_drop=0.3``, ``window=5``, ``n_noise_curves=0``); its declaration gives the default and the range.

    Returns
    -------
    Analysis
        Every table by name (``Analysis.tables``; the built-in ones also as attributes, ``Analysis.events``).

    Raises
    ------
    DatasetLayoutError
        ``dir`` has no geometry or behaviour table, or one lacks required columns; ``out`` is a file, or a
        non-empty folder that is neither a dataset nor an earlier analysis (:func:`check_analysis_out`).
    InvalidParameterError
        A threshold, fraction or window is out of range; ``x`` is not "steps" or "tokens", or is "tokens" and
        some curve records no tokens; ``difficulty`` names a suite the dataset does not hold, or a class other
        than easy, hard or L<k> (:func:`ckptgeo.analysis.inputs.check_difficulty`).
    AnalysisStepError
        The registered steps do not fit together: one reads a table that no step writes, two write one table,
        or they read each other's tables in a cycle (:mod:`ckptgeo.analysis.steps`).

    References
    ----------
    Billa, "The Geometric Anatomy of Capability Acquisition in Transformers", arXiv:2602.15997.
    """
    cfg = config_from(settings, config)
    root = Path(dir)
    if not root.is_dir():
        raise DatasetLayoutError(f"Dataset folder {root} does not exist; run `ckptgeo scan` first.", path=str(root))
    if write and out is not None:
        check_analysis_out(out, dataset=root)
    steps = order_steps(all_steps())   # before any work: a missing table or a cycle is a one-line error
    inputs = read_inputs(root, keep_grouped)
    check_x(x, inputs["curves"], inputs["accuracy"])
    check_difficulty(difficulty, inputs["accuracy"]["suite"].unique())
    out = Path(out) if out is not None else root
    difficulty = {**read_difficulty(root), **(difficulty or {})} or None   # the user's first, then recorded
    tables = run_steps(steps, inputs, config=cfg, root=root, out=out, difficulty=difficulty)
    folders = {t: s.folder for s in steps if s.folder is not None and s.writer is None for t in s.writes
               if isinstance(tables[t], pd.DataFrame)}
    written: list[Path] = []
    if write:
        rules = cfg.rules()
        for s in (s for s in steps if s.folder is not None):
            for t in (t for t in s.writes if isinstance(tables[t], pd.DataFrame)):
                if s.writer is not None:
                    written.extend(s.writer(tables[t], out / s.folder))
                else:
                    written.append(write_table(tables[t], out / s.folder / f"{t}.parquet", SCHEMAS.get(t),
                                               rules if s.rules else None))
        logger.info("wrote %d events and %d files to %s", len(tables["events"]), len(written), out)
    return Analysis(tables=tables, config=cfg, root=root, out=out, written=tuple(written), x=x,
                    steps=tuple(s.name for s in steps), folders=folders)


def read_inputs(root: Path, keep_grouped=None) -> dict[str, pd.DataFrame]:
    """The tables every step may read (:data:`ckptgeo.analysis.steps.INPUTS`): the dataset's tables with grouped
    revisions left out, and the cleaned geometry and behaviour curves (the task loss among the curves). The one
    reading of a dataset, used by :func:`analyze` and by the live forecast (:mod:`ckptgeo.forecasting.live`), so
    both see the same runs.

    Raises
    ------
    DatasetLayoutError
        ``root`` holds neither a geometry nor a behaviour table, or one lacks required columns."""
    geo, beh = read_table(root, "geometry"), read_table(root, "behavior")
    if geo.empty and beh.empty:
        hint = (f" It is a study folder: give {Path(root) / 'dataset'}." if (Path(root) / "dataset").is_dir() else
                " Is it a ckptgeo dataset (the --out folder of `ckptgeo scan`)?")
        raise DatasetLayoutError(f"{root} holds neither a geometry/ nor a behavior/ table.{hint}", path=str(root))
    probes, revs = read_table(root, "probes"), read_table(root, "revisions")
    kept, left_out = leave_out_grouped({"geometry": geo, "behavior": beh, "probes": probes}, revs, keep=keep_grouped)
    geo, beh, probes = kept["geometry"], kept["behavior"], kept["probes"]
    if not geo.empty:
        require_columns(geo, "geometry", ("model", "suite", "step", "metric", "layer", "value"), root)
        curves = clean_geometry(geo)
    else:
        curves = pd.DataFrame(columns=CURVE_KEYS + ["metric", "layer", "step", "value"])
    if not beh.empty:
        require_columns(beh, "behavior", ("model", "suite", "step", "metric", "value"), root)
        accuracy = clean_behavior(beh)
        loss = loss_curves(beh)
        if len(loss):
            curves = pd.concat([curves, loss], ignore_index=True) if len(curves) else loss
    else:
        accuracy = pd.DataFrame(columns=CURVE_KEYS + ["step", "accuracy", "chance"])
    if not probes.empty:
        require_columns(probes, "probes", ("model", "suite", "step", "layer", "accuracy", "control_accuracy"), root)
    tables = {"geometry": geo, "behavior": beh, "probes": probes, "revisions": revs, "curves": curves,
              "accuracy": accuracy, "left_out": left_out}
    assert set(tables) == set(INPUTS)
    return tables
