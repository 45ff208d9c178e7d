"""A third-party analysis step and claim row for ckptgeo, as an outside package would ship them (used by
tests/test_steps.py).

Its ``pyproject.toml`` would declare::

    [project.entry-points."ckptgeo.analysis_steps"]
    gap_by_suite = "ckptgeo_example_step"

    [project.entry-points."ckptgeo.claims"]
    gap_known = "ckptgeo_example_step"

Importing the module registers both; ckptgeo itself is not changed. ``ckptgeo analyze`` then writes
``summary/gap_by_suite.parquet``, and the claim table of ``ckptgeo reproduce`` ends with a ``gap_known`` row.
"""

from ckptgeo import register_claim, register_step
from ckptgeo.events.curves import summary_rows


@register_step(name="gap_by_suite", reads=("events",), writes=("gap_by_suite",))
def gap_by_suite(ctx):
    """Per suite: curves at the summary layer, how many have a precursor gap, and their median gap in steps."""
    e = summary_rows(ctx["events"])   # the layer every table reads, per (model, suite, config_hash, metric)
    table = e.groupby("suite", as_index=False).agg(n_curves=("status", "size"),
                                                  n_precursor=("precursor", "sum"),
                                                  median_gap_steps=("gap_steps", "median"))
    return {"gap_by_suite": table}


@register_claim(id="gap_known", reads=("events",))
def gap_known(ctx):
    """How many counted grid runs have a measured gap (no test: always inconclusive)."""
    counted = ctx.runs[ctx.runs["counted"]]
    n = int(counted["gap_steps"].notna().sum())
    return {"id": "gap_known", "claim": "every counted run has a gap", "paper": "-",
            "measured": f"{n}/{len(counted)} counted runs have a gap", "verdict": "inconclusive",
            "reason": "an example row without a test", "evidence": "events/events.parquet", "value": float(n)}
