"""The event rules, each declared once, and the detector that applies them (:class:`EventRules`); the whole
analysis's settings (the rules plus the probe, null and verdict settings) extend it as
:class:`ckptgeo.analysis.config.AnalysisConfig`.

:class:`EventRules` declares each rule (acquisition threshold and window, recovery fraction, collapse-onset
fraction, the smallest drop that is a collapse, the grid resolution below which a gap is not a precursor) with
:func:`ckptgeo._settings.setting`: its default, what it admits, its description and its command-line flag.
From that one declaration come the ``ckptgeo analyze`` flags (:func:`ckptgeo._settings.add_flags`), the
monitor's options (:class:`ckptgeo.monitor.MonitorConfig` is an :class:`EventRules`), the checks
(:func:`ckptgeo._params.validate_params`) and the rules each output table carries in its Parquet metadata
(:meth:`ckptgeo.analysis.config.AnalysisConfig.rules`).

Its methods are the detector: the one place a rule's value is passed to the pure functions of
:mod:`ckptgeo.events.detect`. The analysis (every curve, and its nulls), the chance nulls of the claim table and
the live monitor all call them, so none of them can apply a rule with another value.

This module imports neither pandas nor torch, so the command line can build its flags from it cheaply.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ckptgeo._settings import Interval, setting, with_settings_doc
from ckptgeo.events import detect as ev

__all__ = ["EventRules"]


@dataclass(frozen=True)
class EventRules:
    """The rules that find events on a curve (fields), and the detector that applies them (methods).

    Attributes
    ----------
    {settings}
    """

    acc_threshold: float | None = setting(
        None, "Accuracy an acquired capability must exceed; None: 0.5, or halfway between chance and 1 where chance "
        ">= 0.5 (:func:`ckptgeo.events.detect.acquisition_threshold`).",
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
        "0.25: :mod:`ckptgeo.events.detect`).", admits=(Interval(float, 0, 1, closed="left"),), flag="--min-drop",
        help="a collapse needs RankMe this fraction of its first value below it (default %(default)s)")
    resolution_checkpoints: int = setting(
        ev.DEFAULT_RESOLUTION_CHECKPOINTS, "A gap of at most this many checkpoints (or one spacing in steps) is "
        "\"unresolved\", not a precursor.", admits=(Interval(int, 0, None),), flag="--resolution-checkpoints",
        help="a gap of at most this many checkpoints is 'unresolved', not a precursor (default %(default)s)")

    def acquisition(self, steps: Sequence[float], acc: Sequence[float], chance: float | None = None) -> ev.Acquisition:
        """Acquisition on an accuracy curve (:func:`~ckptgeo.events.detect.acquisition_step`)."""
        return ev.acquisition_step(steps, acc, self.acc_threshold, self.window, chance)

    def acquisition_at(self, steps: Sequence[float], step: int) -> ev.Acquisition:
        """An acquisition placed at ``step`` of the grid ``steps`` (the nulls;
        :func:`~ckptgeo.events.detect.acquisition_at`)."""
        return ev.acquisition_at(steps, step, window=self.window)

    def accuracy_onset(self, steps: Sequence[float], acc: Sequence[float], chance: float | None = None) -> ev.Onset:
        """Where accuracy starts to rise (:func:`~ckptgeo.events.detect.accuracy_onset`)."""
        return ev.accuracy_onset(steps, acc, chance, fraction=self.recovery)

    def collapse(self, steps: Sequence[float], values: Sequence[float], acquisition: int | None) -> ev.Collapse:
        """The collapse before ``acquisition`` (:func:`~ckptgeo.events.detect.collapse_point`)."""
        return ev.collapse_point(steps, values, acquisition, min_drop=self.min_drop)

    def recovery_onset(self, steps: Sequence[float], values: Sequence[float], collapse: ev.Collapse) -> ev.Onset:
        """Where the curve regains its drop after ``collapse`` (:func:`~ckptgeo.events.detect.recovery_onset`)."""
        return ev.recovery_onset(steps, values, collapse, recovery=self.recovery)

    def collapse_onset(self, steps: Sequence[float], values: Sequence[float]) -> ev.Onset:
        """Where a layer's RankMe falls to its collapse fraction (:func:`~ckptgeo.events.detect.collapse_onset`)."""
        return ev.collapse_onset(steps, values, fraction=self.collapse_fraction)

    def gap(self, acquisition: ev.Acquisition, onset: ev.Onset) -> ev.Gap:
        """The precursor gap of ``onset`` before ``acquisition`` (:func:`~ckptgeo.events.detect.precursor_gap`)."""
        return ev.precursor_gap(acquisition, onset, resolution_checkpoints=self.resolution_checkpoints)

    def curve_events(self, steps: Sequence[float], values: Sequence[float], acquisition: ev.Acquisition, *,
                     kind: str = "recovery", error: Sequence[float] | None = None) -> ev.CurveEvents:
        """Collapse, onset and precursor gap of one curve against ``acquisition``, ``error`` the values'
        measurement half-widths (:func:`~ckptgeo.events.detect.curve_events`): the rule every table, null and
        claim applies."""
        return ev.curve_events(steps, values, acquisition, kind=kind, min_drop=self.min_drop, recovery=self.recovery,
                               resolution_checkpoints=self.resolution_checkpoints, error=error)

    def change_onset(self, steps: Sequence[float], values: Sequence[float]) -> ev.Onset:
        """Where a curve starts to move (:func:`~ckptgeo.events.detect.onset_of_change`; the loss onset)."""
        return ev.onset_of_change(steps, values, fraction=self.recovery)


EventRules.__doc__ = with_settings_doc(EventRules.__doc__, EventRules)
