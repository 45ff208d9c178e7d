"""The markdown report of an analysis: ``report.md`` in the analysis output folder (:func:`write_report`), its
tables, and links to the figures :func:`ckptgeo.analysis.figures.plot_all` draws.

Its settings and the revisions left out come first; every other section is declared by the analysis step that
writes its tables. A step names its section with ``register_step(report=...)``: a function
``section(analysis) -> list[str]`` of markdown parts, ``False`` for none (a table kept in memory, or written in
another format), or nothing, which gives each DataFrame it writes a section of its own titled by the table's name
(:func:`table_sections`). :func:`write_report` puts the settings and the revisions left out first, then the steps'
sections in the order the steps ran, then the figures.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

from ckptgeo._io import atomic_write_text
from ckptgeo.events.curves import summary_rows

__all__ = ["write_report", "markdown_text", "markdown_table", "with_run", "compare_view", "table_sections", "acquisitions_section",
           "events_section", "precursor_rates_section", "precursor_rates_by_model_section", "top_down_section",
           "probe_lead_section", "across_sizes_section", "difficulty_slope_section", "seed_spread_section",
           "seed_events_section", "compare_section"]


def _isna(x) -> bool:
    try:
        return x is None or bool(pd.isna(x))
    except (TypeError, ValueError):
        return False


def markdown_text(text: str) -> str:
    """``text`` (a name read from an input) as inert markdown: control characters as ``\\xNN``; table pipes,
    the ``](`` of a link or image and the HTML tag opener ``<`` escaped, so a suite or model name cannot add a
    link, image or tag (intervals such as ``[30%, 90%]`` and ``->`` in a claim's text stay as they are)."""
    text = "".join(c if ord(c) >= 32 and not 127 <= ord(c) < 160 else f"\\x{ord(c):02x}" for c in text)
    # no table cell ends at "|", no link or image opens without "](", no tag or autolink without "<"
    for ch, esc in (("|", "\\|"), ("](", "\\]("), ("<", "&lt;")):
        text = text.replace(ch, esc)
    return text


def markdown_table(df, max_rows: int = 60, floatfmt: str = "{:.3g}") -> str:
    """A pandas DataFrame as a GitHub markdown table (no tabulate dependency)."""
    if df is None or len(df) == 0:
        return "_(none)_\n"
    view = df.head(max_rows)

    def cell(v) -> str:
        if v is None or (not isinstance(v, str) and _isna(v)):
            return "–"
        if isinstance(v, (float, np.floating)):
            return floatfmt.format(float(v))
        return markdown_text(str(v))

    lines = ["| " + " | ".join(map(str, view.columns)) + " |", "|" + "---|" * len(view.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in view.itertuples(index=False)]
    if len(df) > max_rows:
        lines.append(f"\n_{len(df) - max_rows} more rows in the Parquet table._")
    return "\n".join(lines) + "\n"


def with_run(table, runs):
    """``table`` with its config_hash column replaced by a ``run`` label (:func:`run_labels`) where one model
    and suite has rows of several settings, and dropped otherwise."""
    from ckptgeo.analysis.pipeline import run_labels

    if "config_hash" not in table.columns or table.empty:
        return table.drop(columns=["config_hash"], errors="ignore")
    if table.groupby(["model", "suite"])["config_hash"].nunique().max() <= 1:
        return table.drop(columns=["config_hash"])
    labels = run_labels(table["config_hash"], runs)
    out = table.drop(columns=["config_hash"])
    out.insert(2, "run", [labels[h] for h in table["config_hash"]])
    return out


def compare_view(compare) -> "pd.DataFrame":
    """The ``compare`` table in short, one row per (model, revision): CKA at the deepest layer and weight
    distance of the whole model (``block == "model"``), one column per measure and partner (``cka vs
    previous``, ``weight_distance vs first``, ...), with each partner's step."""
    if compare is None or compare.empty:
        return pd.DataFrame()
    c = compare[compare["value"].notna() | compare["reason"].notna()]
    rows = []
    for (model, metric), g in c.groupby(["model", "metric"], sort=True):
        if metric == "weight_distance":
            g = g[g["block"] == "model"]
        elif "layer" in g.columns and g["layer"].notna().any():
            g = summary_rows(g)
        rows.append(g.assign(column=[f"{metric} vs {a} ({'L' + str(int(l)) if metric != 'weight_distance' else 'model'})"
                                     for a, l in zip(g["against"], g["layer"].fillna(-1))]))
    if not rows:
        return pd.DataFrame()
    long = pd.concat(rows, ignore_index=True)
    long["shown"] = [f"{v:.3g} (vs {p})" if not _isna(v) else "–" for v, p in zip(long["value"], long["partner"])]
    wide = long.pivot_table(index=["model", "revision", "step"], columns="column", values="shown", aggfunc="first")
    return wide.reset_index().sort_values(["model", "step"], ignore_index=True).rename_axis(columns=None)


def compare_section(analysis) -> list[str]:
    """The report's checkpoint-against-checkpoint section (CKA, weight distance), when the dataset has any."""
    compare = analysis.tables.get("compare") if hasattr(analysis, "tables") else None
    if not isinstance(compare, pd.DataFrame) or compare.empty:
        return []
    grouped = sorted(set(compare["revision"][compare["weight_group"].notna()])) if "weight_group" in compare else []
    chosen = sorted(set(compare["partners_from"].dropna())) if "partners_from" in compare else []
    note = ("Partners are chosen among the genuine revisions only: " if chosen == ["genuine"] else
            "Partners are chosen among every revision (no revision of the model is genuine): " if chosen else "")
    note += (f"{len(grouped)} revision(s) of groups serving the same weights ({', '.join(map(markdown_text, grouped[:8]))}"
             f"{', …' if len(grouped) > 8 else ''}) keep their own rows but are no revision's `first`, `previous` or "
             "`reference`." if grouped else "no revision is in a group serving the same weights.")
    return ["## Checkpoint against checkpoint (CKA, weight distance)\n",
            "Linear CKA of each revision's hidden states against its partner's on the same items (1: the same "
            "representation up to rotation and scale), at the deepest layer; weight distance "
            "‖W − W_partner‖ / ‖W_partner‖ of the whole model. `previous`: the revision before it; `first`: the first "
            "revision; `reference`: the measure's reference (default the last). " + note
            + " Every layer and block: `compare/compare.parquet` (`partners_from`, `weight_group` say how each "
            "partner was chosen).\n\n",
            markdown_table(compare_view(compare), max_rows=200)]


def table_sections(step, analysis) -> list[str]:
    """The default section of a step that declared none: each DataFrame it wrote under its table's name."""
    parts: list[str] = []
    for table in step.writes:
        if isinstance(analysis.tables.get(table), pd.DataFrame):
            parts += [f"## {markdown_text(table)}\n", f"From the analysis step `{markdown_text(step.name)}`.\n\n",
                      markdown_table(analysis.tables[table])]
    return parts


def _runs(analysis):
    from ckptgeo.analysis.pipeline import read_runs

    return read_runs(analysis.root)


def acquisitions_section(analysis) -> list[str]:
    return ["## Acquisition\n", markdown_table(with_run(analysis.acquisitions, _runs(analysis)).drop(
        columns=["reason"], errors="ignore"))]


def events_section(analysis) -> list[str]:
    from ckptgeo.analysis.pipeline import events_legend, events_view

    e = analysis.events
    return ["## Events (summary layer: deepest layer, or -1 for whole-model measures)\n",
            "The table `ckptgeo analyze` prints, with the same headers:\n\n",
            "".join(f"- {line}\n" for line in events_legend(analysis.config).splitlines()) + "\n",
            markdown_table(events_view(e, runs=_runs(analysis)), max_rows=200) if len(e) else markdown_table(e)]


def precursor_rates_section(analysis) -> list[str]:
    return ["## Precursor rate by metric and difficulty\n",
            "Each rate with its Wilson interval; null_rate/p_value: acquisition steps permuted among the counted "
            "runs of one checkpoint schedule (one-sided; docs/definitions.md#nulls); jitter_rate / iid_rate / walk_rate: the rule on noise copies of each run's curve at its "
            "own schedule (measurement jitter; iid noise at the curve's own variance; random walks of that spread; "
            "only the last two can show a verdict noise cannot give); verdict from the permutation test.\n\n",
            markdown_table(analysis.precursor_rates)]


def precursor_rates_by_model_section(analysis) -> list[str]:
    return ["### By model\n", markdown_table(analysis.precursor_rates_by_model)]


def top_down_section(analysis) -> list[str]:
    return ["## Top-down propagation\n",
            "Collapse onset per layer (first checkpoint at half the first RankMe; layer 0 excluded). direction: "
            "Kendall's tau of block depth with onset over layers 1..L-1 (the post-final-norm layer L apart) with a "
            "permutation p-value; negative = deeper layers collapse first.\n\n",
            markdown_table(analysis.top_down.drop(columns=["config_hash"], errors="ignore"))]


def probe_lead_section(analysis) -> list[str]:
    cfg = analysis.config
    return ["## Probe lead\n",
            f"First checkpoint where a layer's probe beats the better of majority-class chance and its "
            f"shuffled-label control by {cfg.probe_margin} with p < {cfg.probe_alpha}, against acquisition "
            "(lead = acquisition − probe onset). *not_measured*: the probe was undefined at every checkpoint; "
            "*no_probe_onset*: measured, never beat its baseline; *readable_at_start*: beats it already at the first "
            "measured checkpoint (no rise to see, not a lead).\n\n",
            markdown_table(analysis.probe_lead.drop(columns=["config_hash", "reason"], errors="ignore"))]


def across_sizes_section(analysis) -> list[str]:
    return ["## Across model sizes\n",
            "Runs of the same task (suite) at different model sizes (parameters from the model name, else depth): "
            "collapse floors and acquisition steps of the smaller and larger model, averaged over the suites they "
            "share, and their Spearman correlation across those suites where there are three or more "
            "(never-acquired suites rank last).\n\n",
            markdown_table(analysis.across_sizes) if len(analysis.across_sizes) else
            "_No two runs of the same task at different model sizes in this dataset: nothing to compare._\n"]


def difficulty_slope_section(analysis) -> list[str]:
    return ["## Difficulty as continuous\n",
            "Slope of the gap (checkpoints) on the acquisition step, per 1000 steps, beside the slope of the "
            "permutation null (later acquisition leaves room for longer gaps by construction).\n\n",
            markdown_table(analysis.difficulty_slope)]


def seed_spread_section(analysis) -> list[str]:
    return ["## Seeds: spread across seeds\n", markdown_table(analysis.seed_spread)]


def seed_events_section(analysis) -> list[str]:
    return ["## Seeds: events per seed\n", markdown_table(analysis.seed_events)]


def _left_out_md(analysis) -> str:
    """The report's "N revisions left out and why" and the table of them."""
    from ckptgeo.analysis.inputs import left_out_text

    lo = getattr(analysis, "left_out", None)
    text = left_out_text(lo).replace("\n  ", "\n- ") + "\n"
    return text + ("\n" + markdown_table(lo.drop(columns=["reason"]), max_rows=200) if lo is not None and len(lo) else "")


def write_report(dir: str | os.PathLike, analysis=None, *, plots: bool = True, **analyze_kwargs) -> Path:
    """Write ``report.md`` (and, with ``plots``, ``figures/``) for a dataset.

    Parameters
    ----------
    dir : path
        The dataset folder.
    analysis : Analysis or None, default=None
        A finished analysis; None runs :func:`ckptgeo.analysis.analyze` on ``dir`` with ``analyze_kwargs``.
    plots : bool, default=True
        Draw the figures and link them.

    Returns
    -------
    Path
        The report, in the analysis output folder.
    """
    from ckptgeo.analysis.steps import STEPS
    from ckptgeo.analysis.pipeline import analyze

    if analysis is None:
        analysis = analyze(dir, **analyze_kwargs)
    out = analysis.out
    from ckptgeo.analysis.figures import plot_all

    figures = plot_all(analysis, out / "figures") if plots else []
    cfg = analysis.config
    e = analysis.events
    thr = ("0.5 (halfway between chance and 1 where chance ≥ 0.5)" if cfg.acc_threshold is None
           else str(cfg.acc_threshold))
    parts = [f"# ckptgeo analysis of `{analysis.root}`\n",
             "Definitions: `docs/definitions.md` (in the wheel, `ckptgeo/docs/definitions.md`; after Billa, "
             "arXiv:2602.15997). Tables: `events/events.parquet` and "
             "`summary/*.parquet` (read with `pandas.read_parquet`).\n",
             "## Settings\n",
             f"- accuracy threshold: {thr}; "
             f"window {cfg.window} checkpoints\n- recovery / onset fraction: {cfg.recovery}; collapse onset at "
             f"{cfg.collapse_fraction} of the first value; min drop {cfg.min_drop}; a gap within "
             f"{cfg.resolution_checkpoints} checkpoint is unresolved\n- nulls: {cfg.n_permutations} permutations, "
             f"{cfg.n_noise_curves} noise copies per curve and noise model (jitter, iid, random walk), seed {cfg.seed}; intervals "
             f"{cfg.confidence:g}; verdicts at alpha {cfg.alpha:g}\n- probe margin over control: "
             f"{cfg.probe_margin}\n- models: {', '.join(sorted(e['model'].unique())) if len(e) else '–'}; "
             f"{len(e)} event rows\n",
             "## Revisions left out\n", _left_out_md(analysis)]
    for name in analysis.steps:   # each step's own section, in the order the steps ran
        step = STEPS.get(name)
        if step.report is not False:
            parts += step.report(analysis) if callable(step.report) else table_sections(step, analysis)
    if figures:
        parts.append("## Figures\n")
        for p in figures:
            rel = p.relative_to(out).as_posix()
            parts.append(f"### {p.stem}\n\n![{p.stem}]({rel})\n")
    return atomic_write_text(out / "report.md", "\n".join(parts))
