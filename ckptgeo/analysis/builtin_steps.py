"""The built-in analysis steps, each a few lines declaring what it reads and writes (:mod:`ckptgeo.analysis.steps`).

=========================  ================================  ===============================================
step                       reads                             writes (folder)
=========================  ================================  ===============================================
acquisitions               accuracy                          acquisitions (summary), behavior_events
events                     curves, accuracy, behavior_events events (events)
null_curves                events, curves, behavior_events   null_curves (in memory)
precursor_rates            events, null_curves               precursor_rates (summary)
precursor_rates_by_model   events, null_curves               precursor_rates_by_model (summary)
top_down                   events                            top_down (summary)
probe_lead                 probes, behavior_events           probe_lead (summary)
across_sizes               events, acquisitions, curves      across_sizes (summary)
seed_spread                events                            seed_spread (summary)
difficulty_slope           events, null_curves               difficulty_slope (summary)
seed_events                events                            seed_events (summary)
compare                    left_out, the dataset's artifacts compare (compare; no rules metadata)
runs                       events                            runs (summary/runs.csv and runs.tex)
=========================  ================================  ===============================================
"""

from __future__ import annotations

import math

from ckptgeo.analysis import report as rs
from ckptgeo.analysis import across_runs as sm
from ckptgeo.analysis.curve_events import acquisitions, events_table
from ckptgeo.events.runs import runs_table, write_runs_files
from ckptgeo.events.curves import summary_rows
from ckptgeo.analysis.steps import register_step
from ckptgeo.analysis.inputs import events_in_tokens
from ckptgeo.events.curves import model_size
from ckptgeo.store.schemas import SCHEMAS


@register_step(name="acquisitions", reads=("accuracy",), writes=("acquisitions", "behavior_events"),
               report=rs.acquisitions_section)
def _acquisitions(ctx):
    acq, behavior = acquisitions(ctx["accuracy"], ctx.config, ctx.difficulty)
    return {"acquisitions": acq, "behavior_events": behavior}


@register_step(name="events", reads=("curves", "accuracy", "behavior_events"), writes=("events",), folder="events",
               report=rs.events_section)
def _events(ctx):
    from ckptgeo._version import __version__

    b = ctx["behavior_events"]
    events = events_table(ctx["curves"], b.groups, b.classes, ctx.config, __version__)
    return {"events": events_in_tokens(events, ctx["curves"], ctx["accuracy"])}


@register_step(name="null_curves", reads=("events", "curves", "behavior_events"), writes=("null_curves",),
               folder=None, report=False)
def _null_curves(ctx):
    return {"null_curves": sm.null_curves(summary_rows(ctx["events"]), ctx["curves"], ctx.config,
                                          ctx["behavior_events"].groups)}


@register_step(name="precursor_rates", reads=("events", "null_curves"), writes=("precursor_rates",),
               report=rs.precursor_rates_section)
def _precursor_rates(ctx):
    rows = summary_rows(ctx["events"])
    return {"precursor_rates": sm.rates(rows, ["metric", "centered", "difficulty"], ctx.config, ctx["null_curves"])}


@register_step(name="precursor_rates_by_model", reads=("events", "null_curves"), writes=("precursor_rates_by_model",),
               report=rs.precursor_rates_by_model_section)
def _precursor_rates_by_model(ctx):
    events = ctx["events"]
    sizes = {m: model_size(m) for m in events["model"].unique()}
    by_model = sm.rates(summary_rows(events), ["model", "metric", "centered", "difficulty"], ctx.config,
                        ctx["null_curves"])
    by_model.insert(1, "size", [sizes.get(m, math.nan) for m in by_model["model"]])
    return {"precursor_rates_by_model": by_model}


@register_step(name="top_down", reads=("events",), writes=("top_down",),
               report=rs.top_down_section)
def _top_down(ctx):
    return {"top_down": sm.top_down(ctx["events"], ctx.config)}


@register_step(name="probe_lead", reads=("probes", "behavior_events"), writes=("probe_lead",),
               report=rs.probe_lead_section)
def _probe_lead(ctx):
    return {"probe_lead": sm.probe_lead(ctx["probes"], ctx["behavior_events"].groups, ctx.config)}


@register_step(name="across_sizes", reads=("events", "acquisitions", "curves"), writes=("across_sizes",),
               report=rs.across_sizes_section)
def _across_sizes(ctx):
    return {"across_sizes": sm.across_sizes(ctx["events"], ctx["acquisitions"], ctx["curves"], ctx.config)}


@register_step(name="seed_spread", reads=("events",), writes=("seed_spread",),
               report=rs.seed_spread_section)
def _seed_spread(ctx):
    return {"seed_spread": sm.seed_spread(ctx["events"], ctx.config)}


@register_step(name="difficulty_slope", reads=("events", "null_curves"), writes=("difficulty_slope",),
               report=rs.difficulty_slope_section)
def _difficulty_slope(ctx):
    return {"difficulty_slope": sm.difficulty_slope(summary_rows(ctx["events"]), ctx["null_curves"], ctx.config)}


@register_step(name="seed_events", reads=("events",), writes=("seed_events",),
               report=rs.seed_events_section)
def _seed_events(ctx):
    return {"seed_events": sm.seed_events(ctx["events"])}


@register_step(name="compare", reads=("left_out",), writes=("compare",), folder="compare", rules=False,
               report=rs.compare_section)
def _compare(ctx):
    """The cross-checkpoint step (:func:`ckptgeo.metrics.cross.combine`) where the dataset holds artifacts: every
    stored artifact against its partners, chosen among the revisions the analysis keeps (not ``left_out``);
    None (nothing written) without artifacts."""
    if not (ctx.root / "artifacts").is_dir():
        return {"compare": None}
    from ckptgeo.metrics.cross import combine
    from ckptgeo.sources.groups import grouped_revisions
    from ckptgeo.store.dataset import Dataset

    lo = ctx["left_out"]
    left_out = [] if lo is None or lo.empty else list(zip(lo["model"].astype(str), lo["revision"].astype(str)))
    dataset = Dataset(ctx.root, create=False)
    rows = combine(dataset, write=False, left_out=left_out, groups=grouped_revisions(dataset.read("revisions")))
    return {"compare": rows.reindex(columns=SCHEMAS["compare"].names)}


@register_step(name="runs", report=False, reads=("events",), writes=("runs",), writer=lambda table, folder: list(
    write_runs_files(table, folder)))
def _runs(ctx):
    from ckptgeo.errors import DatasetLayoutError
    from ckptgeo.store.dataset import Dataset

    try:   # parameter counts a monitor recorded (models.json): the size of a model its name does not give
        counted = Dataset(ctx.root, create=False).model_parameters() if (ctx.root / "models.json").is_file() else {}
    except DatasetLayoutError:
        counted = {}
    return {"runs": runs_table(ctx["events"], n_parameters=counted)}
