"""The analysis settings, each declared once: the event rules and the detector that applies them
(:class:`EventRules`), and the whole analysis's settings (:class:`AnalysisConfig`: the rules, the probe, null
and verdict settings).

:class:`EventRules` declares each rule (acquisition threshold and window, recovery fraction, collapse-onset
fraction, the smallest drop that is a collapse, the grid resolution below which a gap is not a precursor) with
:func:`ckptgeo._settings.setting`: its default, what it admits, its description and its command-line flag.
From that one declaration come the ``ckptgeo analyze`` flags (:func:`ckptgeo._settings.add_flags`), the
monitor's options (:class:`ckptgeo.monitor.MonitorConfig` is an :class:`EventRules`), the checks
(:func:`ckptgeo._params.validate_params`) and the rules each output table carries in its Parquet metadata
(:meth:`ckptgeo.analysis.config.AnalysisConfig.rules`).

Its methods are the detector: the one place a rule's value is passed to the pure functions of
:mod:`ckptgeo.analysis.events`. The analysis (every curve, and its nulls), the chance nulls of the claim table and
the live monitor all call them, so none of them can apply a rule with another value.

This module imports neither pandas nor torch, so the command line can build its flags from it cheaply.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from ckptgeo._settings import (Interval, declared, replace_params, setting, validate_params,
                               with_settings_doc)
from ckptgeo.analysis import events as ev
from ckptgeo.analysis import stats as st
from ckptgeo.errors import InvalidParameterError

__all__ = ["EventRules", "AnalysisConfig", "config_from", "validate_config"]


@dataclass(frozen=True)
class EventRules:
    """The rules that find events on a curve (fields), and the detector that applies them (methods).

    Attributes
    ----------
    {settings}
    """

    acc_threshold: float | None = setting(
        None, "Accuracy an acquired capability must exceed; None: 0.5, or halfway between chance and 1 where chance "
        ">= 0.5 (:func:`ckptgeo.analysis.events.acquisition_threshold`).",
        admits=(Interval(float, 0, 1, closed="left"), None), flag="--acc-threshold",
        help="accuracy threshold (default 0.5; halfway between chance and 1 where chance >= 0.5)")
    window: int = setting(
        ev.DEFAULT_WINDOW, "Consecutive checkpoints accuracy must stay above the threshold (acquisition).",
        admits=(Interval(int, 1, None),), flag="--window",
        help="consecutive checkpoints above threshold (default %(default)s)")
    recovery: float = setting(
        ev.DEFAULT_RECOVERY, "Fraction of the drop regained (recovery onset) or of the departure moved (onset of "
        "change; accuracy's own onset).", admits=(Interval(float, 0, 1, closed="right"),), flag="--recovery",
        help="fraction of the RankMe drop regained / of a measure's departure moved (default %(default)s)")
    collapse_fraction: float = setting(
        ev.DEFAULT_COLLAPSE_FRACTION, "Fraction of its first value a layer's RankMe must fall to (collapse onset).",
        admits=(Interval(float, 0, 1, closed="right"),))
    min_drop: float = setting(
        ev.DEFAULT_MIN_DROP, "A collapse needs RankMe more than this fraction of its first value below it (why "
        "0.25: :mod:`ckptgeo.analysis.events`).", admits=(Interval(float, 0, 1, closed="left"),), flag="--min-drop",
        help="a collapse needs RankMe this fraction of its first value below it (default %(default)s)")
    resolution_checkpoints: int = setting(
        ev.DEFAULT_RESOLUTION_CHECKPOINTS, "A gap of at most this many checkpoints (or one spacing in steps) is "
        "\"unresolved\", not a precursor.", admits=(Interval(int, 0, None),), flag="--resolution-checkpoints",
        help="a gap of at most this many checkpoints is 'unresolved', not a precursor (default %(default)s)")

    def acquisition(self, steps: Sequence[float], acc: Sequence[float], chance: float | None = None) -> ev.Acquisition:
        """Acquisition on an accuracy curve (:func:`~ckptgeo.analysis.events.acquisition_step`)."""
        return ev.acquisition_step(steps, acc, self.acc_threshold, self.window, chance)

    def acquisition_at(self, steps: Sequence[float], step: int) -> ev.Acquisition:
        """An acquisition placed at ``step`` of the grid ``steps`` (the nulls;
        :func:`~ckptgeo.analysis.events.acquisition_at`)."""
        return ev.acquisition_at(steps, step, window=self.window)

    def accuracy_onset(self, steps: Sequence[float], acc: Sequence[float], chance: float | None = None) -> ev.Onset:
        """Where accuracy starts to rise (:func:`~ckptgeo.analysis.events.accuracy_onset`)."""
        return ev.accuracy_onset(steps, acc, chance, fraction=self.recovery)

    def collapse(self, steps: Sequence[float], values: Sequence[float], acquisition: int | None) -> ev.Collapse:
        """The collapse before ``acquisition`` (:func:`~ckptgeo.analysis.events.collapse_point`)."""
        return ev.collapse_point(steps, values, acquisition, min_drop=self.min_drop)

    def recovery_onset(self, steps: Sequence[float], values: Sequence[float], collapse: ev.Collapse) -> ev.Onset:
        """Where the curve regains its drop after ``collapse`` (:func:`~ckptgeo.analysis.events.recovery_onset`)."""
        return ev.recovery_onset(steps, values, collapse, recovery=self.recovery)

    def collapse_onset(self, steps: Sequence[float], values: Sequence[float]) -> ev.Onset:
        """Where a layer's RankMe falls to its collapse fraction (:func:`~ckptgeo.analysis.events.collapse_onset`)."""
        return ev.collapse_onset(steps, values, fraction=self.collapse_fraction)

    def gap(self, acquisition: ev.Acquisition, onset: ev.Onset) -> ev.Gap:
        """The precursor gap of ``onset`` before ``acquisition`` (:func:`~ckptgeo.analysis.events.precursor_gap`)."""
        return ev.precursor_gap(acquisition, onset, resolution_checkpoints=self.resolution_checkpoints)

    def curve_events(self, steps: Sequence[float], values: Sequence[float], acquisition: ev.Acquisition, *,
                     kind: str = "recovery", error: Sequence[float] | None = None) -> ev.CurveEvents:
        """Collapse, onset and precursor gap of one curve against ``acquisition``, ``error`` the values'
        measurement half-widths (:func:`~ckptgeo.analysis.events.curve_events`): the rule every table, null and
        claim applies."""
        return ev.curve_events(steps, values, acquisition, kind=kind, min_drop=self.min_drop, recovery=self.recovery,
                               resolution_checkpoints=self.resolution_checkpoints, error=error)

    def change_onset(self, steps: Sequence[float], values: Sequence[float]) -> ev.Onset:
        """Where a curve starts to move (:func:`~ckptgeo.analysis.events.onset_of_change`; the loss onset)."""
        return ev.onset_of_change(steps, values, fraction=self.recovery)


EventRules.__doc__ = with_settings_doc(EventRules.__doc__, EventRules)


@dataclass(frozen=True)
class AnalysisConfig(EventRules):
    """Settings of one analysis: the event rules (:class:`~ckptgeo.analysis.rules.EventRules`, whose methods
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
        "jitter, iid at the curve's own variance, random walk: :mod:`ckptgeo.analysis.nulls`) for the detector's "
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
