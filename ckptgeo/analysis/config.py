"""The settings and the result of an analysis, and the rules every table it writes carries.

:class:`AnalysisConfig` holds every rule and threshold (the event rules of :class:`ckptgeo.events.rules.EventRules`
and the probe, null and verdict settings, each declared once here; validated by :func:`validate_config`);
:class:`Analysis` is what :func:`ckptgeo.analysis.pipeline.analyze` returns: its tables by name
(``Analysis.tables``; the built-in ones also as attributes). :func:`write_table` writes one table as
Parquet with the rules in its metadata, :func:`read_rules` reads them back.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import ckptgeo.stats as st
from ckptgeo._io import atomic_path
from ckptgeo._settings import Interval, declared, replace_params, setting, validate_params, with_settings_doc
from ckptgeo.errors import InvalidParameterError
from ckptgeo.events import detect as ev
from ckptgeo.events.onsets import NOISE_RISE
from ckptgeo.events.rules import EventRules

__all__ = ["AnalysisConfig", "Analysis", "EVENTS_SCHEMA", "RULES_KEY", "config_from", "read_rules", "write_table",
           "validate_config"]


@dataclass(frozen=True)
class AnalysisConfig(EventRules):
    """Settings of one analysis: the event rules (:class:`~ckptgeo.events.rules.EventRules`, whose methods
    apply them) and the probe, null and verdict settings; every field is recorded in the events table and in
    each output table's Parquet metadata (:meth:`rules`). Each is declared once, with its flag where ``ckptgeo
    analyze`` has one (:func:`ckptgeo._settings.add_flags`).

    Attributes
    ----------
    {settings}
    """

    probe_margin: float = setting(
        0.1, "Probe accuracy over the better of majority-class chance and its shuffled-label control that counts "
        "as \"information present\".", admits=(Interval(float, 0, 1, closed="left"),), flag="--probe-margin",
        help="probe accuracy over the better of chance and its shuffled-label control that marks the probe onset "
             "(default %(default)s)")
    probe_alpha: float = setting(
        0.05, "Significance level of the probe's test (its ``p_value`` must be below it).",
        admits=(Interval(float, 0, 1, closed="left"),), flag="--probe-alpha",
        help="the probe onset also needs the probe's p-value below this (default %(default)s)")
    collapse_metrics: tuple[str, ...] = setting(
        ("rankme",), "Metrics analysed by collapse and recovery rather than onset of change; the first gives the "
        "collapse floors compared across sizes.", kind="tuple of str", coerce=tuple)
    n_permutations: int = setting(
        st.DEFAULT_N_PERMUTATIONS, "Relabellings of each permutation test (precursor rates, the difficulty slope, "
        "top-down).", admits=(Interval(int, 1, None),), flag="--n-permutations",
        help="relabellings per permutation test (default %(default)s)")
    n_noise_curves: int = setting(
        st.DEFAULT_N_NOISE_CURVES, "Synthetic noise copies per summary-layer curve and noise model (measurement "
        "jitter, iid at the curve's own variance, random walk: :mod:`ckptgeo.stats.noise`) for the detector's "
        "false-positive rates (0: skip).", admits=(Interval(int, 0, None),), flag="--noise-curves",
        help="noise curves per summary curve for the detector's false-positive rate (default %(default)s; 0: skip)")
    seed: int = setting(0, "Seed of every null (permutations, noise curves).", admits=(Interval(int, 0, None),),
                        flag="--seed", help="seed of the nulls (default %(default)s)")
    confidence: float = setting(st.DEFAULT_CONFIDENCE, "Coverage of every interval (binomial, null quantiles).",
                                admits=(Interval(float, 0, 1, closed="neither"),))
    alpha: float = setting(0.05, "Level at which a test's p-value gives a verdict (a rate \"above_null\", a "
                           "direction).", admits=(Interval(float, 0, 1, closed="neither"),))

    def rules(self) -> dict:
        """Every rule and threshold of this analysis, with the defaults it fell back to, as plain values (written
        into each output table's Parquet metadata under ``ckptgeo.rules``)."""
        d = dataclasses.asdict(self)
        d["collapse_metrics"] = list(self.collapse_metrics)
        d["acc_threshold_rule"] = ("explicit" if self.acc_threshold is not None else
                                   f"{ev.DEFAULT_ACC_THRESHOLD:g}, or (chance + 1) / 2 where chance >= 0.5")
        d["precursor_rule"] = (f"gap_steps > max spacing before onset and acquisition, and gap_checkpoints > "
                               f"{self.resolution_checkpoints}")
        d["collapse_rule"] = f"RankMe minimum before acquisition more than {self.min_drop:g} of its first value below it"
        d["censoring_rule"] = (f"above threshold at the last checkpoints, fewer than window={self.window}: censored")
        d["accuracy_onset_rule"] = (f"first checkpoint of the stretch held >= format level + {self.recovery:g} x "
                                    f"(held maximum - format level) up to acquisition (else the held maximum), at "
                                    f"least window={self.window} checkpoints; format level = max(chance, median of "
                                    f"the first {self.window} checkpoints from where accuracy reaches half its "
                                    f"pre-rise median); none within {NOISE_RISE:g} noise s.d.; far before "
                                    f"acquisition when in its first {self.far_onset:g} of checkpoints")
        d["null"] = ("acquisition steps permuted across counted runs (permutation p, one-sided: rate above the "
                     "null); detector on noise copies of each run's curve at its own schedule: measurement jitter, iid noise at "
                     "the curve's own variance, random walks of that spread (false-positive rates)")
        return d


AnalysisConfig.__doc__ = with_settings_doc(AnalysisConfig.__doc__, AnalysisConfig)


def config_from(settings: Mapping[str, Any], config: AnalysisConfig | None = None) -> AnalysisConfig:
    """``config`` (default: the declared defaults) with ``settings`` set by field name, each coerced as its
    declaration says (``collapse_metrics`` as a tuple) and checked (:func:`validate_config`).

    Raises
    ------
    InvalidParameterError
        A name that is no setting (close names suggested), or a value out of its declared range.
    """
    coerce = {f.name: s.coerce for f, s in declared(AnalysisConfig) if s.coerce is not None}
    settings = {k: coerce[k](v) if k in coerce and v is not None else v for k, v in settings.items()}
    cfg = replace_params(config if config is not None else AnalysisConfig(), settings, owner="analyze")
    validate_config(cfg)
    return cfg


def validate_config(cfg: AnalysisConfig) -> None:
    """Check every setting of ``cfg`` against its constraints.

    Raises
    ------
    InvalidParameterError
        A threshold, fraction or count out of range, or no ``collapse_metrics``.
    """
    validate_params(cfg, owner="analyze")
    if not cfg.collapse_metrics:
        raise InvalidParameterError("The 'collapse_metrics' parameter must name at least one metric. Got ().",
                                    name="collapse_metrics", value=())


def _table(name: str, doc: str) -> property:
    return property(lambda self: self.tables.get(name), doc=doc)


@dataclass(frozen=True, eq=False)
class Analysis:
    """What :func:`~ckptgeo.analysis.pipeline.analyze` found: every table its steps wrote, by name.

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
        The revisions left out and why (:data:`ckptgeo.analysis.inputs.LEFT_OUT_COLUMNS`).
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
        from ckptgeo.events.curves import run_rows
        from ckptgeo.analysis.words import status_words

        import pandas as pd

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


def __getattr__(name: str):
    # the events table's columns come from the store's schema (pyarrow), read only when asked for: the CLI builds
    # ``forecast`` and ``claims`` flags from the declarations above without loading pyarrow or pandas
    if name == "EVENTS_SCHEMA":
        from ckptgeo.store.schemas import EVENTS_COLUMNS

        return EVENTS_COLUMNS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

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



