"""The settings and the result of an analysis, and the rules every table it writes carries.

:class:`AnalysisConfig` holds every rule and threshold (declared in :mod:`ckptgeo.analysis.rules`, re-exported
here; validated by :func:`validate_config`);
:class:`Analysis` is what :func:`ckptgeo.analysis.summary.analyze` returns: its tables by name
(``Analysis.tables``; the built-in ones also as attributes). :func:`write_table` writes one table as
Parquet with the rules in its metadata, :func:`read_rules` reads them back.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import pandas as pd

from ckptgeo._io import atomic_path
from ckptgeo.analysis.rules import AnalysisConfig, config_from, validate_config
from ckptgeo.store.schemas import EVENTS_COLUMNS

__all__ = ["AnalysisConfig", "Analysis", "EVENTS_SCHEMA", "RULES_KEY", "config_from", "read_rules", "write_table",
           "validate_config"]


def _table(name: str, doc: str) -> property:
    return property(lambda self: self.tables.get(name), doc=doc)


@dataclass(frozen=True, eq=False)
class Analysis:
    """What :func:`~ckptgeo.analysis.summary.analyze` found: every table its steps wrote, by name.

    The built-in tables (each a DataFrame, possibly empty) are also attributes: ``analysis.events`` is
    ``analysis.tables["events"]``. A step that an installed package adds (:mod:`ckptgeo.analysis.steps`) puts
    its tables in :attr:`tables` under the names it declares.

    Attributes
    ----------
    tables : mapping of str to object
        Every table by name: the inputs (``curves``, ``accuracy``, ``probes``, ``left_out``, ``geometry``,
        ``behavior``, ``revisions``) and what each step wrote, in the order the steps ran.
    events : DataFrame
        One row per (model, suite, config_hash, metric, layer): see :data:`EVENTS_SCHEMA`.
    acquisitions : DataFrame
        One row per behaviour curve (model, suite, config_hash).
    precursor_rates, precursor_rates_by_model : DataFrame
        Precursor rate by (metric, centered, difficulty) [and model, size].
    top_down : DataFrame
        Spearman correlation of layer depth with collapse onset, per curve family.
    probe_lead : DataFrame
        Probe onset against acquisition, per (model, suite, config_hash, layer).
    across_sizes : DataFrame
        Collapse floors / acquisition steps of each pair of models of different sizes (parameters in the name,
        else depth) that share suites: their means over the shared suites and Spearman correlation (3+ suites).
    seed_spread : DataFrame
        Precursor rates across seeds: mean, std, min, max, and the pooled rate with its binomial interval.
    difficulty_slope : DataFrame
        Per (metric, centered): slope of the gap in checkpoints on the acquisition step (per 1000 steps), beside
        the slope the permutation null gives (later acquisition leaves room for longer gaps by construction).
    seed_events : DataFrame
        Per (base model, suite, metric) with several seeds: the spread of acquisition steps and gaps across seeds.
    curves : DataFrame
        The cleaned geometry curves used (model, suite, config_hash, metric, layer, step, value).
    accuracy : DataFrame
        The cleaned behaviour curves used (model, suite, config_hash, step, accuracy, chance).
    probes : DataFrame or None
        The dataset's probes table (grouped revisions left out), for the probe figures.
    left_out : DataFrame or None
        The revisions left out and why (:data:`ckptgeo.analysis.tables.LEFT_OUT_COLUMNS`).
    config : AnalysisConfig
    root, out : Path
        The dataset read and the folder written (the same unless ``out`` was given).
    written : tuple of Path
        The files written, in the order the steps ran (empty with ``write=False``).
    x : {"steps", "tokens"}
        The axis of the figures and of the events a reader sees.
    report : Path or None
        The ``report.html`` written by the public ``ckptgeo.analyze`` (:func:`ckptgeo.analysis.report.analyze`);
        None when no report was written.
    steps : tuple of str
        The steps run, in dependency order.
    folders : mapping of str to str
        Table name -> the folder under ``out`` its Parquet file goes to (``events``, ``summary``, ``compare``).
    """

    tables: Mapping[str, Any]
    config: AnalysisConfig
    root: Path
    out: Path
    written: tuple[Path, ...] = ()
    x: str = "steps"
    steps: tuple[str, ...] = ()
    folders: Mapping[str, str] = field(default_factory=dict)
    report: Path | None = None

    events = _table("events", "One row per curve (model, suite, config_hash, metric, layer).")
    acquisitions = _table("acquisitions", "One row per behaviour curve (model, suite, config_hash).")
    precursor_rates = _table("precursor_rates", "Precursor rate by (metric, centered, difficulty).")
    precursor_rates_by_model = _table("precursor_rates_by_model", "Precursor rate by model, metric, difficulty.")
    top_down = _table("top_down", "Order of collapse onsets over depth, per curve family, tested.")
    probe_lead = _table("probe_lead", "Probe onset against acquisition, per (model, suite, config_hash, layer).")
    across_sizes = _table("across_sizes", "Collapse floors and acquisition steps across model sizes.")
    seed_spread = _table("seed_spread", "Precursor rates across seeds.")
    difficulty_slope = _table("difficulty_slope", "Slope of the gap on the acquisition step, beside the null's.")
    seed_events = _table("seed_events", "Acquisition steps and gaps across seeds.")
    curves = _table("curves", "The cleaned geometry curves used.")
    accuracy = _table("accuracy", "The cleaned behaviour curves used.")
    probes = _table("probes", "The dataset's probes table (grouped revisions left out).")
    left_out = _table("left_out", "The revisions left out and why.")

    def __repr__(self) -> str:
        """One paragraph: what was analysed, what it found, where it went; the tables are on :attr:`tables`."""
        from ckptgeo.analysis.curves import run_rows
        from ckptgeo.analysis.words import status_words

        e = self.events if isinstance(self.events, pd.DataFrame) else pd.DataFrame()
        metrics = sorted(e["metric"].unique()) if len(e) else []
        rows = run_rows(e, "rankme" if "rankme" in metrics else metrics[0]) if metrics else e
        counts = rows["status"].value_counts() if len(rows) else pd.Series(dtype=int)
        found = ", ".join(f"{n} {status_words(s, short=True)}" for s, n in counts.items()) or "no curves"
        tables = [n for n in self.folders]
        lines = [f"Analysis of {self.root}: {len(rows)} run{'s' if len(rows) != 1 else ''}, "
                 f"{e['suite'].nunique() if len(e) else 0} suite(s), measures {', '.join(metrics) or 'none'}",
                 f"  runs by status: {found}",
                 f"  tables: {', '.join(tables) or 'none'} (analysis.tables[name], or analysis.events ...)",
                 f"  written to {self.out}" + (f"; open {self.report}" if self.report is not None else "")]
        return "\n".join(lines)

    def summary_tables(self) -> dict[str, pd.DataFrame]:
        """The tables written to ``summary/`` as Parquet, by file name (without ``.parquet``), in step order."""
        return {name: self.tables[name] for name, folder in self.folders.items() if folder == "summary"}


#: column names of the events table, in order (its schema: ``ckptgeo.store.schemas.SCHEMAS["events"]``).
EVENTS_SCHEMA = EVENTS_COLUMNS

# ------------------------------------------------------------------------------------------ writing

#: Parquet metadata key under which every analysis table carries its rules (:meth:`AnalysisConfig.rules`).
RULES_KEY = b"ckptgeo.rules"


def read_rules(path: str | os.PathLike) -> dict:
    """The rules and thresholds an analysis table was made with (its ``ckptgeo.rules`` metadata); {} if none."""
    import pyarrow.parquet as pq

    meta = pq.read_schema(path).metadata or {}
    return json.loads(meta[RULES_KEY]) if RULES_KEY in meta else {}


def write_table(df: pd.DataFrame, path: Path, schema=None, rules: Mapping | None = None) -> Path:
    """Write ``df`` to ``path`` as Parquet, atomically, with ``rules`` (:meth:`AnalysisConfig.rules`) as JSON in
    its ``ckptgeo.rules`` metadata; ``schema`` (a ``pyarrow.Schema``) fixes the column types. Returns ``path``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(df, schema=schema, preserve_index=False)
    if rules is not None:
        table = table.replace_schema_metadata({**(table.schema.metadata or {}),
                                               RULES_KEY: json.dumps(dict(rules), default=str).encode()})
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)
    return path



