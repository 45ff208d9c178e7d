"""Live events: collapse, recovery onset and acquisition, reported as the curve arrives.

Every event is what :mod:`ckptgeo.events.detect` finds on the curve measured so far (the same
functions ``ckptgeo analyze`` applies afterwards), reported the first time it can be found, together
with how long after its own step it became known and whether a later checkpoint can still move it.

What can be known online, and when:

* **Acquisition** at step ``s`` needs accuracy above the threshold at ``s`` and the following
  ``window - 1`` checkpoints, so it is reported at the last of them (``delay_steps`` = that checkpoint
  minus ``s``). Once reported it is final: later checkpoints cannot change the first qualifying run.
* **Collapse** (the RankMe minimum before acquisition) is reported when the lowest value so far has
  *held*: ``window`` further checkpoints did not go below it. It stays provisional until acquisition is
  confirmed, because a deeper minimum may still come; if one does and holds, a revised collapse is
  reported. At acquisition it becomes final (the offline definition only looks before acquisition).
* **Recovery onset** (the first checkpoint after the collapse at which RankMe regained ``recovery`` of
  the drop) is reported as soon as the collapse it refers to has been reported and the level is
  reached; it is provisional for the same reason and final from acquisition on. A recovery after
  acquisition (lagging) is final when seen.

The acquisition event carries the precursor gap (acquisition step minus recovery onset) at the tracked layers,
which is then the value ``ckptgeo analyze`` computes on the finished curve, with the same rules, declared once in
:class:`ckptgeo.events.rules.EventRules` and applied by its methods: a collapse needs RankMe more than
``min_drop`` (default 0.25) of its first value below it, and the gap is given in steps and checkpoints with its
interval from the checkpoint grid; a gap within one checkpoint spacing is "unresolved", not a precursor
(:func:`ckptgeo.events.detect.precursor_gap`). It also carries accuracy's own onset (the start of its final rise
from its format level, :meth:`ckptgeo.events.rules.EventRules.accuracy_onset`) on the curve so far; the analysis
of the finished run may place it later, since accuracy's highest held level can still grow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ckptgeo._settings import replace_params, validate_params
from ckptgeo.events import detect as ev
from ckptgeo.events.rules import EventRules

__all__ = ["LiveEvent", "LiveTracker"]


@dataclass(frozen=True)
class LiveEvent:
    """One event found while training.

    Attributes
    ----------
    kind : {"collapse", "recovery", "acquisition"}
    suite : str
    layer : int or None
        The RankMe layer (None for acquisition).
    step : int
        Where the event lies on the curve (training steps).
    reported_at : int
        The measuring step at which it was first found.
    value : float
        The collapse floor, RankMe at the recovery onset, or accuracy at acquisition.
    final : bool
        Whether later checkpoints can no longer move it (see the module docstring).
    revised : bool
        It replaces an earlier report of the same kind and layer.
    gap_steps : int or None
        Acquisition only: acquisition step minus the recovery onset of the deepest tracked layer.
    message : str
        The log line.
    gap_status : str or None
        Acquisition only: the gap's status at the deepest tracked layer ("precursor", "unresolved",
        "synchronous", "lagging", "no_onset", "acquired_at_start").
    gap_checkpoints : int or None
        Acquisition only: the gap in checkpoints.
    acc_onset_step : int or None
        Acquisition only: accuracy's own onset, the start of its final rise from its format level
        (:meth:`ckptgeo.events.rules.EventRules.accuracy_onset`, on the curve so far; the analysis of the finished
        run takes the held maximum over the whole run, which may move it later).
    """

    kind: str
    suite: str
    layer: int | None
    step: int
    reported_at: int
    value: float
    final: bool
    revised: bool = False
    gap_steps: int | None = None
    message: str = ""
    gap_status: str | None = None
    gap_checkpoints: int | None = None
    acc_onset_step: int | None = None

    @property
    def delay_steps(self) -> int:
        """Steps between the event and the checkpoint at which it was known (the confirmation delay)."""
        return self.reported_at - self.step


@dataclass
class _Track:
    steps: list[int] = field(default_factory=list)
    acc: list[float] = field(default_factory=list)
    rankme: dict[int, list[float]] = field(default_factory=dict)
    chance: float | None = None
    acquisition: ev.Acquisition | None = None
    reported: dict = field(default_factory=dict)  # (kind, layer) -> step last reported


class LiveTracker:
    """Per-suite curves of accuracy and RankMe, and the events found on them so far.

    Parameters
    ----------
    rules : EventRules or None, default=None
        The event rules (:class:`ckptgeo.events.rules.EventRules`, the same declaration and detector ``ckptgeo
        analyze`` uses; a :class:`ckptgeo.monitor.MonitorConfig` is one); None: their defaults.
    layers : "last", "all" or tuple of int, default="last"
        RankMe layers whose events are reported ("last": the deepest, the summary layer of ``analyze``).
    **settings
        Any rule of :class:`~ckptgeo.events.rules.EventRules` by name, set on ``rules`` (``min_drop=0.3``).

    Raises
    ------
    InvalidParameterError
        A name that is no rule, or a value out of its declared range.
    """

    def __init__(self, rules: EventRules | None = None, *, layers="last", **settings):
        rules = rules if rules is not None else EventRules()
        self.rules = replace_params(rules, settings, owner="monitor") if settings else rules
        validate_params(self.rules, owner="monitor")
        self.layers = layers
        self.tracks: dict[str, _Track] = {}
        self.events: list[LiveEvent] = []

    def _layers(self, t: _Track) -> list[int]:
        have = sorted(t.rankme)
        if not have:
            return []
        if self.layers == "last":
            return [have[-1]]
        if self.layers == "all":
            return have
        return [k for k in self.layers if k in t.rankme]

    def update(self, suite: str, step: int, *, accuracy: float, rankme: dict[int, float],
               chance: float | None = None, report: bool = True) -> list[LiveEvent]:
        """Add one measuring step of ``suite`` and return the events it reveals.

        ``report=False`` replays history (a resumed run) without returning or recording events.
        """
        t = self.tracks.setdefault(suite, _Track())
        if t.steps and step <= t.steps[-1]:
            return []  # already seen (a resumed run re-measuring its last step)
        t.steps.append(int(step))
        t.acc.append(float(accuracy))
        t.chance = chance if chance is not None else t.chance
        for layer, value in rankme.items():
            t.rankme.setdefault(layer, [math.nan] * (len(t.steps) - 1)).append(float(value))
        for values in t.rankme.values():
            values.extend([math.nan] * (len(t.steps) - len(values)))
        found: list[LiveEvent] = []
        new_acq = None
        if t.acquisition is None:
            a = self.rules.acquisition(t.steps, t.acc, t.chance)
            if a.acquired:
                t.acquisition = new_acq = a
        final = t.acquisition is not None
        acq_step = t.acquisition.step if final else None
        onsets = {}
        for layer in self._layers(t):
            values = t.rankme[layer]
            c = self.rules.collapse(t.steps, values, acq_step)
            if c.index is None:
                continue
            n_after = sum(1 for s, v in zip(t.steps, values) if s > c.step and math.isfinite(v))
            key = ("collapse", layer)
            if (final or n_after >= self.rules.window) and t.reported.get(key) != c.step:
                found.append(self._event("collapse", suite, layer, c.step, step, c.floor, final, key in t.reported,
                                         f"RankMe collapse at step {c.step} (floor {c.floor:.3g}, from "
                                         f"{c.first_value:.3g})" + ("" if final else
                                                                   f", held for {n_after} checkpoints")))
                t.reported[key] = c.step
                if ("recovery", layer) in t.reported:  # it referred to the earlier minimum
                    t.reported[("stale recovery", layer)] = t.reported.pop(("recovery", layer))
            if t.reported.get(key) != c.step:
                continue
            o = self.rules.recovery_onset(t.steps, values, c)
            onsets[layer] = o
            rkey = ("recovery", layer)
            if o.step is not None and t.reported.get(rkey) != o.step:
                v = dict(zip(t.steps, values))[o.step]
                revised = rkey in t.reported or ("stale recovery", layer) in t.reported
                found.append(self._event("recovery", suite, layer, o.step, step, float(v), final, revised,
                                         f"recovery onset at step {o.step} (RankMe {v:.3g} >= {o.level:.3g}, "
                                         f"{self.rules.recovery:g} of the drop regained)"))
                t.reported[rkey] = o.step
        if new_acq is not None:
            found.append(self._acquisition_event(suite, t, new_acq, step, onsets))
        if report:
            self.events.extend(found)
            return found
        return []

    def _event(self, kind, suite, layer, at, now, value, final, revised, text) -> LiveEvent:
        tail = f"seen at step {now}" + (f" ({now - at} steps later)" if now > at else "")
        tail += "; final" if final else "; provisional until acquisition"
        head = f"{suite} L{layer}: " + ("revised " if revised else "")
        return LiveEvent(kind, suite, layer, at, now, value, final, revised, None, f"{head}{text}, {tail}")

    def _acquisition_event(self, suite, t: _Track, a: ev.Acquisition, now: int, onsets: dict) -> LiveEvent:
        acc = t.acc[t.steps.index(a.step)]
        since = f"between step {a.step - a.resolution_steps} and {a.step}" if a.resolution_steps else \
            "at the first checkpoint"
        parts = [f"{suite}: acquisition at step {a.step} on the monitor's grid ({since}; accuracy {acc:.3g} > {a.threshold:g} for "
                 f"{a.window} checkpoints), confirmed at step {now} ({now - a.step} steps later)"]
        ao = self.rules.accuracy_onset(t.steps, t.acc, t.chance)
        parts.append(f"accuracy onset at step {ao.step} (accuracy >= {ao.level:.3g}, {self.rules.recovery:g} of "
                     f"the way from its format level to its highest held accuracy so far)" if ao.step is not None
                     else f"no accuracy onset ({ao.reason})")
        gap_steps = gap_ck = status = None
        for layer in self._layers(t):
            o = onsets.get(layer)
            if o is None:
                parts.append(f"L{layer} no collapse before it (a collapse needs RankMe {self.rules.min_drop:g} of its "
                             f"first value below it)")
                gap_steps = gap_ck = None
                status = "no_onset"
                continue
            g = self.rules.gap(a, o)
            gap_steps, gap_ck, status = g.gap_steps, g.gap_checkpoints, g.status
            col = t.reported.get(("collapse", layer))
            if g.gap_steps is not None:
                lo = "-" if g.gap_low_steps is None else g.gap_low_steps
                hi = "-" if g.gap_high_steps is None else g.gap_high_steps
                what = (f"gap {g.gap_steps} steps, {g.gap_checkpoints} checkpoint(s), in ({lo}, {hi}) from the "
                        f"checkpoint grid")
                if g.status == "unresolved":
                    what += f"; within the resolution of {g.resolution_steps} steps, so not a precursor"
            else:
                what = g.reason or "no recovery yet"
            parts.append(f"L{layer} collapse {col}, recovery {o.step if o.step is not None else '-'}: "
                         f"{g.status}, {what}")
        return LiveEvent("acquisition", suite, None, a.step, now, float(acc), True, False, gap_steps,
                         "; ".join(parts), status, gap_ck, ao.step)

    def status(self) -> str:
        """One line per the latest step: ``L2 RankMe 1.1 (collapsed at 207) · acc 0.02`` per suite."""
        out = []
        for suite, t in self.tracks.items():
            if not t.steps:
                continue
            layers = sorted(t.rankme)
            text = "" if len(self.tracks) == 1 else f"{suite} "
            if layers:
                k = layers[-1]
                if t.acquisition is not None:
                    state = f"acquired at {t.acquisition.step}"
                elif ("recovery", k) in t.reported:
                    state = f"recovering since {t.reported[('recovery', k)]}"
                elif ("collapse", k) in t.reported:
                    state = f"collapsed at {t.reported[('collapse', k)]}"
                else:
                    state = None
                text += f"L{k} RankMe {t.rankme[k][-1]:.3g}" + (f" ({state})" if state else "") + " · "
            text += f"acc {t.acc[-1]:.2f}"
            out.append(text)
        return " | ".join(out)
